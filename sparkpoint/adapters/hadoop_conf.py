"""Hadoop's client configuration: the ``*-site.xml`` files in ``$HADOOP_CONF_DIR`` (``$YARN_CONF_DIR`` first for
YARN's), where spark-submit and every Hadoop client read a cluster's addresses."""

from __future__ import annotations

import os
import re
from pathlib import Path
from xml.etree import ElementTree

from sparkpoint.adapters.local_files import read_configuration
from sparkpoint.errors import ConfigError

SITE_BYTES = 4 << 20  # a site file is a few kilobytes
_VARIABLE = re.compile(r"\$\{([^}]+)\}")


def conf_dirs(*variables: str) -> list[str]:
    """The configuration directories the environment names, in the order given (HADOOP_CONF_DIR by default)."""
    return [os.environ[name] for name in (variables or ("HADOOP_CONF_DIR",)) if os.environ.get(name)]


def read_site(directory: str, name: str) -> dict[str, str]:
    """``<directory>/<name>`` (yarn-site.xml, hdfs-site.xml, core-site.xml) as name -> value, ``${name}``
    references resolved as Hadoop's Configuration does; {} when there is no such file."""
    path = Path(directory) / name
    text = read_configuration(path, SITE_BYTES, "the Hadoop configuration")
    if text is None:
        return {}
    try:
        root = ElementTree.fromstring(text)
    except ElementTree.ParseError as exc:
        raise ConfigError(f"the Hadoop configuration {path} is not XML: {exc}") from None
    values = {(p.findtext("name") or "").strip(): (p.findtext("value") or "").strip() for p in root.iter("property")}
    known: dict[tuple[str, int], str] = {}  # (name, depth): each reference expanded once

    def resolved(value: str, depth: int) -> str:
        if depth > 8:  # a loop of references stays as it is, as in Hadoop's Configuration
            return value
        pieces, size, end = [], 0, 0
        for reference in _VARIABLE.finditer(value):
            name = reference.group(1)
            if name in values and (name, depth + 1) not in known:
                known[name, depth + 1] = resolved(values[name], depth + 1)
            for piece in (value[end:reference.start()], known.get((name, depth + 1), reference.group(0))):
                pieces.append(piece)
                size += len(piece)
            end = reference.end()
            # References that each hold several more grow a value by a power of its depth: a few lines of a site
            # file would fill the memory. Counted as it grows, not once it is built.
            if size > SITE_BYTES:
                raise ConfigError(f"the Hadoop configuration {path}: a value's ${{...}} references expand past "
                                  f"{SITE_BYTES >> 20} MiB")
        return "".join(pieces) + value[end:]

    return {key: resolved(value, 0) for key, value in values.items()}


def client_address(address: str) -> str:
    """A server's bind address as a client reaches it: a wildcard (0.0.0.0) is this host, as Hadoop's clients
    take it."""
    host, _, port = address.rpartition(":")
    return f"{'127.0.0.1' if host in ('0.0.0.0', '') else host}:{port}"

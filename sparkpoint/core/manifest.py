"""The savepoint manifest: its format, its version, and the checks every reader applies.

A savepoint directory holds ``queries/<queryName>/<checkpoint files>`` and ``manifest.json``,
written LAST: its presence is the commit marker. While a savepoint is written (or disposed),
``_sparkpoint_inprogress`` (or ``_sparkpoint_disposing``) marks the directory as sparkpoint's
own, so that ``prune`` may clean it up after a crash and nothing else ever is.
"""

from __future__ import annotations

import json
import posixpath
import re
from typing import Any

from sparkpoint.adapters.storage import HASH_ALGORITHMS
from sparkpoint.errors import SavepointInvalidError

MANIFEST = "manifest.json"
IN_PROGRESS = "_sparkpoint_inprogress"
DISPOSING = "_sparkpoint_disposing"
FORMAT = "sparkpoint-savepoint"
FORMAT_VERSION = 1
QUERIES_DIR = "queries"

# Spark accepts any query name; a savepoint stores it as one directory level, so it must be one.
_QUERY_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,199}$")


def check_query_name(name: str) -> str:
    if not _QUERY_NAME.match(name or "") or name in (".", ".."):
        raise SavepointInvalidError(
            f"query name {name!r} cannot name a savepoint directory: use letters, digits, '_', '.', '-' "
            "(set it with .queryName(...) or --name)"
        )
    return name


def check_relative_path(path: str, where: str) -> str:
    """A manifest path must stay inside the savepoint: relative, normalized, no '..'."""
    if (
        not isinstance(path, str)
        or not path
        or path.startswith("/")
        or "\\" in path
        or "\x00" in path
        or re.match(r"^[A-Za-z]:", path)
        or "://" in path
        or posixpath.normpath(path) != path
        or path == "."
        or ".." in path.split("/")
    ):
        raise SavepointInvalidError(f"{where}: path {path!r} escapes the savepoint directory; refusing to use it")
    return path


def validate(data: Any, where: str) -> dict[str, Any]:
    """Raise SavepointInvalidError unless ``data`` is a manifest this version can use safely."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise SavepointInvalidError(f"{where} is not a sparkpoint savepoint manifest")
    version = data.get("format_version")
    if not isinstance(version, int) or version < 1:
        raise SavepointInvalidError(f"{where} has no valid formatVersion")
    if version > FORMAT_VERSION:
        raise SavepointInvalidError(
            f"{where} has manifest format {version}, newer than this sparkpoint reads ({FORMAT_VERSION}): upgrade sparkpoint"
        )
    if data.get("checksum_algorithm") not in HASH_ALGORITHMS:
        raise SavepointInvalidError(f"{where} names an unknown checksum algorithm {data.get('checksum_algorithm')!r}")
    queries = data.get("queries")
    if not isinstance(queries, list) or not queries:
        raise SavepointInvalidError(f"{where} lists no queries")
    seen = set()
    for query in queries:
        if not isinstance(query, dict):
            raise SavepointInvalidError(f"{where}: a query entry is not an object")
        name = check_query_name(query.get("name", ""))
        if name in seen:
            raise SavepointInvalidError(f"{where}: query {name!r} appears twice")
        seen.add(name)
        if not isinstance(query.get("batch_id"), int):
            raise SavepointInvalidError(f"{where}: query {name!r} has no batchId")
        files = query.get("files")
        if not isinstance(files, list) or not files:
            raise SavepointInvalidError(f"{where}: query {name!r} lists no files")
        prefix = f"{QUERIES_DIR}/{name}/"
        for entry in files:
            if not isinstance(entry, dict) or not isinstance(entry.get("size"), int) or not isinstance(
                entry.get("digest"), str
            ):
                raise SavepointInvalidError(f"{where}: query {name!r} has a malformed file entry")
            path = check_relative_path(entry.get("path"), where)
            if not path.startswith(prefix):
                raise SavepointInvalidError(f"{where}: file {path!r} lies outside {prefix}")
        for path in query.get("relocate", []):
            check_relative_path(path, where)
    return data


def parse(raw: bytes, where: str) -> dict[str, Any]:
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise SavepointInvalidError(f"{where} is not valid JSON: the savepoint is corrupted") from None
    return validate(data, where)


def dumps(data: dict[str, Any]) -> bytes:
    return (json.dumps(data, indent=2, sort_keys=False) + "\n").encode("utf-8")

"""What a value read from Spark's files must be before sparkpoint uses it: the JSON type Spark writes
there, a file name that stays in its directory, a size sparkpoint is willing to parse. A value that is
not is no Spark file (NotACheckpointError) or an unsafe one (UnsafeFileError), named by where it was read."""

from __future__ import annotations

import re
from typing import Any

from sparkpoint.errors import NotACheckpointError, UnsafeFileError

_DIGITS = re.compile(r"\d+", re.ASCII)


_UNIQUE_ID = re.compile(r"[0-9a-fA-F-]+")


# What sparkpoint parses of one Spark file: its logs, metadata and a RocksDB zip's metadata member. Spark's
# own entries are small: the largest realistic, a Kafka source's offsets over 100 topics of 1000 partitions,
# is 1.9 MB; a zip's metadata lists ~110 bytes per SST file (1.8 MB for 16k files, a TB of state). Beyond
# this a file is no Spark entry, and parsing it would cost ten times its size in memory.
MAX_PARSED_BYTES = 8 << 20


def json_object(value: Any, where: str, what: str) -> dict[str, Any]:
    """``value``, which Spark writes as a JSON object (an absent one, null, is empty)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise NotACheckpointError(f"{where}: {what} is not a JSON object")
    return value


def json_array(value: Any, where: str, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise NotACheckpointError(f"{where}: {what} is not a JSON array")
    return value


def typed(value: Any, kind: type, where: str, what: str) -> Any:
    """``value`` (None when absent) if it has the JSON type Spark writes there; a bool is no number."""
    if value is not None and (not isinstance(value, kind) or (kind is int and isinstance(value, bool))):
        raise NotACheckpointError(f"{where}: {what} is not a {'string' if kind is str else 'number'}")
    return value


def required_field(data: dict[str, Any], key: str, kind: type, where: str) -> Any:
    """A field Spark always writes, of the JSON type it writes."""
    if data.get(key) is None:
        raise NotACheckpointError(f"{where}: no {key}")
    return typed(data[key], kind, where, key)


def checked_file_name(value: str, where: str, key: str) -> str:
    """A file name read from a Spark file: used as a path only when it names a file of its own directory."""
    if value in ("", ".", "..") or any(c in value for c in "/\\\x00"):
        raise UnsafeFileError(f"{where}: {key} {value!r} is an unsafe path, not a file name; refusing to use it")
    return value


def checked_unique_id(value: Any, where: str, key: str) -> str:
    """A state file's unique id (a UUID): part of a file name, so checked like one."""
    if value is None:
        raise NotACheckpointError(f"{where}: no {key}")
    if not _UNIQUE_ID.fullmatch(typed(value, str, where, key)):
        raise UnsafeFileError(f"{where}: {key} {value!r} is not a unique id, an unsafe path; refusing to use it")
    return value


def is_number(name: str) -> bool:
    """Only ASCII digits: str.isdigit() takes '²', which int() refuses."""
    return bool(_DIGITS.fullmatch(name))


def bounded(size: int, where: str) -> None:
    if size > MAX_PARSED_BYTES:
        raise NotACheckpointError(
            f"{where} is larger than the {MAX_PARSED_BYTES >> 20} MiB any Spark entry takes: not a Spark file, "
            "refusing to parse it"
        )

"""The savepoint manifest: its format, its version, and the checks every reader applies.

A savepoint directory holds ``queries/<queryName>/<checkpoint files>`` and ``manifest.json``,
written LAST: its presence is the commit marker. While a savepoint is written (or disposed),
``_sparkpoint_inprogress`` (or ``_sparkpoint_disposing``) marks the directory as sparkpoint's
own, so that ``prune`` may clean it up after a crash and nothing else ever is.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
from typing import Any

from sparkpoint import json_input
from sparkpoint.adapters.storage import HASH_ALGORITHMS
from sparkpoint.errors import SavepointInvalidError
from sparkpoint.spark.sources import is_source_record

MANIFEST = "manifest.json"
IN_PROGRESS = "_sparkpoint_inprogress"
DISPOSING = "_sparkpoint_disposing"
FORMAT = "sparkpoint-savepoint"
FORMAT_VERSION = 1
QUERIES_DIR = "queries"

# A query name as a savepoint stores it, as it is where it is one plain directory name (every savepoint before
# any other name was accepted); Spark accepts any name, so every other is escaped (query_directory).
_PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,199}")
_KEPT = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
# Spark takes a name as long as a driver holds; a manifest's is bounded, as every field read from another process.
MAX_QUERY_NAME = 4096
_MAX_DIRECTORY = 200  # of the 255 bytes a directory name may have on the file systems and object stores in use
# Bigger than any manifest sparkpoint writes for ~400,000 files: parsing a file of this size costs ~10x in memory.
MAX_BYTES = 64 << 20


def check_query_name(name: Any) -> str:
    if not isinstance(name, str) or not name or len(name) > MAX_QUERY_NAME:
        raise SavepointInvalidError(
            f"query name {name!r} is not one a savepoint holds: a non-empty string of at most "
            f"{MAX_QUERY_NAME} characters (set it with .queryName(...))"
        )
    return name


def is_plain_name(name: str) -> bool:
    """Whether ``name`` is one plain directory name, as it is: letters, digits, '_', '.', '-', starting with a
    letter or digit, at most 200 characters."""
    return bool(_PLAIN_NAME.fullmatch(name))


def query_directory(name: str) -> str:
    """The directory of ``queries/`` that holds query ``name``'s files: the name itself where it is a plain one
    (letters, digits, '_', '.', '-', starting with a letter or digit), else its UTF-8 bytes with every other byte
    (and a leading '.', '_' or '-') as %XX, so that two names never share a directory and none leads out of
    the savepoint; past a directory name's length, cut and followed by '~' and a digest of the whole name ('~'
    is escaped everywhere else)."""
    if is_plain_name(name):
        return name
    raw = name.encode("utf-8", "surrogatepass")
    escaped = "".join(chr(byte) if byte in _KEPT and (i or chr(byte).isalnum()) else f"%{byte:02X}"
                      for i, byte in enumerate(raw))
    if len(escaped) <= _MAX_DIRECTORY:
        return escaped
    digest = hashlib.sha256(raw).hexdigest()[:32]
    cut = escaped[:_MAX_DIRECTORY - len(digest) - 1]
    cut = cut[:cut.rindex("%")] if "%" in cut[-2:] else cut  # no %XX cut in half
    return f"{cut}~{digest}"


def query_prefix(name: str) -> str:
    """Where query ``name``'s files lie in a savepoint: the start of each of its manifest paths."""
    return f"{QUERIES_DIR}/{query_directory(name)}/"


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


_OPTIONAL = type(None)
# What every manifest of format 1 holds, and its JSON types: a reader indexes these without checks.
_TOP_FIELDS = {
    "id": str, "job": str, "created_at": str, "completed_at": str, "sparkpoint_version": str,
    "spark_version": (str, _OPTIONAL), "checksum_algorithm": str, "origin": dict, "restored_from": (str, _OPTIONAL),
    "bytes": int, "file_count": int, "queries": list,
}
_QUERY_FIELDS = {
    "name": str, "query_id": str, "source_location": str, "batch_id": int, "planned_batch_id": (int, _OPTIONAL),
    "state_version": int, "batch_timestamp_ms": (int, _OPTIONAL), "watermark_ms": (int, _OPTIONAL),
    "offsets": list, "planned_offsets": (list, _OPTIONAL), "provider": (str, _OPTIONAL),
    "checkpoint_format_version": int, "confs": dict, "operators": list, "bytes": int, "files": list, "relocate": list,
}
_OPERATOR_FIELDS = {"id": int, "name": (str, _OPTIONAL), "stores": list, "partitions": int, "bytes": int}
_FILE_FIELDS = {"path": str, "size": int, "digest": str}
# A query's sink (optional: savepoints before sparkpoint recorded it, and of plain checkpoints, have none).
_SINK_FIELDS = {"kind": str, "path": (str, _OPTIONAL), "description": str}
_FILE_SINK_FIELDS = {"path": str, "batch_id": int, "cut_known": bool, "last_file": (str, _OPTIONAL),
                     "compact_interval": (int, _OPTIONAL)}
_DELTA_SINK_FIELDS = {"path": str, "batch_id": int, "cut_known": bool, "table_version": (int, _OPTIONAL),
                      "cut_batch": (int, _OPTIONAL)}
_DELTA_WRITE_FIELDS = {"app_id": str, "follows_batches": bool}


def _check_fields(data: Any, fields: dict[str, Any], what: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise SavepointInvalidError(f"{what} is not an object")
    for key, kind in fields.items():
        value = data.get(key)
        # bool is an int to Python, never to this format.
        if key not in data or not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
            raise SavepointInvalidError(f"{what}: {key!r} is missing or not of the right type")
    return data


def validate(data: Any, where: str) -> dict[str, Any]:
    """Raise SavepointInvalidError unless ``data`` is a manifest this version can use safely: every
    field a reader uses is present, of its type, and every path stays inside the savepoint."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise SavepointInvalidError(f"{where} is not a sparkpoint savepoint manifest")
    version = data.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise SavepointInvalidError(f"{where} has no valid formatVersion")
    if version > FORMAT_VERSION:
        raise SavepointInvalidError(
            f"{where} has manifest format {version}, newer than this sparkpoint reads ({FORMAT_VERSION}): "
            "upgrade sparkpoint"
        )
    _check_fields(data, _TOP_FIELDS, where)
    if data["checksum_algorithm"] not in HASH_ALGORITHMS:
        raise SavepointInvalidError(f"{where} names an unknown checksum algorithm {data['checksum_algorithm']!r}")
    if not data["queries"]:
        raise SavepointInvalidError(f"{where} lists no queries")
    seen = set()
    for query in data["queries"]:
        try:
            name = check_query_name(query.get("name") if isinstance(query, dict) else None)
        except SavepointInvalidError as exc:
            raise SavepointInvalidError(f"{where}: {exc}") from None
        _check_fields(query, _QUERY_FIELDS, f"{where}: query {name!r}")
        if name in seen:
            raise SavepointInvalidError(f"{where}: query {name!r} appears twice")
        seen.add(name)
        if "sink" in query:
            sink = _check_fields(query["sink"], _SINK_FIELDS, f"{where}: the sink of query {name!r}")
            if sink["kind"] == "file":
                _check_fields(sink, _FILE_SINK_FIELDS, f"{where}: the file sink of query {name!r}")
            elif sink["kind"] == "delta":
                _check_fields(sink, _DELTA_SINK_FIELDS, f"{where}: the Delta sink of query {name!r}")
        if "delta_writes" in query:
            if not isinstance(query["delta_writes"], list):
                raise SavepointInvalidError(f"{where}: query {name!r} has a malformed 'delta_writes'")
            for write in query["delta_writes"]:
                what = f"{where}: a foreachBatch Delta write of query {name!r}"
                _check_fields(write, {**_SINK_FIELDS, **_DELTA_SINK_FIELDS, **_DELTA_WRITE_FIELDS}, what)
                if write["kind"] != "delta":
                    raise SavepointInvalidError(f"{what} is not a Delta table's")
        if "inputs" in query and (not isinstance(query["inputs"], list)
                                  or not all(is_source_record(read) for read in query["inputs"])):
            raise SavepointInvalidError(f"{where}: query {name!r} has a malformed 'inputs'")
        for operator in query["operators"]:
            _check_fields(operator, _OPERATOR_FIELDS, f"{where}: an operator of query {name!r}")
            rows = operator.get("rows_at_cut")  # optional: savepoints before sparkpoint recorded it have none
            if rows is not None and not (isinstance(rows, dict) and all(
                    isinstance(count, int) and not isinstance(count, bool) and count >= 0 for count in rows.values())):
                raise SavepointInvalidError(f"{where}: an operator of query {name!r} has a malformed 'rows_at_cut'")
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in query["confs"].items()):
            raise SavepointInvalidError(f"{where}: query {name!r} has a malformed 'confs'")
        if not query["files"]:
            raise SavepointInvalidError(f"{where}: query {name!r} lists no files")
        prefix = query_prefix(name)
        paths = set()
        for entry in query["files"]:
            path = check_relative_path(_check_fields(entry, _FILE_FIELDS, f"{where}: a file of query {name!r}")["path"],
                                       where)
            if not path.startswith(prefix):
                raise SavepointInvalidError(f"{where}: file {path!r} lies outside {prefix}")
            if entry["size"] < 0:
                raise SavepointInvalidError(f"{where}: file {path!r} has a negative size")
            paths.add(path)
        for path in query["relocate"]:
            if check_relative_path(path, where) not in paths:
                raise SavepointInvalidError(f"{where}: query {name!r} relocates {path!r}, which it does not list")
    return data


def parse(raw: bytes, where: str) -> dict[str, Any]:
    try:
        data = json_input.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise SavepointInvalidError(f"{where} is not valid JSON: the savepoint is corrupted") from None
    return validate(data, where)


def dumps(data: dict[str, Any]) -> bytes:
    return (json.dumps(data, indent=2, sort_keys=False) + "\n").encode("utf-8")

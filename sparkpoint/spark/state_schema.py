"""Spark's state schema files: the key and value schemas a stateful operator's state was written with, which Spark
holds an upgraded query against (StateSchemaCompatibilityChecker), read without Spark.

``state/<op>/<part>/[<store>/]_metadata/schema``, for every stateful operator but transformWithState, is written
with Java's DataOutputStream: ``writeUTF("v1")`` then the key's and the value's StructType JSON, each one
``writeUTF``; or ``writeUTF("v2")`` then, for the key and then the value, an int count of chunks, each a
``writeUTF`` (a schema longer than 65535 bytes is chunked). transformWithState's schema files
(``state/<op>/_stateSchema/...``, format v3) hold one key and value schema per column family: read_v3_schema_file.
"""

from __future__ import annotations

import json
import struct
from typing import Any

from sparkpoint import json_input
from sparkpoint.errors import NotACheckpointError

SCHEMA_FILE = "_metadata/schema"


def java_utf(raw: bytes, at: int, where: str, what: str) -> tuple[str, int]:
    """The string Java's ``writeUTF`` wrote at ``at`` (a two-byte length, then modified UTF-8), and the offset
    after it; ``what``: the whole it is part of, for the error of one cut short."""
    if at + 2 > len(raw) or at + 2 + struct.unpack_from(">H", raw, at)[0] > len(raw):
        raise NotACheckpointError(f"{where}: truncated {what}")
    end = at + 2 + struct.unpack_from(">H", raw, at)[0]
    # Modified UTF-8 differs from UTF-8 only for NUL and characters outside the BMP: surrogates pass through.
    return raw[at + 2 : end].decode("utf-8", errors="surrogatepass"), end


def read_schema_file(raw: bytes, where: str) -> dict[str, list[dict[str, Any]]]:
    """``{"key": [...], "value": [...]}``, each a list of ``{"name", "type", "nullable"}`` (``type`` as Spark's
    JSON has it: a name, or an object for a nested type)."""
    version, at = java_utf(raw, 0, where, "state schema")
    schemas = []
    for _ in ("key", "value"):
        if version == "v1":
            text, at = java_utf(raw, at, where, "state schema")
        elif version == "v2":
            if at + 4 > len(raw):
                raise NotACheckpointError(f"{where}: truncated state schema")
            (chunks,) = struct.unpack_from(">i", raw, at)
            if not 0 < chunks <= len(raw):
                raise NotACheckpointError(f"{where} has a schema of {chunks} chunks")
            at += 4
            parts = []
            for _chunk in range(chunks):
                part, at = java_utf(raw, at, where, "state schema")
                parts.append(part)
            text = "".join(parts)
        else:
            raise NotACheckpointError(f"{where} is a state schema of version {version!r}, not v1 or v2")
        schemas.append(_fields(text, where))
    return {"key": schemas[0], "value": schemas[1]}


def read_v3_schema_file(raw: bytes, where: str) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """transformWithState's schema file (``state/<op>/_stateSchema/<store>/<batch>_<uuid>``), as Spark 4.0.5,
    4.1.4, 4.2.1 and 4.3.0 write it (read in the files they wrote; the first three wrote one processor's byte for
    byte alike): ``writeUTF("v3")``, an int count of column families, and for each its name
    (writeUTF), then a short and its key schema (an int count of writeUTF chunks), a short and its value schema
    (chunked the same), then its key encoder and user key encoder (chunked): ``{name: {"key": [...], "value":
    [...]}}``. Another layout is a NotACheckpointError (the caller compares the file by its digest)."""
    version, at = java_utf(raw, 0, where, "state schema")
    if version != "v3":
        raise NotACheckpointError(f"{where} is a state schema of version {version!r}, not v3")
    count, at = _int(raw, at, where)
    families = {}
    for _ in range(count):
        name, at = java_utf(raw, at, where, "state schema")
        schemas = []
        for _part in ("key", "value"):
            at += 2  # a short Spark writes before each schema
            text, at = _chunked(raw, at, where)
            schemas.append(_fields(text, where))
        for _part in ("key encoder", "user key encoder"):
            _text, at = _chunked(raw, at, where)
        families[name] = {"key": schemas[0], "value": schemas[1]}
    return families


def _int(raw: bytes, at: int, where: str) -> tuple[int, int]:
    if at + 4 > len(raw):
        raise NotACheckpointError(f"{where}: truncated state schema")
    (value,) = struct.unpack_from(">i", raw, at)
    if not 0 <= value <= len(raw):
        raise NotACheckpointError(f"{where} has a count of {value}")
    return value, at + 4


def _chunked(raw: bytes, at: int, where: str) -> tuple[str, int]:
    chunks, at = _int(raw, at, where)
    parts = []
    for _ in range(chunks):
        part, at = java_utf(raw, at, where, "state schema")
        parts.append(part)
    return "".join(parts), at


def _fields(text: str, where: str) -> list[dict[str, Any]]:
    try:
        struct_type = json_input.loads(text)
    except json.JSONDecodeError:
        raise NotACheckpointError(f"{where} holds a schema that is not JSON") from None
    fields = struct_type.get("fields") if isinstance(struct_type, dict) else None
    if not isinstance(fields, list) or not all(isinstance(f, dict) and isinstance(f.get("name"), str)
                                               for f in fields):
        raise NotACheckpointError(f"{where} holds a schema that is not a StructType")
    return [{"name": f["name"], "type": f.get("type"), "nullable": f.get("nullable", True)} for f in fields]


def type_said(spark_type: Any, depth: int = 0) -> str:
    """A field's type in one word or a short form: ``long``, ``struct<a,b>``, ``array<string>``; nesting past
    eight levels is ``...`` (a file's JSON may nest deeper than Python recurses)."""
    if depth > 8:
        return "..."
    if not isinstance(spark_type, dict):
        return str(spark_type)
    kind = spark_type.get("type")
    inner = {"array": ("elementType",), "map": ("keyType", "valueType")}.get(kind)
    if kind == "struct":
        return "struct<" + ",".join(str(f.get("name")) for f in spark_type.get("fields") or []
                                    if isinstance(f, dict)) + ">"
    if inner:
        return f"{kind}<" + ",".join(type_said(spark_type.get(key), depth + 1) for key in inner) + ">"
    return str(kind)

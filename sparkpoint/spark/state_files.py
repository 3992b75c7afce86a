"""The state stores' files: their names (``<v>[_<uniqueId>].delta|snapshot|zip|changelog``), operator
metadata, a RocksDB checkpoint zip's metadata member and a format-v2 changelog's lineage header. Each is
read bounded: only what the cut's plan needs, never the state itself."""

from __future__ import annotations

import io
import json
import re
import struct
import zipfile
import zlib
from typing import Any, BinaryIO

from sparkpoint import json_input
from sparkpoint.errors import NotACheckpointError
from sparkpoint.spark.fields import (
    MAX_PARSED_BYTES,
    bounded,
    checked_unique_id,
    json_array,
    json_object,
    required_field,
    typed,
)
from sparkpoint.spark.logs import json_line, parse_log
from sparkpoint.spark.state_schema import java_utf

_STATE_FILE = re.compile(r"(\d+)(?:_([0-9a-fA-F-]+))?\.(delta|snapshot|zip|changelog)", re.ASCII)


# lz4-java's largest block (LZ4BlockOutputStream): a header that claims more is corrupt.
_LZ4_MAX_BLOCK = 1 << 25


def parse_operator_metadata(raw: bytes, where: str) -> dict[str, Any]:
    """Operator metadata (``state/<op>/_metadata/metadata``, ``.../v2/<batch>``): the operator's name, its
    stores, its partitions (None when unrecorded) and transformWithState's state variables."""
    _version, lines = parse_log(raw, where)
    info = json_line(lines, where, "operator metadata")
    stores_info = [json_object(s, where, "a stateStoreInfo entry")
                   for s in json_array(info.get("stateStoreInfo"), where, "stateStoreInfo")]
    partitions = typed(stores_info[0].get("numPartitions"), int, where, "numPartitions") if stores_info else None
    properties_json = typed(info.get("operatorPropertiesJson"), str, where, "operatorPropertiesJson")
    try:
        properties = json_input.loads(properties_json or "{}")
    except json.JSONDecodeError:
        raise NotACheckpointError(f"{where} has malformed operatorPropertiesJson") from None
    variables = json_array(json_object(properties, where, "operatorPropertiesJson").get("stateVariables"), where,
                           "stateVariables")
    return {
        "name": typed(json_object(info.get("operatorInfo"), where, "operatorInfo").get("operatorName"), str, where,
                       "operatorName"),
        "stores": [typed(s.get("storeName", "default"), str, where, "storeName") for s in stores_info],
        "partitions": partitions,
        "state_variables": [
            typed(json_object(v, where, "a state variable").get("stateName") or "", str, where, "stateName")
            for v in variables
        ],
    }


def changelog_lineage(source: bytes | BinaryIO, where: str) -> list[tuple[int, str]]:
    """The (version, unique id) lineage in the header of a format-v2 RocksDB changelog (its bytes, or the
    file open for reading: only the header's blocks are read, not the records).

    The file is an lz4-java ``LZ4BlockOutputStream`` (Spark's default state compression codec);
    it starts with two Java ``writeUTF`` strings: the changelog format (``v3``, ``v4``) and the
    lineage as JSON, ``[{"version": 4, "checkpointUniqueId": "..."}, ...]``, oldest first.
    """
    stream = io.BytesIO(source) if isinstance(source, (bytes, bytearray)) else source
    header = lz4_blocks(stream, where, want=4 + 65535 * 2)
    try:
        fmt, after = java_utf(header, 0, where, "changelog header")
        if fmt in ("v1", "v2"):
            return []  # formats without lineage: the file follows its predecessor version
        lineage = json_input.loads(java_utf(header, after, where, "changelog header")[0])
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise NotACheckpointError(f"{where}: unreadable changelog header") from None
    entries = [json_object(e, where, "a lineage entry") for e in json_array(lineage, where, "the changelog lineage")]
    return [
        (required_field(e, "version", int, where),
         checked_unique_id(e.get("checkpointUniqueId"), where, "checkpointUniqueId"))
        for e in entries
    ]


def lz4_blocks(stream: BinaryIO, where: str, want: int | None = None) -> bytes:
    """Decode lz4-java block framing (Spark's default state compression codec) until ``want`` bytes, or to
    the end: a changelog's header, or a whole HDFS state file.

    A block is ``LZ4Block``, a token (method | level), then little-endian compressed length, decompressed
    length and checksum; a block of length 0 ends the stream.
    """
    import lz4.block

    out = bytearray()
    while want is None or len(out) < want:
        head = stream.read(21)
        if not head:
            break
        if not b"LZ4Block".startswith(head[:8]):
            raise NotACheckpointError(
                f"{where} is not lz4-compressed: sparkpoint reads state files written with "
                "spark.sql.streaming.stateStore.compression.codec=lz4 (the default)"
            )
        if len(head) < 21:
            raise NotACheckpointError(f"{where}: truncated lz4 block header")
        method = head[8] & 0xF0
        compressed, decompressed, _checksum = struct.unpack("<iii", head[9:21])
        if decompressed == 0 and compressed == 0:
            break
        # Raw blocks (0x10) hold the bytes as they are; lz4 blocks (0x20) at most lz4's bound of their size.
        bound = decompressed if method == 0x10 else decompressed + decompressed // 255 + 16
        if method not in (0x10, 0x20) or not 0 < decompressed <= _LZ4_MAX_BLOCK or not 0 < compressed <= bound:
            raise NotACheckpointError(f"{where}: corrupt lz4 block header")
        block = stream.read(compressed)
        if len(block) < compressed:
            raise NotACheckpointError(f"{where}: truncated lz4 block")
        if method == 0x10:
            out += block
            continue
        try:
            out += lz4.block.decompress(block, uncompressed_size=decompressed)
        except lz4.block.LZ4BlockError:
            raise NotACheckpointError(f"{where}: corrupt lz4 block") from None
    return bytes(out)


# lz4-java's LZ4BlockOutputStream framing: each block with the low 28 bits of its XXHash32 (seed 0x9747b28c),
# which LZ4BlockInputStream checks, and a level that bounds its size. Spark writes 32 KiB blocks; any size up
# to the level's reads the same.
_LZ4_BLOCK = 1 << 16
_LZ4_LEVEL = 6
_LZ4_SEED = 0x9747B28C


def lz4_framed(data: bytes) -> bytes:
    """``data`` as lz4-java block framing, readable by Spark's lz4 codec."""
    import lz4.block
    import xxhash

    out = bytearray()
    for start in range(0, len(data), _LZ4_BLOCK):
        chunk = data[start:start + _LZ4_BLOCK]
        packed = lz4.block.compress(chunk, store_size=False)
        method, body = (0x20, packed) if len(packed) < len(chunk) else (0x10, chunk)
        checksum = xxhash.xxh32_intdigest(chunk, seed=_LZ4_SEED) & 0x0FFFFFFF
        out += b"LZ4Block" + bytes([method | _LZ4_LEVEL]) + struct.pack("<iii", len(body), len(chunk), checksum)
        out += body
    out += b"LZ4Block" + bytes([0x10 | _LZ4_LEVEL]) + struct.pack("<iii", 0, 0, 0)
    return bytes(out)


def is_temp(name: str) -> bool:
    """A file still being written (Spark's ``.<name>.<uuid>.tmp``, or Hadoop's checksum of one), or a
    temporary directory: never part of a cut."""
    base = name.removesuffix(".crc")
    return base.endswith(".tmp") or base == "_temporary"


def parse_state_file(name: str) -> tuple[int, str | None, str] | None:
    """(version, unique id or None, kind) of a state file name, or None for other files."""
    match = _STATE_FILE.fullmatch(name)
    if not match:
        return None
    return int(match.group(1)), match.group(2), match.group(3)


def read_zip_member(source: bytes | BinaryIO, member: str, where: str) -> bytes:
    """One member of a RocksDB checkpoint zip (its bytes, or the file open for reading), read no further
    than MAX_PARSED_BYTES: a small zip may expand to gigabytes."""
    stream = io.BytesIO(source) if isinstance(source, (bytes, bytearray)) else source
    try:
        with zipfile.ZipFile(stream) as archive:
            info = archive.getinfo(member)
            if info.flag_bits & 0x1:
                raise NotACheckpointError(f"{where}: its {member} is encrypted, which Spark never does")
            if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                raise NotACheckpointError(f"{where}: its {member} is compressed in a way Spark never uses")
            with archive.open(info) as content:
                raw = content.read(MAX_PARSED_BYTES + 1)  # one byte more says the member is larger
    except KeyError:
        raise NotACheckpointError(f"{where} is not a RocksDB checkpoint zip (no {member})") from None
    # ValueError: an offset before the file's start; NotImplementedError: a zip version or method no writer of Spark's
    except (zipfile.BadZipFile, zlib.error, EOFError, ValueError, NotImplementedError):
        raise NotACheckpointError(f"{where} is not a RocksDB checkpoint zip (corrupt)") from None
    bounded(len(raw), f"{where} ({member})")
    return raw

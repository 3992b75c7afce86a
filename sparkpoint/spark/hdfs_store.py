"""The HDFS-backed state store's files, read and written whole (``HDFSBackedStateStoreProvider``): a record
is the key's size, the key's UnsafeRow bytes, the value's size and the value's bytes (sizes big-endian, as
``DataOutputStream`` writes them); a size of -1 where the value's would be removes the key (deltas only); a
key size of -1 ends the file. The whole is framed by the state compression codec (lz4, the default)."""

from __future__ import annotations

import io
import struct
from collections.abc import Iterable, Iterator

from sparkpoint.errors import NotACheckpointError
from sparkpoint.spark_versions import ROW_CHECKSUM_CONF
from sparkpoint.spark.state_files import lz4_blocks, lz4_framed

_END = -1
COMPRESSION_CONF = "spark.sql.streaming.stateStore.compression.codec"


def records(data: bytes, where: str) -> Iterator[tuple[bytes, bytes | None]]:
    """(key, value) per record of a decompressed file; value None for a removal."""
    position, end = 0, len(data)
    unpack = struct.Struct(">i").unpack_from
    try:
        while True:
            (key_size,) = unpack(data, position)
            position += 4
            if key_size == _END:
                return
            if key_size < 0 or position + key_size > end:
                raise NotACheckpointError(f"{where}: corrupt record (key size {key_size})")
            key = data[position:position + key_size]
            position += key_size
            (value_size,) = unpack(data, position)
            position += 4
            if value_size < 0:
                yield key, None
                continue
            if position + value_size > end:
                raise NotACheckpointError(f"{where}: truncated record")
            yield key, data[position:position + value_size]
            position += value_size
    except struct.error:
        raise NotACheckpointError(f"{where}: truncated before its end marker") from None


def load(files: Iterable[tuple[str, bytes]]) -> dict[bytes, bytes]:
    """One version of a store from its chain (a snapshot or nothing, then deltas, oldest first), as
    (where, file bytes) pairs: applied in order, as the provider loads it."""
    rows: dict[bytes, bytes] = {}
    for where, raw in files:
        for key, value in records(lz4_blocks(io.BytesIO(raw), where), where):
            if value is None:
                rows.pop(key, None)
            else:
                rows[key] = value
    return rows


def snapshot(rows: Iterable[tuple[bytes, bytes]]) -> bytes:
    """A snapshot file of ``rows``, as the provider's ``writeSnapshotFile`` writes one."""
    out = bytearray()
    pack = struct.Struct(">i").pack
    for key, value in rows:
        out += pack(len(key))
        out += key
        out += pack(len(value))
        out += value
    out += pack(_END)
    return lz4_framed(bytes(out))


def hdfs_refusal(confs: dict[str, str], format_version: int) -> str | None:
    """Why sparkpoint cannot write a query's HDFS-backed state as Spark will read it with these pinned confs
    (sparkpoint writes lz4, checkpoint format 1, no row checksums), or None. Refused by `rescale`; kept as it is
    by the check's sandbox."""
    if format_version != 1:
        return "the HDFS-backed state store with checkpoint format version 2"
    if confs.get(ROW_CHECKSUM_CONF, "false").lower() == "true":
        return f"HDFS-backed state with {ROW_CHECKSUM_CONF}=true"
    if confs.get(COMPRESSION_CONF, "lz4") != "lz4":
        return f"HDFS-backed state compressed with {confs[COMPRESSION_CONF]} (sparkpoint writes lz4, the default)"
    return None

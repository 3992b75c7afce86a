"""Writes checkpoint trees in Spark 4.3's on-disk format (as seen in real checkpoints), so that
edge cases — purged files, compacted logs, planned batches, lineage — can be set up exactly."""

from __future__ import annotations

import io
import json
import os
import struct
import zipfile
from pathlib import Path

import lz4.block

CONFS = {
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
}


def write(path: Path, data: bytes | str, crc: bool = True) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    if crc:  # Hadoop's local file system writes a hidden checksum beside every file
        (path.parent / f".{path.name}.crc").write_bytes(b"crc\x00" + os.urandom(8))


def offsets(batch: int, sources: int = 1, confs: dict | None = None) -> str:
    meta = {"batchWatermarkMs": 0, "batchTimestampMs": 1_700_000_000_000 + batch, "conf": confs or CONFS}
    return "\n".join(["v1", json.dumps(meta), *[json.dumps({"logOffset": batch}) for _ in range(sources)]])


def commit(unique_ids: dict | None = None) -> str:
    body = {"nextBatchWatermarkMs": 0}
    if unique_ids is not None:
        body["stateUniqueIds"] = unique_ids
        return "v2\n" + json.dumps(body)
    return "v1\n" + json.dumps(body)


def operator_metadata(name: str = "stateStoreSave", stores=("default",), partitions: int = 2) -> str:
    info = {
        "operatorInfo": {"operatorId": 0, "operatorName": name},
        "stateStoreInfo": [{"storeName": s, "numColsPrefixKey": 0, "numPartitions": partitions} for s in stores],
    }
    return "v1\n" + json.dumps(info)


def hdfs_checkpoint(
    root: Path,
    committed: int,
    planned: bool = False,
    first_batch: int = 0,
    snapshots: tuple[int, ...] = (),
    first_delta: int = 1,
    partitions: int = 2,
    compact_every: int | None = None,
) -> Path:
    """Batches first_batch..committed committed (+1 planned); HDFS-provider state with deltas from
    ``first_delta`` and snapshots at the given versions."""
    write(root / "metadata", json.dumps({"id": "6a1b0c5e-query-id"}))
    last = committed + 1 if planned else committed
    for batch in range(first_batch, last + 1):
        write(root / "offsets" / str(batch), offsets(batch))
        if batch <= committed:
            write(root / "commits" / str(batch), commit())
    for batch in range(0, last + 1):
        compacted = compact_every and (batch + 1) % compact_every == 0
        name = f"{batch}.compact" if compacted else str(batch)
        write(root / "sources" / "0" / name,
              "v1\n" + json.dumps({"path": f"file:///in/{batch}.json", "batchId": batch}))
    write(root / "state" / "0" / "_metadata" / "metadata", operator_metadata(partitions=partitions))
    write(root / "state" / "0" / "0" / "_metadata" / "schema", b"\x00schema")
    top = last + 1
    for part in range(partitions):
        store = root / "state" / "0" / str(part)
        for version in range(first_delta, top + 1):
            write(store / f"{version}.delta", f"delta {part} {version}".encode() * 10)
        for version in snapshots:
            write(store / f"{version}.snapshot", f"snapshot {part} {version}".encode() * 20)
    return root


def rocksdb_zip(sst_names: list[str], num_keys: object = 1) -> bytes:
    meta = {"sstFiles": [{"localFileName": n.split("-")[0] + ".sst", "dfsSstFileName": n, "sizeBytes": 10}
                         for n in sst_names], "numKeys": num_keys}
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("metadata", "v1\n" + json.dumps(meta))
        archive.writestr("CURRENT", "MANIFEST-000005\n")
    return buffer.getvalue()


def zip_metadata(metadata: str | bytes, **options) -> bytes:
    """A RocksDB checkpoint zip holding only the given ``metadata`` member (ZipFile options: compression...)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", **options) as archive:
        archive.writestr("metadata", metadata)
    return buffer.getvalue()


def stateless_store(root: Path, committed: int) -> Path:
    """A checkpoint of one partition, batches 0..committed, whose store directory (returned) holds no state
    files yet: the test writes RocksDB's."""
    hdfs_checkpoint(root, committed=committed, partitions=1)
    store = root / "state" / "0" / "0"
    for delta in store.glob("*delta*"):
        delta.unlink()
    return store


def rocksdb_checkpoint(root: Path, latest_zip: bytes, ssts: tuple[str, ...] = ("000008-aaa.sst",)) -> Path:
    """Batches 0..1 committed; one RocksDB store whose state version 2 is ``latest_zip`` (version 1 names the
    first of ``ssts``, all of which exist)."""
    store = stateless_store(root, committed=1)
    write(store / "1.zip", rocksdb_zip(list(ssts[:1])))
    write(store / "2.zip", latest_zip)
    for name in ssts:
        write(store / "SSTs" / name, b"sst")
    return root


def lz4_block_stream(payload: bytes) -> bytes:
    """lz4-java LZ4BlockOutputStream framing: one compressed block, then the end mark."""
    block = lz4.block.compress(payload, store_size=False)
    header = b"LZ4Block" + bytes([0x20]) + struct.pack("<iii", len(block), len(payload), 0)
    end = b"LZ4Block" + bytes([0x10]) + struct.pack("<iii", 0, 0, 0)
    return header + block + end


def changelog_header(lineage_json: str, fmt: str = "v3") -> bytes:
    """A format-v2 changelog whose header holds ``lineage_json`` as written (well-formed or not)."""
    def utf(text: str) -> bytes:
        raw = text.encode()
        return struct.pack(">H", len(raw)) + raw

    return lz4_block_stream(utf(fmt) + utf(lineage_json) + b"\x00\x00\x00\x10records")


def v2_changelog(lineage: list[tuple[int, str]]) -> bytes:
    return changelog_header(json.dumps([{"version": v, "checkpointUniqueId": u} for v, u in lineage]))


def v2_checkpoint(root: Path) -> Path:
    """Checkpoint format v2 as transformWithState on RocksDB writes it: batches 0..3 committed with unique ids,
    state version 4 a changelog whose lineage leads to the snapshot zip of version 3, and operator metadata v2
    naming its schema file by absolute path."""
    u3, u4 = "00000003-7162-4048-a28c-d9e9fe892389", "00000004-7162-4048-a28c-d9e9fe892389"
    store = stateless_store(root, committed=3)
    write(root / "commits" / "3", commit({"0": [[u4]]}))
    write(store / f"3_{u3}.zip", rocksdb_zip(["000009-c.sst"]))
    write(store / "SSTs" / "000009-c.sst", b"sst")
    write(store / f"4_{u4}.changelog", v2_changelog([(3, u3)]))
    schema = f"file:{root}/state/0/_stateSchema/default/0_{u3}"
    write(root / "state" / "0" / "_stateSchema" / "default" / f"0_{u3}", b"\x00schema")
    info = json.loads(operator_metadata("transformWithStateExec", partitions=1).split("\n", 1)[1])
    info["stateStoreInfo"][0]["stateSchemaFilePaths"] = [schema]
    info["operatorPropertiesJson"] = json.dumps({"stateVariables": [{"stateName": "counts"}]})
    write(root / "state" / "0" / "_metadata" / "v2" / "0", "v2\n" + json.dumps(info))
    return root

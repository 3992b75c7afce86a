"""`rescale` without Spark: the HDFS state files it reads and writes, and what it refuses before anything is
written. Placement and the rescaled state themselves are checked with real Spark (tests/spark/test_rescale.py)."""

from __future__ import annotations

import io
import os
import struct

import pytest
from checkpoints import CONFS, commit, hdfs_checkpoint, offsets, operator_metadata, write

from sparkpoint.config import Settings
from sparkpoint.errors import BadArgumentError, RescaleRefusedError
from sparkpoint.savepoints import savepoint as sp
from sparkpoint.savepoints.create import QuerySource, create
from sparkpoint.savepoints.rescale import rescale
from sparkpoint.adapters.storage import storage_for
from sparkpoint.spark import hdfs_store
from sparkpoint.spark.placement import KeyHasher, hash_bytes, hash_int, hash_long
from sparkpoint.spark.state_files import lz4_blocks, lz4_framed


def test_a_snapshot_reads_back_as_written_across_blocks_compressible_or_not():
    rows = {f"key-{i}".encode(): (os.urandom(300) if i % 2 else b"v" * 300) for i in range(600)}  # ~190 KB
    written = hdfs_store.snapshot(rows.items())
    assert written.count(b"LZ4Block") > 3  # several 64 KiB blocks, and the end mark
    assert hdfs_store.load([("s", written)]) == rows


def test_deltas_apply_in_order_and_a_removal_removes():
    def delta(*records):
        out = b""
        for key, value in records:
            out += struct.pack(">i", len(key)) + key
            out += struct.pack(">i", -1) if value is None else struct.pack(">i", len(value)) + value
        return lz4_framed(out + struct.pack(">i", -1))

    snapshot = hdfs_store.snapshot([(b"a", b"1"), (b"b", b"2")])
    rows = hdfs_store.load([("2.snapshot", snapshot), ("3.delta", delta((b"a", None), (b"c", b"3"))),
                            ("4.delta", delta((b"b", b"22")))])
    assert rows == {b"b": b"22", b"c": b"3"}


def test_a_file_cut_short_is_not_read_as_fewer_rows():
    framed = lz4_framed(struct.pack(">i", 3) + b"abc" + struct.pack(">i", 2) + b"xy")  # no end marker
    with pytest.raises(Exception, match="truncated"):
        hdfs_store.load([("5.delta", framed)])


def test_lz4_framing_round_trips_through_the_reader():
    data = os.urandom(70_000) + b"z" * 70_000
    assert lz4_blocks(io.BytesIO(lz4_framed(data)), "f") == data


def test_spark_murmur3_of_ints_longs_and_bytes():
    # Values of Spark 4.3's `SELECT hash(...)` (seed 42), as signed 32-bit integers.
    signed = lambda h: h - (1 << 32) if h & 0x80000000 else h  # noqa: E731
    assert signed(hash_int(1, 42)) == -559580957
    assert signed(hash_long(1, 42)) == -1712319331
    assert signed(hash_bytes(b"Spark", 42)) == 228093765


@pytest.fixture
def saved(tmp_path):
    def make(metadata: str | None = None, confs: dict | None = None, planned: bool = False):
        root = hdfs_checkpoint(tmp_path / "ckpt", committed=3, planned=planned)
        if metadata is not None:
            write(root / "state/0/_metadata/metadata", metadata)
        if confs is not None:
            for batch in range(5 if planned else 4):
                write(root / "offsets" / str(batch), offsets(batch, confs={**CONFS, **confs}))
        storage, path = storage_for(str(root))
        target_storage, target = storage_for(str(tmp_path / "savepoints"))
        created = create([QuerySource("q", path)], storage, target, target_storage, job="q")
        return sp.load(created["path"])

    return make


@pytest.mark.parametrize("metadata, confs, refusal, complaint", [
    (None, {"spark.sql.streaming.stateStore.providerClass": "com.example.MyStore"}, RescaleRefusedError,
     "does not know"),
    (operator_metadata(name="globalStreamingLimit"), None, RescaleRefusedError, "globalStreamingLimit"),
    (operator_metadata(name="transformWithStateExec"), None, RescaleRefusedError, "RocksDB only"),
    (None, {"spark.sql.streaming.stateStore.rowChecksum.enabled": "true"}, RescaleRefusedError, "rowChecksum"),
    (None, {"spark.sql.streaming.stateStore.compression.codec": "zstd"}, RescaleRefusedError, "zstd"),
    (None, {"spark.sql.shuffle.partitions": "3"}, BadArgumentError, "already has 3 partitions"),
    (None, {"spark.sql.streaming.statefulOperator.useStrictDistribution": "false"}, RescaleRefusedError,
     "useStrictDistribution=false"),
])
def test_what_cannot_be_rescaled_is_refused_before_anything_is_written(saved, tmp_path, metadata, confs, refusal,
                                                                       complaint):
    savepoint = saved(metadata, confs)
    home = tmp_path / "home"
    with pytest.raises(refusal, match=complaint):
        rescale(Settings(home=str(home)), savepoint, 3, str(tmp_path / "rescaled"))
    assert not (tmp_path / "rescaled").exists() and not (home / "tmp").exists()
    assert sp.verify(savepoint).valid


def test_a_target_inside_the_savepoint_is_refused(saved, tmp_path):
    savepoint = saved()
    with pytest.raises(BadArgumentError, match="lies inside the savepoint"):
        rescale(Settings(home=str(tmp_path / "home")), savepoint, 3, os.path.join(savepoint.path, "inside"))
    assert sp.verify(savepoint).valid and not os.path.exists(os.path.join(savepoint.path, "inside"))


def test_a_savepoint_with_a_planned_batch_is_refused_unless_replanned(saved, tmp_path):
    """The rescale's batch takes the planned batch's id: its sink may hold that batch already."""
    savepoint = saved(planned=True)
    with pytest.raises(RescaleRefusedError, match="batch 4 planned at the cut.*--replan"):
        rescale(Settings(home=str(tmp_path / "home")), savepoint, 3, str(tmp_path / "rescaled"))
    assert not (tmp_path / "rescaled").exists()


def test_the_command_exits_17_with_one_line_naming_the_operator(saved, tmp_path, capsys, monkeypatch):
    from sparkpoint.cli.main import main

    savepoint = saved(operator_metadata(name="globalStreamingLimit"))
    monkeypatch.setenv("SPARKPOINT_HOME", str(tmp_path / "home"))
    assert main(["rescale", savepoint.path, "--partitions", "4"]) == 17
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "globalStreamingLimit" in err and "cannot be rescaled" in err


NANS = [struct.unpack("<d", struct.pack("<Q", bits))[0] for bits in (0x7FF8000000000000, 0xFFF8000000000001)]


def test_the_vectorized_hash_of_fixed_width_keys_is_the_row_by_row_one():
    """Keys of (long, int, boolean, double) with nulls, -0.0 and NaNs: numpy's placement equals the exact per-row
    one, and -0.0 sits with 0.0, every NaN with the canonical one (Spark's hash of them)."""
    import random

    fields = [("a", "long", "<q"), ("b", "integer", "<i"), ("c", "boolean", "<?"), ("d", "double", "<d")]
    schema = {"type": "struct", "fields": [{"name": n, "type": t, "nullable": True, "metadata": {}}
                                           for n, t, _ in fields]}
    rng = random.Random(7)
    rows = []
    for _ in range(2000):
        nulls, slots = 0, b""
        for index, (_, _, fmt) in enumerate(fields):
            if rng.random() < 0.1:
                nulls |= 1 << index
                slots += bytes(8)
            else:
                value = {"<q": rng.randint(-2**63, 2**63 - 1), "<i": rng.randint(-2**31, 2**31 - 1),
                         "<?": rng.random() < 0.5, "<d": rng.choice([rng.uniform(-1e9, 1e9), 0.0, -0.0, *NANS])}[fmt]
                slots += struct.pack(fmt, value).ljust(8, b"\0")
        rows.append(struct.pack("<q", nulls) + slots)
    hasher = KeyHasher(schema, len(fields), "test")
    assert hasher.partitions(rows, 7) == [hasher.partition(row, 7) for row in rows]
    assert len(set(hasher.partitions(rows, 7))) == 7
    double_only = KeyHasher({"type": "struct", "fields": [schema["fields"][3]]}, 1, "test")
    same = [bytes(8) + struct.pack("<d", value) for value in (0.0, -0.0)]
    nans = [bytes(8) + struct.pack("<d", value) for value in NANS]
    for group in (same, nans):
        assert len(set(double_only.partitions(group, 1000))) == 1
        assert len({double_only.partition(row, 1000) for row in group}) == 1


LONG_KEY = {"type": "struct", "fields": [{"name": "k", "type": "long", "nullable": True, "metadata": {}}]}


def long_key(value: int) -> bytes:
    return struct.pack("<qq", 0, value)  # an UnsafeRow: its null bits, then the long


def test_an_operator_spark_3_5_wrote_is_rescaled_only_where_its_keys_prove_a_partitioning_by_the_whole_key(tmp_path):
    """No operator metadata: a join is told by its stores; any other operator's keys must each sit where
    Spark's hash of the whole key puts them (a session window's keys, hashed without their session, do not)."""
    from sparkpoint.spark import repartition

    root = tmp_path / "ckpt"
    write(root / "offsets" / "3", offsets(3))
    unnamed = {"id": 0, "name": None, "stores": ["default"], "partitions": 2, "bytes": 0, "state_variables": []}
    operator = repartition.identified(unnamed)
    hasher = KeyHasher(LONG_KEY, 1, "test")
    keys = [long_key(value) for value in range(40)]
    placed = {key: hasher.partition(key, 2) for key in keys}
    assert set(placed.values()) == {0, 1}

    def store(where: dict[bytes, int]) -> None:
        for partition in (0, 1):
            rows = [(key, b"v") for key, at in where.items() if at == partition]
            write(root / "state" / "0" / str(partition) / "4.snapshot", hdfs_store.snapshot(rows))

    plan = repartition.plan_hdfs(str(root), 3, [operator], 5, {0: {"default": LONG_KEY}})
    store(placed)
    state = repartition.read_hdfs(str(root), 3, [operator])
    repartition.prove_partitioning(state, [operator], plan)
    assert set(state[(0, "default")].rows) == set(keys)

    store({key: 1 - at if index % 7 == 0 else at for index, (key, at) in enumerate(placed.items())})
    with pytest.raises(RescaleRefusedError, match="of the .* keys of its store default in partition 0 are not where "
                                                  "Spark's hash of its key puts them.*session window"):
        repartition.prove_partitioning(repartition.read_hdfs(str(root), 3, [operator]), [operator], plan)

    # Three keys in 2 partitions: a wrong guess would place them all right once in 8, which proves nothing.
    store({key: at for key, at in list(placed.items())[:3]})
    with pytest.raises(RescaleRefusedError, match="holds 3 key.s. in 2 partitions: too few .*it takes 20"):
        repartition.prove_partitioning(repartition.read_hdfs(str(root), 3, [operator]), [operator], plan)

    with pytest.raises(RescaleRefusedError, match="written in one partition"):
        repartition.identified(dict(unnamed, partitions=1))
    join = repartition.identified(dict(unnamed, stores=sorted(repartition.JOIN_STORES)))
    assert join["name"] == "symmetricHashJoin"
    with pytest.raises(RescaleRefusedError, match="neither one operator's nor a join's"):
        repartition.identified(dict(unnamed, stores=["default", "other"]))
    named = dict(unnamed, name="dedupe")
    assert repartition.identified(named) is named


def test_the_batch_a_rescale_adds_must_resume_at_the_cut_with_the_new_count_pinned(tmp_path):
    """Each way's batch N+1 is read back before a savepoint is taken of it: the cut's input positions again, the
    new partition count, a commit. A batch written as sparkpoint writes it passes; one that would make the
    restarted query skip or reread input, keep the old count, or find no commit fails the rescale."""
    from sparkpoint.errors import SparkFailureError
    from sparkpoint.spark import repartition

    root = tmp_path / "ckpt"
    write(root / "offsets" / "3", offsets(3))
    write(root / "commits" / "3", commit())
    added = repartition._append_batch(str(root), 3, repartition._rescaled_offsets(str(root), 3, 5))
    repartition.check_batch_logs(str(root), 3, added, 5)

    with pytest.raises(SparkFailureError, match=r"\(batch 4\) pins 5 partitions, not 7; nothing was written"):
        repartition.check_batch_logs(str(root), 3, added, 7)
    write(root / "offsets" / "4", offsets(4, confs=dict(CONFS, **{"spark.sql.shuffle.partitions": "5"})))
    with pytest.raises(SparkFailureError, match=r"its input positions differ from batch 3.s, so the restarted query"):
        repartition.check_batch_logs(str(root), 3, 4, 5)
    write(root / "offsets" / "4", "v1\n{not json")
    with pytest.raises(SparkFailureError, match=r"does not read back \(.*malformed batch metadata\)"):
        repartition.check_batch_logs(str(root), 3, 4, 5)
    write(root / "offsets" / "4", repartition._rescaled_offsets(str(root), 3, 5))
    (root / "commits" / "4").unlink()
    with pytest.raises(SparkFailureError, match=r"does not read back \(.*commits/4"):
        repartition.check_batch_logs(str(root), 3, 4, 5)

"""On a real HDFS (Hadoop's mini cluster, scripts/local_hadoop.py), through WebHDFS as the CLI reaches it: what
HDFS does differently from a disk (adapters/hdfs.py) met, and a keyed aggregation's checkpoint on HDFS
savepointed, moved HDFS -> local disk -> S3 -> HDFS, and continued exactly."""

from __future__ import annotations

import json

import pytest
from clitools import cli_json, race
from s3server import BUCKET, S3Server

from sparkpoint.adapters.storage import join, storage_for
from sparkpoint.errors import TargetNotEmptyError
from sparkpoint.savepoints.restore import restore
from sparkpoint.savepoints.savepoint import load

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture
def hdfs(hadoop_cluster, monkeypatch, tmp_path):
    """A fresh directory of the cluster's HDFS, with the client configuration exported for the CLI."""
    monkeypatch.setenv("HADOOP_CONF_DIR", str(hadoop_cluster.conf_dir))
    return f"{hadoop_cluster.fs}/{tmp_path.name}"


def test_hdfs_is_made_to_keep_sparkpoints_promises(hdfs):
    storage, _ = storage_for(hdfs)
    assert storage.renames and not storage.local
    # An atomic write replaces the whole file; an upload never writes through an existing one.
    storage.write_atomic(f"{hdfs}/m.json", b"one")
    storage.write_atomic(f"{hdfs}/m.json", b"two")
    assert storage.read_bytes(f"{hdfs}/m.json") == b"two"
    assert [e.name for e in storage.list(hdfs)] == ["m.json"]  # no temporary name left beside it
    with storage.open_write(f"{hdfs}/f") as out:
        out.write(b"first")
    with pytest.raises(FileExistsError), storage.open_write(f"{hdfs}/f") as out:
        out.write(b"second")
    assert storage.read_bytes(f"{hdfs}/f") == b"first"
    # HDFS's own rename would move a directory into an existing one: here it is refused, for files too.
    storage.makedirs(f"{hdfs}/a")
    storage.makedirs(f"{hdfs}/b")
    with pytest.raises(FileExistsError):
        storage.fs.mv(f"{hdfs}/a", f"{hdfs}/b")
    with pytest.raises(FileExistsError):
        storage.fs.mv(f"{hdfs}/m.json", f"{hdfs}/f")
    assert not storage.exists(f"{hdfs}/b/a") and storage.read_bytes(f"{hdfs}/f") == b"first"
    # A file of several upload blocks arrives whole.
    block = bytes(range(256)) * 4096
    with storage.open_write(f"{hdfs}/big") as out:
        for _ in range(12):
            out.write(block)
    assert storage.read_bytes(f"{hdfs}/big") == block * 12
    # A query named 'a?b#c' checkpoints to '<root>/a?b#c' (Hadoop's Path keeps them): the path, not a URL's query.
    storage.write_atomic(f"{hdfs}/a?b#c/metadata", b"odd")
    assert storage.read_bytes(f"{hdfs}/a?b#c/metadata") == b"odd" and not storage.exists(f"{hdfs}/a/metadata")
    assert "a?b#c" in [e.name for e in storage.list(hdfs)]


def _aggregate(spark, checkpoint: str, inputs: list[list[tuple[str, int]]], tmp_path) -> dict[str, tuple[int, int]]:
    """A keyed aggregation (sum and count per key) over new input files, run to the end of its input from
    ``checkpoint``; the newest row of each key it wrote."""
    from pyspark.sql import functions as F

    source = tmp_path / "input"
    source.mkdir(exist_ok=True)
    for rows in inputs:
        name = f"part-{len(list(source.iterdir())):04d}.json"
        (source / name).write_text("".join(json.dumps({"k": k, "v": v}) + "\n" for k, v in rows))
    newest: dict[str, tuple[int, int]] = {}

    def sink(batch, _batch_id):
        newest.update({row.k: (row.s, row.n) for row in batch.collect()})

    stream = (spark.readStream.schema("k string, v long").option("maxFilesPerTrigger", 1).json(str(source))
              .groupBy("k").agg(F.sum("v").alias("s"), F.count("*").alias("n")))
    query = (stream.writeStream.queryName("totals").outputMode("update").foreachBatch(sink)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination()
    return newest


def test_a_savepoint_moved_hdfs_local_s3_hdfs_restores_exactly(spark, hdfs, home, tmp_path, monkeypatch):
    s3 = S3Server(tmp_path / "moto.log")
    try:
        for key, value in s3.env.items():
            monkeypatch.setenv(key, value)
        first = [[("a", 1), ("b", 10)], [("a", 2)], [("c", 5), ("b", 1)]]
        _aggregate(spark, f"{hdfs}/live/totals", first, tmp_path)
        taken = cli_json(home, "savepoint", "--from-checkpoint", f"{hdfs}/live/totals", f"{hdfs}/savepoints")
        assert taken["path"].startswith("hdfs://") and taken["queries"][0]["batch_id"] == 2
        # Each hop restores the previous savepoint into a checkpoint there and takes a savepoint of it.
        hops = [(str(tmp_path / "local-checkpoint"), str(tmp_path / "local-savepoints")),
                (f"s3://{BUCKET}/{tmp_path.name}/checkpoint", f"s3://{BUCKET}/{tmp_path.name}/savepoints"),
                (f"{hdfs}/again", f"{hdfs}/savepoints-again")]
        path = taken["path"]
        for checkpoint, savepoints in hops:
            assert cli_json(home, "verify", path)["valid"]
            cli_json(home, "restore", path, checkpoint)
            path = cli_json(home, "savepoint", "--from-checkpoint", join(checkpoint, "totals"), savepoints)["path"]
        assert path.startswith(f"{hdfs}/savepoints-again/")
        assert load(path).queries[0]["batch_id"] == 2
        final = f"{hdfs}/restored"
        cli_json(home, "restore", path, final)
        second = [[("a", 100)], [("d", 7)]]
        newest = _aggregate(spark, join(final, "totals"), second, tmp_path)
        expected: dict[str, list[int]] = {}
        for rows in first + second:
            for key, value in rows:
                expected.setdefault(key, []).append(value)
        # Only the keys of the batches after the cut are written again, each with all of its history.
        assert newest == {k: (sum(expected[k]), len(expected[k])) for k in ("a", "d")}
    finally:
        s3.stop()


def test_concurrent_restores_into_one_hdfs_target_end_whole_or_absent(spark, hdfs, home, tmp_path):
    _aggregate(spark, f"{hdfs}/live/totals", [[("a", 1)], [("b", 2)]], tmp_path)
    saved = load(cli_json(home, "savepoint", "--from-checkpoint", f"{hdfs}/live/totals", f"{hdfs}/sp")["path"])
    outcomes = race(3, lambda: restore(saved, f"{hdfs}/target", workers=2), TargetNotEmptyError)
    won = [o for o in outcomes if not isinstance(o, Exception)]
    assert len(won) == 1 and len(outcomes) == 3, outcomes
    storage, _ = storage_for(hdfs)
    restored = sorted(path for path, _ in storage.walk_files(f"{hdfs}/target/totals"))
    assert restored == sorted(path.removeprefix("queries/totals/") for path, _ in storage.walk_files(saved.path)
                              if path.startswith("queries/totals/"))
    assert [e.name for e in storage.list(f"{hdfs}/target")] == ["totals"]  # no staging left by the losers
    assert cli_json(home, "verify", saved.path)["valid"]  # and the savepoint untouched


def test_inspect_rescale_prune_and_dispose_on_hdfs(spark, hdfs, home, tmp_path, capsys, monkeypatch):
    """The catalog's commands against a catalog on HDFS; `inspect --state` and `rescale` in this process, with its
    Spark (the CLI's own, reading HDFS through its Hadoop client)."""
    from sparkpoint.cli.main import main

    catalog = f"{hdfs}/catalog"
    monkeypatch.setenv("SPARKPOINT_SAVEPOINTS", catalog)
    first = [[("a", 1), ("b", 10)], [("a", 2)]]
    _aggregate(spark, f"{hdfs}/live/totals", first, tmp_path)
    older = cli_json(home, "savepoint", "--from-checkpoint", f"{hdfs}/live/totals", "--job", "totals")
    newer = cli_json(home, "savepoint", "--from-checkpoint", f"{hdfs}/live/totals", "--job", "totals")
    assert older["path"].startswith(f"{catalog}/totals/") and newer["path"].startswith(f"{catalog}/totals/")

    capsys.readouterr()
    assert main(["inspect", newer["id"], "--state", "-o", "json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["queries"][0]["batch_id"] == 1 and [store["rows"] for store in shown["state"]] == [2]

    assert main(["rescale", newer["id"], "--partitions", "3", "-o", "json"]) == 0
    rescaled = json.loads(capsys.readouterr().out)
    assert rescaled["savepoint"]["path"].startswith(f"{catalog}/totals/"), rescaled
    assert rescaled["queries"][0]["partitions_before"] == 2 and rescaled["queries"][0]["partitions"] == 3
    # The rescaled savepoint, restored onto HDFS, continues exactly with its 3 partitions.
    cli_json(home, "restore", rescaled["savepoint"]["path"], f"{hdfs}/rescaled")
    newest = _aggregate(spark, f"{hdfs}/rescaled/totals", [[("a", 100), ("c", 1)]], tmp_path)
    assert newest == {"a": (103, 3), "c": (1, 1)}

    pruned = cli_json(home, "prune", "--keep-last", "1", "--job", "totals")
    assert {d["id"] for d in pruned["deleted"]} == {older["id"], newer["id"]} and len(pruned["kept"]) == 1
    kept = pruned["kept"][0]
    assert cli_json(home, "savepoint", "--dispose", kept["id"])["disposed"]
    storage, path = storage_for(f"{catalog}/totals")
    assert [e.name for e in storage.list(path)] == []  # nothing of the three is left on HDFS

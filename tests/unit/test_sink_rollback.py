"""Sink rollback on file sink logs in Spark's exact format (the end-to-end test with Spark is
tests/spark/test_sink_rollback_e2e.py): what is kept, moved, rebuilt and refused, and the order of the moves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkpoint.adapters.storage import Storage
from sparkpoint.errors import SinkRollbackRefusedError
from sparkpoint.spark import sink_rollback
from sparkpoint.spark.file_sink import SinkLog, derive_interval, parse_entries
from sparkpoint.spark.sinks import sink_record
from sparkpoint.spark.sink_rollback import SinkCut

LOCAL = Storage(None, local=True)


def entry(out: Path, batch: int, index: int) -> str:
    return json.dumps({"path": f"file://{out}/part-{batch:02d}-{index}.parquet", "size": 100 + batch,
                       "isDir": False, "modificationTime": 1795457526286 + batch, "blockReplication": 1,
                       "blockSize": 33554432, "action": "add"}, separators=(",", ":"))


def sink(out: Path, batches: int, interval: int = 3, deleted_below: int = 0, files_per_batch: int = 2) -> None:
    """An output as Spark's file sink leaves it after ``batches`` batches: data files, their checksums, deltas,
    a compaction every ``interval`` batches, and the log files below ``deleted_below`` deleted (expired)."""
    log = out / "_spark_metadata"
    log.mkdir(parents=True)
    lines: list[str] = []
    for batch in range(batches):
        added = [entry(out, batch, i) for i in range(files_per_batch)]
        for i in range(files_per_batch):
            (out / f"part-{batch:02d}-{i}.parquet").write_bytes(b"x" * (100 + batch))
            (out / f".part-{batch:02d}-{i}.parquet.crc").write_bytes(b"crc")
        lines += added
        compaction = (batch + 1) % interval == 0
        name = f"{batch}.compact" if compaction else f"{batch}"
        if batch >= deleted_below:
            (log / name).write_text("\n".join(["v1", *(lines if compaction else added)]))
            (log / f".{name}.crc").write_bytes(b"crc")


def files_at(out: Path, batch: int) -> list[str]:
    return [e.path for e in SinkLog(LOCAL, str(out)).entries_at(batch)]


def last_at(out: Path, batch: int) -> str:
    return f"file://{out}/part-{batch:02d}-1.parquet"


def test_a_rollback_moves_the_later_batches_aside_and_the_log_ends_at_the_cut(tmp_path):
    out = tmp_path / "out"
    sink(out, 9)  # compactions at 2, 5, 8
    plan = sink_rollback.plan(LOCAL, str(out), SinkCut(3, 3, True, last_at(out, 3)))
    assert plan.batches == [4, 5, 6, 7, 8] and not plan.rebuilt
    # Strictly newest first: each step leaves the log as Spark had it at an earlier batch.
    assert plan.log_aside == [] and plan.log_chain == ["8.compact", "7", "6", "5.compact", "4"]
    assert sorted(p for p, _ in plan.moved) == [f"part-{b:02d}-{i}.parquet" for b in range(4, 9) for i in range(2)]
    assert plan.bytes == sum(2 * (100 + b) for b in range(4, 9))
    trash = Path(sink_rollback.apply(LOCAL, plan))
    assert trash.parent == tmp_path and trash.name.startswith("out.sparkpoint-trash-")
    assert sorted(p.name for p in (out / "_spark_metadata").iterdir() if not p.name.endswith(".crc")) == [
        "0", "1", "2.compact", "3"]
    assert files_at(out, 3) == [f"file://{out}/part-{b:02d}-{i}.parquet" for b in range(4) for i in range(2)]
    assert sorted(p.name for p in out.glob("part-*")) == [f"part-{b:02d}-{i}.parquet" for b in range(4)
                                                         for i in range(2)]
    # Checksums travel with their files; the record, written last, lists what moved.
    assert (trash / ".part-08-1.parquet.crc").exists() and (trash / "_spark_metadata" / ".8.compact.crc").exists()
    record = json.loads((trash / "_sparkpoint_rollback.json").read_text())
    assert record["latest_batch"] == 8 and len(record["files"]) == 10


def test_the_log_compacted_and_deleted_past_the_cut_is_rebuilt_from_the_recorded_newest_file(tmp_path):
    out = tmp_path / "out"
    sink(out, 9, deleted_below=5)  # 2.compact, 3 and 4 are gone, as Spark's cleanup leaves them
    before = SinkLog(LOCAL, str(out)).entries_at(8)
    plan = sink_rollback.plan(LOCAL, str(out), SinkCut(3, 3, True, last_at(out, 3)))
    assert plan.rebuilt and set(plan.log_written) == {"2.compact", "3"}
    sink_rollback.apply(LOCAL, plan)
    log = SinkLog(LOCAL, str(out))
    assert log.latest == 3 and log.chain(3) == [2, 3]
    assert log.entries_at(3) == before[:8]  # a compaction keeps the order: the cut's files are a prefix
    assert derive_interval(log.compactions, 3) == 3  # the interval Spark will take from the rebuilt log


def test_a_rescaled_savepoint_s_own_batch_is_written_empty_after_the_sink_s_cut(tmp_path):
    out = tmp_path / "out"
    sink(out, 7)
    plan = sink_rollback.plan(LOCAL, str(out), SinkCut(3, 4, True, last_at(out, 3)))
    assert list(plan.filler) == ["4"]
    sink_rollback.apply(LOCAL, plan)
    assert SinkLog(LOCAL, str(out)).latest == 4 and files_at(out, 4) == files_at(out, 3)


def test_an_output_at_or_before_the_cut_has_nothing_to_roll_back(tmp_path):
    out = tmp_path / "out"
    sink(out, 4)
    plan = sink_rollback.plan(LOCAL, str(out), SinkCut(3, 3, True, last_at(out, 3)))
    assert plan.batches == [] and sink_rollback.apply(LOCAL, plan) is None
    assert len(list(out.glob("part-*"))) == 8


@pytest.mark.parametrize("case, expected", [
    ("no log", "not the output of Spark's file sink"),
    ("unknown cut", "cannot be undone from here"),
    ("other output", "not the output the savepoint's query wrote"),
    ("file not in log", "is not in the sink's log"),
    ("deletes", "deletes files"),
    ("outside", "outside the output"),
    ("broken chain", "missing files of batch 7's chain"),
])
def test_refusals_name_the_reason_and_move_nothing(tmp_path, case, expected):
    out = tmp_path / "out"
    cut = SinkCut(3, 3, True, last_at(out, 3), compact_interval=3)
    if case == "no log":
        out.mkdir()
    else:
        sink(out, 8, deleted_below=5 if case in ("unknown cut", "file not in log") else 0)  # latest: 5.compact, 6, 7
    log = out / "_spark_metadata"
    if case == "unknown cut":
        cut = SinkCut(3, 3, False, None, compact_interval=3)
    elif case == "other output":
        cut = SinkCut(3, 3, True, last_at(out, 2), compact_interval=3)
    elif case == "file not in log":
        cut = SinkCut(3, 3, True, f"file://{tmp_path}/elsewhere/part-03-1.parquet", compact_interval=3)
    elif case == "deletes":
        (log / "6").write_text((log / "6").read_text().replace('"add"', '"delete"'))
    elif case == "outside":
        (log / "6").write_text((log / "6").read_text().replace(str(out), str(tmp_path / "victim")))
    elif case == "broken chain":
        (log / "6").unlink()
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    with pytest.raises(SinkRollbackRefusedError, match=expected):
        sink_rollback.plan(LOCAL, str(out), cut)
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before


def test_what_a_savepoint_records_of_a_sink(tmp_path):
    out = tmp_path / "out"
    sink(out, 9, deleted_below=5)
    assert sink_record("ForeachBatchSink") == {"kind": "other", "path": None, "description": "ForeachBatchSink"}
    kafka = "org.apache.spark.sql.kafka010.KafkaSourceProvider$KafkaTable@132f8983"  # as Spark 4.3 names it
    assert sink_record(kafka) == {"kind": "kafka", "path": None, "description": kafka}
    record = sink_record(f"FileSink[file:{out}]")
    assert record == {"kind": "file", "path": f"file:{out}", "description": f"FileSink[file:{out}]",
                      "compact_interval": None}
    assert sink_record(f"FileSink[file:{out}]", "3")["compact_interval"] == 3
    assert sink_record(f"FileSink[file:{out}]", "0")["compact_interval"] is None  # not a usable interval
    log = SinkLog(LOCAL, str(out))
    assert log.last_file_at(6) == (True, last_at(out, 6))
    assert log.last_file_at(5) == (True, last_at(out, 5))  # the tail of a compaction file
    assert log.last_file_at(3) == (False, None)  # its chain is gone


def test_a_log_line_that_is_not_spark_s_is_refused():
    from sparkpoint.errors import NotACheckpointError

    with pytest.raises(NotACheckpointError, match="malformed"):
        parse_entries(b'v1\n{"path": 3', "x/_spark_metadata/0")
    with pytest.raises(NotACheckpointError, match="version v2"):
        parse_entries(b"v2\n", "x/_spark_metadata/0")


def test_the_command_on_a_savepoint_that_records_no_sink_needs_the_output_and_then_rolls_it_back(
        capsys, home, tmp_path):
    from checkpoints import hdfs_checkpoint

    from sparkpoint.cli.main import main

    checkpoint = hdfs_checkpoint(tmp_path / "alarms", committed=3)  # a plain checkpoint: no sink recorded
    assert main(["savepoint", "--from-checkpoint", str(checkpoint), "-o", "json"]) == 0
    saved = json.loads(capsys.readouterr().out)["id"]
    assert main(["rollback-sink", saved]) == 18
    assert "records no sink at all" in capsys.readouterr().err
    out = tmp_path / "out"
    sink(out, 6)  # its log at batch 3 is still there: the cut's files are known from it
    assert main(["rollback-sink", saved, str(out), "--dry-run", "-o", "json"]) == 0
    (dry,) = json.loads(capsys.readouterr().out)
    assert (dry["batches"], dry["trash"], len(dry["files"])) == ([4, 5], None, 4)
    assert main(["rollback-sink", saved, str(out), "--query", "nope"]) == 2
    capsys.readouterr()
    assert main(["rollback-sink", saved, str(out)]) == 0
    assert "back to batch 3; batches 4..5 moved to" in capsys.readouterr().out
    assert SinkLog(LOCAL, str(out)).latest == 3


def test_with_one_compaction_left_the_interval_is_the_one_the_version_sets(tmp_path):
    out = tmp_path / "out"
    sink(out, 9, interval=3, deleted_below=8)  # 8.compact alone: Spark's default (10) would make the interval 9
    plan = sink_rollback.plan(LOCAL, str(out), SinkCut(3, 3, True, last_at(out, 3), compact_interval=3))
    assert set(plan.log_written) == {"2.compact", "3"}
    sink_rollback.apply(LOCAL, plan)
    log = SinkLog(LOCAL, str(out))
    assert derive_interval(log.compactions, 3) == 3 and log.chain(3) == [2, 3] and len(log.entries_at(3)) == 8


def spark_reads(out: Path, default_interval: int) -> bool:
    """Whether Spark's reader of the log (CompactibleFileStreamLog.allFiles) finds every file it looks for."""
    log = SinkLog(LOCAL, str(out))
    if log.latest is None:
        return True
    interval = derive_interval(log.compactions, default_interval)
    start = max(0, (log.latest + 1) // interval * interval - 1)
    return all(log.batches.get(b) == (f"{b}.compact" if (b + 1) % interval == 0 else f"{b}")
               for b in range(start, log.latest + 1))


def test_an_interrupted_rollback_keeps_the_log_readable_at_each_step_and_is_finished_by_the_next(
        tmp_path, monkeypatch):
    out = tmp_path / "out"
    sink(out, 10, interval=3, deleted_below=5)  # 5.compact .. 9: cut 3 must be rebuilt
    cut = SinkCut(3, 3, True, last_at(out, 3), compact_interval=3)
    real_move, moves = Storage.move, []

    def move_then_check(self, source, target):
        if len(moves) == 4:
            raise OSError(5, "Input/output error", source)  # the machine failing under the rollback
        real_move(self, source, target)
        moves.append(source)
        assert spark_reads(out, 3), f"the log is unreadable after moving {source}"

    monkeypatch.setattr(Storage, "move", move_then_check)
    with pytest.raises(Exception, match="Input/output error"):
        sink_rollback.apply(LOCAL, sink_rollback.plan(LOCAL, str(out), cut))
    monkeypatch.setattr(Storage, "move", real_move)
    with pytest.raises(SinkRollbackRefusedError, match="was interrupted"):
        sink_rollback.plan(LOCAL, str(out), SinkCut(2, 2, True, last_at(out, 2), compact_interval=3))
    resumed = sink_rollback.plan(LOCAL, str(out), cut)
    assert resumed.trash is not None and resumed.batches == [4, 5, 6, 7, 8, 9]
    assert sink_rollback.apply(LOCAL, resumed) == resumed.trash
    trash = Path(resumed.trash)
    assert json.loads((trash / "_sparkpoint_rollback.json").read_text())["state"] == "done"
    assert sorted(p.name for p in out.glob("part-*")) == [f"part-{b:02d}-{i}.parquet" for b in range(4)
                                                         for i in range(2)]
    assert len(list(trash.glob("part-*"))) == 12 and spark_reads(out, 3) and SinkLog(LOCAL, str(out)).latest == 3
    assert sink_rollback.plan(LOCAL, str(out), cut).batches == []  # done: nothing left to finish


def test_a_log_that_fits_several_compaction_intervals_is_refused_unless_the_job_s_is_known(tmp_path):
    out = tmp_path / "out"
    sink(out, 11, interval=3, deleted_below=8)  # 8.compact, 9, 10: Spark's default (10) would derive 9
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    with pytest.raises(SinkRollbackRefusedError, match="fits compaction intervals 3, 9, and the savepoint does not"):
        sink_rollback.plan(LOCAL, str(out), SinkCut(3, 3, True, last_at(out, 3)))
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before
    sink_rollback.apply(LOCAL, sink_rollback.plan(LOCAL, str(out), SinkCut(3, 3, True, last_at(out, 3),
                                                                      compact_interval=3)))
    assert spark_reads(out, 3) and SinkLog(LOCAL, str(out)).latest == 3


def test_paths_are_decoded_as_hadoop_encodes_them(tmp_path):
    out = tmp_path / "out dir"
    log = out / "_spark_metadata"
    (out / "k=50%25").mkdir(parents=True)
    log.mkdir()
    for batch in range(3):
        name = f"k=50%25/part-{batch}.parquet"
        (out / name).write_bytes(b"x")
        # Hadoop's URI encodes the space, and the '%' of the partition value's own escape again.
        logged = f"file://{str(out).replace(' ', '%20')}/{name.replace('%', '%25')}"
        (log / str(batch)).write_text("v1\n" + json.dumps({"path": logged, "size": 1, "action": "add"}))
    plan = sink_rollback.plan(LOCAL, str(out), SinkCut(0, 0, False, None))
    assert plan.moved == [("k=50%25/part-1.parquet", 1), ("k=50%25/part-2.parquet", 1)]
    trash = Path(sink_rollback.apply(LOCAL, plan))
    assert sorted(p.name for p in (trash / "k=50%25").iterdir()) == ["part-1.parquet", "part-2.parquet"]


def test_a_log_behind_the_cut_is_refused_and_one_at_it_gets_the_rescaled_batch(tmp_path):
    out = tmp_path / "out"
    sink(out, 4)
    with pytest.raises(SinkRollbackRefusedError, match="ends at batch 3, before the savepoint's batch 6"):
        sink_rollback.plan(LOCAL, str(out), SinkCut(6, 6, True, None))
    plan = sink_rollback.plan(LOCAL, str(out), SinkCut(3, 4, True, last_at(out, 3)))
    assert plan.batches == [] and list(plan.filler) == ["4"]
    assert sink_rollback.apply(LOCAL, plan) is None
    assert SinkLog(LOCAL, str(out)).latest == 4 and files_at(out, 4) == files_at(out, 3)


def test_a_savepoint_is_taken_when_the_sink_cannot_be_read(tmp_path):
    from sparkpoint.spark.sinks import at_cut

    out = tmp_path / "out"
    sink(out, 4)
    (out / "_spark_metadata" / "3").unlink()
    (out / "_spark_metadata" / "3").symlink_to(tmp_path / "elsewhere")  # refused as unsafe: the cut is unknown
    record = at_cut(sink_record(f"FileSink[file:{out}]"), "a-query-id", 3)
    assert (record["batch_id"], record["cut_known"], record["last_file"]) == (3, False, None)


def test_a_log_whose_files_spark_would_not_find_after_the_rollback_is_refused(tmp_path):
    out = tmp_path / "out"
    sink(out, 8, interval=3)
    log = out / "_spark_metadata"
    (log / "4").rename(log / "4.compact")  # not a compaction batch of this log: Spark would look for "4"
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    with pytest.raises(SinkRollbackRefusedError, match="would not find"):
        sink_rollback.plan(LOCAL, str(out), SinkCut(4, 4, False, None, compact_interval=3))
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before


def test_the_command_takes_the_compaction_interval_the_log_does_not_tell(capsys, home, tmp_path):
    from checkpoints import hdfs_checkpoint

    from sparkpoint.cli.main import main

    checkpoint = hdfs_checkpoint(tmp_path / "alarms", committed=3)
    assert main(["savepoint", "--from-checkpoint", str(checkpoint), "-o", "json"]) == 0
    saved = json.loads(capsys.readouterr().out)["id"]
    out = tmp_path / "out"
    sink(out, 11, interval=3, deleted_below=8)  # 8.compact, 9, 10: fits 3 and 9
    assert main(["rollback-sink", saved, str(out)]) == 18
    assert "fits compaction intervals 3, 9" in capsys.readouterr().err
    # With the interval, the next question is the cut's files: this savepoint does not record them.
    assert main(["rollback-sink", saved, str(out), "--compact-interval", "3"]) == 18
    assert "cannot be undone from here" in capsys.readouterr().err


@pytest.mark.parametrize("escape", ["dot-dot", "link"])
def test_a_log_that_names_a_file_outside_the_output_through_dot_dot_or_a_link_is_refused(tmp_path, escape):
    out, victim = tmp_path / "out", tmp_path / "victim"
    sink(out, 7)
    victim.mkdir()
    (victim / "keep.txt").write_text("secret")
    log = out / "_spark_metadata" / "6"
    entry = json.loads(log.read_text().splitlines()[1])
    if escape == "dot-dot":
        entry["path"] = f"file://{out}/../victim/keep.txt"
    else:
        (out / "sub").symlink_to(victim)
        entry["path"] = f"file://{out}/sub/keep.txt"
    log.write_text("v1\n" + json.dumps(entry))
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    with pytest.raises(SinkRollbackRefusedError, match="outside the output"):
        sink_rollback.plan(LOCAL, str(out), SinkCut(3, 3, True, last_at(out, 3)))
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before and (victim / "keep.txt").read_text() == "secret"


def test_an_output_named_through_a_link_is_the_output(tmp_path):
    out = tmp_path / "out"
    sink(out, 6)
    (tmp_path / "link").symlink_to(out)
    plan = sink_rollback.plan(LOCAL, str(tmp_path / "link"), SinkCut(3, 3, True, last_at(out, 3)))
    assert sorted(p for p, _ in plan.moved) == [f"part-{b:02d}-{i}.parquet" for b in (4, 5) for i in range(2)]


@pytest.mark.parametrize("edit", [
    lambda record: record["files"].append({"path": "../victim/keep.txt", "size": 1}),
    lambda record: record["log_chain"].append("../../victim/keep.txt"),
    lambda record: record.update(log_written=["2.compact"]),
    lambda record: record.update(sink_batch=None),
])
def test_an_edited_record_of_an_interrupted_rollback_is_refused(tmp_path, monkeypatch, edit):
    out, victim = tmp_path / "out", tmp_path / "victim"
    sink(out, 7)
    victim.mkdir()
    (victim / "keep.txt").write_text("secret")
    cut = SinkCut(3, 3, True, last_at(out, 3), compact_interval=3)
    monkeypatch.setattr(Storage, "move", lambda self, source, target: (_ for _ in ()).throw(OSError(5, "I/O")))
    with pytest.raises(Exception, match="I/O"):
        sink_rollback.apply(LOCAL, sink_rollback.plan(LOCAL, str(out), cut))
    monkeypatch.undo()
    (record_path,) = tmp_path.glob("out.sparkpoint-trash-*/_sparkpoint_rollback.json")
    record = json.loads(record_path.read_text())
    edit(record)
    record_path.write_text(json.dumps(record))
    with pytest.raises(SinkRollbackRefusedError, match="(not readable|was interrupted)"):
        sink_rollback.plan(LOCAL, str(out), cut)
    assert (victim / "keep.txt").read_text() == "secret"


def test_a_second_rollback_of_one_output_waits_for_the_first_and_a_dead_one_s_lock_is_taken_over(tmp_path):
    import subprocess
    import sys

    out = tmp_path / "out"
    sink(out, 4)
    with sink_rollback.exclusive(LOCAL, str(out)), pytest.raises(
            SinkRollbackRefusedError, match=r"another rollback of .* runs \(pid \d+\)"), \
            sink_rollback.exclusive(LOCAL, str(out)):
        pass
    assert not list(tmp_path.glob("*.lock"))
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (tmp_path / "out.sparkpoint-rollback.lock").write_text(json.dumps(
        {"pid": int(gone.stdout), "start": "1", "host": __import__("socket").gethostname()}))
    with sink_rollback.exclusive(LOCAL, str(out)):  # its process is gone
        assert json.loads((tmp_path / "out.sparkpoint-rollback.lock").read_text())["pid"] != int(gone.stdout)
    assert not list(tmp_path.glob("*.lock"))


def test_a_stateful_query_restored_into_a_file_sink_past_its_cut_is_refused_and_a_stateless_one_warned_of(
        capsys, home, tmp_path):
    """Spark 4.3, tried: a dedup restored from batch 2 into an output whose log holds 3..5 skips them, writes no
    state for them, and fails at batch 6 (CANNOT_READ_DELTA_FILE_NOT_EXISTS)."""
    from checkpoints import hdfs_checkpoint

    from sparkpoint.cli.main import main
    from sparkpoint.config import load_settings
    from sparkpoint.errors import SinkAheadError
    from sparkpoint.jobs.sinks_ahead import pending, refuse_sinks_ahead
    from sparkpoint.savepoints import catalog
    from sparkpoint.spark.sinks import at_cut

    assert main(["savepoint", "--from-checkpoint", str(hdfs_checkpoint(tmp_path / "ck", committed=3)),
                 "-o", "json"]) == 0
    settings = load_settings()
    savepoint = catalog.load(settings, json.loads(capsys.readouterr().out)["id"])
    out = tmp_path / "out"
    sink(out, 6)
    savepoint.queries[0]["sink"] = at_cut(sink_record(f"FileSink[file:{out}]"), "6a1b0c5e-query-id", 3)
    with pytest.raises(SinkAheadError, match=r"has committed batches 4\.\.5 after the savepoint's batch 3: .*keeps "
                                             r"state.*pass --rollback-sink"):
        refuse_sinks_ahead(settings, savepoint, False, True, print)  # --keep-sink-output cannot help it
    savepoint.queries[0]["operators"] = []
    assert refuse_sinks_ahead(settings, savepoint, False, False, print) == []
    assert "batches 4..5 after the savepoint's batch 3" in pending(settings, savepoint)[0]

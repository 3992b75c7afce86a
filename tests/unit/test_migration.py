"""Moving a savepoint to another Spark version (savepoints.migration): what the target cannot read is refused
from the savepoint alone, the confs it needs are named, what changes is said. Each case is a format fact read
in that version's bytecode (sparkpoint.spark_versions); tests/compat runs the moves on the real Sparks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from checkpoints import CONFS, hdfs_checkpoint
from clitools import cli, spark_home

from sparkpoint.adapters.storage import storage_for
from sparkpoint.savepoints import compat
from sparkpoint.savepoints.create import QuerySource, create
from sparkpoint.savepoints.migration import ansi_note, move
from sparkpoint.savepoints.savepoint import load

CHECKPOINT_FORMAT = "spark.sql.streaming.stateStore.checkpointFormatVersion"


def savepoint_of(tmp_path: Path, spark_version: str | None, commits: str = "v1", offsets: str = "v1",
                 confs: dict | None = None, operator: str = "stateStoreSave"):
    """A savepoint whose Spark, log versions, pinned confs and operator are as given."""
    checkpoint = hdfs_checkpoint(tmp_path / "ckpt" / "alarms", committed=3)
    storage, target = storage_for(str(tmp_path / "savepoints"))
    created = create([QuerySource("alarms", str(checkpoint))], storage, target, storage, job="alarms",
                     spark_version=spark_version)
    saved = load(created["path"])
    query = saved.query("alarms")
    for log, version in (("offsets", offsets), ("commits", commits)):
        path = Path(saved.path) / "queries" / "alarms" / log / "3"
        path.write_text(version + path.read_text()[2:])
    query["confs"] = confs or dict(CONFS)
    query["operators"][0]["name"] = operator
    return saved


def test_a_3_5_savepoint_moves_to_every_newer_spark_with_nothing_to_refuse_or_set(tmp_path):
    saved = savepoint_of(tmp_path, "3.5.9")
    for target in ("3.5.9", "4.0.5", "4.1.4", "4.2.1", "4.3.0"):
        moved = move(saved, target)
        assert (moved.source, moved.refused, moved.notes, moved.launch_confs) == ("3.5.9", None, [], []), target


def test_a_commit_log_v2_is_refused_on_3_5_and_named_to_every_4_x_whose_session_must_match_it(tmp_path):
    saved = savepoint_of(tmp_path, "4.3.0", commits="v2")
    assert move(saved, "3.5.9").refused == ("query alarms: its commit log is v2 (checkpoint format v2); "
                                            "Spark 3.5.9 reads up to v1")
    # Format v2 state of another minor is read by none (seen: 4.3.0's RocksDB state on 4.0.5, 4.0.5's on 4.3.0).
    assert move(saved, "4.2.1").refused == ("query alarms: its state is of checkpoint format v2, written by Spark "
                                            "4.3.0; Spark 4.2.1 does not read that format as another minor wrote "
                                            "it; it restores on Spark 4.3")
    own = savepoint_of(tmp_path / "own", "4.0.5", commits="v2")
    # On its own minor: 4.0 and 4.1 read the commit log only as the session's conf says; 4.2+ get it as written.
    assert move(own, "4.3.0").refused.endswith("it restores on Spark 4.0")
    for target in ("4.0.0", "4.0.5"):
        assert move(own, target).launch_confs == [f"{CHECKPOINT_FORMAT}=2"] and move(own, target).refused is None
        assert "reads only the version" in move(own, target, {CHECKPOINT_FORMAT: "1"}).refused
    assert move(savepoint_of(tmp_path / "4.2", "4.2.1", commits="v2"), "4.2.1").launch_confs == [
        f"{CHECKPOINT_FORMAT}=2"]
    # A v1 log on 4.0 with the conf set to 2: Spark would refuse it at the first batch.
    assert "(2 in --conf)" in move(savepoint_of(tmp_path / "v1", "4.0.5"), "4.0.5", {CHECKPOINT_FORMAT: "2"}).refused


def test_an_offset_log_v2_needs_spark_4_2(tmp_path):
    saved = savepoint_of(tmp_path, "4.3.0", offsets="v2")
    for target in ("3.5.9", "4.0.5", "4.1.4"):
        assert move(saved, target).refused == (f"query alarms: its offset log is v2 (written by Spark 4.2 or newer "
                                               f"when asked); Spark {target} reads v1 only")
    assert move(saved, "4.2.1").refused is None


def test_transform_with_state_is_refused_on_3_5(tmp_path):
    saved = savepoint_of(tmp_path, "4.1.4", operator="transformWithStateExec")
    assert move(saved, "3.5.9").refused == ("query alarms: operator 0 is transformWithState, which Spark 3.5.9 does "
                                            "not have")
    assert move(saved, "4.0.5").refused is None


def test_a_downgrade_names_the_pinned_confs_the_older_spark_does_not_know_and_refuses_a_state_layout(tmp_path):
    saved = savepoint_of(tmp_path, "4.3.0", confs={**CONFS, "spark.sql.dropDuplicates.deterministicKeyOrder.enabled":
                                                   "true", "spark.sql.streaming.stateStore.encodingFormat": "avro"})
    to_4_2 = move(saved, "4.2.1")
    assert to_4_2.refused is None
    assert to_4_2.notes == ["query alarms: spark.sql.dropDuplicates.deterministicKeyOrder.enabled=true is pinned by "
                            "Spark 4.3 or newer; Spark 4.2.1 does not know it and runs the query as with false"]
    assert move(saved, "3.5.9").refused == ("query alarms: spark.sql.streaming.stateStore.encodingFormat=avro is "
                                            "pinned by Spark 4.0 or newer; Spark 3.5.9 does not know it and runs "
                                            "the query as with unsaferow, which misreads the saved state")
    # The value an older Spark assumes is no change at all.
    assert move(savepoint_of(tmp_path / "same", "4.3.0", confs={
        **CONFS, "spark.sql.streaming.stateStore.encodingFormat": "unsaferow"}), "3.5.9").notes == []


def test_the_conf_3_5_4_misnamed_is_read_up_to_4_0_and_said_from_4_1(tmp_path):
    misnamed = "spark.databricks.sql.optimizer.pruneFiltersCanPruneStreamingSubplan"
    saved = savepoint_of(tmp_path, "3.5.4", confs={**CONFS, misnamed: "false"})
    assert move(saved, "4.0.5").notes == []
    assert move(saved, "4.1.4").notes == [
        f"query alarms: its offset log pins spark.sql.optimizer.pruneFiltersCanPruneStreamingSubplan=false under an "
        f"older name ({misnamed}, written by Spark 3.5.4), which Spark 4.1.4 no longer reads: it runs the query "
        f"with true"]


def test_ansi_mode_is_said_when_the_new_session_runs_it_otherwise_than_the_old_default():
    assert ansi_note("q", "3.5.9", "true") == (
        "query q: ANSI SQL mode changes from off (Spark 3.5.9's default) to on (spark.sql.ansi.enabled=true in the "
        "new session; no offset log pins it): an overflow or a bad cast now fails the query instead of giving null; "
        "--conf spark.sql.ansi.enabled=false keeps the old behaviour")
    assert ansi_note("q", "3.5.9", "false") is None and ansi_note("q", "4.0.5", "true") is None
    assert "from on (Spark 4.0.5's default) to off" in ansi_note("q", "4.0.5", "false")
    assert ansi_note("q", None, "true") is None  # a savepoint of a plain checkpoint: its Spark is not known


def test_the_verdict_says_the_ansi_change_the_driver_reported(tmp_path):
    saved = savepoint_of(tmp_path, "3.5.9")
    ran = {"name": "alarms", "saved": True, "confs": {}, "effective": {"spark.sql.ansi.enabled": "true"},
           "error": None, "batch_id": 4, "operators": [{"name": "stateStoreSave"}], "sources": ["s"]}
    checked = compat.verdict(saved, "app.py", {"queries": [ran]}, allow_non_restored=False)
    assert checked.compatible and [note[:48] for note in checked.notes] == [
        "query alarms: ANSI SQL mode changes from off (Sp"]
    assert compat.request(saved, 60.0, 30.0, [])["effective"] == ["spark.sql.ansi.enabled"]


@pytest.mark.parametrize("command", [["check"], ["run", "--detach"]])
def test_check_and_run_refuse_what_the_jobs_spark_cannot_read_before_any_spark_starts(tmp_path, command):
    """The Spark here is a directory with a version and no working spark-submit: nothing may launch it."""
    saved = savepoint_of(tmp_path, "4.3.0", commits="v2")
    manifest = Path(saved.path) / "manifest.json"
    data = json.loads(manifest.read_text())
    data["queries"][0]["operators"] = saved.query("alarms")["operators"]
    manifest.write_text(json.dumps(data))
    app = tmp_path / "app.py"
    app.write_text("raise SystemExit('never run')\n")
    old = spark_home(tmp_path / "spark-3.5", "3.5.9")
    code, out, err = cli(tmp_path / "home", *command, "-s", saved.path, "--spark-home", str(old), str(app))
    assert code == 16, err
    assert "its commit log is v2 (checkpoint format v2); Spark 3.5.9 reads up to v1" in (out + err)
    assert not (tmp_path / "home" / "jobs").exists() or not list((tmp_path / "home" / "jobs").iterdir())


@pytest.mark.parametrize("check", [[], ["--no-check"]])
def test_run_gives_4_0_the_checkpoint_format_its_read_needs_checked_or_not(tmp_path, check):
    """The conf is how 4.0 reads a commit log v2, not a check: --no-check keeps it. The Spark here records the
    command line it is given and fails, so that nothing else runs."""
    saved = savepoint_of(tmp_path, "4.0.5", commits="v2")
    spark = spark_home(tmp_path / "spark-4.0", "4.0.5")
    argv = tmp_path / "argv"
    (spark / "bin" / "spark-submit").write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {argv}\nexit 1\n')
    (spark / "bin" / "spark-submit").chmod(0o755)
    app = tmp_path / "app.py"
    app.write_text("raise SystemExit('never run')\n")
    cli(tmp_path / "home", "run", *check, "-s", saved.path, "--spark-home", str(spark), str(app), timeout=120)
    given = argv.read_text().splitlines()
    assert given[given.index(f"{CHECKPOINT_FORMAT}=2") - 1] == "--conf"

"""Delta tables against a savepoint's cut, on real tables written by delta-rs the way Delta's streaming sink
writes them (each batch one commit with ``txn {appId: query id, version: batch}``): what sparkpoint reads of the
log, the trap it refuses, and the rollback (Delta's restore) with its refusals. The end-to-end test with Spark's
own Delta sink, on each Spark that has one, is tests/compat/test_delta_versions.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from dataclasses import replace
from types import SimpleNamespace

import pytest

pa = pytest.importorskip("pyarrow")
deltalake = pytest.importorskip("deltalake")

from sparkpoint.adapters.storage import Storage  # noqa: E402
from sparkpoint.errors import (NotACheckpointError, SavepointInvalidError, SinkAheadError,  # noqa: E402
                               SinkRollbackRefusedError)
from sparkpoint.spark.delta_log import DeltaLog, parse_commit, sink_cut  # noqa: E402
from sparkpoint.spark.sinks import at_cut, sink_record  # noqa: E402

LOCAL = Storage(None, local=True)
QUERY = "6a1b0c5e-query-id"  # the query id of tests/unit/checkpoints.py's checkpoints


def batch(table: Path, number: int, query: str = QUERY, rows: int = 2) -> None:
    """What Delta's sink commits for one batch: its rows and the query's txn, in one commit."""
    data = pa.table({"batch": pa.array([number] * rows, pa.int64()), "i": pa.array(range(rows), pa.int64())})
    deltalake.write_deltalake(str(table), data, mode="append", commit_properties=deltalake.CommitProperties(
        app_transactions=[deltalake.Transaction(query, number)]))


def foreign_write(table: Path) -> None:
    deltalake.write_deltalake(str(table), pa.table({"batch": pa.array([-1], pa.int64()),
                                                    "i": pa.array([0], pa.int64())}), mode="append")


def batches_in(table: Path) -> list[int]:
    return sorted(r["batch"] for r in deltalake.DeltaTable(str(table)).to_pyarrow_table().to_pylist())


def test_the_cut_is_the_query_s_commit_of_its_batch_and_a_rollback_target_keeps_others_commits_before(tmp_path):
    table = tmp_path / "t"
    for number in range(3):
        batch(table, number)  # versions 0..2
    foreign_write(table)  # version 3: another writer, before the query's next batch: kept by a rollback
    for number in range(3, 6):
        batch(table, number)  # versions 4..6
    cut = sink_cut(DeltaLog(LOCAL, str(table)), QUERY, 2)
    assert (cut.table_version, cut.cut_batch, cut.complete, cut.later_batches, cut.target) == (2, 2, True,
                                                                                               [3, 4, 5], 3)
    assert cut.foreign() == []
    assert sink_cut(DeltaLog(LOCAL, str(table)), QUERY, 5).later_batches == []
    # A batch that wrote nothing: the cut is the query's newest commit below it.
    assert sink_cut(DeltaLog(LOCAL, str(table)), QUERY, 7).cut_batch == 5
    # Another query's commits are another writer's.
    assert sink_cut(DeltaLog(LOCAL, str(table)), "another-query", 0).later_batches == []


def test_what_a_savepoint_records_of_a_delta_sink(tmp_path):
    table = tmp_path / "t"
    for number in range(4):
        batch(table, number)
    record = sink_record(f"DeltaSink[file:{table}]")
    assert record == {"kind": "delta", "path": f"file:{table}", "description": f"DeltaSink[file:{table}]"}
    assert at_cut(record, QUERY, 2) == {**record, "batch_id": 2, "cut_known": True, "table_version": 2,
                                        "cut_batch": 2}
    assert at_cut(record, "never-wrote", 2)["cut_known"] is False
    gone = sink_record(f"DeltaSink[file:{tmp_path / 'gone'}]")
    assert at_cut(gone, QUERY, 2) == {**gone, "batch_id": 2, "cut_known": False, "table_version": None,
                                      "cut_batch": None}


@pytest.mark.parametrize("raw, message", [
    (b"not json", "not JSON"),
    (b'{"txn": {"appId": 3, "version": 1}}', "no appId or version"),
    (b'{"txn": {"appId": "q", "version": true}}', "no appId or version"),
    (b'{"add": {}, "remove": {}}', "not one Delta action"),
    (b'{"txn": []}', "not an object"),
    (b"[" * 100000, "not JSON"),
])
def test_a_commit_that_is_not_delta_s_is_refused_by_name(raw, message):
    with pytest.raises(NotACheckpointError, match=message):
        parse_commit(raw, 7, "t/_delta_log/00000000000000000007.json")


def test_commits_that_change_no_row_are_not_another_writer_s(tmp_path):
    table = tmp_path / "t"
    for number in range(6):
        batch(table, number)
    deltalake.DeltaTable(str(table)).optimize.compact()  # dataChange false: the same rows in fewer files
    cut = sink_cut(DeltaLog(LOCAL, str(table)), QUERY, 2)
    assert cut.ahead[0].operation == "OPTIMIZE" and not cut.ahead[0].changes_data
    assert cut.foreign() == [] and cut.later_batches == [3, 4, 5]


def rewrite_query(savepoint_path: str, **fields) -> None:
    """The savepoint's manifest with its (only) query's ``fields`` set: what a savepoint of a job would record."""
    manifest = Path(savepoint_path) / "manifest.json"
    data = json.loads(manifest.read_text())
    data["queries"][0].update(fields)
    manifest.write_text(json.dumps(data))


def savepoint_of_checkpoint(capsys, tmp_path) -> str:
    from checkpoints import hdfs_checkpoint

    from sparkpoint.cli.main import main

    checkpoint = hdfs_checkpoint(tmp_path / "ck", committed=3)
    assert main(["savepoint", "--from-checkpoint", str(checkpoint), "-o", "json"]) == 0
    return json.loads(capsys.readouterr().out)["id"]


def test_rollback_sink_restores_the_table_to_the_cut_keeps_what_it_takes_out_and_refuses_another_writer(
        capsys, home, tmp_path):
    from sparkpoint.cli.main import main

    saved = savepoint_of_checkpoint(capsys, tmp_path)  # the query's cut: batch 3
    table = tmp_path / "t"
    for number in range(9):
        batch(table, number)
    assert main(["rollback-sink", saved, str(table), "--dry-run", "-o", "json"]) == 0
    (dry,) = json.loads(capsys.readouterr().out)
    assert (dry["kind"], dry["batches"], dry["latest_version"], dry["restored_to"], dry["commit"]) == (
        "delta", [4, 5, 6, 7, 8], 8, 3, None)
    assert deltalake.DeltaTable(str(table)).version() == 8  # a dry run changes nothing

    assert main(["rollback-sink", saved, str(table)]) == 0
    said = capsys.readouterr().out
    assert "restored to version 3 (batch 3) in version 9: batches 4..8 undone, 5 files out of the table" in said
    restored = deltalake.DeltaTable(str(table))
    assert batches_in(table) == [0, 0, 1, 1, 2, 2, 3, 3] and restored.transaction_version(QUERY) == 3
    assert len(deltalake.DeltaTable(str(table), version=8).to_pyarrow_table()) == 18  # time travel: all there
    # The table is at the cut now: a second rollback has nothing to do.
    assert main(["rollback-sink", saved, str(table), "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["batches"] == []

    for number in range(4, 6):
        batch(table, number)
    foreign_write(table)  # version 12
    batch(table, 6)
    assert main(["rollback-sink", saved, str(table)]) == 18
    err = capsys.readouterr().err
    assert "version 12 (WRITE by delta-rs" in err and "another writer after the cut" in err, err
    assert deltalake.DeltaTable(str(table)).version() == 13  # nothing changed


def test_delta_s_log_cleanup_past_the_cut_refuses_the_rollback(capsys, home, tmp_path):
    from sparkpoint.cli.main import main

    saved = savepoint_of_checkpoint(capsys, tmp_path)
    table = tmp_path / "t"
    for number in range(7):
        batch(table, number)
    deltalake.DeltaTable(str(table)).create_checkpoint()
    for version in range(5):  # as Delta's log cleanup leaves it: a checkpoint, and the commits after it
        (table / "_delta_log" / f"{version:020d}.json").unlink()
    assert main(["rollback-sink", saved, str(table)]) == 18
    assert "no longer holds the commits" in capsys.readouterr().err


def test_two_rollbacks_of_one_table_at_once_one_wins_and_nothing_is_lost(capsys, home, tmp_path):
    from sparkpoint.cli.main import main

    saved = savepoint_of_checkpoint(capsys, tmp_path)
    table = tmp_path / "t"
    for number in range(9):
        batch(table, number)
    command = [sys.executable, "-m", "sparkpoint", "--home", str(home), "rollback-sink", saved, str(table)]
    runs = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    done = sorted((run.wait(timeout=120), run.stderr.read()) for run in runs)
    assert done[0][0] == 0, done
    # The loser found the lock, or the table at the cut already (nothing to do), or its commit beaten.
    assert done[1][0] in (0, 18), done
    restored = deltalake.DeltaTable(str(table))
    assert restored.version() == 9 and batches_in(table) == [0, 0, 1, 1, 2, 2, 3, 3]
    assert main(["rollback-sink", saved, str(table), "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["batches"] == []


def test_a_restore_into_a_table_written_past_the_cut_is_refused_unless_chosen(capsys, home, tmp_path):
    from sparkpoint.config import load_settings
    from sparkpoint.jobs.sinks_ahead import refuse_sinks_ahead
    from sparkpoint.savepoints import catalog

    saved = savepoint_of_checkpoint(capsys, tmp_path)
    table = tmp_path / "t"
    for number in range(6):
        batch(table, number)
    settings = load_settings()
    savepoint = catalog.load(settings, saved)
    savepoint.queries[0]["sink"] = at_cut(sink_record(f"DeltaSink[file:{table}]"), QUERY, 3)
    with pytest.raises(SinkAheadError, match=r"holds 2 batches of query .* after the savepoint's batch 3 \(4\.\.5\): "
                                             r"the restored version would skip them"):
        refuse_sinks_ahead(settings, savepoint, False, False, print)
    with pytest.raises(SinkAheadError, match="a second time beside them; write the fork to another table"):
        refuse_sinks_ahead(settings, savepoint, True, False, print)
    # Kept for a stateful query, the skip would fail it: Spark writes no state for a batch its sink skips.
    with pytest.raises(SinkAheadError, match="it keeps state, and Delta skips a batch's write before its plan runs"):
        refuse_sinks_ahead(settings, savepoint, False, True, print)
    heard = []
    assert refuse_sinks_ahead(settings, savepoint, True, True, heard.append) == heard
    assert heard and "kept as they are (--keep-sink-output): the fork writes them again" in heard[0]
    savepoint.queries[0]["operators"] = []  # a stateless query keeps the skip
    assert refuse_sinks_ahead(settings, savepoint, False, True, heard.append) == heard[1:] == [
        heard[1]] and "the restored version skips them" in heard[1]
    # A table gone since, or not written past the cut, is no trap.
    savepoint.queries[0]["sink"] = at_cut(sink_record(f"DeltaSink[file:{tmp_path / 'gone'}]"), QUERY, 3)
    assert refuse_sinks_ahead(settings, savepoint, False, False, print) == []


def test_a_delta_source_s_version_vacuumed_or_cleaned_from_the_log_is_refused_before_a_restore(
        capsys, home, tmp_path):
    """Delta's twin of Kafka's retention: VACUUM deletes the data files a savepoint taken long ago still reads,
    log cleanup its commits; `check` and `run -s` refuse it (exit 20) unless --allow-data-loss."""
    from sparkpoint.config import load_settings
    from sparkpoint.errors import InputGoneError
    from sparkpoint.savepoints import catalog
    from sparkpoint.savepoints.restorability import delta_gone, require_input
    from sparkpoint.spark.sources import DELTA, as_recorded, kind_of

    saved = savepoint_of_checkpoint(capsys, tmp_path)
    table = tmp_path / "source"
    for number in range(4):
        batch(table, number, query="the-writer")  # versions 0..3
    settings = load_settings()
    savepoint = catalog.load(settings, saved)
    offset = {"sourceVersion": 1, "reservoirId": "b1e2", "reservoirVersion": 2, "index": -1,
              "isStartingVersion": False}
    assert kind_of(offset) == DELTA and kind_of({**offset, "reservoirVersion": "2"}) != DELTA
    record = {"kind": "delta", "path": str(table)}
    assert as_recorded(record) == record
    savepoint.queries[0]["offsets"] = [offset]
    savepoint.queries[0]["inputs"] = [record]
    assert delta_gone(savepoint) == ([], [])
    require_input(savepoint, {}, False, print)  # all there: passes

    # An overwrite removes every file; VACUUM with no retention deletes them: versions 2 and 3's adds are gone.
    deltalake.write_deltalake(str(table), pa.table({"batch": pa.array([9], pa.int64()),
                                                    "i": pa.array([0], pa.int64())}), mode="overwrite")
    deltalake.DeltaTable(str(table)).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    (gone,), unchecked = delta_gone(savepoint)
    assert unchecked == [] and "reads on from version 2: 2 data files that the commits it reads add are gone" in gone
    with pytest.raises(InputGoneError, match="cannot be restored exactly, so nothing was started") as refused:
        require_input(savepoint, {}, False, print)
    assert refused.value.exit_code == 20
    heard = []
    require_input(savepoint, {}, True, heard.append)
    assert heard and heard[0].startswith("--allow-data-loss:")

    from sparkpoint.savepoints.inspect import inspect

    assert inspect(savepoint).to_json()["delta_input"] == {"gone": [gone], "unchecked": []}

    (table / "_delta_log" / f"{2:020d}.json").unlink()  # Delta's log cleanup
    assert "1 commits it reads are gone from the table's log (from version 2)" in delta_gone(savepoint)[0][0]
    savepoint.queries[0]["offsets"] = [{**offset, "reservoirVersion": 5}]  # all read, waiting for version 5
    assert delta_gone(savepoint)[0] == []
    savepoint.queries[0]["offsets"] = [{**offset, "reservoirVersion": 40}]
    assert "the table was deleted and made again" in delta_gone(savepoint)[0][0]
    savepoint.queries[0]["inputs"] = [{"kind": "delta"}]  # a savepoint of a plain checkpoint: not recorded
    assert delta_gone(savepoint)[0] == [] and "does not record its table" in delta_gone(savepoint)[1][0]


@pytest.fixture
def nine_batches(capsys, home, tmp_path):
    """(settings, the savepoint of a checkpoint cut at batch 3, table ``t`` holding its query's batches 0..8)."""
    from sparkpoint.config import load_settings
    from sparkpoint.savepoints import catalog

    saved = savepoint_of_checkpoint(capsys, tmp_path)
    settings = load_settings()
    table = tmp_path / "t"
    for number in range(9):
        batch(table, number)
    return settings, catalog.load(settings, saved), table


def test_review_cases_a_rescaled_cut_a_table_behind_the_cut_and_one_made_after_it(nine_batches, tmp_path):
    from sparkpoint.jobs.sinks import roll_back_sinks
    from sparkpoint.jobs.sinks_ahead import refuse_sinks_ahead

    settings, savepoint, table = nine_batches
    query = savepoint.queries[0]
    # A rescaled savepoint: its own batch (4) wrote nothing to the sink, which stands at batch 3.
    query["batch_id"] = 4
    query["sink"] = {**at_cut(sink_record(f"DeltaSink[file:{table}]"), QUERY, 3), "batch_id": 3}
    (dry,) = roll_back_sinks(settings, savepoint, dry_run=True)
    assert (dry.batches, dry.restored_to, dry.cut) == ([4, 5, 6, 7, 8], 3, 3)
    with pytest.raises(SinkAheadError, match=r"after the savepoint's batch 3 \(4\.\.8\)"):
        refuse_sinks_ahead(settings, savepoint, False, False, print)

    # An earlier rollback took the table to batch 1: a savepoint at batch 3 would never get batches 2..3 written.
    query["batch_id"] = 3
    query["sink"] = at_cut(sink_record(f"DeltaSink[file:{table}]"), QUERY, 3)
    deltalake.DeltaTable(str(table)).restore(1, commit_properties=deltalake.CommitProperties(
        app_transactions=[deltalake.Transaction(QUERY, 1)]))
    with pytest.raises(SinkAheadError, match=r"up to 1 only .* not write batches 2\.\.3"):
        refuse_sinks_ahead(settings, savepoint, False, False, print)
    with pytest.raises(SinkRollbackRefusedError, match="an earlier rollback took it past the cut"):
        roll_back_sinks(settings, savepoint)

    # A table made after the cut: no version to restore.
    young = tmp_path / "young"
    for number in range(5, 7):
        batch(young, number)
    query["sink"] = at_cut(sink_record(f"DeltaSink[file:{young}]"), QUERY, 3)
    with pytest.raises(SinkRollbackRefusedError, match="made after the cut"):
        roll_back_sinks(settings, savepoint)


def test_review_cases_log_cleanup_a_stray_link_and_a_number_too_long(nine_batches, tmp_path):
    from sparkpoint.jobs.sinks_ahead import refuse_sinks_ahead

    settings, savepoint, table = nine_batches
    for _ in range(3):
        foreign_write(table)
    deltalake.DeltaTable(str(table)).create_checkpoint()
    for version in range(9):  # Delta's log cleanup: the query's commits are only in the checkpoint now
        (table / "_delta_log" / f"{version:020d}.json").unlink()
    savepoint.queries[0]["sink"] = at_cut(sink_record(f"DeltaSink[file:{table}]"), QUERY, 3)
    with pytest.raises(SinkAheadError, match=r"holds 5 batches .* \(4\.\.8\)"):
        refuse_sinks_ahead(settings, savepoint, False, False, print)
    (table / "_delta_log" / "notes.txt").symlink_to(tmp_path)  # not Delta's: passed over, not a blind spot
    assert DeltaLog(LOCAL, str(table)).versions == [9, 10, 11]

    (table / "_delta_log" / f"{11:020d}.json").write_text('{"commitInfo": {"timestamp": 1' + "0" * 5000 + "}}")
    with pytest.raises(NotACheckpointError, match="not JSON"):
        DeltaLog(LOCAL, str(table)).commit(11)
    assert at_cut(sink_record(f"DeltaSink[file:{table}]"), QUERY, 3)["cut_known"] is False
    heard = []
    assert refuse_sinks_ahead(settings, savepoint, False, False, heard.append) == []
    assert "was not checked" in heard[0]


def test_after_log_cleanup_the_batches_ahead_are_the_checkpoint_s_and_those_of_the_commits_after_it(
        nine_batches, tmp_path):
    """A foreachBatch writes table payouts under txnAppId payouts, batches 0..8; the savepoint's cut is batch 3.
    Delta's log cleanup leaves a checkpoint and the commits from it on: the batches after the cut are those the
    checkpoint's txn says were written by its version, and those of the commits after it (the count was the
    commits' alone: "1 batch (8..8)"). Where no checkpoint says, the line says "at least", and why."""
    from sparkpoint.jobs.sinks_ahead import refuse_sinks_ahead
    from sparkpoint.spark.sinks import batch_write_records

    settings, savepoint, _ = nine_batches
    query = savepoint.queries[0]
    query["sink"] = sink_record("ForeachBatchSink")

    def cleaned(name: str, checkpoint: int | None, below: int) -> None:
        table = tmp_path / name
        for number in range(9):
            batch(table, number, query="payouts")
        (record,) = batch_write_records([{"path": f"file:{table}", "app_id": "payouts", "txn_version": 8,
                                          "batch_id": 8}])
        query["delta_writes"] = [at_cut(record, QUERY, 3)]
        if checkpoint is not None:
            deltalake.DeltaTable(str(table), version=checkpoint).create_checkpoint()
        for version in range(below):
            (table / "_delta_log" / f"{version:020d}.json").unlink()

    cleaned("at-the-end", 8, 8)  # the checkpoint at the newest version, its commit the one left
    with pytest.raises(SinkAheadError, match=r"holds 5 batches of query ck after the savepoint's batch 3 \(4\.\.8\), "
                                             "written by its foreachBatch under txnAppId payouts"):
        refuse_sinks_ahead(settings, savepoint, False, False, print)
    cleaned("within", 6, 6)  # batches 4..6 in the checkpoint's txn, 7 and 8 in the commits after it
    with pytest.raises(SinkAheadError, match=r"holds 5 batches .* \(4\.\.8\), written"):
        refuse_sinks_ahead(settings, savepoint, False, False, print)
    cleaned("no-checkpoint", None, 6)  # not Delta's own cleanup: nothing says what versions 0..5 held
    with pytest.raises(SinkAheadError, match=r"holds at least 3 batches .* \(6\.\.8; Delta's log cleanup removed the "
                                             "commits before version 6, and no checkpoint after them says which "
                                             r"batches they held\), written"):
        refuse_sinks_ahead(settings, savepoint, False, False, print)


def test_a_foreach_batch_write_with_a_transaction_of_its_own_is_cut_refused_and_rolled_back(nine_batches, tmp_path):
    """A foreachBatch that writes a table with txnAppId/txnVersion: Delta skips what the table holds for that app
    id, a fork's writes too (the app id is the application's); the rollback sets that app id's txn back."""
    from sparkpoint.jobs.sinks import roll_back_sinks
    from sparkpoint.jobs.sinks_ahead import refuse_sinks_ahead
    from sparkpoint.savepoints.manifest import validate
    from sparkpoint.spark.sinks import batch_write_records

    settings, savepoint, _ = nine_batches
    table = tmp_path / "totals"
    for number in range(9):
        batch(table, number, query="totals")
    seen = [{"path": f"file:{table}", "app_id": "totals", "txn_version": 8, "batch_id": 8},
            {"path": 3, "app_id": "x"}, "not a write"]
    (record,) = batch_write_records(seen)
    assert record == {"kind": "delta", "path": f"file:{table}", "app_id": "totals", "follows_batches": True,
                      "description": f"foreachBatch Delta write to file:{table} (txnAppId totals)"}
    assert batch_write_records(None) is None
    query = savepoint.queries[0]
    query["sink"] = sink_record("ForeachBatchSink")
    query["delta_writes"] = [at_cut(record, QUERY, 3)]  # the cut under the app id, not the query id
    assert query["delta_writes"][0] == {**record, "batch_id": 3, "cut_known": True, "table_version": 3,
                                        "cut_batch": 3}
    validate(savepoint.manifest, "the manifest")
    with pytest.raises(SinkAheadError, match=r"holds 5 batches .* \(4\.\.8\), written by its foreachBatch under "
                                             r"txnAppId totals: the restored version would skip them \(Delta skips"):
        refuse_sinks_ahead(settings, savepoint, False, False, print)
    # A fork running the same code writes under the same app id: the two would take each other's batches.
    with pytest.raises(SinkAheadError, match="which a fork running the same code writes under too: Delta keeps"):
        refuse_sinks_ahead(settings, savepoint, True, False, print)
    # Kept for a query that keeps state, the skip would fail it: Delta skips the write before the plan runs.
    with pytest.raises(SinkAheadError, match="it keeps state"):
        refuse_sinks_ahead(settings, savepoint, False, True, print)
    query["operators"] = []
    heard = []
    assert refuse_sinks_ahead(settings, savepoint, False, True, heard.append) == heard
    assert len(heard) == 1 and "the restored version skips them" in heard[0]

    (rolled,) = roll_back_sinks(settings, savepoint)
    assert (rolled.output, rolled.batches, rolled.restored_to) == (str(table), [4, 5, 6, 7, 8], 3)
    assert deltalake.DeltaTable(str(table)).transaction_version("totals") == 3
    assert refuse_sinks_ahead(settings, savepoint, False, False, print) == []

    # txnVersion values that are not batch ids say nothing of the batches: not checked, and not rolled back.
    (unlike,) = batch_write_records([{**seen[0], "txn_version": 1000 + 8}])
    query["delta_writes"] = [at_cut(unlike, QUERY, 3)]
    assert query["delta_writes"][0]["cut_known"] is False
    heard = []
    assert refuse_sinks_ahead(settings, savepoint, False, False, heard.append) == []
    assert "txnVersion values that are not its batch ids" in heard[0]
    with pytest.raises(SinkRollbackRefusedError, match="txnVersion values that are not its batch ids"):
        roll_back_sinks(settings, savepoint)
    query["delta_writes"] = [{**query["delta_writes"][0], "app_id": 7}]
    with pytest.raises(SavepointInvalidError, match="'app_id' is missing or not of the right type"):
        validate(savepoint.manifest, "the manifest")


def test_each_refusal_offers_only_ways_that_are_then_accepted(nine_batches, tmp_path):
    """Every refusal of a restore into a table written past the cut (exit 22), for a query that keeps state or
    not, Delta's sink or a foreachBatch's own txnAppId, a fork or not: each way out it offers (--keep-sink-output,
    --fork --keep-sink-output, --rollback-sink) is accepted when taken. A stateful query was offered
    --keep-sink-output to accept the skip, then refused it."""
    from sparkpoint.jobs.sinks import roll_back_sinks
    from sparkpoint.jobs.sinks_ahead import refuse_sinks_ahead
    from sparkpoint.spark.sinks import batch_write_records

    settings, savepoint, table = nine_batches
    query = savepoint.queries[0]
    stateful = query["operators"]
    assert stateful
    totals = tmp_path / "totals"
    for number in range(9):
        batch(totals, number, query="totals")
    (record,) = batch_write_records([{"path": f"file:{totals}", "app_id": "totals", "txn_version": 8,
                                      "batch_id": 8}])
    writes = {"sink": {"sink": at_cut(sink_record(f"DeltaSink[file:{table}]"), QUERY, 3)},
              "txnAppId": {"sink": sink_record("ForeachBatchSink"), "delta_writes": [at_cut(record, QUERY, 3)]}}

    def offered(message: str, fork: bool) -> list[tuple[bool, bool] | str]:
        message = message.replace("--keep-sink-output cannot keep them", "")  # the flag refused, not offered
        ways: list[tuple[bool, bool] | str] = ["rollback"] if "--rollback-sink" in message else []
        if "--fork --keep-sink-output" in message:
            ways.append((True, True))
            message = message.replace("--fork --keep-sink-output", "")
        if "--keep-sink-output" in message:
            ways.append((fork, True))
        return ways

    for operators in (stateful, []):
        for kind, written in writes.items():
            query.pop("delta_writes", None)
            query.update(written, operators=operators)
            for fork, keep in ((False, False), (True, False), (False, True), (True, True)):
                try:
                    refuse_sinks_ahead(settings, savepoint, fork, keep, lambda line: None)
                except SinkAheadError as exc:
                    refused = exc
                else:
                    assert keep  # refused without a choice, always: the table holds batches after the cut
                    continue
                ways = offered(str(refused), fork)
                assert ways, refused
                for way in ways:
                    if way == "rollback":
                        assert roll_back_sinks(settings, savepoint, dry_run=True)[0].batches == [4, 5, 6, 7, 8]
                        continue
                    try:
                        refuse_sinks_ahead(settings, savepoint, *way, lambda line: None)
                    except SinkAheadError as again:
                        raise AssertionError(f"{kind}, {'stateful' if operators else 'stateless'}, fork {fork}, "
                                             f"keep {keep}: offered {way} in: {refused}\n  then refused: {again}"
                                             ) from None


def test_a_hand_over_whose_stop_left_a_batch_in_the_table_is_refused_before_the_restore(
        capsys, home, tmp_path, monkeypatch, request):
    """`run --replace` whose stop was cut short: the old version's sink committed the batch in flight, which the
    stop's savepoint (at the last batch Spark committed) does not hold. The new version would replay it and Delta
    skip it; the hand-over is refused before anything is restored, naming the table, and the error carries the
    savepoint to go back to. The old job's stop is the one thing not run here (tests/spark: real stops)."""
    from sparkpoint.config import load_settings
    from sparkpoint.jobs import replace as handover
    from sparkpoint.jobs.protocol import HANDOVER_FILE
    from sparkpoint.jobs.registry import Registry
    from sparkpoint.jobs.stop import Stopped, StoppedQuery
    from sparkpoint.savepoints import catalog

    saved = savepoint_of_checkpoint(capsys, tmp_path)  # the stop's savepoint: batch 3
    settings = load_settings()
    path = catalog.load(settings, saved).path
    table = tmp_path / "t"
    for number in range(5):  # batch 4, the one in flight when the stop timed out, committed by Delta's sink
        batch(table, number)
    rewrite_query(path, sink=at_cut(sink_record(f"DeltaSink[file:{table}]"), QUERY, 3))
    registry = Registry(str(home))
    old = registry.new_job("old", app="app.py", app_args=[], master="local[2]", submit_args=[])
    new = registry.new_job("new", app="app.py", app_args=[], master="local[2]", submit_args=[])
    monkeypatch.setattr(handover, "_await_handover_waiting", lambda *args: None)
    cut_short = StoppedQuery(name="ck", query_id=QUERY, batch_id=3, planned_batch_id=4, bytes=1, at_boundary=False,
                             replayed_batch_id=4, how="timeout")
    stopped = Stopped(path=path, id=saved, job="old", created_at="t", bytes=1, file_count=1, queries=[cut_short],
                      phases={"boundary": 0.1, "savepoint": 0.1})
    monkeypatch.setattr(handover, "stop_with_savepoint", lambda *args: (stopped, SimpleNamespace(wait=lambda: 0.1)))
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    with pytest.raises(handover.HandoverFailedError) as failed:
        handover.take_over(settings, registry, new, ended, old, None, 60, None, lambda s: None, lambda: 0.0, 10)
    assert failed.value.savepoint == path
    assert f"Delta table file:{table} holds 1 batch of query " in str(failed.value), failed.value
    assert "--rollback-sink" in str(failed.value)
    said = json.loads((Path(new.directory) / HANDOVER_FILE).read_text())
    assert said["abort"].startswith(f"the hand-over from {old.id} failed")
    assert not (Path(new.checkpoint_root) / "ck").exists()  # nothing restored

    # A query that keeps no state: the batch Delta skips is the old version's own, whole; the hand-over goes on,
    # and says so in the new job's history.
    rewrite_query(path, operators=[])
    again = registry.new_job("new", app="app.py", app_args=[], master="local[2]", submit_args=[])
    waiting = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])  # the new driver, up
    request.addfinalizer(waiting.kill)
    handover.take_over(settings, registry, again, waiting, old, None, 60, None, lambda s: None, lambda: 0.0, 10)
    notes = [(e["event"], e["detail"]) for e in registry.load(again.id).history]
    assert any(event == "sink_kept" and "the new version skips them (the old version's own batch)" in detail
               for event, detail in notes), notes
    assert (Path(again.checkpoint_root) / "ck").is_dir()

    # A stop at the boundary replays nothing: the hand-over's downtime reads no table.
    stopped = replace(stopped, queries=[replace(cut_short, planned_batch_id=None, at_boundary=True,
                                                replayed_batch_id=None, how="boundary")])
    at_boundary = registry.new_job("new", app="app.py", app_args=[], master="local[2]", submit_args=[])
    handover.take_over(settings, registry, at_boundary, waiting, old, None, 60, None, lambda s: None, lambda: 0.0,
                       10)
    assert "sink_kept" not in [e["event"] for e in registry.load(at_boundary.id).history]


def test_a_second_fork_into_the_table_an_earlier_fork_wrote_past_the_cut_is_refused(capsys, home, tmp_path):
    """The first fork of a savepoint wrote its batches from the cut on under a query id of its own; a second fork
    into that table would write the same batches beside them (the savepoint's own query wrote nothing after it)."""
    from sparkpoint.config import load_settings
    from sparkpoint.jobs.sinks_ahead import refuse_sinks_ahead
    from sparkpoint.savepoints import catalog

    saved = savepoint_of_checkpoint(capsys, tmp_path)
    settings = load_settings()
    table = tmp_path / "t"
    for number in range(4):
        batch(table, number)
    for number in range(4, 7):
        batch(table, number, query="the-first-fork")
    savepoint = catalog.load(settings, saved)
    savepoint.queries[0]["sink"] = at_cut(sink_record(f"DeltaSink[file:{table}]"), QUERY, 3)
    with pytest.raises(SinkAheadError, match=r"holds batches of other streaming queries after the savepoint's cut "
                                             r"\(version 3; the-first-fork: batches 4\.\.6\): if one is an earlier "
                                             "fork of this savepoint"):
        refuse_sinks_ahead(settings, savepoint, True, False, print)
    heard = []
    assert refuse_sinks_ahead(settings, savepoint, True, True, heard.append) == heard
    assert len(heard) == 1 and "the fork writes its batches beside them" in heard[0]
    # Not a fork: other streams writing the table (a shared table's co-writers, as at every hand-over) are not
    # the savepoint's to refuse.
    assert refuse_sinks_ahead(settings, savepoint, False, False, print) == []


def test_check_with_rollback_sink_asks_whether_the_rollback_would_go_through_and_rolls_nothing_back(
        capsys, nine_batches, tmp_path):
    """`check --rollback-sink`: the restore it checks for will roll the table back, so a table written past the cut
    is no refusal; a rollback that would be refused (another writer) is, before any Spark starts (exit 18)."""
    from sparkpoint.cli.main import main

    settings, savepoint, table = nine_batches
    rewrite_query(savepoint.path, sink=at_cut(sink_record(f"DeltaSink[file:{table}]"), QUERY, 3))
    absent = str(tmp_path / "absent_app.py")  # past the sinks, the check stops here: no Spark in a unit test
    assert main(["check", "-s", savepoint.path, absent]) == 22
    assert "holds 5 batches of query" in capsys.readouterr().err
    assert main(["check", "-s", savepoint.path, "--rollback-sink", absent]) == 4
    err = capsys.readouterr().err
    assert "--rollback-sink: " in err, err
    assert "would be restored from version 8 to 3 (batch 3), batches 4..8 undone" in err, err
    assert f"application {absent} does not exist" in err
    assert deltalake.DeltaTable(str(table)).version() == 8  # nothing rolled back
    foreign_write(table)
    assert main(["check", "-s", savepoint.path, "--rollback-sink", absent]) == 18
    assert "was committed by another writer after the cut" in capsys.readouterr().err
    assert main(["check", "-s", savepoint.path, "--rollback-sink", "--keep-sink-output", absent]) == 2


def test_a_rollback_whose_version_s_files_vacuum_deleted_is_refused_before_anything_starts(
        capsys, nine_batches, tmp_path):
    """OPTIMIZE after the cut takes the files of every batch out of the table (kept on disk: a rollback brings them
    back), then VACUUM with no retention deletes them: version 3 can no longer be restored. The dry run, `check
    --rollback-sink`, `rollback-sink` and `run -s --rollback-sink` refuse it alike (exit 18), naming the files and
    VACUUM, before any driver starts; the table is left as it is."""
    from sparkpoint.cli.main import main
    from sparkpoint.jobs.registry import Registry

    settings, savepoint, table = nine_batches
    rewrite_query(savepoint.path, sink=at_cut(sink_record(f"DeltaSink[file:{table}]"), QUERY, 3))
    needed = sorted(path for version in range(4) for path in DeltaLog(LOCAL, str(table)).commit(version).placed)
    deltalake.DeltaTable(str(table)).optimize.compact()  # version 9: the nine files out, one in
    assert main(["rollback-sink", savepoint.path, "--dry-run"]) == 0  # their files still there: it would go through
    capsys.readouterr()
    deltalake.DeltaTable(str(table)).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    version = deltalake.DeltaTable(str(table)).version()
    app = tmp_path / "app.py"
    app.write_text("raise SystemExit('started')\n")
    for command in (["rollback-sink", savepoint.path, "--dry-run"], ["rollback-sink", savepoint.path],
                    ["check", "-s", savepoint.path, "--rollback-sink", str(app)],
                    ["run", "-s", savepoint.path, "--rollback-sink", str(app)]):
        assert main(command) == 18, command
        err = capsys.readouterr().err
        assert ("restoring version 3 needs 4 data files that later commits took out of the table and that are "
                "gone from storage (" in err and "VACUUM deleted them" in err), err
        assert sum(path in err for path in needed) == 3 and "and 1 more" in err, err
    assert deltalake.DeltaTable(str(table)).version() == version  # nothing changed
    assert Registry(settings.home).all() == []  # no job, no driver


def test_commits_a_coordinator_staged_beyond_the_log_are_not_taken_for_the_table_s_end(nine_batches):
    """Coordinated (catalog-managed) commits: the newest commits wait in _delta_log/_staged_commits until the
    coordinator backfills them. The log alone would say nothing is after the cut: not checked, said; a rollback
    is refused; a savepoint records its cut unknown."""
    from sparkpoint.jobs.sinks import roll_back_sinks
    from sparkpoint.jobs.sinks_ahead import refuse_sinks_ahead

    settings, savepoint, table = nine_batches
    record = sink_record(f"DeltaSink[file:{table}]")
    for version in range(4, 9):  # as if the coordinator had not backfilled batches 4..8 yet
        (table / "_delta_log" / f"{version:020d}.json").unlink()
    staged = table / "_delta_log" / "_staged_commits"
    staged.mkdir()
    (staged / f"{4:020d}.0b6a1c2e-7d4f-4e1a-9c3b-5f2e8a7d6c10.json").write_text("{}")
    savepoint.queries[0]["sink"] = {**record, "batch_id": 3, "cut_known": True, "table_version": 3, "cut_batch": 3}
    heard = []
    assert refuse_sinks_ahead(settings, savepoint, False, False, heard.append) == []
    assert "not checked" in heard[0] and "staged by a commit coordinator" in heard[0], heard
    with pytest.raises(SinkRollbackRefusedError, match=r"versions 4\.\.4: coordinated, or catalog-managed"):
        roll_back_sinks(settings, savepoint)
    assert at_cut(record, QUERY, 3)["cut_known"] is False


def test_a_savepoint_keeps_the_writes_its_job_was_restored_with_and_the_way_back_rolls_back_what_it_can(
        nine_batches, tmp_path):
    """A driver knows only the writes it made: a query restored and idle since records those of the savepoint it
    was restored from, at its own cut. The probation's way back rolls back each table it can, and says which it
    cannot, rather than none."""
    from checkpoints import hdfs_checkpoint

    from sparkpoint.adapters.storage import storage_for
    from sparkpoint.jobs.registry import Registry
    from sparkpoint.jobs.run import _tables_back
    from sparkpoint.jobs.savepoint import create_savepoint
    from sparkpoint.savepoints.create import QuerySource
    from sparkpoint.savepoints.savepoint import load
    from sparkpoint.spark.sinks import batch_write_records

    settings, savepoint, table = nine_batches
    totals = tmp_path / "totals"
    for number in range(9):
        batch(totals, number, query="totals")
    (record,) = batch_write_records([{"path": f"file:{totals}", "app_id": "totals", "txn_version": 3,
                                      "batch_id": 3}])
    rewrite_query(savepoint.path, delta_writes=[at_cut(record, QUERY, 3)])
    registry = Registry(settings.home)
    job = registry.new_job("ck", app="app.py", app_args=[], master="local[2]", submit_args=[],
                           restored_from=savepoint.path)
    _, location = storage_for(str(hdfs_checkpoint(tmp_path / "again", committed=5)))
    created = create_savepoint(settings, job, [QuerySource("ck", location, delta_writes=[])], None, None)
    (carried,) = load(created.path).queries[0]["delta_writes"]
    assert (carried["path"], carried["app_id"], carried["batch_id"], carried["table_version"]) == (
        f"file:{totals}", "totals", 5, 5)

    # The way back: the query's sink (table t) and its foreachBatch table; the latter cannot be rolled back.
    query = savepoint.queries[0]
    query["sink"] = at_cut(sink_record(f"DeltaSink[file:{table}]"), QUERY, 3)
    query["delta_writes"] = [{**at_cut(record, QUERY, 3), "follows_batches": False}]
    warned, rolled = [], []
    _tables_back(settings, savepoint, warned.append, rolled)
    assert [(r.output, r.batches) for r in rolled] == [(str(table), [4, 5, 6, 7, 8])]
    assert len(warned) == 1 and "was not rolled back for the way back" in warned[0] and "txnVersion" in warned[0]

"""The check's sandbox and verdict (savepoints.compat) on checkpoints in Spark's format; the runtime half,
and Spark's own refusals, run in tests/spark/test_check.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from checkpoints import hdfs_checkpoint

from sparkpoint.adapters.storage import storage_for
from sparkpoint.config import Settings
from sparkpoint.jobs.check import CheckRequest, prepare_in_driver
from sparkpoint.jobs.protocol import CHECK_REQUEST, START_CHECK_DIR
from sparkpoint.runtime.writers import outcome
from sparkpoint.savepoints import compat
from sparkpoint.savepoints.create import QuerySource, create
from sparkpoint.savepoints.savepoint import load, verify
from sparkpoint.spark import hdfs_store


@pytest.fixture
def saved(tmp_path):
    """A savepoint of query 'alarms' cut at batch 3 with batch 4 planned (its offsets, no commit)."""
    checkpoint = hdfs_checkpoint(tmp_path / "ckpt" / "alarms", committed=3, planned=True)
    storage, target = storage_for(str(tmp_path / "savepoints"))
    created = create([QuerySource("alarms", str(checkpoint))], storage, target, storage, job="alarms")
    return load(created["path"])


def test_the_sandbox_plans_an_empty_batch_and_leaves_the_savepoint_as_it_was(saved, tmp_path):
    query = saved.query("alarms")
    assert (query["batch_id"], query["planned_batch_id"]) == (3, 4)
    sandbox = tmp_path / "sandbox"
    compat.prepare_sandbox(saved, str(sandbox))
    offsets = sandbox / "alarms" / "offsets"
    # The planned batch 4 is replaced by one whose offsets are the cut's: it reads nothing.
    assert (offsets / "4").read_bytes() == (offsets / "3").read_bytes()
    # ... and its Hadoop checksum is the cut's too (a stale one fails the read with a ChecksumException).
    assert (offsets / ".4.crc").read_bytes() == (offsets / ".3.crc").read_bytes()
    assert "4" not in os.listdir(sandbox / "alarms" / "commits")  # so Spark runs it at once, on start
    # The savepoint's own batch 4 (hard-linked into the sandbox) was replaced there, not written through.
    assert (Path(saved.path) / "queries" / "alarms" / "offsets" / "4").read_bytes() != (offsets / "4").read_bytes()
    assert verify(saved).valid


def test_the_sandbox_s_hdfs_state_is_one_empty_snapshot_where_spark_checks_its_schema_files(saved, tmp_path):
    """Spark checks a new plan against the schema files, not the rows: the sandbox loaded the whole state for
    nothing (the two-step upgrade paid a second load of a million keys inside its downtime)."""
    sandbox = tmp_path / "sandbox"
    compat.prepare_sandbox(saved, str(sandbox))
    for partition in ("0", "1"):
        store = sandbox / "alarms" / "state" / "0" / partition
        assert sorted(n for n in os.listdir(store) if not n.startswith(("_", "."))) == ["4.snapshot"]
        assert hdfs_store.load([("4.snapshot", (store / "4.snapshot").read_bytes())]) == {}
    saved_store = Path(saved.path) / "queries" / "alarms" / "state" / "0" / "0"
    assert any(n.endswith(".delta") for n in os.listdir(saved_store)) and verify(saved).valid

    # Without schema files (written with Spark's schema check off), reading the rows is Spark's only check.
    unchecked = hdfs_checkpoint(tmp_path / "ckpt2" / "alarms", committed=3, planned=True)
    (unchecked / "state" / "0" / "0" / "_metadata" / "schema").unlink()
    storage, target = storage_for(str(tmp_path / "savepoints2"))
    kept = load(create([QuerySource("alarms", str(unchecked))], storage, target, storage, job="alarms")["path"])
    assert compat.prepare_sandbox(kept, str(tmp_path / "sandbox2")) == []  # its check batch must run
    store = tmp_path / "sandbox2" / "alarms" / "state" / "0" / "0"
    rows = sorted(n for n in os.listdir(store) if n.endswith((".delta", ".snapshot")))
    assert rows == ["1.delta", "2.delta", "3.delta", "4.delta"] and (store / "4.delta").stat().st_size > 0


def test_a_query_whose_operators_all_have_schema_files_is_checked_by_planning_its_batch(saved, tmp_path):
    """From Spark 4.0 the planning of a run's first batch holds the new plan against the schema files (and the
    operator metadata): a check batch that runs no task has had all of Spark's checks, and loads no state."""
    assert compat.prepare_sandbox(saved, str(tmp_path / "sandbox")) == ["alarms"]
    # Checkpoint format v2: the batch's commit needs each store's new id, which only its tasks give.
    saved.query("alarms")["checkpoint_format_version"] = 2
    assert compat.prepare_sandbox(saved, str(tmp_path / "sandbox-v2")) == []


@pytest.mark.parametrize(("before_handover", "planned"), [(False, ["alarms"]), (True, [])])
def test_only_run_s_has_its_driver_plan_a_check_batch_alone(saved, tmp_path, before_handover, planned):
    """run -s checks inside the downtime; run --replace before the hand-over, where the whole batch costs none and
    warms the JVM that loads the state after it."""
    job_directory = tmp_path / "job"
    environment = prepare_in_driver(Settings(home=str(tmp_path / "home")), saved, str(job_directory),
                                    CheckRequest(app="app.py"), None, before_handover)
    assert environment == {"SPARKPOINT_CHECK_DIR": str(job_directory / START_CHECK_DIR)}
    assert json.loads((job_directory / START_CHECK_DIR / CHECK_REQUEST).read_text())["planned"] == planned


@pytest.mark.parametrize("conf", [{"spark.sql.streaming.stateStore.compression.codec": "zstd"},
                                  {"spark.sql.streaming.stateStore.rowChecksum.enabled": "true"}])
def test_state_sparkpoint_cannot_write_as_spark_reads_it_keeps_its_rows_in_the_sandbox(saved, tmp_path, conf):
    """An empty snapshot is written lz4-framed, without row checksums: Spark reading another codec would fail."""
    saved.query("alarms")["confs"].update(conf)  # as the offset log pins it
    compat.prepare_sandbox(saved, str(tmp_path / "sandbox"))
    store = tmp_path / "sandbox" / "alarms" / "state" / "0" / "0"
    assert sorted(n for n in os.listdir(store) if n.endswith((".delta", ".snapshot"))) == [
        "1.delta", "2.delta", "3.delta", "4.delta"]


def report(**query) -> dict:
    ran = {"name": "alarms", "saved": True, "confs": {"spark.sql.shuffle.partitions": "2"}, "error": None,
           "batch_id": 4, "input_rows": 0, "operators": [{"name": "stateStoreSave", "partitions": 2}],
           "sources": ["FileStreamSource[file:/in]"]}
    return {"app_error": None, "app_ended": True, "queries": [ran | query] if query.get("name", 1) else []}


def kinds(checked: compat.Checked) -> list[tuple[str | None, int | None, str]]:
    return [(p.query, p.operator, p.kind) for p in checked.problems]


def test_an_application_that_runs_the_empty_batch_with_the_same_operators_restores(saved):
    checked = compat.verdict(saved, "app.py", report(state_loaded=False), allow_non_restored=False)
    assert checked.compatible and checked.problems == [] and checked.notes == []
    assert [(q.name, q.started, q.operators, q.sources, q.state_loaded) for q in checked.queries] == [
        ("alarms", True, ["stateStoreSave"], 1, False)]


class FinishedQuery:
    """What runtime.writers.outcome reads of a StreamingQuery whose check batch completed."""

    isActive = False

    def __init__(self, progress):
        self.lastProgress = progress


@pytest.mark.parametrize(("instances", "loaded"), [([0], False), ([2], True), ([0, 2], True), ([], False)])
def test_a_check_batch_loaded_state_when_spark_counts_store_instances_in_it(instances, loaded):
    """Spark's own count of the state store instances the batch opened: none when it was only planned."""
    progress = {"batchId": 4, "numInputRows": 0, "sources": [{"description": "s"}],
                "stateOperators": [{"operatorName": "stateStoreSave", "numShufflePartitions": 2,
                                    "numStateStoreInstances": count} for count in instances]}
    said = outcome("alarms", True, {"confs": {}, "effective": {}}, None, FinishedQuery(progress))
    assert (said["batch_id"], said["state_loaded"]) == (4, loaded)
    assert outcome("alarms", True, {"confs": {}, "effective": {}}, None, FinishedQuery(None))["state_loaded"] is None


@pytest.mark.parametrize(("change", "expected"), [
    ({"error": "[STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE] Provided key schema does not match existing state key schema."},
     [("alarms", 0, "state_schema")]),
    ({"error": "[STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA] Streaming stateful operator name does not "
               "match"}, [("alarms", None, "operators")]),
    # Seen on 4.0.5 restoring 4.3's RocksDB state of checkpoint format v2: the state is refused, not undecided.
    ({"error": "[CANNOT_LOAD_STATE_STORE.CANNOT_READ_CHECKPOINT] An error occurred during loading state. Cannot read "
               "RocksDB checkpoint metadata. Expected v2, but found v1."}, [("alarms", 0, "state_schema")]),
    # Spark 3.5's word for a changed aggregation key (an exception class; 4.0 on: an error class), seen in its
    # check of post_counts.py's paid version.
    ({"error": "org.apache.spark.sql.execution.streaming.state.StateSchemaNotCompatible: Provided schema doesn't "
               "match to the schema for existing state!"}, [("alarms", 0, "state_schema")]),
    # ... or, when another task fails first, its validation of a saved row (seen in CI on 3.5.9).
    ({"error": "Job aborted due to stage failure: Task 1 in stage 1.0 failed 1 times, most recent failure: Lost task "
               "1.0 in stage 1.0 (TID 1) (localhost executor driver): org.apache.spark.sql.execution.streaming.state."
               "InvalidUnsafeRowException: The streaming query failed by state format invalidation."},
     [("alarms", 0, "state_schema")]),
    ({"error": "assertion failed: There are [1] sources in the checkpoint offsets and now there are [2] sources "
               "requested by the query. Cannot continue."}, [("alarms", None, "sources")]),
    ({"operators": [{"name": "dedupe"}, {"name": "stateStoreSave"}]}, [("alarms", None, "operators")]),
    ({"operators": []}, [("alarms", None, "operators")]),
    ({"sources": ["a", "b"]}, [("alarms", None, "sources")]),
    ({"confs": {"spark.sql.shuffle.partitions": "8"}}, [("alarms", None, "shuffle_partitions")]),
    ({"batch_id": None, "operators": [], "sources": []}, [("alarms", None, "spark_error")]),
    ({"name": None}, [("alarms", None, "not_started")]),
    ({"own_checkpoint": "/data/ckpt/alarms"}, [("alarms", None, "own_checkpoint")]),
])
def test_each_thing_that_stops_a_restore_is_a_problem_of_its_own(saved, change, expected):
    checked = compat.verdict(saved, "app.py", report(**change), allow_non_restored=False)
    assert not checked.compatible and kinds(checked) == expected
    assert all(problem.message.startswith("query alarms") for problem in checked.problems)


def test_a_check_batch_still_running_when_the_answer_was_due_makes_the_check_undecided_and_says_so(saved):
    checked = compat.verdict(saved, "app.py", report(batch_id=None, operators=[], sources=[], unfinished=285),
                             allow_non_restored=False)
    assert [p.kind for p in checked.problems] == ["spark_error"] and set(compat.UNDECIDED) == {"spark_error"}
    assert checked.problems[0].message.startswith("query alarms: its check batch was still running after 285 s")


def test_a_query_not_started_is_a_note_when_non_restored_state_is_allowed(saved):
    checked = compat.verdict(saved, "app.py", report(name=None), allow_non_restored=True)
    assert checked.compatible and "accepted: --allow-non-restored-state" in checked.notes[0]


def test_new_queries_and_other_pinned_confs_are_notes(saved):
    new = {"name": "fresh", "saved": False, "confs": {}, "error": None, "batch_id": None, "operators": [],
           "sources": []}
    confs = {"spark.sql.shuffle.partitions": "2", "spark.sql.streaming.multipleWatermarkPolicy": "max"}
    pinned = saved.query("alarms")["confs"]
    confs = {key: value for key, value in confs.items() if key in pinned or key == "spark.sql.shuffle.partitions"}
    ran = report(confs=confs)
    ran["queries"].append(new)
    checked = compat.verdict(saved, "app.py", ran, allow_non_restored=False)
    assert checked.compatible
    assert "query fresh: not in the savepoint; it starts without state" in checked.notes


def test_an_application_that_fails_before_its_queries_start_says_so(saved):
    ran = report(name=None)
    ran["app_error"] = "NameError: name 'spakr' is not defined"
    checked = compat.verdict(saved, "app.py", ran, allow_non_restored=False)
    assert kinds(checked) == [("alarms", None, "not_started"), (None, None, "application_error")]


def test_operators_of_a_savepoint_without_their_names_are_compared_by_number(saved):
    """A checkpoint of Spark before 4.0 has no operator metadata: its operators' names are unknown."""
    for operator in saved.query("alarms")["operators"]:
        operator["name"] = None
    assert compat.verdict(saved, "app.py", report(), allow_non_restored=False).compatible
    two = report(operators=[{"name": "stateStoreSave"}, {"name": "dedupe"}])
    assert kinds(compat.verdict(saved, "app.py", two, allow_non_restored=False)) == [("alarms", None, "operators")]


def test_other_shuffle_partitions_without_state_are_no_problem(saved):
    saved.query("alarms")["operators"] = []
    checked = compat.verdict(saved, "app.py", report(operators=[], confs={"spark.sql.shuffle.partitions": "8"}),
                             allow_non_restored=False)
    assert checked.compatible


def test_a_rescaled_savepoint_keeps_its_partitions_whatever_the_application_sets_with_a_note(saved):
    saved.manifest["origin"] = {"kind": "rescale", "savepoint": "x", "partitions": 2, "queries": ["alarms"]}
    checked = compat.verdict(saved, "app.py", report(confs={"spark.sql.shuffle.partitions": "8"}),
                             allow_non_restored=False)
    assert checked.compatible and checked.notes == [
        "query alarms: the application sets spark.sql.shuffle.partitions=8, its saved state has 2 partitions, as "
        "`rescale` made it: Spark keeps 2"]


def test_an_application_that_raises_after_its_queries_were_checked_gets_a_note(saved):
    ran = report()
    ran["app_error"] = "RuntimeError: the queries ended"
    checked = compat.verdict(saved, "app.py", ran, allow_non_restored=False)
    assert checked.compatible and checked.notes == [
        "the application failed: RuntimeError: the queries ended (after its saved queries were checked)"]


def test_run_answers_each_query_its_driver_tried_and_refuses_at_the_first_problem(tmp_path):
    """`run -s`'s check in the new driver (jobs.check.await_in_driver, the CLI's half): each outcome the driver
    writes is judged as `check` judges it and answered; the first query let go runs ``before_go`` (the sink
    rollback) once; a refused one is answered with its problems and ends the wait."""
    from sparkpoint.jobs.check import await_in_driver
    from sparkpoint.jobs.protocol import START_CHECK_DIR, write_outcome

    storage, target = storage_for(str(tmp_path / "savepoints"))
    sources = [QuerySource(name, str(hdfs_checkpoint(tmp_path / "ckpt" / name, committed=3))) for name in "abc"]
    saved = load(create(sources, storage, target, storage, job="three")["path"])
    job_dir = tmp_path / "job"
    check_dir = job_dir / START_CHECK_DIR
    check_dir.mkdir(parents=True)
    ran = report()["queries"][0] | {"seconds": 1.5}
    write_outcome(check_dir, 1, ran | {"name": "b"})  # the application starts b first, then a

    def driver_runs() -> bool:  # the driver, let go with b, starts a next
        if (check_dir / "answer-1.json").exists() and not (check_dir / "outcome-0.json").exists():
            write_outcome(check_dir, 0, ran | {"name": "a", "error": "[STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE] no"})
        return True

    released = []
    found = await_in_driver(saved, "app.py", str(job_dir), driver_runs, lambda: False,
                            lambda: released.append("sinks"), None, sleep=lambda _: None)
    answers = {path.name: path.read_text() for path in check_dir.glob("answer-*.json")}
    assert released == ["sinks"] and found.untried == ["c"]
    assert '"go": true' in answers["answer-1.json"] and "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE" in answers[
        "answer-0.json"]
    assert "stopped waiting" in answers["answer-2.json"]  # a driver that reaches c later is refused at once
    assert not found.checked.compatible and [(p.query, p.kind) for p in found.checked.problems] == [
        ("a", "state_schema")]
    assert [q.name for q in found.checked.queries] == ["b", "a"] and found.checked.seconds == 3.0


def test_a_sink_rollback_that_fails_refuses_the_query_it_was_for(tmp_path, saved):
    from sparkpoint.errors import SinkRollbackRefusedError
    from sparkpoint.jobs.check import await_in_driver
    from sparkpoint.jobs.protocol import START_CHECK_DIR, write_outcome

    check_dir = tmp_path / "job" / START_CHECK_DIR
    check_dir.mkdir(parents=True)
    write_outcome(check_dir, 0, report()["queries"][0])

    def refused():
        raise SinkRollbackRefusedError("job x still writes to /out")

    with pytest.raises(SinkRollbackRefusedError):
        await_in_driver(saved, "app.py", str(tmp_path / "job"), lambda: True, lambda: False, refused, None,
                        sleep=lambda _: None)
    assert "still writes to /out" in (check_dir / "answer-0.json").read_text()


def test_the_wait_for_a_driver_ends_with_it_or_at_the_time_out(tmp_path, saved):
    from sparkpoint.jobs.check import await_in_driver

    (tmp_path / "job" / "check").mkdir(parents=True)
    ended = await_in_driver(saved, "app.py", str(tmp_path / "job"), lambda: False, lambda: False, lambda: None,
                            None, sleep=lambda _: None)
    assert ended.untried == ["alarms"] and ended.checked.compatible and ended.checked.queries == []
    now = [0.0]

    def sleep(seconds):
        now[0] += seconds

    late = await_in_driver(saved, "app.py", str(tmp_path / "job"), lambda: True, lambda: False, lambda: None, 5.0,
                           sleep=sleep, clock=lambda: now[0])
    assert late.untried == ["alarms"] and 5.0 <= now[0] < 5.2


def test_spark_4_1_s_kafka_connector_defect_is_named_for_a_query_that_reads_kafka(saved):
    """The check's empty batch is run again from the offset log, which Spark 4.1's connector fails
    (tests/compat/test_kafka_versions.py meets it on 4.1.4); a query that reads no Kafka keeps Spark's own words."""
    error = ('Cannot invoke "scala.collection.IterableOps.map(scala.Function1)" because the return value of '
             '"scala.Option.get()" is null SQLSTATE: XXKST')
    query = saved.query("alarms")
    outcome = {"error": error, "operators": [], "sources": [{}]}
    _checked, (problem,), _notes = compat.query_verdict(saved, {**query, "offsets": [{"events": {"0": 7}}]}, outcome)
    assert problem.kind == "spark_error" and "SPARK-55271" in problem.message and "--no-check" in problem.message
    _checked, (problem,), _notes = compat.query_verdict(saved, query, outcome)
    assert problem.kind == "spark_error" and problem.message.endswith(error) and "SPARK-55271" not in problem.message

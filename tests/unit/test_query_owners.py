"""One query id, one running job (sparkpoint.jobs.query_owners): `run -s` of a savepoint whose queries a job runs
already is refused before anything starts, whether the job's agent says so or, still starting, its restore's
record does. No Spark: the running job is this test's process with the real agent over a fake query."""

from __future__ import annotations

import json
import os
import threading
import time

from checkpoints import hdfs_checkpoint
from running_jobs import agent_of_a_fake_query

from sparkpoint.adapters.processes import process_start
from sparkpoint.adapters.transfer import NullProgress
from sparkpoint.cli.main import main
from sparkpoint.errors import QueriesRunningError
from sparkpoint.jobs.query_owners import claiming, refuse_running, restored_ids
from sparkpoint.jobs.registry import Registry

QUERY_ID = "6a1b0c5e-query-id"  # the fake query's, and the id its checkpoints hold (tests/unit/checkpoints.py)


def savepoint_of_alarms(home, tmp_path, capsys) -> dict:
    checkpoint = hdfs_checkpoint(tmp_path / "cut" / "alarms", committed=3)
    assert main(["--home", str(home), "-o", "json", "savepoint", "--from-checkpoint", str(checkpoint),
                 "--name", "alarms"]) == 0
    return json.loads(capsys.readouterr().out)


def test_run_s_of_a_savepoint_whose_queries_run_already_is_refused_before_anything_starts(home, tmp_path, capsys):
    saved = savepoint_of_alarms(home, tmp_path, capsys)
    app = tmp_path / "app.py"
    app.write_text("raise SystemExit('never launched')\n")
    with agent_of_a_fake_query(home, tmp_path) as running:
        code = main(["--home", str(home), "run", "-s", saved["path"], str(app)])
        said = capsys.readouterr().err
        jobs = Registry(str(home)).all()
    assert code == 23
    assert f"alarms already run in job {running.id} (running)" in said
    assert f"run --replace {running.id}" in said and "--fork" in said
    assert [job.id for job in jobs] == [running.id]  # nothing was launched, nor recorded


def test_a_job_still_restoring_is_known_by_its_record_and_a_fork_by_new_ids(home, tmp_path, capsys):
    saved = savepoint_of_alarms(home, tmp_path, capsys)
    registry = Registry(str(home))
    ids = restored_ids([{"name": "alarms", "query_id": QUERY_ID}], fork=False)
    # Its driver up (this process), no agent yet: starting, with the ids its restore gives.
    starting = registry.new_job("alarms", app="app.py", app_args=[], master="local[2]", submit_args=[],
                                query_ids=sorted(ids), pid=os.getpid(), pid_start=process_start(os.getpid()))
    try:
        refuse_running(registry, ids, saved["path"])
    except QueriesRunningError as refused:
        assert f"job {starting.id} (starting)" in str(refused)
    else:
        raise AssertionError("a second restore of the same query ids was let through")
    refuse_running(registry, restored_ids([{"name": "alarms", "query_id": QUERY_ID}], fork=True), saved["path"])
    starting.end("cancelled", reason="test")
    registry.save(starting)
    refuse_running(registry, ids, saved["path"])  # ended: its ids are free again


class Said(NullProgress):
    def __init__(self) -> None:
        self.waits: list[str] = []

    def waiting(self, message: str) -> None:
        self.waits.append(message)


def test_two_claims_of_one_savepoint_at_once_let_one_through_and_the_other_says_it_waits(home, tmp_path):
    registry = Registry(str(home))
    ids = {QUERY_ID: "alarms"}
    inside, outcomes = threading.Event(), []
    said = {True: Said(), False: Said()}

    def claim(first: bool) -> None:
        try:
            with claiming(registry, ids, "sp", said[first]):
                if first:
                    # What run does in the block: the job's record, then its driver launched and recorded.
                    job = registry.new_job("alarms", app="app.py", app_args=[], master="local[2]", submit_args=[],
                                           query_ids=[QUERY_ID])
                    inside.set()
                    time.sleep(0.5)  # the other claim has looked by now, unless the lock holds it
                    job.pid, job.pid_start = os.getpid(), process_start(os.getpid())
                    registry.save(job)
            outcomes.append("claimed")
        except QueriesRunningError:
            outcomes.append("refused")

    first = threading.Thread(target=claim, args=(True,))
    first.start()
    assert inside.wait(10)
    second = threading.Thread(target=claim, args=(False,))
    second.start()
    first.join(10)
    second.join(10)
    assert sorted(outcomes) == ["claimed", "refused"]
    assert said[True].waits == []
    assert said[False].waits == [f"waiting for another `sparkpoint run` in this home to launch its job "
                                 f"({home / 'jobs' / '.launch.lock'})"]


def test_a_link_in_the_lock_file_s_place_is_refused_in_one_line(home, tmp_path, capsys):
    """Never followed: a link planted as jobs/.launch.lock would have the lock's file made wherever it points."""
    saved = savepoint_of_alarms(home, tmp_path, capsys)
    app = tmp_path / "app.py"
    app.write_text("raise SystemExit('never launched')\n")
    (home / "jobs").mkdir(parents=True, exist_ok=True)
    (home / "jobs" / ".launch.lock").symlink_to(tmp_path / "elsewhere")
    code = main(["--home", str(home), "run", "-s", saved["path"], "--no-check", str(app)])
    said = capsys.readouterr().err
    assert code == 9 and said.count("\n") == 1 and "cannot open the lock file" in said, said
    assert not (tmp_path / "elsewhere").exists() and Registry(str(home)).all() == []

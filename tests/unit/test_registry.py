"""The job registry's records: private, written whole, and read with their types checked."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from checkpoints import hdfs_checkpoint

from sparkpoint.config import Settings
from sparkpoint.jobs import triggers
from sparkpoint.jobs.registry import Registry
from sparkpoint.jobs.protocol import answer_handover, write_agent_file
from sparkpoint.jobs.listing import list_jobs
from sparkpoint.jobs.savepoint import create_savepoint
from sparkpoint.savepoints.create import QuerySource
from sparkpoint.savepoints.savepoint import dispose
from sparkpoint.errors import BadArgumentError, CorruptRecordError


def new_job(registry, name="alarms"):
    return registry.new_job(name, app="app.py", app_args=["--password", "hunter2"], master="local[2]", submit_args=[])


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_every_record_of_a_job_is_private_and_no_temp_file_stays(tmp_path):
    registry = Registry(str(tmp_path))
    job = new_job(registry)
    write_agent_file(job.directory, {"state": "starting"})
    answer_handover(job.directory, {"abort": "no"})
    trigger = Path(job.directory) / "triggers" / "t-0123abcd.json"
    trigger.parent.mkdir()
    triggers._write_trigger(trigger, TRIGGER)
    records = [Path(job.directory) / name for name in ("job.json", "agent.json", "handover.json", "token")] + [trigger]
    assert {path.name: mode(path) for path in records} == {path.name: 0o600 for path in records}
    assert not [p for p in Path(job.directory).rglob("*") if p.name.startswith(".")]


def test_a_home_sparkpoint_makes_is_private(tmp_path):
    job = new_job(Registry(str(tmp_path / "home")))
    assert [mode(tmp_path / "home"), mode(tmp_path / "home" / "jobs"), mode(job.directory)] == [0o700] * 3


def test_a_name_with_a_trailing_newline_is_refused(tmp_path):
    with pytest.raises(BadArgumentError, match="job name"):
        new_job(Registry(str(tmp_path)), "q1\n")


@pytest.mark.parametrize("change, problem", [
    (lambda d: [1, 2], "not a JSON object"),
    (lambda d: {**d, "pid": "x"}, "pid is"),
    (lambda d: {**d, "app_args": "a b"}, "app_args is"),
    (lambda d: {**d, "submit_args": [1]}, "submit_args is"),
    (lambda d: {**d, "ended": "yes"}, "ended is"),
    (lambda d: {**d, "detached": 1}, "detached is"),
    (lambda d: {k: v for k, v in d.items() if k != "app"}, "app missing"),
    (lambda d: {**d, "id": "other-0000"}, "not its directory's name"),
])
def test_a_malformed_entry_is_reported_as_such_and_list_goes_on(tmp_path, change, problem):
    settings = Settings(home=str(tmp_path))
    registry = Registry(settings.home)
    broken, fine = new_job(registry, "broken"), new_job(registry, "fine")
    path = Path(broken.directory) / "job.json"
    path.write_text(json.dumps(change(json.loads(path.read_text()))))
    with pytest.raises(CorruptRecordError, match=problem) as raised:
        registry.load(broken.id)
    assert raised.value.exit_code == 15 and str(path) in str(raised.value)
    listed = [(entry.id, entry.state) for entry in list_jobs(settings, include_all=True)]
    assert listed == [(fine.id, "lost"), (broken.id, "malformed")]  # marked, not left out
    assert problem in list_jobs(settings)[-1].error  # without --all too: its state is unknown


def test_keys_of_a_newer_sparkpoint_are_ignored(tmp_path):
    registry = Registry(str(tmp_path))
    job = new_job(registry)
    path = Path(job.directory) / "job.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "extra": 1}))
    assert registry.load(job.id).app_args == ["--password", "hunter2"]


def test_a_job_json_that_is_not_json_is_reported(tmp_path):
    registry = Registry(str(tmp_path))
    job = new_job(registry)
    (Path(job.directory) / "job.json").write_bytes(b"\xff{")
    with pytest.raises(CorruptRecordError, match="is not UTF-8 text"):
        registry.load(job.id)
    (Path(job.directory) / "job.json").write_bytes(b"{")
    with pytest.raises(CorruptRecordError, match="is not JSON"):
        registry.load(job.id)


@pytest.mark.parametrize("trigger_id", ["../x", "../../x", "t-0123abcd/../../x", "t-0123abcd\n", "t-0123ABCD", ""])
def test_trigger_ids_of_another_shape_never_become_paths(tmp_path, trigger_id):
    settings = Settings(home=str(tmp_path))
    job = new_job(Registry(settings.home))
    (Path(job.directory) / "triggers").mkdir()
    (Path(job.directory) / "x.json").write_text(json.dumps({"status": "completed"}))
    with pytest.raises(BadArgumentError, match="not a savepoint trigger id"):
        triggers.trigger_status(settings, job.id, trigger_id)


TRIGGER = triggers.TriggerRecord(trigger_id="t-0123abcd", job_id="alarms-0001", status="in_progress",
                                  started_at="2026-11-23T09:00:00.000Z")
WELL_FORMED = '"trigger_id": "t-0123abcd", "job_id": "alarms-0001", "started_at": "2026-11-23T09:00:00.000Z"'


@pytest.mark.parametrize("record", [
    "{}", "[]", "not json", '{"status": 1}', f'{{{WELL_FORMED}}}',
    f'{{{WELL_FORMED}, "status": "in_progress", "pid": "12"}}',
    f'{{{WELL_FORMED}, "status": "completed", "savepoint": "sp-1"}}',
    f'{{{WELL_FORMED}, "status": "completed", "savepoint": {{"id": "sp-1"}}}}',
    f'{{{WELL_FORMED}, "status": "failed", "exit_code": true}}',
])
def test_a_malformed_trigger_record_is_reported(tmp_path, record):
    settings = Settings(home=str(tmp_path))
    job = new_job(Registry(settings.home))
    (Path(job.directory) / "triggers").mkdir()
    (Path(job.directory) / "triggers" / "t-0123abcd.json").write_text(record)
    with pytest.raises(CorruptRecordError, match="trigger record"):
        triggers.trigger_status(settings, job.id, "t-0123abcd")


@pytest.mark.parametrize("make", [os.mkfifo, os.mkdir])
def test_a_trigger_record_that_is_not_a_file_is_reported_at_once(tmp_path, make):
    """A FIFO in place of the record made `savepoint --status` wait for a writer for ever; a directory was an
    internal error."""
    settings = Settings(home=str(tmp_path))
    job = new_job(Registry(settings.home))
    (Path(job.directory) / "triggers").mkdir()
    make(Path(job.directory) / "triggers" / "t-0123abcd.json")
    with pytest.raises(CorruptRecordError, match="trigger record .* is not a regular file"):
        triggers.trigger_status(settings, job.id, "t-0123abcd")


def test_a_triggered_savepoint_runs_in_a_process_of_its_own_without_the_cli(tmp_path):
    """trigger_savepoint's background half is a core entry point: it records the outcome (here: the job is not
    running) and exits with its code, and the trigger reads as failed with that code."""
    settings = Settings(home=str(tmp_path))
    job = new_job(Registry(settings.home))
    (Path(job.directory) / "triggers").mkdir()
    triggers._write_trigger(Path(job.directory) / "triggers" / "t-0123abcd.json", replace(TRIGGER, job_id=job.id))
    done = subprocess.run([sys.executable, "-m", "sparkpoint.jobs.triggers", "--home", settings.home, job.id,
                           "t-0123abcd"], capture_output=True, text=True, timeout=60)
    record = triggers.trigger_status(settings, job.id, "t-0123abcd")
    assert (done.returncode, record.status, record.exit_code) == (12, "failed", 12)
    assert record.error.startswith(f"job {job.id} is not running") and done.stderr == ""
    assert "sparkpoint.cli" not in subprocess.run(
        [sys.executable, "-c", "import sys, sparkpoint.jobs.triggers; print(sorted(sys.modules))"],
        capture_output=True, text=True, check=True).stdout


def test_the_history_has_what_the_cli_recorded_and_what_only_the_driver_saw_in_time_order(tmp_path):
    from sparkpoint.jobs.job_view import history_of

    registry = Registry(str(tmp_path))
    job = new_job(registry)
    job.note("started", "app.py, restored from sp-1")
    job.history[-1]["at"] = "2026-11-23T10:00:00.000Z"
    registry.save(job)
    write_agent_file(job.directory, {"state": "failed", "error": "query 'q' failed: boom",
                                     "ended_at": "2026-11-23T10:05:00.000Z",
                                     "not_restored": {"queries": ["audit"], "at": "2026-11-23T10:01:00.000Z"}})
    assert [(e["event"], e["detail"]) for e in history_of(registry.load(job.id))] == [
        ("started", "app.py, restored from sp-1"),
        ("state_not_restored", "--allow-non-restored-state: the saved state of audit is not used: the application "
                               "started no query of that name"),
        ("failed", "query 'q' failed: boom"),
    ]
    # Once the CLI recorded the end itself (a cancel), the driver's account of it is not repeated.
    job = registry.load(job.id)
    job.end("cancelled", reason="cancel")
    registry.save(job)
    assert [e["event"] for e in history_of(registry.load(job.id))] == ["started", "state_not_restored", "cancelled"]


@pytest.mark.parametrize("history", [{"event": "x"}, ["started"], None])
def test_a_history_of_another_shape_makes_the_entry_broken(tmp_path, history):
    registry = Registry(str(tmp_path))
    job = new_job(registry)
    path = Path(job.directory) / "job.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "history": history}))
    with pytest.raises(CorruptRecordError, match=r"malformed \(history is "):
        registry.load(job.id)


def test_list_shows_the_line_of_versions_a_job_continues(tmp_path):
    """v1 replaced by v2, which failed on probation; v1's version again: the line ends at each job. Arguments
    are not shown (v1's hold a password): the record keeps them private."""
    registry = Registry(str(tmp_path))
    v1 = new_job(registry, "posts")
    v2 = registry.new_job("posts", app="/apps/v2.py", app_args=["--fast"], master="local[2]", submit_args=[],
                          follows=v1.id)
    again = registry.new_job("posts", app="app.py", app_args=[], master="local[2]", submit_args=[], follows=v2.id)
    for job, state in ((v1, "finished"), (v2, "failed")):
        job.end(state)
        registry.save(job)
    listed = {job.id: job for job in list_jobs(Settings(home=str(tmp_path)), include_all=True)}
    assert [(v.id, v.command, v.state) for v in listed[again.id].lineage] == [
        (v1.id, "app.py", "finished"), (v2.id, "v2.py", "failed"), (again.id, "app.py", "lost")]
    assert listed[v1.id].lineage == []  # it follows none
    # A link to a job no longer registered, or back into the line (an edited record), ends the line there.
    v1_record = Path(v1.directory) / "job.json"
    v1_record.write_text(json.dumps({**json.loads(v1_record.read_text()), "follows": again.id}))
    listed = {job.id: job for job in list_jobs(Settings(home=str(tmp_path)), include_all=True)}
    assert [v.id for v in listed[again.id].lineage] == [v1.id, v2.id, again.id]


def test_list_shows_each_job_its_own_last_savepoint_and_the_names_newest_beside_it(tmp_path):
    """v1 stopped with a savepoint, v2 (same name) restored from it and savepointed since: v1's row showed
    v2's savepoint; after a chain of five versions every row showed the last one's."""
    settings = Settings(home=str(tmp_path / "home"))
    registry = Registry(settings.home_url())
    checkpoint = hdfs_checkpoint(tmp_path / "ckpt" / "posts", committed=2)
    v1 = new_job(registry, "posts")
    v1_saved = [create_savepoint(settings, v1, [QuerySource("posts", str(checkpoint))], None, None).path
                for _ in range(2)]
    v1.end("finished")
    registry.save(v1)  # the record as loaded before its savepoints: a save of it must not lose them
    v2 = registry.new_job("posts", app="v2.py", app_args=[], master="local[2]", submit_args=[], follows=v1.id)
    v3 = registry.new_job("posts", app="v3.py", app_args=[], master="local[2]", submit_args=[], follows=v2.id)
    time.sleep(1.05)  # savepoint ids sort by the second they were taken in: v2's is the name's newest
    v2_saved = create_savepoint(settings, v2, [QuerySource("posts", str(checkpoint))], None, None).path

    listed = {job.id: job for job in list_jobs(settings, include_all=True)}
    assert len({*v1_saved, v2_saved}) == 3
    assert {job_id: (job.last_savepoint, job.name_last_savepoint) for job_id, job in listed.items()} == {
        v1.id: (v1_saved[1], v2_saved), v2.id: (v2_saved, v2_saved), v3.id: (None, v2_saved)}
    dispose(v1_saved[1])  # disposed of since: not offered as a savepoint to restore from
    assert {job.id: job.last_savepoint for job in list_jobs(settings, include_all=True)}[v1.id] is None

"""Job control without Spark: real processes stand in for a driver whose agent never came up."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from clitools import wait_for

from sparkpoint.config import Settings
from sparkpoint.jobs import cancel, driver_launch, drivers, rollback, run, stop
from sparkpoint.jobs.run_request import RunRequest
from sparkpoint.jobs.job_state import state_of
from sparkpoint.jobs.registry import Registry
from sparkpoint.jobs.protocol import answer_handover, await_handover, handover_waiting, write_agent_file
from sparkpoint.adapters.processes import pid_alive, process_start, signal_group
from sparkpoint.errors import (
    BadArgumentError,
    CorruptRecordError,
    JobFailedError,
    JobNotRunningError,
    NotFoundError,
    SparkpointError,
    StopInterruptedError,
    StopRefusedError,
)


def sleeper(*popen_args, **popen_kwargs) -> subprocess.Popen:
    """A process that stays until ended, in a session of its own (as spark-submit is started)."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", *popen_args],
                            start_new_session=True, **popen_kwargs)


def test_cancel_without_an_agent_ends_the_process_group_at_once(tmp_path, monkeypatch):
    settings = Settings(home=str(tmp_path))
    registry = Registry(settings.home)
    job = registry.new_job("stuck", app="app.py", app_args=[], master="local[2]", submit_args=[])
    # A 'driver' with a child, in its own process group, as spark-submit's JVM and its Python are.
    driver = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                               "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
                               "time.sleep(600)"],
                              start_new_session=True)
    job.pid, job.pid_start = driver.pid, process_start(driver.pid)
    registry.save(job)
    assert state_of(registry.load(job.id)) == "starting"

    # No agent: no grace is given, the group is signalled before any wait (the waits after are for it to end).
    events = []
    killpg = os.killpg
    monkeypatch.setattr(os, "killpg", lambda pid, sig: (events.append(sig), killpg(pid, sig)))
    result = cancel.cancel_job(settings, job.id, sleep=lambda seconds: events.append("wait"))
    assert result.state == "cancelled" and events[0] == signal.SIGTERM
    assert driver.wait(timeout=30) == -signal.SIGTERM
    # The group was signalled; its other member ends a moment later (the test's sleeps do not wait).
    assert wait_for(lambda: not subprocess.run(["pgrep", "-g", str(driver.pid)], capture_output=True).stdout,
                    timeout=10, what="the driver's process group to end")
    with pytest.raises(JobNotRunningError, match="already cancelled"):
        cancel.cancel_job(settings, job.id)


@pytest.mark.parametrize("log", ["file", "fifo", "link"])
def test_a_cancel_returns_once_the_application_has_ended_and_a_process_of_its_own_ends_a_driver_that_stays(
        tmp_path, monkeypatch, log):
    settings = Settings(home=str(tmp_path))
    registry = Registry(settings.home)
    job = registry.new_job("slow-exit", app="app.py", app_args=[], master="local[2]", submit_args=[])
    driver = sleeper()  # a JVM whose shutdown hangs once its application has ended
    job.pid, job.pid_start = driver.pid, process_start(driver.pid)
    registry.save(job)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("untouched")
    if log == "fifo":  # opened to write, it would block the cancel until a reader came
        os.mkfifo(job.log_path)
    elif log == "link":  # the watcher's output must not go through it
        os.symlink(elsewhere, job.log_path)
    write_agent_file(job.directory, {"state": "running", "host": "127.0.0.1", "port": 9})

    class Agent:  # as the driver's agent does: the queries stopped, the application returns, its record is final
        def cancel(self):
            write_agent_file(job.directory, {"state": "finished", "host": "127.0.0.1", "port": 9,
                                             "ended_at": "2026-11-28T10:00:00.000Z"})
            return ["q"]

    monkeypatch.setattr(cancel, "client_for", lambda *_: Agent())
    monkeypatch.setattr(cancel, "CANCEL_GRACE", 0.5)
    answers = []
    cancelling = threading.Thread(target=lambda: answers.append(cancel.cancel_job(settings, job.id)), daemon=True)
    cancelling.start()
    cancelling.join(timeout=20)
    try:
        assert [view.state for view in answers] == ["cancelled"]
        assert driver.poll() is None  # returned without waiting for the driver's exit
        assert driver.wait(timeout=30) == -signal.SIGTERM  # ended by the watching process, once its grace was over
    finally:
        driver.kill()
    assert elsewhere.read_text() == "untouched"


def test_a_stop_waits_for_the_application_s_end_and_a_process_of_its_own_ends_a_driver_that_stays(
        tmp_path, monkeypatch):
    registry = Registry(str(tmp_path))
    job = registry.new_job("slow-exit", app="app.py", app_args=[], master="local[2]", submit_args=[])
    driver = sleeper()  # a JVM whose shutdown hangs once its application has ended
    job.pid, job.pid_start = driver.pid, process_start(driver.pid)
    registry.save(job)
    write_agent_file(job.directory, {"state": "running", "host": "127.0.0.1", "port": 9})
    monkeypatch.setattr(drivers, "STOPPED_GRACE", 0.5)
    ending = drivers.ApplicationEnd(registry, job, time.sleep, time.monotonic)
    time.sleep(0.3)
    assert ending._thread.is_alive()  # the application runs on: its queries are still ending
    write_agent_file(job.directory, {"state": "finished", "host": "127.0.0.1", "port": 9,
                                     "ended_at": "2026-11-29T10:00:00.000Z"})
    try:
        assert 0.3 <= ending.wait() < 5
        assert driver.poll() is None  # returned without waiting for the driver's exit
        assert driver.wait(timeout=30) == -signal.SIGTERM  # ended by the watching process, once its grace was over
    finally:
        driver.kill()


def test_a_driver_that_ignores_sigterm_is_killed_once_the_grace_is_over(tmp_path):
    settings = Settings(home=str(tmp_path))
    registry = Registry(settings.home)
    job = registry.new_job("deaf", app="app.py", app_args=[], master="local[2]", submit_args=[])
    app = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(600)"
    driver = subprocess.Popen([sys.executable, "-c", app], start_new_session=True, stdout=subprocess.PIPE, text=True)
    assert driver.stdout.readline() == "up\n"
    job.pid, job.pid_start = driver.pid, process_start(driver.pid)
    registry.save(job)

    clock, sleep = fake_time()
    assert cancel.cancel_job(settings, job.id, sleep=sleep, clock=clock).state == "cancelled"
    assert driver.wait(timeout=30) == -signal.SIGKILL
    assert clock() >= 10  # terminate_group's grace, counted on the clock given: no real wait


def test_cancel_of_a_lost_job_leaves_the_process_that_reuses_its_pid_alone(tmp_path):
    settings = Settings(home=str(tmp_path))
    registry = Registry(settings.home)
    recorded = registry.new_job("lost", app="app.py", app_args=[], master="local[2]", submit_args=[])
    legacy = registry.new_job("legacy", app="app.py", app_args=[], master="local[2]", submit_args=[])
    # The pid is now another process's: started after the driver (another start time), or, for a job.json
    # of an earlier sparkpoint (no start time), one whose command line does not name the job's directory.
    other = sleeper()
    try:
        recorded.pid, recorded.pid_start = other.pid, str(int(process_start(other.pid)) - 1)
        legacy.pid = other.pid
        for job in (recorded, legacy):
            registry.save(job)
            assert state_of(registry.load(job.id)) == "lost"
            assert cancel.cancel_job(settings, job.id, sleep=lambda _: None).state == "cancelled"
        assert other.poll() is None and pid_alive(other.pid)
    finally:
        other.kill()
        other.wait()


def test_the_driver_of_an_earlier_sparkpoints_job_is_recognised_by_its_command_line(tmp_path):
    settings = Settings(home=str(tmp_path))
    registry = Registry(settings.home)
    job = registry.new_job("legacy", app="app.py", app_args=[], master="local[2]", submit_args=[])
    driver = sleeper(job.directory)  # spark-submit's arguments name the job's directory
    job.pid = driver.pid
    registry.save(job)
    assert registry.load(job.id).pid_start is None and state_of(registry.load(job.id)) == "starting"
    assert cancel.cancel_job(settings, job.id, sleep=lambda _: None).state == "cancelled"
    assert driver.wait(timeout=30) == -signal.SIGTERM


@pytest.mark.parametrize("pid", [-1, 0, 1, True, "x", 1.5])
def test_a_job_json_with_an_impossible_pid_is_reported_not_signalled(tmp_path, pid):
    settings = Settings(home=str(tmp_path))
    registry = Registry(settings.home)
    job = registry.new_job("odd", app="app.py", app_args=[], master="local[2]", submit_args=[])
    path = Path(job.directory) / "job.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "pid": pid}))
    with pytest.raises(CorruptRecordError, match="pid is"):
        cancel.cancel_job(settings, job.id)
    assert not pid_alive(pid) and process_start(pid) is None and not signal_group(pid, "1", signal.SIGTERM)


def test_replace_refuses_before_anything_starts(tmp_path):
    settings = Settings(home=str(tmp_path / "home"))
    app = tmp_path / "app.py"
    app.write_text("")
    registry = Registry(settings.home)
    old = registry.new_job("old", app=str(app), app_args=[], master="local[2]", submit_args=[])
    old.ended = {"state": "finished"}
    registry.save(old)

    with pytest.raises(BadArgumentError, match="drop -s"):
        run.run_job(settings, RunRequest(app=str(app), replace=old.id, savepoint="sp"))
    with pytest.raises(NotFoundError):
        run.run_job(settings, RunRequest(app=str(app), replace="no-such-job"))
    with pytest.raises(JobNotRunningError):
        run.run_job(settings, RunRequest(app=str(app), replace=old.id))
    assert [job.id for job in registry.all()] == [old.id]  # no new job registered, no driver launched


def test_a_waiting_driver_gives_up_when_its_controller_is_gone(tmp_path):
    controller = subprocess.Popen([sys.executable, "-c", "pass"])
    controller.wait()
    answer = await_handover(tmp_path, controller.pid, sleep=lambda _: None)
    assert "ended before the hand-over" in answer["abort"]
    assert handover_waiting(tmp_path)


def test_a_cluster_mode_driver_gives_up_waiting_for_its_hand_over_after_its_time(tmp_path):
    """It cannot see the `run` that launched it from another machine: a `run` gone for good is a wait that ends."""
    answer = await_handover(tmp_path, None, timeout=0.2)
    assert answer == {"abort": "no hand-over within 0.2 s"}
    assert handover_waiting(tmp_path)


def test_a_waiting_driver_takes_the_controllers_answer(tmp_path):
    answer_handover(tmp_path, {"expected_queries": ["counts"]})
    assert await_handover(tmp_path, os.getpid()) == {"expected_queries": ["counts"]}


class StopReports:
    """An agent's stop reports, one per poll; the last one stays."""

    def __init__(self, *reports, gone_after=None):
        self.reports, self.gone_after, self.polls = list(reports), gone_after, 0

    def request_stop(self, timeout):
        self.timeout = timeout
        return self.reports[0]

    def stop_report(self):
        self.polls += 1
        if self.gone_after is not None and self.polls > self.gone_after:
            raise JobNotRunningError("the agent does not answer")
        return self.reports[min(self.polls, len(self.reports) - 1)]


class Shown:
    def __init__(self):
        self.lines, self.finished = [], 0

    def waiting(self, message):
        self.lines.append(message)

    def finish(self):
        self.finished += 1


def waiting(seconds, batch=41):
    return {"done": False, "seconds": seconds, "queries": [
        {"name": "counts", "state": "waiting", "batch_id": batch, "at_boundary": None},
        {"name": "alarms", "state": "stopped", "batch_id": 7, "at_boundary": True}]}


DONE = {"done": True, "seconds": 2.5, "queries": [{"name": "counts", "state": "stopped", "at_boundary": True}]}


def fake_time():
    now = [0.0]
    return (lambda: now[0]), (lambda s: now.__setitem__(0, now[0] + s))


def stop_job_for_test(tmp_path):
    return Registry(str(tmp_path)).new_job("counts", app="app.py", app_args=[], master="local[2]", submit_args=[])


def test_the_wait_for_the_boundary_shows_what_it_waits_for(tmp_path):
    clock, sleep = fake_time()
    shown = Shown()
    agent = StopReports(waiting(0.2), waiting(1.4), waiting(12.0, batch=42), DONE)
    queries = stop._await_boundary(agent, stop_job_for_test(tmp_path), 60, shown, sleep, clock)
    assert queries == DONE["queries"] and agent.timeout == 60
    assert shown.lines == ["waiting for batch 41 of counts to commit, 0 s",
                           "waiting for batch 41 of counts to commit, 1 s",
                           "waiting for batch 42 of counts to commit, 12 s"]
    assert shown.finished == 1


def test_a_stop_the_agent_refuses_says_why_and_what_timeout_would_do(tmp_path):
    clock, sleep = fake_time()
    shown = Shown()
    job = stop_job_for_test(tmp_path)
    refused = {"done": True, "seconds": 0.0, "queries": [], "refused": {
        "queries": [{"name": "relay", "batch_seconds": 300.0, "ends_within": 203.0}], "needed_seconds": 303}}
    with pytest.raises(StopRefusedError) as raised:
        stop._await_boundary(StopReports(refused), job, 60, shown, sleep, clock)
    assert raised.value.exit_code == 21 and shown.finished == 1
    assert str(raised.value) == (
        f"job {job.id} was not stopped: the stop's timeout (60 s) would cut short a real-time batch (relay, "
        "batches of 300.0 s, this one done within 203.0 s), and the output it wrote would be written again after "
        "a restore; give the stop 303 s or more (stop --timeout, run --replace --stop-timeout), or cancel the job")
    # A refusal from another process that is not what this one writes still refuses, in general words.
    with pytest.raises(StopRefusedError, match="give the stop a batch's length or more"):
        stop._await_boundary(StopReports({**refused, "refused": "no"}), job, 60, shown, sleep, clock)


def test_a_replace_whose_stop_would_cut_a_real_time_batch_short_starts_nothing(tmp_path):
    job = stop_job_for_test(tmp_path)
    status = {"queries": [{"name": "relay", "real_time_batch_seconds": 300.0}, {"name": "counts"}]}
    with pytest.raises(StopRefusedError, match=r"relay \(batches of 300 s\).*give --stop-timeout 303 or more"):
        run._refuse_short_stop(job, status, 60)
    run._refuse_short_stop(job, status, 303)  # long enough
    run._refuse_short_stop(job, {"queries": "not a list"}, 60)  # nothing real-time that can be told


def test_a_real_time_batch_cut_short_is_said_to_run_again():
    from sparkpoint.savepoints.create import SavedQuery

    cut = SavedQuery(name="relay", query_id="q", batch_id=7, planned_batch_id=None, bytes=0)
    assert stop._replayed(cut, {"at_boundary": False, "real_time": True}) == 8  # its offsets were never logged
    assert stop._replayed(cut, {"at_boundary": True, "real_time": True}) is None
    assert stop._replayed(cut, {"at_boundary": False, "real_time": False}) is None  # the checkpoint says it all
    planned = SavedQuery(name="counts", query_id="q", batch_id=7, planned_batch_id=8, bytes=0)
    assert stop._replayed(planned, {"at_boundary": False}) == 8
    assert not stop._at_boundary(planned, {"at_boundary": True})


def test_an_agent_that_never_reports_the_end_is_given_up_on(tmp_path):
    clock, sleep = fake_time()
    shown = Shown()
    job = stop_job_for_test(tmp_path)
    with pytest.raises(JobFailedError, match=r"did not report the end of its queries within 40 s"):
        stop._await_boundary(StopReports(waiting(1)), job, 10, shown, sleep, clock)
    assert 40 <= clock() < 40.2 and shown.finished == 1


def test_a_driver_that_dies_during_the_stop_says_where_its_checkpoints_are(tmp_path):
    clock, sleep = fake_time()
    job = stop_job_for_test(tmp_path)
    with pytest.raises(JobFailedError, match="ended before its queries reached a batch boundary") as raised:
        stop._await_boundary(StopReports(waiting(1), gone_after=2), job, 60, Shown(), sleep, clock)
    assert job.checkpoint_root in str(raised.value) and "savepoint --from-checkpoint" in str(raised.value)


@pytest.mark.parametrize("broken", ["unnamed", "target"])
def test_a_stop_whose_savepoint_fails_after_its_queries_ended_says_the_job_stopped_and_how_to_save_it(
        tmp_path, monkeypatch, broken):
    from checkpoints import hdfs_checkpoint
    from sparkpoint.errors import StoppedWithoutSavepointError
    from sparkpoint.jobs.job_view import describe_job

    registry = Registry(str(tmp_path / "home"))
    job = stop_job_for_test(tmp_path / "home")
    hdfs_checkpoint(Path(job.checkpoint_root) / "counts", committed=3)
    ended = {"done": True, "seconds": 0.4, "queries": [
        {"id": "5c1e", "name": None if broken == "unnamed" else "counts", "state": "stopped", "at_boundary": True,
         "checkpoint": f"file://{job.checkpoint_root}/counts"}]}
    write_agent_file(job.directory, {"state": "finished", "ended_at": "2026-12-07T22:00:00.000Z"})
    monkeypatch.setattr(stop, "client_for", lambda registry, job: StopReports(ended))
    target = tmp_path / "not-a-directory"
    target.write_text("a file where the savepoint's directory should be")
    clock, sleep = fake_time()
    with pytest.raises(StoppedWithoutSavepointError) as raised:
        stop.stop_with_savepoint(Settings(home=str(tmp_path / "home")), registry, job, str(target), 60, Shown(),
                                 sleep, clock)
    said = str(raised.value)
    assert raised.value.exit_code == 24 and "\n" not in said
    assert said.startswith(f"job {job.id} was stopped, but the savepoint of its stop failed: ")
    assert said.endswith(f"its checkpoints stay under {job.checkpoint_root}, and `sparkpoint savepoint "
                         f"--from-checkpoint {job.checkpoint_root} --job counts --topic-ids` takes the savepoint "
                         "of them")
    recorded = registry.load(job.id)
    assert recorded.ended["state"] == "finished" and describe_job(recorded).error == said  # list and the page
    assert recorded.savepoints.failed == 1  # the metrics' failed savepoints


def test_ctrl_c_during_the_wait_says_the_stop_goes_on_without_a_savepoint(tmp_path):
    clock, _ = fake_time()

    def interrupted(seconds):
        raise KeyboardInterrupt

    shown = Shown()
    job = stop_job_for_test(tmp_path)
    with pytest.raises(StopInterruptedError, match="goes on ending its queries") as raised:
        stop._await_boundary(StopReports(waiting(1)), job, 60, shown, interrupted, clock)
    assert raised.value.exit_code == 130 and job.checkpoint_root in str(raised.value) and shown.finished == 1


def test_a_final_report_read_by_another_caller_is_taken_from_the_agents_record(tmp_path):
    from sparkpoint.jobs.protocol import write_agent_file

    clock, sleep = fake_time()
    job = stop_job_for_test(tmp_path)
    write_agent_file(job.directory, {"state": "finished", "stop": DONE})  # what finish() leaves
    queries = stop._await_boundary(StopReports(waiting(1), gone_after=1), job, 60, Shown(), sleep, clock)
    assert queries == DONE["queries"]


def test_a_failed_poll_of_a_living_driver_is_tried_again(tmp_path):
    clock, sleep = fake_time()
    job = stop_job_for_test(tmp_path)
    job.pid = os.getpid()  # alive: the poll timed out on a busy driver

    class FlakyAgent(StopReports):
        def stop_report(self):
            self.polls += 1
            if self.polls == 2:
                raise JobNotRunningError("timed out")
            return self.reports[min(self.polls, len(self.reports) - 1)]

    agent = FlakyAgent(waiting(1), waiting(2), waiting(3), DONE)
    assert stop._await_boundary(agent, job, 60, Shown(), sleep, clock) == DONE["queries"]


def test_what_ending_the_driver_raised_reaches_the_caller(tmp_path):
    clock, sleep = fake_time()
    registry = Registry(str(tmp_path))
    job = stop_job_for_test(tmp_path)
    job.submission_id, job.master = "driver-1", "not-a-master-url"  # cluster mode, with a master that cannot be
    with pytest.raises(SparkpointError):
        drivers.ApplicationEnd(registry, job, sleep, clock).wait()


class FakeClock:
    """Seconds that pass only when the code under test sleeps."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def probation_job(tmp_path, agent: dict):
    from clitools import closed_port

    registry = Registry(str(tmp_path))
    job = registry.new_job("v2", app="app.py", app_args=[], master="local[2]", submit_args=[])
    job.pid, job.pid_start = os.getpid(), process_start(os.getpid())  # this process stands in for the driver
    registry.save(job)
    from sparkpoint.jobs.protocol import write_agent_file

    write_agent_file(job.directory, {"host": "127.0.0.1", "port": closed_port(), "pid": os.getpid(), **agent})
    return registry, job


def test_probation_reports_a_new_version_that_failed(tmp_path):
    from sparkpoint.jobs.rollback import watch_probation

    registry, job = probation_job(tmp_path, {"state": "failed", "error": "query 'q' failed: RuntimeError: boom"})
    clock = FakeClock()
    probation = watch_probation(registry, job, {"q": 4}, 30, 60, [], clock.sleep, clock)
    assert probation.failure == "query 'q' failed: RuntimeError: boom" and not probation.still_running
    assert clock.now == 0  # at the first look


def test_probation_without_input_ends_after_the_grace_and_the_probation(tmp_path):
    """No batch commits (no input, and here no agent answering): the new version is not failed, so it stays."""
    from sparkpoint.jobs.rollback import parse_condition, watch_probation

    registry, job = probation_job(tmp_path, {"state": "running"})
    clock = FakeClock()
    probation = watch_probation(registry, job, {"q": 4}, 2, 3, [parse_condition("processing_rate>=10")],
                                clock.sleep, clock)
    assert probation.failure is None and 5 <= clock.now <= 5.5
    assert probation.detail == ("no batch committed in 5 s (no input?): it runs, but its processing is unproven; "
                                "--healthy-when not judged")


def test_probation_takes_a_lost_driver_for_failed_only_once_it_stays_lost(tmp_path):
    """A cancel ends the driver, then records the end: in between the job looks lost, which is no failure."""
    from sparkpoint.jobs.rollback import LOST_SETTLE, watch_probation

    registry, job = probation_job(tmp_path, {"state": "running"})
    # no such process (pids are below pid_max, at most 2**22): the driver is gone, its end unrecorded
    job.pid, job.pid_start = 2**22, "0"
    registry.save(job)
    clock = FakeClock()
    probation = watch_probation(registry, job, {"q": 4}, 30, 60, [], clock.sleep, clock)
    assert probation.failure == "the new version is lost" and LOST_SETTLE <= clock.now <= LOST_SETTLE + 0.5


@pytest.mark.parametrize("text", ["processing_rate", "processing_rate>=", "latency<=5", "processing_rate=>5",
                                  "processing_rate>=-1", "processing_rate>=5 and input_rate>=1"])
def test_a_healthy_when_condition_that_does_not_parse_names_the_form(text):
    from sparkpoint.jobs.rollback import parse_condition

    with pytest.raises(BadArgumentError, match="write METRIC>=NUMBER .* processing_rate, input_rate"):
        parse_condition(text)


def test_healthy_when_judges_the_median_of_the_batches_that_read_rows():
    from sparkpoint.jobs.rollback import Batch, _judged, parse_condition

    def batch(batch_id, rows, rate):
        return Batch("q", batch_id, rows, rate, rate)

    # q's batches: 80, 120, 400 (median 120) and an idle batch (no row, NaN rates), which does not count.
    seen = [batch(5, 10, 80.0), batch(6, 0, None), batch(7, 10, 120.0), batch(8, 10, 400.0)]
    passed = _judged([parse_condition("processing_rate >= 100")], seen, 30)
    assert passed.failure is None and passed.detail == (
        "passed: ran 30 s past its first commit after the cut; processing_rate of q: 120.0/s (median of 3 batches) "
        "meets processing_rate>=100")
    failed = _judged([parse_condition("processing_rate>=100"), parse_condition("processing_rate>=1e3")], seen, 30)
    assert failed.still_running and failed.failure == (
        "unhealthy: processing_rate of q: 120.0/s (median of 3 batches), --healthy-when processing_rate>=1000")
    # A run's first batch reads rows at an input rate of 0 (Spark measures from the previous trigger): no measure.
    first = _judged([parse_condition("input_rate>=50")], [Batch("q", 5, 10, 0.0, 90.0), batch(6, 10, 100.0)], 30)
    assert first.failure is None and "input_rate of q: 100.0/s (median of 1 batches)" in first.detail
    idle = _judged([parse_condition("input_rate<5")], [batch(6, 0, 0.0)], 30)
    assert idle.failure is None and idle.detail.endswith("input_rate<5 not judged for q (no batch read a row)")


def test_the_probation_counts_each_batch_the_agent_reports_once_and_what_is_not_a_batch_never(tmp_path):
    """The agent's listener keeps every batch's progress (a poll every half second would miss fast batches)."""
    from sparkpoint.jobs.rollback import Batch, _batches_after
    from sparkpoint.runtime.agent import Agent

    registry, job = probation_job(tmp_path, {})
    agent = Agent(job.id, job.directory, registry.token(job), session_provider=lambda: None)
    agent.start()
    agent._write_state("running")  # as once the application's session is up
    try:
        for batch_id, rows, rate in ((3, 5, 50.0), (4, 5, 60.0), (5, 0, float("nan"))):
            agent.record_progress(SimpleNamespace(name="q", id="id-1", batchId=batch_id, numInputRows=rows,
                                                  inputRowsPerSecond=rate, processedRowsPerSecond=rate))
        agent.record_progress(SimpleNamespace(name="other", id="id-2", batchId=9, numInputRows=1,
                                              inputRowsPerSecond=1.0, processedRowsPerSecond=1.0))
        with agent._lock:  # a report of another shape (a newer agent's, a bug's) is no batch
            agent.recent_batches["q"].append({"batch_id": "6", "input_rows": 1})
            agent.recent_batches["q"].append({"batch_id": True, "input_rows": 1})
        latest = registry.load(job.id)
        assert _batches_after(registry, latest, {"q": 3}) == [Batch("q", 4, 5, 60.0, 60.0),
                                                              Batch("q", 5, 0, None, None)]
    finally:
        agent.finish(0, None)


@pytest.mark.parametrize(("options", "words"), [
    ({"rollback_to": "sp"}, "--rollback-to goes with -s"),
    ({"healthy_when": ["processing_rate>=1"]}, "--healthy-when is judged on probation: use it with --replace or "
                                               "--rollback-to"),
    ({"savepoint": "sp", "rollback_to": "sp", "probation": None}, "--no-rollback leaves nothing for --rollback-to"),
    ({"savepoint": "sp", "rollback_to": "sp", "claim": True}, "--claim-mode claim disposes of the savepoint the "
                                                              "rollback would start the previous version from"),
    ({"partitions": 8}, "--partitions rescales the savepoint of -s: use it with -s"),
    ({"replace": "j", "partitions": 8}, "--partitions rescales the savepoint of -s"),
])
def test_run_refuses_a_way_back_it_cannot_take_before_anything_starts(tmp_path, options, words):
    app = tmp_path / "app.py"
    app.write_text("")
    with pytest.raises(BadArgumentError, match=words):
        run.run_job(Settings(home=str(tmp_path / "home")), RunRequest(app=str(app), **options))
    assert not (tmp_path / "home" / "jobs").exists()


def test_rollback_to_a_savepoint_of_no_registered_job_is_refused(tmp_path):
    """Its application and options would be unknown: a savepoint of a plain checkpoint has no job to restart."""
    from checkpoints import hdfs_checkpoint

    from sparkpoint.savepoints.create import savepoint_checkpoint

    home = tmp_path / "home"
    settings = Settings(home=str(home))
    saved = savepoint_checkpoint(settings, str(hdfs_checkpoint(tmp_path / "cp", committed=2)), name="q").path
    app = tmp_path / "app.py"
    app.write_text("")
    with pytest.raises(BadArgumentError, match="that savepoint was not taken of a job this home runs .origin: "
                                               "checkpoint"):
        run.run_job(settings, RunRequest(app=str(app), savepoint=saved, rollback_to=saved))
    assert not (home / "jobs").exists()


@pytest.mark.parametrize("asked", [{"cancel_requested_at": "2026-11-23T10:00:00.000Z"},
                                   {"stop": {"done": True, "queries": []}}])
def test_an_application_that_fails_after_a_requested_stop_or_cancel_is_not_rolled_back(tmp_path, asked):
    from sparkpoint.jobs.rollback import watch_probation

    registry, job = probation_job(tmp_path, {"state": "failed", "error": "awaitTermination raised", **asked})
    clock = FakeClock()
    probation = watch_probation(registry, job, {"q": 4}, 30, 60, [], clock.sleep, clock)
    assert probation.failure is None and probation.detail == (
        "stopped or cancelled on request during the probation (its application then failed: awaitTermination "
        "raised): nothing to roll back")


def test_a_hand_over_that_fails_after_the_old_job_stopped_names_the_way_back(tmp_path, monkeypatch):
    """The restore into the new job fails (a full disk, say) once the old job is stopped: the new driver is told
    to give up, the old job's record says why it stopped, and the error carries the savepoint to go back to."""
    from sparkpoint.errors import StorageError
    from sparkpoint.jobs import replace as handover
    from sparkpoint.jobs.stop import Stopped

    registry = Registry(str(tmp_path))
    old = registry.new_job("old", app="app.py", app_args=[], master="local[2]", submit_args=[])
    new = registry.new_job("new", app="app.py", app_args=[], master="local[2]", submit_args=[])
    answer = {}
    monkeypatch.setattr(handover, "_await_handover_waiting", lambda *args: None)
    monkeypatch.setattr(handover, "answer_handover", lambda directory, said: answer.update(said))
    stopped = Stopped(path="/sp/old-1", id="old-1", job="old", created_at="t", bytes=1, file_count=1, queries=[],
                      phases={"boundary": 0.1, "savepoint": 0.1})
    exited = SimpleNamespace(wait=lambda: 0.2)
    monkeypatch.setattr(handover, "stop_with_savepoint", lambda *args: (stopped, exited))
    monkeypatch.setattr(handover.savepoint, "load", lambda *args: SimpleNamespace(path="/sp/old-1", queries=[]))

    def full_disk(*args, **kwargs):
        raise StorageError("no space left on device")

    monkeypatch.setattr(handover, "restore", full_disk)
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()  # the new driver gave up already
    with pytest.raises(handover.HandoverFailedError) as failed:
        handover.take_over(Settings(home=str(tmp_path)), registry, new, ended, old, None, 60, None,
                           lambda s: None, lambda: 0.0, 10)
    assert failed.value.savepoint == "/sp/old-1" and failed.value.exit_code == 13
    assert str(failed.value) == (f"the hand-over from {old.id} failed after it stopped: no space left on device")
    assert answer["abort"].startswith(f"the hand-over from {old.id} failed")
    history = registry.load(old.id).history
    assert history[-1]["detail"] == f"stopped for {new.id}, whose hand-over then failed; savepoint /sp/old-1"


def test_a_way_back_to_an_application_file_that_changed_is_refused_before_anything_starts(tmp_path):
    """A deploy that overwrote v1's file with v2's: a rollback would start v2's code as if it were v1's."""
    from checkpoints import hdfs_checkpoint

    from sparkpoint.adapters.storage import storage_for
    from sparkpoint.savepoints.create import QuerySource, take

    settings = Settings(home=str(tmp_path / "home"))
    registry = Registry(settings.home)
    app = tmp_path / "app.py"
    app.write_text("# v1\n")
    v1 = registry.new_job("posts", app=str(app), app_args=[], master="local[2]", submit_args=[],
                          app_sha256=rollback.app_digest(str(app)))
    v1.end("finished", reason="stopped with savepoint")
    registry.save(v1)
    storage, location = storage_for(str(hdfs_checkpoint(tmp_path / "cp", committed=2)))
    saved = take(settings, "posts", [QuerySource("q", location)], storage, None,
                 origin={"kind": "job", "job_id": v1.id}).path
    v1_running = registry.load(v1.id)  # a way back to a job that still runs would start it twice
    v1_running.ended, v1_running.pid, v1_running.pid_start = None, os.getpid(), process_start(os.getpid())
    registry.save(v1_running)
    from sparkpoint.jobs.protocol import write_agent_file

    write_agent_file(v1.directory, {"state": "running", "pid": os.getpid()})
    with pytest.raises(BadArgumentError, match=f"its job {v1.id} still runs, and a rollback would start its version "
                                               "a second time"):
        run.run_job(settings, RunRequest(app=str(app), savepoint=saved, rollback_to=saved, check=False))
    write_agent_file(v1.directory, {"state": "finished", "pid": os.getpid()})
    app.write_text("# v2, deployed over v1\n")
    with pytest.raises(BadArgumentError, match=f"{v1.id}'s application {app} has changed since it started"):
        run.run_job(settings, RunRequest(app=str(app), savepoint=saved, rollback_to=saved, check=False))
    app.unlink()
    v2 = tmp_path / "v2.py"
    v2.write_text("")
    with pytest.raises(BadArgumentError, match=f"{v1.id}'s application {app} is gone"):
        run.run_job(settings, RunRequest(app=str(v2), savepoint=saved, rollback_to=saved, check=False))
    assert [job.id for job in registry.all()] == [v1.id]  # nothing registered, nothing launched


def test_a_master_that_does_not_answer_is_no_failure_of_the_new_version(tmp_path):
    """A cluster-mode version whose master is unreachable for a while is not taken for lost and rolled back."""
    from clitools import closed_port

    from sparkpoint.jobs.rollback import watch_probation

    registry, job = probation_job(tmp_path, {"state": "running"})
    job.submission_id, job.master = "driver-20261123-0001", f"spark://127.0.0.1:{closed_port()}"
    registry.save(job)
    assert state_of(registry.load(job.id)) == "lost"  # as list shows it: the master says nothing
    clock = FakeClock()
    probation = watch_probation(registry, job, {"q": 4}, 2, 3, [], clock.sleep, clock)
    assert probation.failure is None and probation.detail.startswith("no batch committed in 5 s")


def test_a_restore_that_fails_while_its_driver_starts_ends_that_driver_before_any_query(tmp_path):
    """run -s starts the driver first and restores while it starts: a failed restore is said to the driver
    (its first query start would end the application) and the driver is ended."""
    from checkpoints import hdfs_checkpoint

    from sparkpoint.errors import TargetNotEmptyError
    from sparkpoint.jobs.protocol import HANDOVER_FILE
    from sparkpoint.savepoints import savepoint
    from sparkpoint.savepoints.create import savepoint_checkpoint

    settings = Settings(home=str(tmp_path / "home"))
    saved = savepoint.load(savepoint_checkpoint(settings, str(hdfs_checkpoint(tmp_path / "cp", committed=2)),
                                                name="q").path)
    registry = Registry(settings.home_url())
    job = registry.new_job("j", app="app.py", app_args=[], master="local[2]", submit_args=[])
    in_the_way = Path(job.checkpoint_root) / "q"
    in_the_way.mkdir(parents=True)
    (in_the_way / "offsets").mkdir()
    driver = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    job.pid, job.pid_start = driver.pid, process_start(driver.pid)
    try:
        with pytest.raises(TargetNotEmptyError):
            driver_launch.restore_while_it_starts(settings, registry, job, driver, saved, RunRequest(app="app.py"),
                                                  None)
        said = json.loads((Path(job.directory) / HANDOVER_FILE).read_text())
        assert said["abort"].startswith(f"the restore of {saved.manifest['id']} failed: restore target "), said
        assert driver.wait(timeout=10) is not None
        assert "restored" not in (job.launch or {})
    finally:
        if driver.poll() is None:
            driver.kill()


def test_a_driver_that_ended_before_its_restore_is_not_handed_a_claimed_savepoint(tmp_path):
    """Its application failed before its first query start: nothing is restored, and a claim leaves the savepoint
    where it was."""
    from checkpoints import hdfs_checkpoint

    from sparkpoint.savepoints import savepoint
    from sparkpoint.savepoints.create import savepoint_checkpoint

    settings = Settings(home=str(tmp_path / "home"))
    saved = savepoint.load(savepoint_checkpoint(settings, str(hdfs_checkpoint(tmp_path / "cp", committed=2)),
                                                name="q").path)
    registry = Registry(settings.home_url())
    job = registry.new_job("j", app="app.py", app_args=[], master="local[2]", submit_args=[])
    driver = subprocess.Popen([sys.executable, "-c", "raise SystemExit(1)"], start_new_session=True)
    driver.wait()
    with pytest.raises(JobFailedError, match=f"job {job.id}'s driver ended before its savepoint was restored"):
        driver_launch.restore_while_it_starts(settings, registry, job, driver, saved,
                                              RunRequest(app="app.py", claim=True), None)
    assert not (Path(job.checkpoint_root) / "q").exists()
    assert savepoint.load(saved.path).manifest == saved.manifest

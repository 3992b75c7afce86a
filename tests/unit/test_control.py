"""Job control without Spark: real processes stand in for a driver whose agent never came up."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from sparkpoint.config import Settings
from sparkpoint.core import control
from sparkpoint.core.jobs import (
    Registry,
    answer_handover,
    await_handover,
    handover_waiting,
    pid_alive,
    state_of,
)
from sparkpoint.errors import BadArgumentError, JobNotRunningError, NotFoundError


def test_cancel_without_an_agent_ends_the_process_group_at_once(tmp_path):
    settings = Settings(home=str(tmp_path))
    registry = Registry(settings.home)
    job = registry.new_job("stuck", app="app.py", app_args=[], master="local[2]", submit_args=[])
    # A 'driver' with a child, in its own process group, as spark-submit's JVM and its Python are.
    driver = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                               "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); time.sleep(600)"],
                              start_new_session=True)
    job.pid = driver.pid
    registry.save(job)
    assert state_of(registry.load(job.id)) == "starting"

    started = time.monotonic()
    result = control.cancel_job(settings, job.id)
    driver.wait(timeout=10)
    assert result["state"] == "cancelled" and time.monotonic() - started < 10
    assert not pid_alive(driver.pid)
    leftovers = subprocess.run(["pgrep", "-g", str(driver.pid)], capture_output=True, text=True).stdout.split()
    assert leftovers == []
    with pytest.raises(JobNotRunningError, match="already cancelled"):
        control.cancel_job(settings, job.id)


def test_replace_refuses_before_anything_starts(tmp_path):
    settings = Settings(home=str(tmp_path / "home"))
    app = tmp_path / "app.py"
    app.write_text("")
    registry = Registry(settings.home)
    old = registry.new_job("old", app=str(app), app_args=[], master="local[2]", submit_args=[])
    old.ended = {"state": "finished"}
    registry.save(old)

    with pytest.raises(BadArgumentError, match="drop -s"):
        control.run_job(settings, control.RunRequest(app=str(app), replace=old.id, savepoint="sp"))
    with pytest.raises(NotFoundError):
        control.run_job(settings, control.RunRequest(app=str(app), replace="no-such-job"))
    with pytest.raises(JobNotRunningError):
        control.run_job(settings, control.RunRequest(app=str(app), replace=old.id))
    assert [job.id for job in registry.all()] == [old.id]  # no new job registered, no driver launched


def test_a_waiting_driver_gives_up_when_its_controller_is_gone(tmp_path):
    controller = subprocess.Popen([sys.executable, "-c", "pass"])
    controller.wait()
    answer = await_handover(tmp_path, controller.pid, sleep=lambda _: None)
    assert "ended before the hand-over" in answer["abort"]
    assert handover_waiting(tmp_path)


def test_a_waiting_driver_takes_the_controllers_answer(tmp_path):
    answer_handover(tmp_path, {"expected_queries": ["counts"]})
    assert await_handover(tmp_path, os.getpid()) == {"expected_queries": ["counts"]}

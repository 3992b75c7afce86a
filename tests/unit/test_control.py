"""Job control without Spark: real processes stand in for a driver whose agent never came up."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from sparkpoint.config import Settings
from sparkpoint.core import control
from sparkpoint.core.jobs import Registry, pid_alive, state_of
from sparkpoint.errors import JobNotRunningError


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

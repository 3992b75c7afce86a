"""Ctrl-C between two versions of a job: after `run --replace` stopped the old one and before the new one took
over, and while a rollback starts the version before again. Nothing runs then: what was launched is ended, and
the error (exit 130) names the savepoint that restores the job. The stop, the restore and the relaunch are stood
in for (the interrupt comes inside them); the drivers are processes that act as the real ones do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from checkpoints import hdfs_checkpoint

from sparkpoint.adapters.processes import process_start
from sparkpoint.cli.main import main
from sparkpoint.config import load_settings
from sparkpoint.errors import InterruptedBetweenVersionsError
from sparkpoint.jobs import replace as replace_module
from sparkpoint.jobs import rollback as rollback_module
from sparkpoint.jobs.protocol import HANDOVER_FILE, HANDOVER_WAITING
from sparkpoint.jobs.job_state import state_of
from sparkpoint.jobs.registry import Registry
from sparkpoint.jobs.rollback import Probation, WayBack, roll_back
from sparkpoint.jobs.stop import Stopped


@pytest.fixture
def saved(home, tmp_path, capsys) -> dict:
    checkpoint = hdfs_checkpoint(tmp_path / "cut" / "alarms", committed=3)
    assert main(["--home", str(home), "-o", "json", "savepoint", "--from-checkpoint", str(checkpoint),
                 "--name", "alarms"]) == 0
    return json.loads(capsys.readouterr().out)


def interrupted(*args, **kwargs):
    raise KeyboardInterrupt


def test_an_interrupt_after_the_old_job_stopped_ends_the_new_one_and_names_the_savepoint(home, saved,
                                                                                         monkeypatch):
    """While the stop's savepoint is restored into the new job: the new driver (a process that waits for its
    hand-over) is called off and ended, and the old job's stop is recorded."""
    registry = Registry(str(home))
    old = registry.new_job("alarms", app="app.py", app_args=[], master="local[2]", submit_args=[])
    new = registry.new_job("alarms", app="app.py", app_args=[], master="local[2]", submit_args=[])
    answer = os.path.join(new.directory, HANDOVER_FILE)
    driver = subprocess.Popen([sys.executable, "-c", "import os, sys, time\n"
                               f"while not os.path.exists({answer!r}): time.sleep(0.02)\nsys.exit(1)"],
                              start_new_session=True)
    new.pid, new.pid_start = driver.pid, process_start(driver.pid)
    registry.save(new)
    open(os.path.join(new.directory, HANDOVER_WAITING), "w").close()

    class Ended:
        def wait(self) -> float:
            return 0.05

    stopped = Stopped(saved["path"], saved["id"], "alarms", saved["created_at"], saved["bytes"], saved["file_count"],
                      [], {"boundary": 0.5, "savepoint": 0.2})
    monkeypatch.setattr(replace_module, "stop_with_savepoint", lambda *args: (stopped, Ended()))

    monkeypatch.setattr(replace_module, "restore", interrupted)
    with pytest.raises(InterruptedBetweenVersionsError) as raised:
        replace_module.take_over(load_settings(overrides={"home": str(home)}), registry, new, driver, old, None,
                                 60.0, None, time.sleep, time.monotonic, 30.0)
    assert f"{old.id}'s savepoint {saved['path']} restores it" in str(raised.value)
    assert raised.value.exit_code == 130
    assert driver.wait(10) is not None  # called off, it ended
    assert json.loads(open(answer).read()) == {"abort": f"the hand-over from {old.id} was interrupted"}
    assert registry.load(new.id).ended["state"] == "cancelled"
    assert registry.load(old.id).stop["savepoint"] == saved["path"]


def test_an_interrupt_while_a_rollback_starts_the_version_before_names_its_savepoint(home, saved, tmp_path):
    registry = Registry(str(home))
    app = tmp_path / "app.py"
    app.write_text("pass\n")
    previous = registry.new_job("alarms", app=str(app), app_args=[], master="local[2]", submit_args=[])
    gone = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    failed = registry.new_job("alarms", app=str(app), app_args=[], master="local[2]", submit_args=[],
                              pid=gone.pid, pid_start=process_start(gone.pid))
    gone.wait(10)
    with pytest.raises(InterruptedBetweenVersionsError) as raised:
        roll_back(load_settings(overrides={"home": str(home)}), registry, failed,
                  WayBack(previous, saved["path"], {"alarms": 3}), Probation("batch failed", "batch failed"),
                  interrupted, time.sleep, time.monotonic)
    assert f"the savepoint to start it from is {saved['path']}" in str(raised.value)
    assert raised.value.exit_code == 130
    # The failed version's record says where the way back was, as before any restart.
    assert registry.load(failed.id).rollback["savepoint"] == saved["path"]


@pytest.mark.parametrize("detached", [False, True])
def test_an_interrupt_during_the_probation_ends_a_foreground_job_and_says_no_version_runs(home, saved, tmp_path,
                                                                                          monkeypatch, detached):
    """A foreground job ends with its command, after the version before it stopped: the line names both ways back.
    A detached one runs on unwatched, and the interrupt is the command's own."""
    registry = Registry(str(home))
    previous = registry.new_job("alarms", app="app.py", app_args=[], master="local[2]", submit_args=[])
    driver = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    job = registry.new_job("alarms", app="app.py", app_args=[], master="local[2]", submit_args=[],
                           checkpoints_under=str(tmp_path / "checkpoints"), pid=driver.pid,
                           pid_start=process_start(driver.pid))
    monkeypatch.setattr(rollback_module, "watch_probation", interrupted)
    try:
        with pytest.raises(KeyboardInterrupt if detached else InterruptedBetweenVersionsError) as raised:
            rollback_module.on_probation(load_settings(overrides={"home": str(home)}), registry, job,
                                         None if detached else driver, WayBack(previous, saved["path"], {"alarms": 3}),
                                         [], 30.0, 60.0, detached, interrupted, time.sleep, time.monotonic)
        said = [event["detail"] for event in registry.load(job.id).history if event["event"] == "probation"]
        if detached:
            assert driver.poll() is None and state_of(registry.load(job.id)) != "cancelled"
            assert said == [f"interrupted: it runs on unwatched, with no automatic rollback; {previous.id}'s version "
                            f"restores from {saved['path']}"]
        else:
            assert driver.wait(10) is not None and registry.load(job.id).ended["state"] == "cancelled"
            assert said == ["interrupted: the job is cancelled with its command"]
            assert raised.value.exit_code == 130
            assert "no version of the job runs" in str(raised.value)
            assert f"checkpoints stay under {job.checkpoint_root}" in str(raised.value)
            assert f"{previous.id}'s version restores from {saved['path']}" in str(raised.value)
    finally:
        driver.kill()
        driver.wait(10)

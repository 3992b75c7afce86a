"""`run --replace`'s new driver holds its first query start until the hand-over is answered
(runtime.handover): the application's start-up runs meanwhile; every start then goes, or ends the application.
And the CLI's side (jobs.replace) when the hand-over is interrupted after the old job stopped.
The writer class is a stand-in for Spark's DataStreamWriter (what the interception wraps is its start())."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest
from checkpoints import hdfs_checkpoint

from sparkpoint.adapters.processes import process_start
from sparkpoint.cli.main import main
from sparkpoint.config import load_settings
from sparkpoint.errors import HandoverInterruptedError
from sparkpoint.jobs import replace as replace_module
from sparkpoint.jobs.protocol import (HANDOVER_FILE, HANDOVER_WAITING, answer_handover, handover_waiting,
                                      held_start)
from sparkpoint.jobs.registry import Registry
from sparkpoint.jobs.stop import Stopped
from sparkpoint.runtime.handover import hold_first_start


def writer_class():
    class Writer:
        started: list[str] = []

        def __init__(self, name: str):
            self.name = name

        def queryName(self, name):  # noqa: N802 - Spark's name
            self.name = name
            return self

        def outputMode(self, mode):  # noqa: N802 - Spark's name
            return self

        def option(self, key, value):
            return self

        def options(self, **given):
            return self

        def start(self, path=None, format=None, outputMode=None, partitionBy=None, queryName=None, **given):  # noqa: A002, N803
            Writer.started.append(self.name)
            return self.name

        def toTable(self, tableName, format=None, outputMode=None, partitionBy=None, queryName=None, **given):  # noqa: A002, N802, N803
            return self.start()

    return Writer


def test_starts_wait_for_the_hand_over_and_hear_it_once(tmp_path):
    cls = writer_class()
    heard = []
    hold_first_start(str(tmp_path), os.getpid(), heard.append, classes=[cls])
    results = []
    starts = [threading.Thread(target=lambda n=name: results.append(cls("w").queryName(n).start()))
              for name in ("a", "b")]
    for thread in starts:
        thread.start()
    time.sleep(0.5)
    # The application is at its first start: it says so, and which query it holds; nothing has started yet.
    assert handover_waiting(tmp_path) and held_start(tmp_path) in ("a", "b") and cls.started == [] and heard == []
    answer_handover(tmp_path, {"expected_queries": ["a"]})
    for thread in starts:
        thread.join(10)
    assert sorted(results) == ["a", "b"] and sorted(cls.started) == ["a", "b"] and heard == [("a",)]
    assert cls("c").start() == "c" and heard == [("a",)]  # a later start goes at once


def test_a_hand_over_called_off_ends_the_application_at_its_start(tmp_path):
    cls = writer_class()
    heard = []
    hold_first_start(str(tmp_path), os.getpid(), heard.append, classes=[cls])
    answer_handover(tmp_path, {"abort": "the old job's stop failed"})
    for _ in range(2):
        with pytest.raises(SystemExit, match="sparkpoint: not started: the old job's stop failed"):
            cls("a").start()
    assert cls.started == [] and heard == []


def test_the_check_s_sandbox_query_goes_before_the_hand_over(tmp_path):
    """run --replace's check (runtime.gate) starts the saved query in its sandbox before the hand-over."""
    cls = writer_class()
    hold_first_start(str(tmp_path), os.getpid(), lambda _queries: None, classes=[cls])
    assert cls("x").queryName("counts (sparkpoint check)").start() == "counts (sparkpoint check)"
    assert not handover_waiting(tmp_path)


def test_an_interrupt_after_the_old_job_stopped_ends_the_new_one_and_names_the_savepoint(home, tmp_path, monkeypatch,
                                                                                         capsys):
    """Ctrl-C between the old version's stop and the hand-over (its savepoint being restored): the new driver is
    called off and ended, the old job's stop is recorded, and the error names the savepoint that restores it. The
    stop and the restore are stood in for (the interrupt comes during the restore); the new driver is a process
    that waits for its hand-over as the real one does."""
    checkpoint = hdfs_checkpoint(tmp_path / "cut" / "alarms", committed=3)
    assert main(["--home", str(home), "-o", "json", "savepoint", "--from-checkpoint", str(checkpoint),
                 "--name", "alarms"]) == 0
    saved = json.loads(capsys.readouterr().out)
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

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(replace_module, "restore", interrupted)
    with pytest.raises(HandoverInterruptedError) as raised:
        replace_module.take_over(load_settings(overrides={"home": str(home)}), registry, new, driver, old, None,
                                 60.0, None, time.sleep, time.monotonic, 30.0)
    assert f"{old.id}'s savepoint {saved['path']} restores it" in str(raised.value)
    assert raised.value.exit_code == 130
    assert driver.wait(10) is not None  # called off, it ended
    assert json.loads(open(answer).read()) == {"abort": f"the hand-over from {old.id} was interrupted"}
    assert registry.load(new.id).ended["state"] == "cancelled"
    assert registry.load(old.id).stop["savepoint"] == saved["path"]

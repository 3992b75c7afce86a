"""`run --replace`'s new driver holds its first query start until the hand-over is answered
(runtime.handover): the application's start-up runs meanwhile; every start then goes, or ends the application.
The writer class is a stand-in for Spark's DataStreamWriter (what the interception wraps is its start())."""

from __future__ import annotations

import os
import threading
import time

import pytest

from sparkpoint.jobs.protocol import answer_handover, handover_waiting, held_start
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

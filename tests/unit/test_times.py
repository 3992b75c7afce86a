"""poll_until, the one way sparkpoint waits, on a clock that only moves when it sleeps."""

from __future__ import annotations

import pytest

from sparkpoint.times import iso, parse_iso, poll_until


class FakeTime:
    def __init__(self):
        self.now = 0.0
        self.sleeps = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_an_answer_at_once_costs_no_sleep():
    time = FakeTime()
    assert poll_until(lambda: "ready", 10, 0.5, clock=time.clock, sleep=time.sleep) == "ready"
    assert time.sleeps == []


def test_it_polls_every_interval_and_returns_the_first_true_answer():
    time = FakeTime()
    answers = iter([None, 0, "", {"state": "running"}, "never asked"])
    assert poll_until(lambda: next(answers), 10, 0.2, clock=time.clock, sleep=time.sleep) == {"state": "running"}
    assert time.sleeps == [0.2, 0.2, 0.2]


def test_at_the_timeout_it_returns_the_last_false_answer():
    time = FakeTime()
    calls = []
    assert poll_until(lambda: calls.append(time.now) or [], 1.0, 0.25, clock=time.clock, sleep=time.sleep) == []
    assert calls == [0.0, 0.25, 0.5, 0.75, 1.0] and time.now == 1.0


def test_with_no_time_left_it_still_asks_once():
    time = FakeTime()
    calls = []
    assert poll_until(lambda: calls.append(1), 0, 0.1, clock=time.clock, sleep=time.sleep) is None
    assert calls == [1] and time.sleeps == []


def test_without_a_timeout_it_waits_as_long_as_it_takes():
    time = FakeTime()
    left = iter(range(1000, -1, -1))
    assert poll_until(lambda: next(left) == 0, None, 60, clock=time.clock, sleep=time.sleep) is True
    assert time.now == 1000 * 60


def test_the_predicate_ends_the_wait_by_raising():
    time = FakeTime()

    def gone():
        if time.now >= 0.3:
            raise ProcessLookupError("the driver ended")
        return False

    with pytest.raises(ProcessLookupError):
        poll_until(gone, 10, 0.1, clock=time.clock, sleep=time.sleep)
    assert time.now == pytest.approx(0.3)


def test_iso_round_trips_and_a_bad_stamp_is_none():
    assert iso(1795000000.123) == "2026-11-18T11:06:40.123Z"
    assert parse_iso(iso(1795000000.123)) == pytest.approx(1795000000.123)
    assert parse_iso("yesterday") is None and parse_iso(None) is None

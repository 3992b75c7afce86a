"""Time: the one timestamp format of sparkpoint's files and output (UTC, ISO 8601, milliseconds, 'Z'), the
one way to wait (poll_until), and the one way to ask many peers at once with one deadline (answers_within)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import TypeVar

T = TypeVar("T")


def iso(moment: float | None = None) -> str:
    """``moment`` (seconds since the epoch; now when None) as ``2026-11-22T05:03:54.199Z``."""
    # timezone.utc, not datetime.UTC (3.11+): the driver-side runtime imports this module, and a cluster's driver
    # runs the Python its cluster has: 3.9 or 3.10 with Spark 4.0 to 4.2 (tests/unit/test_layers.py).
    stamp = datetime.fromtimestamp(time.time() if moment is None else moment, timezone.utc)  # noqa: UP017
    return stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_iso(text: str | None) -> float | None:
    """Seconds since the epoch of an ISO 8601 time, or None when there is none or it is malformed."""
    if not text or not isinstance(text, str):
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except (ValueError, OverflowError):
        return None


def poll_until(predicate: Callable[[], T], timeout: float | None, interval: float, *,
               clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> T:
    """sparkpoint's one way to wait: call ``predicate`` every ``interval`` seconds until it returns something
    true, and return that; at ``timeout`` seconds (None: never) return its last, false, answer. It is called
    at least once, even with no time left. It ends the wait early by raising. Waiting goes through the
    ``clock`` and ``sleep`` given, so tests drive it without waiting for real."""
    deadline = None if timeout is None else clock() + timeout
    while True:
        answer = predicate()
        if answer or (deadline is not None and clock() >= deadline):
            return answer
        sleep(interval)


def answers_within(calls: Sequence[Callable[[], T]], seconds: float, late: Callable[[int], T]) -> list[T]:
    """Each call's answer, all started at once and waited for ``seconds`` in all; ``late(i)`` in place of call i's
    answer when it has not answered by then, or raised. The calls run on daemon threads: one held up by a peer
    that trickles its reply keeps no caller waiting and no process from exiting (a pool's threads are joined
    at exit), and ends on its own once its peer does."""
    answers: dict[int, T] = {}
    pending = [len(calls)]
    done = threading.Condition()

    def run(index: int, call: Callable[[], T]) -> None:
        try:
            answers[index] = call()
        except Exception:  # noqa: BLE001 - a call that failed is one that did not answer
            pass
        finally:
            with done:
                pending[0] -= 1
                done.notify_all()

    for index, call in enumerate(calls):
        threading.Thread(target=run, args=(index, call), daemon=True, name="sparkpoint-ask").start()
    with done:
        done.wait_for(lambda: pending[0] == 0, timeout=seconds)
        return [answers[index] if index in answers else late(index) for index in range(len(calls))]

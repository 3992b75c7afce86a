"""Time: the one timestamp format of sparkpoint's files and output (UTC, ISO 8601, milliseconds, 'Z'), and
the one way to wait (poll_until)."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TypeVar

T = TypeVar("T")


def iso(moment: float | None = None) -> str:
    """``moment`` (seconds since the epoch; now when None) as ``2026-11-22T05:03:54.199Z``."""
    stamp = datetime.fromtimestamp(time.time() if moment is None else moment, UTC)
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

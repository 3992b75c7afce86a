"""The one timestamp format of sparkpoint's files and output: UTC, ISO 8601, milliseconds, 'Z'."""

from __future__ import annotations

import time
from datetime import UTC, datetime


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

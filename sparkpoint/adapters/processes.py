"""Processes sparkpoint started and may signal later: who they are (a pid is reused), whether they
run, and ending their process groups. A process is signalled only once it is known to be the one recorded."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import Any

from sparkpoint.times import poll_until


# The kernel's own ceiling on pid_max (PID_MAX_LIMIT, 2^22 on 64-bit Linux): no process has a larger pid, and
# a larger number overflows what os.kill takes.
PID_LIMIT = 1 << 22


def is_pid(value: Any) -> bool:
    # Never a bool, 0, a negative or 1 (init, never a driver): killpg(1) is kill(-1), a signal to every
    # process the user may signal, and 0 or -1 name a whole group or every process as well.
    return type(value) is int and 1 < value <= PID_LIMIT


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/<pid>/stat from its third field (the state) on: the command name before it may hold anything."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(") ", 1)[1].split()
    except (OSError, IndexError):
        return None


def process_start(pid: int | None, mark: str | None = None) -> str | None:
    """What tells process ``pid`` from a later one that reuses its pid: its start time (field 22 of
    /proc/<pid>/stat, clock ticks since boot). None when there is no such process, or, with ``mark``, when
    its command line does not hold ``mark`` (how a process recorded without its start time is recognised)."""
    if not is_pid(pid):
        return None
    stat = _stat_fields(pid)
    if stat is None or len(stat) < 20:
        return None
    if mark is not None:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                if mark.encode() not in handle.read().split(b"\0"):
                    return None
        except OSError:
            return None
    return stat[19]


def pid_alive(pid: int | None, start: str | None = None) -> bool:
    """Whether process ``pid`` runs (a zombie, exited but not reaped, does not); with ``start`` (its
    process_start when it was launched), whether it is still that process and not a later one."""
    if not is_pid(pid):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        if start is None:
            return True
    stat = _stat_fields(pid)
    if stat is None:
        return start is None  # /proc hides it (another user's, hidepid): only an unchecked pid counts as alive
    return stat[0] != "Z" and (start is None or stat[19] == start)


def signal_group(pid: int | None, start: str | None, sig: int) -> bool:
    """Signal the process group that process ``pid`` (started at ``start``) leads; whether it was signalled.
    Not when ``pid`` is now another process: a pid, and so a group id, is reused only once the group is
    empty, so with its leader gone the group left is still the one it led. Without ``start`` nothing is
    signalled: an unknown process is not ended on a guess."""
    if not is_pid(pid) or start is None:
        return False
    now = process_start(pid)
    if now is not None and now != start:
        return False
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def terminate_group(pid: int, start: str | None, grace: float = 10.0, sleep: Callable[[float], None] = time.sleep,
                    clock: Callable[[], float] = time.monotonic) -> None:
    """SIGTERM a process group, then SIGKILL it once its leader is gone or ``grace`` is over (waiting with the
    ``sleep`` and ``clock`` given)."""
    if not signal_group(pid, start, signal.SIGTERM):
        return
    poll_until(lambda: not pid_alive(pid, start), grace, 0.1, clock=clock, sleep=sleep)
    signal_group(pid, start, signal.SIGKILL)

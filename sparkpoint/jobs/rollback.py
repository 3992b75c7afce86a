"""`run --replace`'s probation: the new version is watched after the hand-over, and if it fails the
version it replaced is started again from the hand-over's savepoint (run.py does that: the relaunch is a
run of its own)."""

from __future__ import annotations

from collections.abc import Callable

from sparkpoint.errors import SparkpointError
from sparkpoint.jobs.registry import Job, Registry, client_for, describe_job, state_of
from sparkpoint.times import poll_until

LOST_SETTLE = 3.0  # seconds a driver must stay lost (gone, its end unrecorded) to count as failed


def watch_probation(registry: Registry, job: Job, cut: dict[str, int], seconds: float, grace: float,
                    sleep: Callable[[float], None], clock: Callable[[], float]) -> str | None:
    """The new version's error if it fails on probation; None once it has run ``seconds`` past its first
    batch committed after the hand-over (``cut``: each query's batch there), or, with no input to commit,
    once ``grace`` + ``seconds`` have passed: then it is running, but its processing is unproven."""
    started = clock()
    first_commit: list[float] = []
    lost_since: list[float] = []

    def decided() -> tuple[str | None] | None:
        latest = registry.load(job.id)
        state = state_of(latest)
        # A driver gone without a record of its end is lost; a cancel records its end just after ending the
        # driver, so lost counts only once it has lasted.
        lost_since[:] = (lost_since or [clock()]) if state == "lost" else []
        if state == "failed" or (lost_since and clock() - lost_since[0] >= LOST_SETTLE):
            return (describe_job(latest, state=state).error or f"the new version is {state}",)
        if state in ("finished", "cancelled"):
            return (None,)  # ended on purpose (stopped, cancelled): not a failure to roll back
        if not first_commit and _committed_after(registry, latest, cut):
            first_commit.append(clock())
        since = clock() - (first_commit[0] if first_commit else started)
        return (None,) if since >= (seconds if first_commit else grace + seconds) else None

    return poll_until(decided, None, 0.5, clock=clock, sleep=sleep)[0]


def _committed_after(registry: Registry, job: Job, cut: dict[str, int]) -> bool:
    """Whether a query of the job has completed a batch after the cut, as its agent reports."""
    try:
        queries = client_for(registry, job, timeout=2.0).status()["queries"]
    except SparkpointError:
        return False  # not up yet, or between answers: asked again at the next poll
    return any(isinstance(q.get("batch_id"), int) and q.get("name") in cut and q["batch_id"] > cut[q["name"]]
               for q in queries)

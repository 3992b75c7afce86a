"""Probation: a new version is watched after it took over (`run --replace`) or started from a savepoint with a
way back (`run -s --rollback-to`); if it fails, or misses a `--healthy-when` condition, the version before it
is started again from that savepoint (run.py does that: the relaunch is a run of its own)."""

from __future__ import annotations

import operator
import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sparkpoint.errors import BadArgumentError, SparkpointError
from sparkpoint.jobs.live import json_number
from sparkpoint.jobs.agents import client_for
from sparkpoint.jobs.job_view import describe_job
from sparkpoint.jobs.registry import Job, Registry, state_of
from sparkpoint.times import poll_until

LOST_SETTLE = 3.0  # seconds a driver must stay lost (gone, its end unrecorded) to count as failed

# What a --healthy-when condition may test: a query's rates as its progress reports give them, per batch.
METRICS = ("processing_rate", "input_rate")
_COMPARISONS = {">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt}
_CONDITION = re.compile(r"\s*([a-z_]+)\s*(>=|<=|>|<)\s*([0-9]+(?:\.[0-9]*)?(?:[eE][0-9]+)?)\s*")


@dataclass(frozen=True)
class HealthCondition:
    """``metric comparison bound``: holds when the median of the metric over a query's batches on probation
    compares so (batches that read no row are left out: their rates are 0 or undefined)."""

    metric: str
    comparison: str
    bound: float

    def __str__(self) -> str:
        return f"{self.metric}{self.comparison}{self.bound:g}"

    def holds(self, value: float) -> bool:
        return _COMPARISONS[self.comparison](value, self.bound)


def parse_condition(text: str) -> HealthCondition:
    match = _CONDITION.fullmatch(text)
    if not match or match.group(1) not in METRICS:
        raise BadArgumentError(f"--healthy-when {text!r}: write METRIC>=NUMBER (or <=, >, <), METRIC one of "
                               f"{', '.join(METRICS)} (rows per second), e.g. processing_rate>=500")
    return HealthCondition(match.group(1), match.group(2), float(match.group(3)))


@dataclass(frozen=True)
class Probation:
    """How a probation ended: ``failure`` (why to roll back) or None, and what was seen, for the history."""

    failure: str | None
    detail: str
    still_running: bool = False  # failed a condition while running: it must be ended before the rollback


def watch_probation(registry: Registry, job: Job, cut: dict[str, int], seconds: float, grace: float,
                    conditions: list[HealthCondition], sleep: Callable[[float], None],
                    clock: Callable[[], float]) -> Probation:
    """Watch the new version until it fails, or has run ``seconds`` past its first batch committed after
    ``cut`` (each query's batch where it started), or, with no input to commit, until ``grace`` + ``seconds``
    have passed: then it is running, but its processing is unproven. ``conditions`` are then judged on the
    progress reports of the batches seen."""
    started = clock()
    first_commit: list[float] = []
    lost_since: list[float] = []
    batches: dict[tuple[str, int], Batch] = {}  # (query, batch id) -> its progress: each batch counted once

    def decided() -> tuple[Probation] | None:
        latest = registry.load(job.id)
        state = state_of(latest)
        # A driver gone without a record of its end is lost; a cancel records its end just after ending the
        # driver, so lost counts only once it has lasted.
        # A master that does not answer says nothing of its driver (UNKNOWN): that is no sign of a failure, and
        # rolling back a healthy version for a master's hiccup would be one.
        unheard = bool(latest.submission_id) and latest.driver.get("unreachable") is True
        lost_since[:] = (lost_since or [clock()]) if state == "lost" and not unheard else []
        if state == "failed" and (latest.agent.get("stop") or latest.agent.get("cancel_requested_at")):
            error = describe_job(latest, state=state).error
            return (Probation(None, "stopped or cancelled on request during the probation (its application then "
                                    f"failed: {error}): nothing to roll back"),)
        if state == "failed" or (lost_since and clock() - lost_since[0] >= LOST_SETTLE):
            error = describe_job(latest, state=state).error or f"the new version is {state}"
            return (Probation(error, f"failed after {clock() - started:.0f} s: {error}"),)
        if state in ("finished", "cancelled"):
            return (Probation(None, f"ended on purpose ({state}) during the probation: nothing to roll back"),)
        batches.update({(b.query, b.batch_id): b for b in _batches_after(registry, latest, cut)})
        if not first_commit and batches:
            first_commit.append(clock())
        since = clock() - (first_commit[0] if first_commit else started)
        if since < (seconds if first_commit else grace + seconds):
            return None
        if not first_commit:
            return (Probation(None, f"no batch committed in {grace + seconds:g} s (no input?): it runs, but its "
                                    "processing is unproven" + ("; --healthy-when not judged" if conditions else "")),)
        return (_judged(conditions, list(batches.values()), seconds),)

    return poll_until(decided, None, 0.5, clock=clock, sleep=sleep)[0]


@dataclass(frozen=True)
class Batch:
    """A batch a query ran, as its progress report gives it (the agent keeps the last 100 per query)."""

    query: str
    batch_id: int
    input_rows: int
    input_rate: float | None
    processing_rate: float | None


def _judged(conditions: list[HealthCondition], batches: list[Batch], seconds: float) -> Probation:
    passed = f"passed: ran {seconds:g} s past its first commit after the cut"
    judged = []
    for condition in conditions:
        for name in sorted({b.query for b in batches}):
            values = [getattr(b, condition.metric) for b in batches if b.query == name and b.input_rows > 0]
            # A run's first batch reads rows at an input rate of 0 (Spark has no previous trigger to measure
            # from): no measure at all, so not one of the values.
            values = [v for v in values if v is not None and not (condition.metric == "input_rate" and v == 0)]
            if not values:
                judged.append(f"{condition} not judged for {name} (no batch read a row)")
                continue
            median = statistics.median(values)
            seen = f"{condition.metric} of {name}: {median:.1f}/s (median of {len(values)} batches)"
            if not condition.holds(median):
                return Probation(f"unhealthy: {seen}, --healthy-when {condition}", f"{passed}, but {seen} misses "
                                 f"--healthy-when {condition}", still_running=True)
            judged.append(f"{seen} meets {condition}")
    return Probation(None, "; ".join([passed, *judged]))


def _batches_after(registry: Registry, job: Job, cut: dict[str, int]) -> list[Batch]:
    """The batches the job's queries ran after the cut, as its agent reports them."""
    try:
        recent = client_for(registry, job, timeout=2.0).status().get("recent_batches")
    except SparkpointError:
        return []  # not up yet, or between answers: asked again at the next poll
    batches = []
    for name, reports in (recent if isinstance(recent, dict) else {}).items():
        for report in reports if name in cut and isinstance(reports, list) else []:
            batch = _batch(name, report)
            if batch is not None and batch.batch_id > cut[name]:
                batches.append(batch)
    return batches


def _batch(name: str, report: Any) -> Batch | None:
    """A batch of an agent's report (JSON from another process): None unless its ids and counts are numbers."""
    if not isinstance(report, dict) or not all(_is_int(report.get(key)) for key in ("batch_id", "input_rows")):
        return None
    return Batch(name, report["batch_id"], report["input_rows"], **{key: json_number(report.get(key))
                                                                    for key in METRICS})


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)

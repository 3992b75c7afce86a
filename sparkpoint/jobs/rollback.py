"""Probation and the way back: a new version is watched after it took over (`run --replace`) or started from a
savepoint with a way back (`run -s --rollback-to`); if it fails, or misses a `--healthy-when` condition, the
version before it is started again from that savepoint. The relaunch is a run of its own, which run.py hands in
(``Relaunch``)."""

from __future__ import annotations

import contextlib
import operator
import re
import statistics
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from sparkpoint.adapters.storage import digest_of, storage_for
from sparkpoint.config import Settings
from sparkpoint.errors import (BadArgumentError, InterruptedBetweenVersionsError, JobFailedError, NotFoundError,
                               SavepointInvalidError, SparkpointError)
from sparkpoint.results import json_number
from sparkpoint.jobs.agents import client_for
from sparkpoint.jobs.drivers import end_driver, end_interrupted
from sparkpoint.jobs.job_view import JobView, describe_job
from sparkpoint.jobs.job_record import Job
from sparkpoint.jobs.job_state import ACTIVE_STATES, state_of
from sparkpoint.jobs.registry import Registry
from sparkpoint.savepoints import catalog
from sparkpoint.savepoints.savepoint import Savepoint
from sparkpoint.times import iso, poll_until

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


# -- the way back ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class WayBack:
    """What a failed new version is rolled back to: the job it followed, started again from ``savepoint``.
    ``cut``: each query's batch where the new version started (its commits after it prove it runs)."""

    previous: Job
    savepoint: str
    cut: dict[str, int]
    # run -s --rollback-sink: the new version's file sink batches go aside too, or the version before it would
    # skip them and leave the failed version's results in place.
    rollback_sink: bool = False


# Starts the version before a failed one again from the way back (run.py's run_job, which this module cannot import).
Relaunch = Callable[[WayBack, Job], JobView]


def app_digest(app: str) -> str | None:
    """The application file's SHA-256 as it is now (None: gone or unreadable), recorded at each launch: a rollback
    starts a version again only from the code that ran."""
    try:
        return digest_of(*storage_for(app), algorithm="sha256")[1]
    except OSError:
        return None


def check_restartable(previous: Job) -> None:
    """A rollback starts the previous version's recorded application file: refused before anything is stopped
    or started if that file is gone or is not the code that ran (a deploy that overwrote it in place)."""
    digest = app_digest(previous.app)
    if previous.app_sha256 is not None and digest != previous.app_sha256:
        how = "is gone" if digest is None else "has changed since it started (another version's code?)"
        raise BadArgumentError(f"{previous.id}'s application {previous.app} {how}, so a rollback could not start "
                               "its version again; keep each version in a file of its own, or pass --no-rollback")


def way_back_to(settings: Settings, registry: Registry, reference: str, saved: Savepoint) -> WayBack:
    """--rollback-to: the savepoint, and the registered job it was taken of (whose application, arguments
    and options a rollback starts again)."""
    fallback = catalog.load(settings, reference)
    previous = registry.taken_of(fallback.manifest)
    if previous is not None and state_of(previous) in ACTIVE_STATES:
        raise BadArgumentError(f"--rollback-to {reference}: its job {previous.id} still runs, and a rollback would "
                               "start its version a second time: stop it first (`sparkpoint stop`), or use --replace")
    if previous is None:
        origin = fallback.manifest.get("origin") or {}
        raise BadArgumentError(f"--rollback-to {reference}: that savepoint was not taken of a job this home runs "
                               f"(origin: {origin.get('kind', 'unknown')} {origin.get('job_id') or ''}), so its "
                               "application and options are unknown: run the previous version with -s instead")
    return WayBack(previous, fallback.path, {q["name"]: _cut_batch(q) for q in saved.queries})


def _cut_batch(query: dict[str, Any]) -> int:
    """A saved query's batch at the cut (-1: none committed yet)."""
    return query["batch_id"] if query.get("batch_id") is not None else -1


def on_probation(settings: Settings, registry: Registry, job: Job, process: subprocess.Popen | None,
                 way_back: WayBack, conditions: list[HealthCondition], seconds: float, grace: float, detached: bool,
                 relaunch: Relaunch, sleep, clock) -> JobView | None:
    """The new version watched for ``seconds`` (its queries' first batches within ``grace``): None if it
    passes, else its view once the version before it runs again."""
    try:
        probation = watch_probation(registry, job, way_back.cut, seconds, grace, conditions, sleep, clock)
    except KeyboardInterrupt:
        if _probation_interrupted(registry, job, process, detached, way_back):
            raise
        raise InterruptedBetweenVersionsError(
            f"interrupted during {job.id}'s probation: it was cancelled with its command (it ran in the foreground), "
            f"and {way_back.previous.id} had stopped before it, so no version of the job runs. {job.id}'s "
            f"checkpoints stay under {job.checkpoint_root} (`sparkpoint savepoint --from-checkpoint` takes a "
            f"savepoint of where it ended); {way_back.previous.id}'s version restores from {way_back.savepoint}") \
            from None
    if probation.failure is None:
        latest = registry.load(job.id)
        latest.note("probation", probation.detail)
        registry.save(latest)
        return None
    again = roll_back(settings, registry, job, way_back, probation, relaunch, sleep, clock)
    return replace(describe_job(registry.load(job.id)), rolled_back=again)


def _probation_interrupted(registry: Registry, job: Job, process: subprocess.Popen | None, detached: bool,
                           way_back: WayBack) -> bool:
    """Ctrl-C or SIGTERM during the probation: a foreground job ends with its command; a detached one runs
    on, unwatched (True). Either way the history says so, with the way back."""
    latest = registry.load(job.id)
    running_on = detached or process is None
    latest.note("probation", "interrupted: " + (
        f"it runs on unwatched, with no automatic rollback; {way_back.previous.id}'s version restores from "
        f"{way_back.savepoint}" if running_on else "the job is cancelled with its command"))
    registry.save(latest)
    if not running_on:
        end_interrupted(registry, latest)
    return running_on


def roll_back(settings: Settings, registry: Registry, failed: Job, way_back: WayBack, probation: Probation,
              relaunch: Relaunch, sleep, clock) -> JobView:
    """Start the version ``failed`` followed again (``relaunch``), from the way back's savepoint: it continues at
    exactly that cut. The failed job's record says so first, so that a relaunch that fails too leaves the way back
    written down."""
    previous, failure = way_back.previous, probation.failure
    try:
        check_restartable(previous)
        catalog.load(settings, way_back.savepoint)  # still there (not disposed or pruned meanwhile)
    except (BadArgumentError, NotFoundError, SavepointInvalidError) as exc:  # changed during the probation
        latest = registry.load(failed.id)
        latest.note("probation", f"failed ({probation.detail}); not rolled back: {exc}" +
                    ("; it still runs" if probation.still_running else ""))
        registry.save(latest)
        raise JobFailedError(f"job {failed.id} failed on probation ({failure}) and is not rolled back: {exc}; "
                             f"{previous.id}'s version restores from {way_back.savepoint} (run -s)") from None
    if probation.still_running:  # unhealthy, not failed: its queries are stopped before its driver is ended
        with contextlib.suppress(SparkpointError):  # gone meanwhile, or not answering: ending the driver counts
            client_for(registry, failed).cancel()
    end_driver(failed, grace=10.0, sleep=sleep, clock=clock)  # a failed driver may linger (a JVM left waiting)
    failed = registry.load(failed.id)
    failed.rollback = {"rolled_back_to": None, "error": failure, "savepoint": way_back.savepoint, "at": iso()}
    if probation.still_running:
        failed.end("failed", error=failure)
    failed.note("rolled_back", f"failed on probation ({probation.detail}); {previous.id}'s version starts again "
                               f"from {way_back.savepoint}")
    registry.save(failed)
    try:
        again = relaunch(way_back, failed)
    except KeyboardInterrupt:  # the relaunch ended what it had launched: no version runs
        raise InterruptedBetweenVersionsError(
            f"interrupted while {previous.id}'s version started again, after {failed.id} failed on probation "
            f"({failure}): no version of the job runs; the savepoint to start it from is {way_back.savepoint} "
            f"(`sparkpoint run -s {way_back.savepoint} ...`)") from None
    except SparkpointError as exc:
        raise JobFailedError(f"job {failed.id} failed on probation ({failure}), and starting {previous.id}'s version "
                             f"again failed too: {exc}; the savepoint to start it from is "
                             f"{way_back.savepoint}") from None
    failed = registry.load(failed.id)
    failed.rollback = {**failed.rollback, "rolled_back_to": again.id, "at": iso()}
    registry.save(failed)
    return again

"""Stopping a job at its queries' next batch boundary with a savepoint (`stop`, `cancel --with-savepoint`).

Waiting is done with the ``sleep`` and ``clock`` given, so tests need not wait for real."""

from __future__ import annotations

import contextlib
import shlex
import time
from dataclasses import dataclass, replace
from collections.abc import Callable, Iterator
from typing import Any

from sparkpoint.adapters.processes import pid_alive
from sparkpoint.adapters.transfer import NullProgress, Progress
from sparkpoint.config import Settings
from sparkpoint.errors import (JobFailedError, JobNotRunningError, SparkpointError, StopInterruptedError,
                               StoppedWithoutSavepointError, StopRefusedError)
from sparkpoint.jobs.drivers import ApplicationEnd
from sparkpoint.results import json_number
from sparkpoint.jobs.protocol import read_agent_file
from sparkpoint.jobs.agents import client_for
from sparkpoint.jobs.job_view import JobView, describe_job
from sparkpoint.jobs.job_record import Job
from sparkpoint.jobs.job_state import ACTIVE_STATES, state_of
from sparkpoint.jobs.registry import Registry
from sparkpoint.jobs.savepoint import create_savepoint, job_sources
from sparkpoint.results import Result
from sparkpoint.savepoints.create import SavedQuery
from sparkpoint.times import iso, poll_until

STOP_REPORT_GRACE = 30.0  # beyond the stop's own timeout, for an agent to report its queries' end


def stop_job(settings: Settings, reference: str, target_dir: str | None = None, timeout: float = 60.0,
             progress: Progress | None = None, cancelled: bool = False,
             sleep: Callable[[float], None] = time.sleep,
             clock: Callable[[], float] = time.monotonic) -> Stopped:
    """Stop every query at its next micro-batch boundary (interrupted after ``timeout``), savepoint the
    checkpoints while the application ends, and return once both are done (the driver's JVM may still be
    shutting Spark down: see drivers.end_once_application_ended)."""
    registry = Registry(settings.home_url())
    job = registry.resolve(reference)
    result, ending = stop_with_savepoint(settings, registry, job, target_dir, timeout, progress, sleep, clock,
                                         cancelled)
    return replace(result, job=record_stopped(registry, job, cancelled, ending, result,
                                              f"stopped with savepoint {result.path}"))


def stop_with_savepoint(settings: Settings, registry: Registry, job: Job, target_dir: str | None, timeout: float,
                         progress: Progress | None, sleep, clock,
                         cancelled: bool = False) -> tuple[Stopped, ApplicationEnd]:
    """The savepoint at the boundary, and the application's end, already under way (the savepoint reads only
    the stopped queries' checkpoints, so the two overlap). A savepoint that fails once the queries ended is
    StoppedWithoutSavepointError, recorded as the job's end."""
    started = clock()
    try:
        stopped = _await_boundary(client_for(registry, job), job, timeout, progress or NullProgress(), sleep, clock)
        if not stopped:
            raise JobNotRunningError(f"job {job.id} runs no streaming query to stop")
    except StopRefusedError:
        raise  # nothing was stopped, and no savepoint tried: the job runs on as before
    except SparkpointError as exc:  # the stop's savepoint was never taken: a failed one (create_savepoint's own
        registry.savepoint_failed(job, exc)  # failures it records itself)
        raise
    boundary = clock()
    ending = ApplicationEnd(registry, job, sleep, clock)
    try:
        try:
            sources = job_sources(stopped)
        except SparkpointError as exc:  # (create_savepoint records its own failures)
            registry.savepoint_failed(job, exc)
            raise
        created = create_savepoint(settings, job, sources, target_dir, progress, taken="stop")
    except SparkpointError as exc:
        raise _stopped_without_savepoint(registry, job, cancelled, ending, exc) from None
    outcome = {q["name"]: q for q in stopped}
    queries = [StoppedQuery(**vars(q), at_boundary=_at_boundary(q, outcome[q.name]),
                            replayed_batch_id=_replayed(q, outcome[q.name]), how=_how(outcome[q.name].get("how")))
               for q in created.queries]
    phases = {"boundary": round(boundary - started, 3), "savepoint": round(clock() - boundary, 3)}
    return Stopped(path=created.path, id=created.id, job=created.job, created_at=created.created_at,
                   bytes=created.bytes, file_count=created.file_count, queries=queries, phases=phases), ending


def _stopped_without_savepoint(registry: Registry, job: Job, cancelled: bool, ending: ApplicationEnd,
                               failure: SparkpointError) -> StoppedWithoutSavepointError:
    """The queries ended, and their savepoint failed: once the application has ended, the job's end is recorded
    with the line that says so (list and the page show it), where the checkpoints stay and how to take the
    savepoint from them."""
    root = shlex.quote(job.checkpoint_root)
    line = (f"job {job.id} was stopped, but the savepoint of its stop failed: {failure}; its checkpoints stay "
            f"under {job.checkpoint_root}, and `sparkpoint savepoint --from-checkpoint {root} --job {job.name} "
            "--topic-ids` takes the savepoint of them")
    with contextlib.suppress(Exception):  # the record of the end is written all the same
        ending.wait()
    with contextlib.suppress(SparkpointError, OSError):  # a record that cannot be written must not hide the line
        job = registry.load(job.id)
        if job.ended:
            job.note("savepoint_failed", line)
        else:
            job.end("cancelled" if cancelled else "finished", error=line)
        registry.save(job)
    return StoppedWithoutSavepointError(line)


@dataclass(frozen=True)
class StoppedQuery(SavedQuery):
    at_boundary: bool  # ended at a batch boundary; false: interrupted at the timeout
    replayed_batch_id: int | None  # the batch the restored query runs again
    # How the agent ended it: boundary (its batch committed, no other started), between-triggers, ended (by
    # itself), fallback (no trigger active: a Spark without the internals of the graceful stop), timeout, error: ...
    how: str | None = None


def _at_boundary(saved: SavedQuery, outcome: dict[str, Any]) -> bool:
    # The checkpoint has the last word: a planned batch without its commit was interrupted.
    return bool(outcome.get("at_boundary")) and saved.planned_batch_id is None


def _replayed(saved: SavedQuery, outcome: dict[str, Any]) -> int | None:
    """The batch the restored query runs again: the one planned at the cut; for a real-time query cut short, the
    batch after the cut, which logs its offsets only at its end."""
    if saved.planned_batch_id is not None or outcome.get("at_boundary") or outcome.get("real_time") is not True:
        return saved.planned_batch_id
    return saved.batch_id + 1


def _how(said: Any) -> str | None:
    return said if isinstance(said, str) else None  # an agent's report is JSON from another process


@dataclass(frozen=True)
class Stopped(Result):
    """A savepoint at the stop (as Created), and once the application has ended, the job as `run` shows it."""

    path: str
    id: str
    job: str | JobView  # the savepoint's job label, until the stopped job's view replaces it
    created_at: str
    bytes: int
    file_count: int
    queries: list[StoppedQuery]
    phases: dict[str, float]  # seconds: boundary, savepoint, application_end

    def said(self) -> list[str]:
        """As the CLI and the page report it."""
        state = self.job.state if isinstance(self.job, JobView) else "stopped"
        job_id = self.job.id if isinstance(self.job, JobView) else self.job
        phases = self.phases
        lines = [f"Job {job_id} stopped ({state}); savepoint {self.path}",
                 f"  boundary {phases['boundary']:.1f} s, savepoint {phases['savepoint']:.1f} s, application end "
                 f"{phases['application_end']:.1f} s (from the boundary, alongside the savepoint)"]
        for q in self.queries:
            where = "at a batch boundary" if q.at_boundary else "without a boundary (interrupted)"
            replay = (f"; batch {q.replayed_batch_id} is replayed on restore" if q.replayed_batch_id is not None
                      else "; no batch is replayed")
            lines.append(f"  {q.name}: stopped {where}, cut at batch {q.batch_id}{replay}")
        return lines


def _await_boundary(client, job: Job, timeout: float, progress: Progress, sleep, clock) -> list[dict[str, Any]]:
    """The agent's account of its queries once every one has ended at its next batch boundary (or was
    interrupted at ``timeout``), showing what is being waited for meanwhile."""
    def reports() -> Iterator[dict[str, Any]]:
        report = client.request_stop(timeout)
        if report.get("refused"):
            raise StopRefusedError(_refusal(job, timeout, report["refused"]))
        while True:
            yield report
            report = _next_report(client, job, report)

    stream = reports()

    def ended() -> dict[str, Any] | None:
        report = next(stream)
        if report["done"]:
            return report
        progress.waiting(_waiting_message(report))
        return None

    try:
        report = poll_until(ended, timeout + STOP_REPORT_GRACE, 0.05, clock=clock, sleep=sleep)
        if report is None:
            where = f"its driver log: {job.log_path}" if job.detached else "the driver's output above"
            raise JobFailedError(f"job {job.id} did not report the end of its queries within "
                                 f"{timeout + STOP_REPORT_GRACE:g} s; see {where}")
    except KeyboardInterrupt:
        raise StopInterruptedError(f"interrupted: job {job.id} goes on ending its queries at their batch boundaries, "
                                   f"without a savepoint; their checkpoints stay under {job.checkpoint_root} "
                                   "(`sparkpoint savepoint --from-checkpoint` takes one)") from None
    finally:
        progress.finish()
    return report["queries"]


def _refusal(job: Job, timeout: float, refused: Any) -> str:
    """The agent's refusal, worded: which real-time batches would be cut short, and the timeout that lets them end."""
    refused = refused if isinstance(refused, dict) else {}
    queries = [q for q in refused.get("queries") or [] if isinstance(q, dict)]
    said = "; ".join(f"{q.get('name')}, batches of {q.get('batch_seconds')} s, this one done within "
                     f"{q.get('ends_within')} s" for q in queries) or "a real-time query"
    needed = json_number(refused.get("needed_seconds"))
    give = f"give the stop {needed:g} s or more" if needed is not None else "give the stop a batch's length or more"
    return (f"job {job.id} was not stopped: the stop's timeout ({timeout:g} s) would cut short a real-time batch "
            f"({said}), and the output it wrote would be written again after a restore; {give} "
            "(stop --timeout, run --replace --stop-timeout), or cancel the job")


def _next_report(client, job: Job, last: dict[str, Any]) -> dict[str, Any]:
    """The agent's latest report. Once the agent is gone (the application ended; another caller may have
    read the final report first), its final one from the agent's record; while the driver lives, a
    poll that failed (a busy driver) is tried again."""
    try:
        return client.stop_report()
    except JobNotRunningError:
        final = read_agent_file(job.directory).get("stop")
        if isinstance(final, dict) and final.get("done"):
            return final
        if pid_alive(job.pid):
            return last
        raise JobFailedError(f"the driver of job {job.id} ended before its queries reached a batch boundary; its "
                             f"checkpoints are kept under {job.checkpoint_root}: "
                             "`sparkpoint savepoint --from-checkpoint` takes a savepoint of them") from None


def _waiting_message(report: dict[str, Any]) -> str:
    waiting = [q for q in report["queries"] if q["state"] == "waiting"]
    batches = ", ".join(f"batch {q['batch_id']} of {q['name']}" if q.get("batch_id") is not None else q["name"]
                        for q in waiting)
    return f"waiting for {batches} to commit, {report['seconds']:.0f} s"


def record_stopped(registry: Registry, job: Job, cancelled: bool, ending: ApplicationEnd, stopped: Stopped,
                   reason: str) -> JobView:
    """Once the stopped application has ended: record how the job ended, how long that took and whether every
    query ended at a boundary (the job's ``stop``, which metrics report)."""
    stopped.phases["application_end"] = ending.wait()
    job = registry.load(job.id)
    job.stop = {"at": iso(), "phases": stopped.phases, "at_boundary": all(q.at_boundary for q in stopped.queries),
                "savepoint": stopped.path}
    if cancelled or state_of(job) in ACTIVE_STATES or state_of(job) == "lost":
        job.end("cancelled" if cancelled else "finished", reason=reason)
    else:  # its agent recorded the end already: the history still says why it came
        job.note("stopped", reason)
    registry.save(job)
    return describe_job(registry.load(job.id))

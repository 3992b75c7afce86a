"""`run --replace`: the new driver starts, the old job stops at a batch boundary with a savepoint, the new
one restores it and takes over."""

from __future__ import annotations

import subprocess
from dataclasses import replace

from sparkpoint.config import Settings
from sparkpoint.errors import InterruptedBetweenVersionsError, JobFailedError, SparkpointError
from sparkpoint.jobs.drivers import await_end, cluster_driver_failure, driver_running, end_driver
from sparkpoint.jobs.protocol import answer_handover, handover_waiting
from sparkpoint.jobs.job_view import describe_job
from sparkpoint.jobs.query_owners import restored_ids
from sparkpoint.jobs.job_record import Job
from sparkpoint.jobs.job_state import state_of
from sparkpoint.jobs.registry import Registry
from sparkpoint.jobs.sinks_ahead import refuse_sinks_ahead
from sparkpoint.jobs.stop import Stopped, record_stopped, stop_with_savepoint
from sparkpoint.savepoints import savepoint
from sparkpoint.savepoints.restore import restore
from sparkpoint.times import iso, poll_until


class HandoverFailedError(JobFailedError):
    """The old job stopped with a savepoint, and then the new one could not take over from it."""

    def __init__(self, message: str, savepoint: str):
        super().__init__(message)
        self.savepoint = savepoint


def take_over(settings: Settings, registry: Registry, job: Job, process: subprocess.Popen | None, replaced: Job,
              savepoint_path: str | None, stop_timeout: float, progress, sleep, clock,
              timeout: float) -> Stopped:
    """Stop ``replaced`` with a savepoint and restore it into ``job``, whose driver is already up and waiting:
    the new JVM's start-up overlaps the old job's last batch, and the old one runs on until the new
    one is ready. If anything fails before the hand-over, the new driver is told to give up. ``process``: the
    new driver's spark-submit here, or None when its cluster manager runs it (cluster mode)."""
    stopped = None
    try:
        _await_handover_waiting(registry, job, process, replaced, sleep, clock, timeout)
        job.launch = {**(job.launch or {}), "stop_began": iso()}
        stopped, ending = stop_with_savepoint(settings, registry, replaced, savepoint_path,
                                              stop_timeout, progress, sleep, clock)
        job.launch["stopped"] = iso()
        saved = savepoint.load(stopped.path, settings.storage_options)
        # A stop cut short (a batch outlasting the timeout) may leave its batch in a Delta table, committed by the
        # old version's sink: the new version replays it and Delta skips it, which is the old version's own batch,
        # kept (said in the history); but a query that keeps state would fail after it, refused (SinkAheadError)
        # before the restore: the way back (or run -s --rollback-sink) takes the table back with the state. A stop
        # at the boundary replays nothing, and its downtime reads no table.
        if any(q.replayed_batch_id is not None for q in stopped.queries):
            refuse_sinks_ahead(settings, saved, False, False, lambda line: job.note("sink_kept", line),
                               handover=True)
        restore(saved, job.checkpoint_root, mode="auto", workers=settings.transfer_workers,
                progress=progress, storage_options=settings.storage_options)
        if not driver_running(registry, job, process):  # a cluster-mode driver gives up waiting after a while
            raise JobFailedError(f"job {job.id} ended while the savepoint of {replaced.id} was restored")
        job.launch["restored"] = iso()
    except BaseException as exc:
        interrupted = isinstance(exc, KeyboardInterrupt)
        outcome = "was interrupted" if interrupted else "failed"
        why = outcome if interrupted else f"{outcome}: {exc}"
        answer_handover(job.directory, {"abort": f"the hand-over from {replaced.id} {why}"})
        if driver_running(registry, job, process):
            end_driver(job, grace=30.0, sleep=sleep, clock=clock)
            job.end("cancelled", reason=f"hand-over from {replaced.id} {why}")
            registry.save(job)
        if stopped is None:
            raise  # the old job runs on (or a stop interrupted, which says where its checkpoints stay)
        # The old job is stopped: its savepoint is the way back, which the caller takes, or the operator who
        # pressed Ctrl-C.
        record_stopped(registry, replaced, False, ending, stopped,
                       f"stopped for {job.id}, whose hand-over then {outcome}; savepoint {stopped.path}")
        if interrupted:
            raise InterruptedBetweenVersionsError(
                f"interrupted after {replaced.id} stopped: {job.id} was ended before it took over, so no version "
                f"of the job runs; {replaced.id}'s savepoint {stopped.path} restores it "
                f"(`sparkpoint run -s {stopped.path} ...`)") from None
        if not isinstance(exc, SparkpointError):
            raise
        raise HandoverFailedError(f"the hand-over from {replaced.id} failed after it stopped: {exc}",
                                  stopped.path) from exc
    job.restored_from = saved.path
    job.query_ids = sorted(restored_ids(saved.queries, fork=False))  # its own before its agent can say so
    job.note("took_over", f"from {replaced.id}, stopped at batch {_cuts(stopped)} with savepoint {saved.path}")
    registry.save(job)
    answer_handover(job.directory, {"expected_queries": [q["name"] for q in saved.queries]})
    # Only now wait for the old application's end: the new one is already restoring and starting its queries.
    return replace(stopped, job=record_stopped(registry, replaced, False, ending, stopped,
                                               f"replaced by {job.id}, savepoint {stopped.path}"))


def _await_handover_waiting(registry: Registry, job: Job, process: subprocess.Popen | None, replaced: Job, sleep,
                            clock, timeout: float) -> None:
    def up() -> bool:
        if handover_waiting(job.directory):
            return True
        if not driver_running(registry, job, process):
            raise JobFailedError(f"job {job.id} {_how_it_ended(registry, job, process)} before it could take over "
                                 f"from {replaced.id}, which keeps running")
        return False

    # The old job runs on while this waits, so a slower poll costs no downtime; a cluster-mode driver's state is
    # a request to its cluster manager.
    if not poll_until(up, timeout, 0.02 if process else 0.5, clock=clock, sleep=sleep):
        raise JobFailedError(f"job {job.id} did not start within {timeout:g} s; {replaced.id} is still running")


def _how_it_ended(registry: Registry, job: Job, process: subprocess.Popen | None) -> str:
    if process is not None:
        try:
            await_end(registry, job, process)
            return "ended"
        except JobFailedError as exc:
            return str(exc).removeprefix(f"job {job.id} ")
    latest = registry.load(job.id)
    state = state_of(latest)
    return "ended" if state == "finished" else f"{state}: {cluster_driver_failure(latest, describe_job(latest))}"


def _cuts(stopped: Stopped) -> str:
    return ", ".join(f"{q.batch_id} ({q.name})" for q in stopped.queries)

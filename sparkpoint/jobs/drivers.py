"""A job's driver process once launched: until it runs, until it ends, and ending it (through its
cluster manager, or its process group)."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from sparkpoint.adapters.local_files import append_to
from sparkpoint.adapters.processes import pid_alive, signal_group, terminate_group
from sparkpoint.adapters.cluster_managers import manager_for
from sparkpoint.errors import JobFailedError
from sparkpoint.jobs.protocol import read_agent_file
from sparkpoint.jobs.job_view import JobView, describe_job
from sparkpoint.jobs.job_record import Job
from sparkpoint.jobs.job_state import ACTIVE_STATES, driver_start, state_of
from sparkpoint.jobs.registry import Registry
from sparkpoint.times import poll_until

# A stopped job's application's time to end once its queries have ended at the boundary, and then its JVM's to
# exit (each), before the driver is ended.
STOPPED_GRACE = 30.0


def await_cluster_driver(registry: Registry, job: Job, detach: bool, sleep, clock, timeout: float) -> JobView:
    """Until the agent runs (detached) or the driver ended (foreground), as its manager and the agent tell."""
    def settled() -> tuple[Job, str] | None:
        latest = registry.load(job.id)
        state = state_of(latest)
        return (latest, state) if state not in ACTIVE_STATES or (detach and state == "running") else None

    # Detached: until the agent runs, or the timeout; in the foreground, until the driver ends.
    found = poll_until(settled, timeout if detach else None, 0.5, clock=clock, sleep=sleep)
    job = found[0] if found else registry.load(job.id)
    state = found[1] if found else state_of(job)
    info = describe_job(job, state=state)
    if state in ("failed", "lost"):
        raise JobFailedError(f"job {job.id} failed: {cluster_driver_failure(job, info)}")
    return info


def cluster_driver_failure(job: Job, info: JobView) -> str:
    """Why a cluster-mode driver failed: what its agent recorded, else what its cluster manager says."""
    return info.error or (f"the cluster manager reports the driver {job.driver.get('driverState', 'unknown')}"
                          + (f": {job.driver['message']}" if job.driver.get("message") else ""))


def driver_running(registry: Registry, job: Job, process: subprocess.Popen | None) -> bool:
    """Whether the job's driver runs on: its spark-submit here, or as its cluster manager says (None)."""
    if process is not None:
        return process.poll() is None
    latest = registry.load(job.id)
    # A cluster manager that did not answer this look says nothing of its driver (as on probation, jobs.rollback):
    # no sign of an end, and calling a hand-over off for a hiccup of the manager would be one.
    return state_of(latest) in ACTIVE_STATES or latest.driver.get("unreachable") is True


def await_start(registry: Registry, job: Job, process: subprocess.Popen, sleep, clock, timeout: float) -> JobView:
    poll_until(lambda: process.poll() is not None or read_agent_file(job.directory).get("state") == "running",
               timeout, 0.2, clock=clock, sleep=sleep)
    if process.poll() is not None:
        return await_end(registry, job, process)
    return describe_job(registry.load(job.id))


def await_end(registry: Registry, job: Job, process: subprocess.Popen) -> JobView:
    try:
        code = process.wait()
    except KeyboardInterrupt:
        end_interrupted(registry, job)
        raise
    job = registry.load(job.id)
    if job.agent.get("state") not in ("finished", "failed"):
        # The driver died before its agent could record the end (a JVM crash, a kill -9).
        job.end("failed", exit_code=code, error=f"spark-submit exited with status {code}; see the output above")
        registry.save(job)
    info = describe_job(job)
    if info.state == "failed":
        raise JobFailedError(f"job {job.id} failed: {info.error}")
    return info


def end_interrupted(registry: Registry, job: Job, sleep: Callable[[float], None] = time.sleep,
                    clock: Callable[[], float] = time.monotonic) -> None:
    """The command that launched ``job`` was interrupted (Ctrl-C, SIGTERM) before it returned, or while it waited
    on a foreground job: its driver goes with it, and the job is recorded cancelled."""
    end_launched(job, sleep, clock)
    job = registry.load(job.id)
    job.end("cancelled", reason="interrupted")
    registry.save(job)


def end_launched(job: Job, sleep: Callable[[float], None], clock: Callable[[], float]) -> None:
    """``job``'s driver ended at once, if one was launched: nothing will answer a driver that holds its queries for
    a check or a hand-over (it would give up by itself some seconds later, recorded failed)."""
    if job.pid or job.submission_id:
        end_driver(job, grace=0.0, sleep=sleep, clock=clock)


class ApplicationEnd:
    """Waits, on a thread of its own, for a stopped job's application to end (end_once_application_ended)."""

    def __init__(self, registry: Registry, job: Job, sleep, clock):
        self._clock = clock
        self._started = clock()
        self._seconds: float | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(registry, job, sleep, clock),
                                        name="sparkpoint-application-end", daemon=True)
        self._thread.start()

    def _run(self, registry: Registry, job: Job, sleep, clock) -> None:
        try:
            end_once_application_ended(registry, job, STOPPED_GRACE, sleep, clock)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller by wait()
            self._error = exc
        self._seconds = self._clock() - self._started

    def wait(self) -> float:
        """Seconds from the boundary to the application's end; what ending the driver raised, if anything did."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        return round(self._seconds or 0.0, 3)


def end_once_application_ended(registry: Registry, job: Job, grace: float, sleep: Callable[[float], None],
                               clock: Callable[[], float]) -> None:
    """Return once a stopped or cancelled driver's application has ended (every query stopped: nothing more is
    read or written), while its JVM still shuts Spark down (about half a second here): a process of its own
    then ends the driver if that shutdown hangs (end_driver_apart). A cluster-mode driver: once its manager
    says it ended. An application that has not ended within ``grace``: its driver is ended now."""
    if job.submission_id:
        end_driver(job, grace=grace, sleep=sleep, clock=clock)
    elif _application_ended(job, grace, sleep, clock):
        end_driver_apart(registry, job, grace=grace)
    else:
        end_driver(job, grace=0.0, sleep=sleep, clock=clock)


def _application_ended(job: Job, grace: float, sleep: Callable[[float], None], clock: Callable[[], float]) -> bool:
    """Whether the application ends within ``grace``: its agent's record final, or its driver gone. A short poll:
    a stop's and a cancel's reply wait on it (the record is a small local file)."""
    start = driver_start(job)
    return bool(poll_until(lambda: "ended_at" in read_agent_file(job.directory) or not pid_alive(job.pid, start),
                           grace, 0.02, clock=clock, sleep=sleep))


def end_driver(job: Job, grace: float, sleep: Callable[[float], None] = time.sleep,
               clock: Callable[[], float] = time.monotonic) -> None:
    """Let the driver end by itself within ``grace``; then end it: through its cluster manager for a cluster-mode
    driver (the bootstrap's watchdog ends its Python when the JVM goes), else its process group."""
    if not job.submission_id:
        _await_exit(job, grace, sleep, clock)
        return
    manager = manager_for(job.master)
    ended = poll_until(lambda: manager.driver_status(job.submission_id)["state"] not in ACTIVE_STATES,
                       grace, 0.2, clock=clock, sleep=sleep)
    if not ended:
        manager.kill(job.submission_id)


def end_driver_apart(registry: Registry, job: Job, grace: float) -> None:
    """end_driver(job, grace) in a process of its own, which outlives the caller: a cancel or a stop returns once
    the application has ended, while its JVM still shuts Spark down (about 0.4 s), and this process ends the
    driver if that shutdown hangs. What it cannot do it says in the job's log, when that is a file of its own (a
    FIFO or a link in its place is left alone: the caller must neither block on it nor write through it)."""
    log = append_to(Path(job.log_path))
    output = log or subprocess.DEVNULL
    try:
        subprocess.Popen([sys.executable, "-m", "sparkpoint.jobs.exit_watch", str(registry.root.parent), job.id,
                          str(grace)], stdin=subprocess.DEVNULL, stdout=output, stderr=output, start_new_session=True)
    finally:
        if log is not None:
            log.close()  # the watcher keeps its own descriptor


def _await_exit(job: Job, grace: float, sleep: Callable[[float], None], clock: Callable[[], float]) -> None:
    """Let the driver exit by itself within ``grace``, then end its whole process group: only the driver's,
    recognised by its start time (its pid may be another process's by now)."""
    start = driver_start(job)
    # A short poll: a cancel's and a stop's reply wait on this exit (pid_alive reads /proc, nothing more).
    poll_until(lambda: start is None or not pid_alive(job.pid, start), grace, 0.05, clock=clock, sleep=sleep)
    if start is not None and pid_alive(job.pid, start):
        terminate_group(job.pid, start, sleep=sleep, clock=clock)
    else:
        signal_group(job.pid, start, signal.SIGKILL)  # leftovers of the group (a Python driver outliving its JVM)

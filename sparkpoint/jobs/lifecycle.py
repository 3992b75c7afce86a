"""Operating managed jobs: run (optionally from a savepoint), list, savepoint, stop, cancel.

Waiting is done with the ``sleep`` and ``clock`` given, so tests need not wait for real.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkpoint.adapters import spark_submit
from sparkpoint.adapters.standalone import DRIVER_STATES, StandaloneMaster, submission_properties
from sparkpoint.adapters.storage import join, storage_for
from sparkpoint.adapters.transfer import NullProgress, Progress
from sparkpoint.config import Settings
from sparkpoint.errors import (
    BadArgumentError,
    CorruptRecordError,
    JobFailedError,
    JobNotRunningError,
    NotFoundError,
    SparkpointError,
    StopInterruptedError,
)
from sparkpoint.jobs.registry import ACTIVE_STATES, Job, Registry, client_for, describe_job, driver_start, state_of
from sparkpoint.jobs.protocol import answer_handover, handover_waiting, read_agent_file
from sparkpoint.adapters.processes import pid_alive, process_start, signal_group, terminate_group
from sparkpoint.adapters.local_files import write_json
from sparkpoint.savepoints import catalog, savepoint
from sparkpoint.times import iso

BOOTSTRAP = str(Path(__file__).resolve().parents[1] / "runtime" / "bootstrap.py")
RUN_OPTIONS = {"--name", "-s", "--from-savepoint", "--allow-non-restored-state", "--claim-mode", "--master",
               "--conf", "--detach", "--output", "-o", "--restore-grace", "--replace", "--savepoint-path",
               "--stop-timeout", "--deploy-mode"}


@dataclass
class RunRequest:
    app: str
    app_args: list[str] = field(default_factory=list)
    submit_args: list[str] = field(default_factory=list)
    name: str | None = None
    master: str = "local[2]"
    confs: list[str] = field(default_factory=list)
    detach: bool = False
    savepoint: str | None = None
    allow_non_restored_state: bool = False
    claim: bool = False
    restore_grace: float = 60.0
    replace: str | None = None  # a running job to stop with a savepoint and continue from
    savepoint_path: str | None = None  # with replace: where that savepoint goes
    stop_timeout: float = 60.0  # with replace: seconds to wait for the old job's batch boundary
    deploy_mode: str = "client"  # cluster: the standalone master runs the driver (REST submission)


def _parse_confs(confs: list[str]) -> list[str]:
    argv = []
    for conf in confs:
        key, sep, _value = conf.partition("=")
        if not sep or not key:
            raise BadArgumentError(f"--conf {conf!r}: expected KEY=VALUE")
        if key == "spark.sql.streaming.checkpointLocation":
            raise BadArgumentError("the checkpoint location of a managed job is sparkpoint's: do not set it")
        argv += ["--conf", conf]
    return argv


def run_job(settings: Settings, request: RunRequest, progress: Progress | None = None,
            sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic,
            start_timeout: float = 180.0) -> dict[str, Any]:
    """Launch the application under spark-submit, restored from a savepoint when asked."""
    app = os.path.abspath(request.app)
    if not os.path.isfile(app):
        raise NotFoundError(f"application {request.app} does not exist")
    conf_args = _parse_confs(request.confs)
    registry = Registry(settings.home_url())
    saved, replaced = None, None
    cluster = request.deploy_mode == "cluster"
    if cluster and request.replace:
        raise BadArgumentError("--replace needs the new driver on this machine (client mode): in cluster mode, "
                               "stop the job, then run -s")
    master = StandaloneMaster(request.master) if cluster else None  # a bad master URL fails before anything runs
    if request.replace:
        if request.savepoint:
            raise BadArgumentError("--replace restores from the savepoint it takes of that job: drop -s")
        replaced = registry.resolve(request.replace)
        client_for(registry, replaced).status()  # exit 12 now, before a driver starts, if it does not run
    elif request.savepoint:
        saved = savepoint.load(catalog.resolve(request.savepoint, settings.savepoints_dir(), settings.storage_options),
                               settings.storage_options)
    job = registry.new_job(
        request.name or Path(app).stem.replace("_", "-"), app=app, app_args=request.app_args,
        master=request.master, submit_args=request.submit_args, detached=request.detach,
        restored_from=saved.path if saved else None,
    )
    try:
        if saved is not None:
            savepoint.restore(saved, job.checkpoint_root, mode="claim" if request.claim else "auto",
                              workers=settings.transfer_workers, progress=progress)
        driver_settings = {
            "SPARKPOINT_RESTORE_GRACE": str(request.restore_grace),
            "SPARKPOINT_ALLOW_NON_RESTORED_STATE": "1" if request.allow_non_restored_state else "0",
            "SPARKPOINT_EXPECTED_QUERIES": ",".join(q["name"] for q in saved.queries) if saved else "",
            **({"SPARKPOINT_HANDOVER_FROM": str(os.getpid())} if replaced is not None else {}),
        }
        checkpoint_conf = f"spark.sql.streaming.checkpointLocation={job.checkpoint_root}"
        if master is not None:
            job.submission_id = _submit(master, job, app, request, [*conf_args, "--conf", checkpoint_conf],
                                        driver_settings)
        else:
            argv = [spark_submit.spark_submit(), "--master", request.master, "--name", job.id,
                    "--conf", checkpoint_conf, *conf_args, *request.submit_args, BOOTSTRAP, job.directory, app,
                    *request.app_args]
            # Foreground: the driver's output goes to stderr, so stdout stays clean for --output json.
            process = spark_submit.launch(argv, {**spark_submit.driver_environment(), **driver_settings},
                                          job.log_path if request.detach else None,
                                          stdout=None if request.detach else sys.stderr)
            job.pid, job.pid_start = process.pid, process_start(process.pid)
    except BaseException as exc:
        job.ended = {"state": "failed", "error": str(exc), "at": iso()}
        registry.save(job)
        raise
    registry.save(job)
    if master is not None:
        return _await_cluster_driver(registry, job, request.detach, sleep, clock, start_timeout)
    handover = None
    if replaced is not None:
        handover = _take_over(settings, registry, job, process, replaced, request, progress, sleep, clock,
                              start_timeout)
    if request.detach:
        info = _await_start(registry, job, process, sleep, clock, start_timeout)
    else:
        info = _await_end(registry, job, process)
    return {**info, "replaced": handover} if handover else info


def _take_over(settings: Settings, registry: Registry, job: Job, process: subprocess.Popen, replaced: Job,
               request: RunRequest, progress, sleep, clock, timeout: float) -> dict[str, Any]:
    """Stop ``replaced`` with a savepoint and restore it into ``job``, whose driver is already up and waiting:
    the new JVM's start-up overlaps the old job's last batch, and the old one runs on until the new
    one is ready. If anything fails before the hand-over, the new driver is told to give up."""
    try:
        _await_handover_waiting(registry, job, process, replaced, sleep, clock, timeout)
        stopped, exiting = _stop_with_savepoint(settings, registry, replaced, request.savepoint_path,
                                                request.stop_timeout, progress, sleep, clock)
        saved = savepoint.load(stopped["path"], settings.storage_options)
        savepoint.restore(saved, job.checkpoint_root, mode="auto", workers=settings.transfer_workers,
                          progress=progress)
    except BaseException as exc:
        answer_handover(job.directory, {"abort": f"the hand-over from {replaced.id} failed: {exc}"})
        if process.poll() is None:
            _end_driver(job, grace=30.0, sleep=sleep)
            job.ended = {"state": "cancelled", "reason": f"hand-over from {replaced.id} failed: {exc}", "at": iso()}
            registry.save(job)
        raise
    job.restored_from = saved.path
    registry.save(job)
    answer_handover(job.directory, {"expected_queries": [q["name"] for q in saved.queries]})
    # Only now wait for the old driver's exit: the new one is already restoring and starting its queries.
    stopped["job"] = _record_stopped(registry, replaced, False, exiting, stopped["phases"])
    return stopped


def _await_handover_waiting(registry: Registry, job: Job, process: subprocess.Popen, replaced: Job, sleep, clock,
                            timeout: float) -> None:
    deadline = clock() + timeout
    while not handover_waiting(job.directory):
        if process.poll() is not None:
            try:
                _await_end(registry, job, process)
                reason = "ended"
            except JobFailedError as exc:
                reason = str(exc).removeprefix(f"job {job.id} ")
            raise JobFailedError(f"job {job.id} {reason} before it could take over from {replaced.id}, which "
                                 "keeps running")
        if clock() > deadline:
            raise JobFailedError(f"job {job.id} did not start within {timeout:g} s; {replaced.id} is still running")
        sleep(0.02)


def _submit(master: StandaloneMaster, job: Job, app: str, request: RunRequest, submit_args: list[str],
            driver_settings: dict[str, str]) -> str:
    """Hand the driver to the master through its REST API: spark-submit refuses Python cluster mode on
    standalone, while Spark's PythonRunner, named directly, runs it."""
    properties = submission_properties([*request.submit_args, *submit_args])
    py_files = properties.get("spark.submit.pyFiles", "")
    properties.update({"spark.app.name": job.id, "spark.pyspark.python": sys.executable,
                       "spark.pyspark.driver.python": sys.executable})
    return master.create(BOOTSTRAP, [BOOTSTRAP, py_files, job.directory, app, *request.app_args], properties,
                         driver_settings)


def _await_cluster_driver(registry: Registry, job: Job, detach: bool, sleep, clock, timeout: float) -> dict:
    """Until the agent runs (detached) or the driver ended (foreground), as the master and the agent tell."""
    deadline = clock() + timeout
    while True:
        job = registry.load(job.id)
        state = state_of(job)
        if state not in ACTIVE_STATES or (detach and (state == "running" or clock() > deadline)):
            break
        sleep(0.5)
    info = describe_job(job, state=state)
    if state in ("failed", "lost"):
        reason = info["error"] or f"the master reports the driver {job.driver.get('driverState', 'unknown')}"
        raise JobFailedError(f"job {job.id} failed: {reason}")
    return info


def _await_start(registry: Registry, job: Job, process: subprocess.Popen, sleep, clock, timeout: float) -> dict:
    deadline = clock() + timeout
    while clock() < deadline:
        if process.poll() is not None:
            return _await_end(registry, job, process)
        if read_agent_file(job.directory).get("state") == "running":
            return describe_job(registry.load(job.id))
        sleep(0.2)
    return describe_job(registry.load(job.id))


def _await_end(registry: Registry, job: Job, process: subprocess.Popen) -> dict:
    try:
        code = process.wait()
    except KeyboardInterrupt:
        terminate_group(process.pid, job.pid_start)
        job.ended = {"state": "cancelled", "reason": "interrupted", "at": iso()}
        registry.save(job)
        raise
    job = registry.load(job.id)
    if job.agent.get("state") not in ("finished", "failed"):
        # The driver died before its agent could record the end (a JVM crash, a kill -9).
        job.ended = {"state": "failed", "exit_code": code, "at": iso(),
                     "error": f"spark-submit exited with status {code}; see the output above"}
        registry.save(job)
    info = describe_job(job)
    if info["state"] == "failed":
        raise JobFailedError(f"job {job.id} failed: {info['error']}")
    return info


def _job_sources(queries: list[dict[str, Any]]) -> list[savepoint.QuerySource]:
    sources = []
    for query in queries:
        if not query.get("name"):
            raise BadArgumentError(
                f"query {query['id']} has no name and cannot be savepointed: name it with .queryName(...)"
            )
        location = query["checkpoint"].removeprefix("file:").replace("///", "/", 1)
        sources.append(savepoint.QuerySource(query["name"], location))
    return sources


def savepoint_job(settings: Settings, reference: str, target_dir: str | None = None, keep_last: int | None = None,
                  progress: Progress | None = None) -> dict[str, Any]:
    """A savepoint of every query of a running job, without pausing it."""
    registry = Registry(settings.home_url())
    job = registry.resolve(reference)
    status = client_for(registry, job).status()
    if not status["queries"]:
        raise JobNotRunningError(f"job {job.id} runs no streaming query yet")
    result = savepoint.created_summary(_create(settings, job, _job_sources(status["queries"]), target_dir, progress))
    if keep_last is not None:
        result["pruned"] = prune_older_savepoints(settings, job.name, keep_last)
    return result


def prune_older_savepoints(settings: Settings, job_name: str, keep_last: int) -> list[dict[str, Any]]:
    """After a new savepoint: keep the job's newest ``keep_last`` in the catalog; what was deleted."""
    return catalog.prune(join(settings.savepoints_dir(), job_name), keep_last=keep_last, max_age=None, job=job_name,
                         storage_options=settings.storage_options)["deleted"]


TRIGGERS_DIR = "triggers"
_TRIGGER_ID = re.compile(r"t-[0-9a-f]{8}")


def trigger_savepoint(settings: Settings, reference: str, target_dir: str | None, keep_last: int | None,
                      config_path: str | None = None) -> dict[str, Any]:
    """Start a savepoint in the background (Flink's trigger-then-poll); return its trigger id at once."""
    registry = Registry(settings.home_url())
    job = registry.resolve(reference)
    client_for(registry, job).status()  # fail now, with exit 12, if the job is not running
    trigger_id = f"t-{secrets.token_hex(4)}"  # the shape _TRIGGER_ID accepts
    path = _trigger_path(job, trigger_id)
    path.parent.mkdir(exist_ok=True)
    argv = [sys.executable, "-m", "sparkpoint", "--home", settings.home, "--quiet",
            *(["--config", config_path] if config_path else []),
            "savepoint", job.id, *([target_dir] if target_dir else []),
            *(["--keep-last", str(keep_last)] if keep_last is not None else []), "--record-trigger", trigger_id]
    _write_trigger(path, {"trigger_id": trigger_id, "job_id": job.id, "status": "in_progress",
                          "started_at": iso()})
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    record = _write_trigger(path, {**json.loads(path.read_text()), "pid": process.pid,
                                   "pid_start": process_start(process.pid)})
    return record


def run_trigger(settings: Settings, reference: str, trigger_id: str, target_dir: str | None,
                keep_last: int | None) -> dict[str, Any]:
    """The background half of trigger_savepoint: take the savepoint and record how it went."""
    job = Registry(settings.home_url()).resolve(reference)
    path = _trigger_path(job, trigger_id)
    record = _read_trigger(path, job, trigger_id)
    try:
        result = savepoint_job(settings, job.id, target_dir, keep_last)
    except SparkpointError as exc:
        _write_trigger(path, {**record, "status": "failed", "error": str(exc), "exit_code": exc.exit_code,
                              "ended_at": iso()})
        raise
    _write_trigger(path, {**record, "status": "completed", "savepoint": result, "ended_at": iso()})
    return result


def trigger_status(settings: Settings, reference: str, trigger_id: str) -> dict[str, Any]:
    job = Registry(settings.home_url()).resolve(reference)
    record = _read_trigger(_trigger_path(job, trigger_id), job, trigger_id)
    if record["status"] == "in_progress" and not pid_alive(record.get("pid"), record.get("pid_start")):
        record = {**record, "status": "failed", "error": "the savepoint process ended without recording a result"}
    return record


def _trigger_path(job: Job, trigger_id: str) -> Path:
    # The id becomes a file name: only the shape trigger_savepoint makes, never a path of the caller's.
    if not isinstance(trigger_id, str) or not _TRIGGER_ID.fullmatch(trigger_id):
        raise BadArgumentError(f"{trigger_id!r} is not a savepoint trigger id (t- and 8 hex digits, as "
                               "`savepoint --detached` prints)")
    return Path(job.directory) / TRIGGERS_DIR / f"{trigger_id}.json"


def _read_trigger(path: Path, job: Job, trigger_id: str) -> dict[str, Any]:
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        raise NotFoundError(f"job {job.id} has no savepoint trigger {trigger_id!r}") from None
    except ValueError:
        raise CorruptRecordError(f"the savepoint trigger record {path} is not JSON") from None
    if not isinstance(record, dict) or not isinstance(record.get("status"), str):
        raise CorruptRecordError(f"the savepoint trigger record {path} is malformed (no status)")
    return record


def _write_trigger(path: Path, record: dict[str, Any]) -> dict[str, Any]:
    write_json(path, record)
    return record


def _create(settings: Settings, job: Job, sources, target_dir: str | None, progress) -> dict[str, Any]:
    source_storage, _ = storage_for(job.checkpoint_root)
    target_storage, parent = storage_for(target_dir or join(settings.savepoints_dir(), job.name),
                                         settings.storage_options)
    return savepoint.create(sources, source_storage, parent, target_storage, job=job.name,
                            origin={"kind": "job", "job_id": job.id}, restored_from=job.restored_from,
                            workers=settings.transfer_workers, attempts=settings.savepoint_attempts,
                            progress=progress)


STOP_REPORT_GRACE = 30.0  # beyond the stop's own timeout, for an agent to report its queries' end


def stop_job(settings: Settings, reference: str, target_dir: str | None = None, timeout: float = 60.0,
             progress: Progress | None = None, cancelled: bool = False,
             sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> dict[str, Any]:
    """Stop every query at its next micro-batch boundary (interrupted after ``timeout``), savepoint the
    checkpoints while the driver exits, and return once both are done."""
    registry = Registry(settings.home_url())
    job = registry.resolve(reference)
    result, exiting = _stop_with_savepoint(settings, registry, job, target_dir, timeout, progress, sleep, clock)
    result["job"] = _record_stopped(registry, job, cancelled, exiting, result["phases"])
    return result


def _stop_with_savepoint(settings: Settings, registry: Registry, job: Job, target_dir: str | None, timeout: float,
                         progress: Progress | None, sleep, clock) -> tuple[dict[str, Any], _DriverExit]:
    """The savepoint at the boundary, and the driver's exit, already under way (the savepoint reads only
    the stopped queries' checkpoints, so the two overlap)."""
    started = clock()
    stopped = _await_boundary(client_for(registry, job), job, timeout, progress or NullProgress(), sleep, clock)
    if not stopped:
        raise JobNotRunningError(f"job {job.id} runs no streaming query to stop")
    boundary = clock()
    exiting = _DriverExit(job, sleep, clock)
    result = savepoint.created_summary(_create(settings, job, _job_sources(stopped), target_dir, progress))
    result["phases"] = {"boundary": round(boundary - started, 3), "savepoint": round(clock() - boundary, 3)}
    outcome = {q["name"]: q for q in stopped}
    for query in result["queries"]:
        # The checkpoint has the last word: a planned batch without its commit was interrupted.
        query["at_boundary"] = bool(outcome[query["name"]]["at_boundary"]) and query["planned_batch_id"] is None
        query["replayed_batch_id"] = query["planned_batch_id"]
    return result, exiting


def _await_boundary(client, job: Job, timeout: float, progress: Progress, sleep, clock) -> list[dict[str, Any]]:
    """The agent's account of its queries once every one has ended at its next batch boundary (or was
    interrupted at ``timeout``), showing what is being waited for meanwhile."""
    give_up = clock() + timeout + STOP_REPORT_GRACE
    try:
        report = client.request_stop(timeout)
        while not report["done"]:
            if clock() > give_up:
                where = f"its driver log: {job.log_path}" if job.detached else "the driver's output above"
                raise JobFailedError(f"job {job.id} did not report the end of its queries within "
                                     f"{timeout + STOP_REPORT_GRACE:g} s; see {where}")
            progress.waiting(_waiting_message(report))
            sleep(0.05)
            report = _next_report(client, job, report)
    except KeyboardInterrupt:
        raise StopInterruptedError(f"interrupted: job {job.id} goes on ending its queries at their batch boundaries, "
                                   f"without a savepoint; their checkpoints stay under {job.checkpoint_root} "
                                   "(`sparkpoint savepoint --from-checkpoint` takes one)") from None
    finally:
        progress.finish()
    return report["queries"]


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


class _DriverExit:
    """Waits, on a thread of its own, for a stopped driver to exit (ending it after a grace period)."""

    def __init__(self, job: Job, sleep, clock):
        self._clock = clock
        self._started = clock()
        self._seconds: float | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(job, sleep), name="sparkpoint-driver-exit",
                                        daemon=True)
        self._thread.start()

    def _run(self, job: Job, sleep) -> None:
        try:
            _end_driver(job, grace=30.0, sleep=sleep)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller by wait()
            self._error = exc
        self._seconds = self._clock() - self._started

    def wait(self) -> float:
        """Seconds from the boundary to the driver's exit; what ending it raised, if anything did."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        return round(self._seconds or 0.0, 3)


def _record_stopped(registry: Registry, job: Job, cancelled: bool, exiting: _DriverExit,
                    phases: dict[str, float]) -> dict[str, Any]:
    """Once the stopped driver has exited: record how the job ended (and how long that took)."""
    phases["driver_exit"] = exiting.wait()
    job = registry.load(job.id)
    if cancelled or state_of(job) in ACTIVE_STATES or state_of(job) == "lost":
        job.ended = {"state": "cancelled" if cancelled else "finished", "reason": "stopped with savepoint",
                     "at": iso()}
        registry.save(job)
    return describe_job(registry.load(job.id))


def cancel_job(settings: Settings, reference: str, sleep: Callable[[float], None] = time.sleep) -> dict[str, Any]:
    """Stop without savepoint. Works without the agent: the process group is ended."""
    registry = Registry(settings.home_url())
    job = registry.resolve(reference)
    state = state_of(job)
    if state in ("finished", "failed", "cancelled"):
        raise JobNotRunningError(f"job {job.id} is already {state}")
    try:
        client_for(registry, job).cancel()
        grace = 15.0  # the queries are stopped: let the application end by itself
    except SparkpointError:
        grace = 0.0  # an agent gone, wedged or not up yet: nobody else will end the driver
    _end_driver(job, grace=grace, sleep=sleep)
    job.ended = {"state": "cancelled", "reason": "cancel", "previous_state": state, "at": iso()}
    registry.save(job)
    return describe_job(registry.load(job.id))


def _end_driver(job: Job, grace: float, sleep: Callable[[float], None]) -> None:
    """Let the driver end by itself within ``grace``; then end it: through the master for a cluster-mode
    driver (the bootstrap's watchdog ends its Python when the JVM goes), else its process group."""
    if not job.submission_id:
        _await_exit(job, grace, sleep)
        return
    master = StandaloneMaster(job.master)
    waited = 0.0
    while DRIVER_STATES.get(master.driver_state(job.submission_id).get("driverState"), "lost") in ACTIVE_STATES:
        if waited >= grace:
            master.kill(job.submission_id)
            return
        sleep(0.2)
        waited += 0.2


def _await_exit(job: Job, grace: float, sleep: Callable[[float], None]) -> None:
    """Let the driver exit by itself within ``grace``, then end its whole process group: only the driver's,
    recognised by its start time (its pid may be another process's by now)."""
    start = driver_start(job)
    waited = 0.0
    while start is not None and pid_alive(job.pid, start) and waited < grace:
        sleep(0.2)
        waited += 0.2
    if start is not None and pid_alive(job.pid, start):
        terminate_group(job.pid, start)
    else:
        signal_group(job.pid, start, signal.SIGKILL)  # leftovers of the group (a Python driver outliving its JVM)


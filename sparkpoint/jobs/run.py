"""`sparkpoint run`: an application launched under spark-submit (or by a standalone master in cluster
mode), restored from a savepoint when asked, or taking over from a running job (`--replace`).

Waiting is done with the ``sleep`` and ``clock`` given, so tests need not wait for real.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from sparkpoint.adapters import spark_submit
from sparkpoint.adapters.processes import process_start
from sparkpoint.adapters.standalone import StandaloneMaster, submission_properties
from sparkpoint.adapters.transfer import Progress
from sparkpoint.config import Settings
from sparkpoint.errors import (
    BadArgumentError,
    IncompatibleUpgradeError,
    JobFailedError,
    NotFoundError,
    SparkpointError,
)
from sparkpoint.jobs.check import CheckRequest, Launch, check_upgrade
from sparkpoint.jobs.drivers import await_cluster_driver, await_end, await_start, end_driver
from sparkpoint.jobs.registry import Job, JobView, Registry, client_for, describe_job
from sparkpoint.jobs.rollback import watch_probation
from sparkpoint.jobs.replace import take_over
from sparkpoint.jobs.stop import Stopped
from sparkpoint.savepoints import catalog
from sparkpoint.savepoints.restore import restore
from sparkpoint.jobs.savepoint import savepoint_job
from sparkpoint.savepoints.savepoint import Savepoint
from sparkpoint.savepoints.savepoint import load as load_savepoint
from sparkpoint.times import iso

BOOTSTRAP = str(Path(__file__).resolve().parents[1] / "runtime" / "bootstrap.py")


@dataclass
class RunRequest(Launch):
    name: str | None = None
    detach: bool = False
    savepoint: str | None = None
    claim: bool = False
    replace: str | None = None  # a running job to stop with a savepoint and continue from
    savepoint_path: str | None = None  # with replace: where that savepoint goes
    stop_timeout: float = 60.0  # with replace: seconds to wait for the old job's batch boundary
    deploy_mode: str = "client"  # cluster: the standalone master runs the driver (REST submission)
    check: bool = True  # with -s or --replace: refuse an application that will not restore (sparkpoint check)
    probation: float | None = 30.0  # with replace: seconds past the new version's first batch to roll back in


def run_job(settings: Settings, request: RunRequest, progress: Progress | None = None,
            sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic,
            start_timeout: float = 180.0) -> JobView:
    """Launch the application under spark-submit, restored from a savepoint when asked."""
    app = os.path.abspath(request.app)
    if not os.path.isfile(app):
        raise NotFoundError(f"application {request.app} does not exist")
    conf_args = spark_submit.conf_arguments(request.confs)
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
        saved = catalog.load(settings, request.savepoint)
    upgrade_check = _check_upgrade(settings, request, saved, replaced, progress) if saved or replaced else None
    job = registry.new_job(
        request.name or Path(app).stem.replace("_", "-"), app=app, app_args=request.app_args,
        master=request.master, submit_args=request.submit_args, detached=request.detach,
        restored_from=saved.path if saved else None, upgrade_check=upgrade_check, confs=request.confs,
    )
    try:
        process = _launch(settings, job, app, request, conf_args, master, saved, replaced is not None, progress)
    except BaseException as exc:
        job.ended = {"state": "failed", "error": str(exc), "at": iso()}
        registry.save(job)
        raise
    registry.save(job)
    if master is not None:
        return await_cluster_driver(registry, job, request.detach, sleep, clock, start_timeout)
    handover = None
    if replaced is not None:
        handover = take_over(settings, registry, job, process, replaced, request.savepoint_path,
                             request.stop_timeout, progress, sleep, clock, start_timeout)
        rolled_back = _on_probation(settings, registry, job, replaced, handover, request, progress, sleep, clock,
                                    start_timeout)
        if rolled_back is not None:
            return rolled_back
    if request.detach:
        info = await_start(registry, job, process, sleep, clock, start_timeout)
    else:
        info = await_end(registry, job, process)
    return replace(info, replaced=handover) if handover else info


def _on_probation(settings: Settings, registry: Registry, job: Job, replaced: Job, handover: Stopped,
                  request: RunRequest, progress: Progress | None, sleep, clock, start_timeout: float) -> JobView | None:
    """The new version watched after the hand-over: None if it passes (or --no-rollback), else its view once
    the version it replaced runs again."""
    if request.probation is None:
        return None
    cut = {q.name: q.batch_id for q in handover.queries}
    failure = watch_probation(registry, job, cut, request.probation, request.restore_grace, sleep, clock)
    if failure is None:
        return None
    again = _roll_back(settings, registry, job, replaced, handover, failure, progress, sleep, clock, start_timeout)
    return replace(describe_job(registry.load(job.id)), replaced=handover, rolled_back=again)


def _roll_back(settings: Settings, registry: Registry, failed: Job, previous: Job, handover: Stopped, failure: str,
               progress: Progress | None, sleep, clock, start_timeout: float) -> JobView:
    """Start the version ``failed`` replaced again, with the application path, arguments, spark-submit options,
    confs and deploy mode of its record, from the hand-over's savepoint: it continues at exactly the cut.
    Detached: its output goes to its driver.log. The failed job's record says so first, so that a relaunch
    that fails too leaves the way back written down."""
    end_driver(failed, grace=10.0, sleep=sleep, clock=clock)  # a failed driver may linger (a JVM left waiting)
    failed = registry.load(failed.id)
    failed.rollback = {"rolled_back_to": None, "error": failure, "savepoint": handover.path, "at": iso()}
    registry.save(failed)
    try:
        again = run_job(settings, RunRequest(
            app=previous.app, app_args=previous.app_args, submit_args=previous.submit_args, master=previous.master,
            confs=previous.confs, name=previous.name, detach=True, savepoint=handover.path, check=False,
            deploy_mode="cluster" if previous.submission_id else "client",
        ), progress, sleep, clock, start_timeout)
    except SparkpointError as exc:
        raise JobFailedError(f"job {failed.id} failed on probation ({failure}), and starting {previous.id}'s version "
                             f"again failed too: {exc}; its savepoint from the hand-over is {handover.path}") from None
    now = iso()
    restarted = registry.load(again.id)
    restarted.upgrade_check = {"skipped": f"rollback: the version {failed.id} replaced, as it ran before", "at": now}
    restarted.rollback = {"rollback_of": failed.id, "at": now}
    registry.save(restarted)
    failed = registry.load(failed.id)
    failed.rollback = {**failed.rollback, "rolled_back_to": again.id, "at": now}
    registry.save(failed)
    return describe_job(registry.load(again.id))


def _check_upgrade(settings: Settings, request: RunRequest, saved: Savepoint | None, replaced: Job | None,
                   progress: Progress | None) -> dict[str, Any]:
    """Before anything is stopped or started: will the application restore? Raises IncompatibleUpgradeError
    if not. A job to replace is checked against a savepoint of it taken now, without pausing it (the one
    the hand-over takes comes later, at the boundary), in a scratch directory removed afterwards."""
    if not request.check:
        return {"skipped": "--no-check", "at": iso()}
    checking = CheckRequest(**{f.name: getattr(request, f.name) for f in fields(Launch)},
                            timeout=request.restore_grace + 240.0)
    scratch = tempfile.mkdtemp(prefix="sparkpoint-precheck-") if replaced else None
    try:
        if replaced is not None:
            saved = load_savepoint(savepoint_job(settings, replaced.id, scratch, progress=progress).path)
        checked = check_upgrade(settings, saved, checking, progress)
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    if not checked.compatible:
        problems = "; ".join(problem.message for problem in checked.problems)
        raise IncompatibleUpgradeError(f"{request.app} will not restore from {saved.manifest['id']}, so nothing was "
                                       f"stopped or started: {problems} (`sparkpoint check` shows the details; "
                                       "--no-check skips it)")
    return {"compatible": True, "savepoint": saved.path if not replaced else None, "seconds": checked.seconds,
            "notes": checked.notes, "at": iso()}


def _launch(settings: Settings, job: Job, app: str, request: RunRequest, conf_args: list[str],
            master: StandaloneMaster | None, saved: Savepoint | None, replacing: bool,
            progress: Progress | None) -> subprocess.Popen | None:
    """Restore the savepoint into the job's checkpoints and start its driver: spark-submit here (its
    process), or a submission to the standalone master (None; the submission id is recorded in ``job``)."""
    if saved is not None:
        restore(saved, job.checkpoint_root, mode="claim" if request.claim else "auto",
                workers=settings.transfer_workers, progress=progress)
    driver_settings = {
        "SPARKPOINT_RESTORE_GRACE": str(request.restore_grace),
        "SPARKPOINT_ALLOW_NON_RESTORED_STATE": "1" if request.allow_non_restored_state else "0",
        "SPARKPOINT_EXPECTED_QUERIES": ",".join(q["name"] for q in saved.queries) if saved else "",
        **({"SPARKPOINT_HANDOVER_FROM": str(os.getpid())} if replacing else {}),
    }
    checkpoint_conf = f"spark.sql.streaming.checkpointLocation={job.checkpoint_root}"
    if master is not None:
        job.submission_id = _submit(master, job, app, request, [*conf_args, "--conf", checkpoint_conf],
                                    driver_settings)
        return None
    argv = [spark_submit.spark_submit(), "--master", request.master, "--name", job.id,
            "--conf", checkpoint_conf, *conf_args, *request.submit_args, BOOTSTRAP, job.directory, app,
            *request.app_args]
    # Foreground: the driver's output goes to stderr, so stdout stays clean for --output json.
    process = spark_submit.launch(argv, {**spark_submit.driver_environment(), **driver_settings},
                                  job.log_path if request.detach else None,
                                  stdout=None if request.detach else sys.stderr)
    job.pid, job.pid_start = process.pid, process_start(process.pid)
    return process


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



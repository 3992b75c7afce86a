"""A run's driver started: spark-submit here, its cluster manager's submission in cluster mode, or a standby
driver adopted; then, while it starts, the savepoint put in its checkpoints and its first query let go (the
hand-over). What is launched, and when, is jobs.run's."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Callable

from sparkpoint.adapters import spark_submit
from sparkpoint.adapters.class_archives import built_archive
from sparkpoint.adapters.cluster_managers.manager import ClusterManager, DriverLaunch
from sparkpoint.adapters.processes import process_start
from sparkpoint.adapters.spark_install import Spark
from sparkpoint.adapters.transfer import Progress
from sparkpoint.config import Settings
from sparkpoint.errors import JobFailedError
from sparkpoint.jobs.check import prepare_in_driver
from sparkpoint.jobs.drivers import driver_running, end_driver
from sparkpoint.jobs.job_record import Job
from sparkpoint.jobs.protocol import answer_handover
from sparkpoint.jobs.registry import Registry
from sparkpoint.jobs.run_request import RunRequest
from sparkpoint.jobs.standby import BOOTSTRAP, AdoptedDriver, Standby, adopt, call_off, claim_for, client_command
from sparkpoint.jobs.upgrade_check import check_request
from sparkpoint.paths import spark_uri
from sparkpoint.savepoints.restore import restore
from sparkpoint.savepoints.savepoint import Savepoint
from sparkpoint.times import iso

# A cluster-mode driver waiting for its hand-over gives up after its start and the old job's stop, and this
# much more: the stop's savepoint and its restore into the new job's checkpoints, minutes for a large state.
HANDOVER_RESTORE_MARGIN = 900.0



def restore_while_it_starts(settings: Settings, registry: Registry, job: Job, process: subprocess.Popen | None,
                             saved: Savepoint, request: RunRequest, progress: Progress | None) -> None:
    """Put ``saved`` in the job's checkpoints while its driver starts (the JVM, the Spark session, the application
    up to its first query start: seconds, and the restore's copies to HDFS or S3 take seconds too), then let it
    start its queries. A restore that fails ends the driver before any query started; a driver that ended first
    (its application failed before its first query) is not restored for, nor handed a claimed savepoint."""
    def still_running(when: str) -> None:
        if not driver_running(registry, job, process):
            raise JobFailedError(f"job {job.id}'s driver ended {when}")

    try:
        still_running("before its savepoint was restored")
        restore(saved, job.checkpoint_root, mode="claim" if request.claim else "auto",
                workers=settings.transfer_workers, progress=progress, fork=request.fork,
                storage_options=settings.storage_options)
        still_running(f"while its savepoint was restored (the state is in {job.checkpoint_root})")
    except BaseException as exc:
        answer_handover(job.directory, {"abort": f"the restore of {saved.manifest['id']} failed: {exc}"})
        if driver_running(registry, job, process):
            end_driver(job, grace=0.0)
        raise
    job.launch = {**(job.launch or {}), "restored": iso()}
    answer_handover(job.directory, {"expected_queries": [q["name"] for q in saved.queries]})


def _handover_settings(cluster: bool, stop_timeout: float, start_timeout: float) -> dict[str, str]:
    """How a driver waits for its hand-over (the restore of `run -s`, `run --replace`'s stop and restore): watching
    this process, or, from a machine where it cannot (cluster mode), for a bounded time, so that a `run` gone for
    good leaves no driver waiting forever: its own start, the old job's stop, and a margin for the savepoint and
    its restore."""
    if not cluster:
        return {"SPARKPOINT_HANDOVER_FROM": str(os.getpid())}
    wait = start_timeout + stop_timeout + HANDOVER_RESTORE_MARGIN
    return {"SPARKPOINT_HANDOVER_FROM": "cluster", "SPARKPOINT_HANDOVER_WAIT": f"{wait:g}"}


def standby_for(settings: Settings, registry: Registry, request: RunRequest, spark: Spark | None,
                 conf_args: list[str], name: str) -> tuple[Standby | None, list[str]]:
    """A ready standby of job name ``name`` launched as this run's driver would be, claimed, and why any other of
    that name was passed over. Only a detached client-mode run adopts one: a foreground run streams its driver's
    output, which a standby writes to its log."""
    if not (request.standby and request.detach and request.deploy_mode == "client" and spark is not None):
        return None, []
    return claim_for(registry, spark, name, request.master, conf_args, list(request.submit_args),
                     settings.checkpoints)


@contextlib.contextmanager
def called_off_on_failure(standby: Standby | None):
    """A claimed standby hears that its run failed before handing it the application."""
    try:
        yield
    except BaseException as exc:
        if standby is not None:
            call_off(standby, f"its run failed first: {str(exc) or type(exc).__name__}")
        raise


def launch(settings: Settings, job: Job, app: str, request: RunRequest, conf_args: list[str],
            manager: ClusterManager, spark: Spark | None, saved: Savepoint | None, replacing: bool,
            checked_against: Savepoint | None, progress: Progress | None,
            start_timeout: float, standby: Standby | None = None,
            save: Callable[[Job], None] | None = None) -> subprocess.Popen | AdoptedDriver | None:
    """Start the job's driver: spark-submit of the Spark chosen, here (its process), or in cluster mode through its
    manager (None; the id the manager knows the driver by is recorded in ``job``). ``checked_against``: the
    savepoint the driver checks the application against. A driver that restores ``saved`` or takes over a job
    (``replacing``) holds its first query start until `run` has put the state in place and says so. ``standby``:
    a claimed standby (jobs.standby), handed the application instead of a spark-submit launched, once ``job`` is
    saved with its process."""
    cluster = request.deploy_mode == "cluster"
    check_settings = {}
    if checked_against is not None:
        check_settings = prepare_in_driver(settings, checked_against, job.directory, check_request(request),
                                           None if cluster else os.getpid(), replacing, progress)
    driver_settings = {
        **check_settings,
        "SPARKPOINT_RESTORE_GRACE": str(request.restore_grace),
        "SPARKPOINT_ALLOW_NON_RESTORED_STATE": "1" if request.allow_non_restored_state else "0",
        **(_handover_settings(cluster, request.stop_timeout, start_timeout) if replacing or saved else {}),
    }
    checkpoint_conf = ["--conf", f"spark.sql.streaming.checkpointLocation={spark_uri(job.checkpoint_root)}"]
    if cluster:
        try:
            job.submission_id = manager.submit(DriverLaunch(
                job_id=job.id, job_directory=job.directory, bootstrap=BOOTSTRAP,
                arguments=[job.directory, app, *request.app_args],
                submit_args=[*request.submit_args, *conf_args, *checkpoint_conf], environment=driver_settings,
                spark=spark))
        except BaseException as exc:
            # The manager may have taken the driver before the submission failed here (YARN: the application
            # found by its tag too late): one waiting for its hand-over must not hold its container for long.
            if replacing or saved:
                answer_handover(job.directory, {"abort": f"its submission failed: {exc}"})
            raise
        return None
    if standby is not None:
        driver = adopt(standby, job, save, app, request.app_args, driver_settings)
        job.note("standby", f"adopted standby {standby.id}, launched with {standby.like}'s options")
        return driver
    argv = [*client_command(spark, request.master, job.id, job.checkpoint_root, conf_args, request.submit_args),
            job.directory, app, *request.app_args]
    environment = spark_submit.driver_environment(spark, crash_reports=job.directory,
                                                  class_archive=built_archive(settings.class_archives_dir(), spark))
    # Foreground: the driver's output goes to stderr, so stdout stays clean for --output json.
    process = spark_submit.launch(argv, {**environment, **driver_settings}, job.log_path if request.detach else None,
                                  stdout=None if request.detach else sys.stderr)
    job.pid, job.pid_start = process.pid, process_start(process.pid)
    return process

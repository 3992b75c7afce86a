"""`sparkpoint run`: an application launched under spark-submit (or by its cluster manager in cluster mode),
restored from a savepoint when asked, or taking over from a running job (`--replace`).

Waiting is done with the ``sleep`` and ``clock`` given, so tests need not wait for real.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from sparkpoint.adapters import spark_submit
from sparkpoint.adapters.spark_install import find_spark
from sparkpoint.adapters.cluster_managers import manager_for
from sparkpoint.adapters.transfer import Progress
from sparkpoint.config import Settings
from sparkpoint.errors import JobFailedError, NotFoundError, SparkpointError, StopRefusedError
from sparkpoint.jobs.upgrade_check import (
    check_before_launch,
    check_in_driver,
    check_move,
    NotCheckableInDriver,
    check_said,
    checkable_in_driver,
    savepoint_to_check,
)
from sparkpoint.jobs.live import LiveQuery
from sparkpoint.jobs.protocol import real_time_stop_seconds
from sparkpoint.jobs.drivers import (await_cluster_driver, await_end, await_start, end_interrupted, end_launched)
from sparkpoint.jobs.agents import client_for
from sparkpoint.jobs.job_view import JobView, describe_job
from sparkpoint.jobs.job_record import Job
from sparkpoint.jobs.registry import Registry, is_job_name
from sparkpoint.jobs.query_owners import claiming, refuse_running, restored_ids
from sparkpoint.jobs.rollback import (Probation, Relaunch, WayBack, app_digest, check_restartable, on_probation,
                                     parse_condition, roll_back, way_back_to)
from sparkpoint.jobs.replace import HandoverFailedError, take_over
from sparkpoint.jobs.driver_launch import called_off_on_failure, launch, restore_while_it_starts, standby_for
from sparkpoint.jobs.run_request import RunRequest, refuse_what_cannot_go_together
from sparkpoint.spark.delta_log import DELTA_SINK
from sparkpoint.savepoints import catalog, restorability
from sparkpoint.savepoints.migration import SparkMove
from sparkpoint.savepoints.rescale import needs_rescale, rescale
from sparkpoint.jobs.sinks import SinkRolledBack, TableRolledBack, log_interval, roll_back_sinks
from sparkpoint.jobs.sinks_ahead import pending, refuse_sinks_ahead
from sparkpoint.savepoints.savepoint import Savepoint
from sparkpoint.savepoints.savepoint import load as load_savepoint
from sparkpoint.times import iso


def run_job(settings: Settings, request: RunRequest, progress: Progress | None = None,
            sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic,
            start_timeout: float = 180.0, rollback_of: Job | None = None,
            warn: Callable[[str], None] | None = None) -> JobView:
    """Launch the application under spark-submit, restored from a savepoint when asked. ``rollback_of``: the
    failed new version this run starts the previous version in place of (run's own rollback). ``warn`` hears,
    before the launch, of what the restored version will not do (a file sink that skips its batches)."""
    rolled: list[SinkRolledBack | TableRolledBack] = []
    view = _run_job(settings, request, progress, sleep, clock, start_timeout, rollback_of, warn or _unheard, rolled)
    return replace(view, sink_rollbacks=rolled) if request.rollback_sink or rolled else view


def _unheard(_message: str) -> None:
    pass


def _run_job(settings: Settings, request: RunRequest, progress: Progress | None, sleep: Callable[[float], None],
             clock: Callable[[], float], start_timeout: float, rollback_of: Job | None, warn: Callable[[str], None],
             rolled: list[SinkRolledBack | TableRolledBack], in_driver: bool = True) -> JobView:
    began = iso()  # the start's first milestone (jobs.startup)
    app = os.path.abspath(request.app)
    if not os.path.isfile(app):
        raise NotFoundError(f"application {request.app} does not exist")
    conf_args = spark_submit.conf_arguments(request.confs)
    conditions = [parse_condition(text) for text in request.healthy_when]
    registry = Registry(settings.home_url())
    saved, replaced, way_back, kept_sinks, restored = None, None, None, [], {}
    refuse_what_cannot_go_together(request)
    manager = manager_for(request.master)  # a bad master URL, or a mode it cannot run, fails before anything runs
    manager.refuse_deploy_mode(request.deploy_mode)
    # The Spark that runs spark-submit here (a standalone master's REST submission needs none): refused before
    # anything runs.
    spark = find_spark(request.spark_home) if manager.needs_spark_here(request.deploy_mode) else None
    if request.replace:
        replaced = registry.resolve(request.replace)
        # Exit 12 now, before a driver starts, if it does not run; 21 if its stop would cut a real-time batch short.
        _refuse_short_stop(replaced, client_for(registry, replaced).status(), request.stop_timeout)
    elif request.savepoint:
        saved = catalog.load(settings, request.savepoint)
        restored = restored_ids(saved.queries, request.fork)  # the query ids it will run (a rescale keeps them)
        if rollback_of is None:  # a rollback restarts the version that ran, come what may: a refusal ends both
            refuse_running(registry, restored, saved.path)
            restorability.require_input(saved, settings.kafka, request.allow_data_loss, warn,
                                        storage_options=settings.storage_options)
            if request.rollback_sink:  # planned now: a rollback refused (exit 18) must start no driver
                roll_back_sinks(settings, saved, dry_run=True, compact_interval=log_interval(request.confs),
                                writers_checked=True)
            else:
                kept_sinks = refuse_sinks_ahead(settings, saved, request.fork, request.keep_sink_output, warn)
    if request.rollback_to:
        way_back = replace(way_back_to(settings, registry, request.rollback_to, saved),
                           rollback_sink=request.rollback_sink)
    if request.probation is not None and (replaced or way_back):
        check_restartable(replaced or way_back.previous)
    if saved and request.partitions is not None and needs_rescale(saved, request.partitions):
        # Its Spark session stopped: the job's driver runs beside this process.
        saved = load_savepoint(rescale(settings, saved, request.partitions, stop_spark=True,
                                       progress=progress).savepoint.path)
    # --replace: the savepoint it checks against, in a scratch directory kept until the new driver has its sandbox.
    cleanup = contextlib.ExitStack()
    with cleanup:
        upgrade_check = None  # nothing is restored (nothing to check), or checked in the job's own driver
        # The new driver itself tries the saved queries (runtime.gate) instead of a Spark started for the check alone,
        # before anything stops (upgrade_check says when it cannot); a claim, which hands the savepoint over at the
        # launch, is checked before it: a refusal must leave the savepoint where it was.
        to_check = saved
        if replaced is not None and request.check:
            to_check, scratch = savepoint_to_check(settings, replaced, progress)
            cleanup.callback(shutil.rmtree, scratch, ignore_errors=True)
        checked_in_driver = (to_check is not None and request.check and rollback_of is None and not request.claim
                             and in_driver and checkable_in_driver(to_check, replaced is not None))
        moved = (check_move(to_check, spark, request, refuse=checked_in_driver)
                 if to_check is not None and spark is not None else SparkMove(None, [], []))
        if rollback_of is not None:
            upgrade_check = {"skipped": f"rollback: the version {rollback_of.id} replaced, as it ran before",
                             "at": iso()}
        elif not request.check and (saved or replaced):
            upgrade_check = {"skipped": "--no-check", "at": iso()}
        elif to_check is not None and not checked_in_driver:
            upgrade_check = check_before_launch(settings, request, to_check, replaced is not None, progress)
        conf_args += spark_submit.conf_arguments(moved.launch_confs or (upgrade_check or {}).get("confs", []))
        # A sink is rolled back once the check has let the first query go: an upgrade refused moves nothing.
        sink_notes = (_sinks_before_launch(settings, request, saved, warn, rolled, rollback_of)
                      if saved and not (checked_in_driver and request.rollback_sink) else [])
        follows = (rollback_of or replaced or way_back and way_back.previous
                   or registry.taken_of(saved.manifest if saved else None))
        name = request.name or _default_name(app, replaced, None if request.fork else saved)
        standby, passed_over = standby_for(settings, registry, request, spark, conf_args, name)
        # Checked again under the registry's lock, held until the new job's record names its driver: two `run -s`
        # of one savepoint at once, the second refused by the first's record.
        with contextlib.ExitStack() as claim:
            with called_off_on_failure(standby):
                claim.enter_context(claiming(registry, {} if rollback_of else restored, saved.path if saved else "",
                                             progress))
                job = registry.new_job(
                    name, checkpoints_under=settings.checkpoints, app=app, app_args=request.app_args,
                    master=request.master, submit_args=request.submit_args, detached=request.detach,
                    restored_from=saved.path if saved else None, upgrade_check=upgrade_check, confs=request.confs,
                    follows=follows.id if follows else None, fork=bool(saved and request.fork),
                    rollback={"rollback_of": rollback_of.id, "at": iso()} if rollback_of else None,
                    app_sha256=app_digest(app), spark_home=spark.home if spark else None,
                    spark_version=spark.version if spark else None, launch={"at": began},
                    reserved=standby.directory if standby else None, query_ids=sorted(restored),
                )
                job.note("started", _started(job, request, saved, replaced, rollback_of))
                for line in passed_over:
                    job.note("standby", line)
                if upgrade_check is not None:
                    job.note("check", check_said(upgrade_check))
                for event, note in [*sink_notes, *(("sink_kept", line) for line in kept_sinks)]:
                    job.note(event, note)
            try:
                with called_off_on_failure(standby):  # the adoption is launch's last step: nothing was handed over
                    process = launch(settings, job, app, request, conf_args, manager, spark, saved,
                                      replaced is not None, to_check if checked_in_driver else None, progress,
                                      start_timeout, standby, registry.save)
                if saved is not None:
                    registry.save(job)  # its driver known (listed starting) while the savepoint is put in place
                    claim.close()
                    restore_while_it_starts(settings, registry, job, process, saved, request, progress)
            except BaseException as exc:
                if isinstance(exc, KeyboardInterrupt):
                    end_launched(job, sleep, clock)  # its record is saved below, with what this run noted in it
                    job.end("cancelled", reason="interrupted")
                else:
                    job.end("failed", error=str(exc))
                registry.save(job)
                raise
        registry.save(job)
    if checked_in_driver:
        try:
            check_in_driver(registry, job, process, to_check, request, moved,
                            lambda: _rolled_back_before_the_first_query(settings, registry, job, request, saved, warn,
                                                                        rolled) if saved else None, progress, sleep,
                            clock, start_timeout, replaced)
        except NotCheckableInDriver:
            return _run_job(settings, request, progress, sleep, clock, start_timeout, rollback_of, warn, rolled,
                            in_driver=False)
        except KeyboardInterrupt:
            end_interrupted(registry, job, sleep, clock)
            raise
        job = registry.load(job.id)  # with the verdict it recorded, which a later save of this job must keep
    handover = None
    if replaced is not None:
        try:
            handover = take_over(settings, registry, job, process, replaced, request.savepoint_path,
                                 request.stop_timeout, progress, sleep, clock, start_timeout)
        except HandoverFailedError as exc:  # the old job stopped, the new one did not start: nothing runs
            if request.probation is None:
                raise JobFailedError(f"{exc}; {replaced.id}'s version restores from {exc.savepoint} (run -s)") from None
            way_back = WayBack(replaced, exc.savepoint, {})
            again = roll_back(settings, registry, job, way_back, Probation(str(exc), str(exc)),
                              _relaunch(settings, progress, sleep, clock, start_timeout), sleep, clock)
            return replace(describe_job(registry.load(job.id)), rolled_back=again)
        way_back = WayBack(replaced, handover.path, {q.name: q.batch_id for q in handover.queries})
    if way_back is not None and request.probation is not None:
        rolled_back = on_probation(settings, registry, job, process, way_back, conditions, request.probation,
                                   request.restore_grace, request.detach,
                                   _relaunch(settings, progress, sleep, clock, start_timeout), sleep, clock)
        if rolled_back is not None:
            return replace(rolled_back, replaced=handover) if handover else rolled_back
    if process is None:  # the cluster manager runs the driver
        return await_cluster_driver(registry, job, request.detach, sleep, clock, start_timeout)
    if request.detach:
        try:
            info = await_start(registry, job, process, sleep, clock, start_timeout)
        except KeyboardInterrupt:
            if handover is None:  # a job that took over from another runs on: it is the only one left
                end_interrupted(registry, job, sleep, clock)
            raise
    else:
        info = await_end(registry, job, process)
    return replace(info, replaced=handover) if handover else info


def _relaunch(settings: Settings, progress: Progress | None, sleep: Callable[[float], None],
              clock: Callable[[], float], start_timeout: float) -> Relaunch:
    """How a rollback starts the version before a failed one again: a run of its own, detached (its output goes
    to its driver.log), with the application path, arguments, spark-submit options, confs and deploy mode of its
    record, from the way back's savepoint, unchecked: it continues at exactly that cut, as it ran before."""
    def relaunch(way_back: WayBack, failed: Job) -> JobView:
        previous = way_back.previous
        return run_job(settings, RunRequest(
            app=previous.app, app_args=previous.app_args, submit_args=previous.submit_args, master=previous.master,
            confs=previous.confs, name=previous.name, detach=True, savepoint=way_back.savepoint, check=False,
            spark_home=previous.spark_home,
            deploy_mode="cluster" if previous.submission_id else "client", rollback_sink=way_back.rollback_sink,
        ), progress, sleep, clock, start_timeout, rollback_of=failed)
    return relaunch


def _sinks_before_launch(settings: Settings, request: RunRequest, saved: Savepoint, warn: Callable[[str], None],
                         rolled: list[SinkRolledBack | TableRolledBack], rollback_of: Job | None = None,
                         launching: str | None = None) -> list[tuple[str, str]]:
    """With --rollback-sink, the file sinks and Delta tables rolled back to the savepoint's cut (into
    ``rolled``); without, a warning for each file sink that holds batches after the cut, which the restored
    version would skip, and on a probation's way back (``rollback_of``) its Delta tables rolled back. What was
    said, for the job's history."""
    if request.rollback_sink:
        rolled.extend(roll_back_sinks(settings, saved, compact_interval=log_interval(request.confs),
                                      launching=launching))
        return [("sink_rollback", r.said()) for r in rolled]
    if rollback_of is not None:
        _tables_back(settings, saved, warn, rolled)
    said = pending(settings, saved, log_interval(request.confs))
    for warning in said:
        warn(warning)
    return [("sink_rollback", r.said()) for r in rolled] + [("sink_skips", warning) for warning in said]


def _tables_back(settings: Settings, saved: Savepoint, warn: Callable[[str], None],
                 rolled: list[SinkRolledBack | TableRolledBack]) -> None:
    """A probation's way back: the Delta tables the failed version wrote, under the query id it took from the
    savepoint, go back to its cut, or the version started again would skip those batches (keeping the failed
    version's rows) or, keeping state, fail after them. Refused (another writer committed after the cut), it is
    said, and the version starts all the same: the way back does not stop half-way."""
    def refused(why: str) -> None:
        warn(f"a Delta table of savepoint {saved.manifest['id']} was not rolled back for the way back: {why}")

    try:
        rolled.extend(roll_back_sinks(settings, saved, only=DELTA_SINK, on_refused=refused))
    except SparkpointError as exc:
        refused(str(exc))


def _rolled_back_before_the_first_query(settings: Settings, registry: Registry, job: Job, request: RunRequest,
                                        saved: Savepoint, warn: Callable[[str], None],
                                        rolled: list[SinkRolledBack | TableRolledBack]) -> None:
    """--rollback-sink with the check in the driver: once the check lets the first saved query go."""
    if request.rollback_sink:
        notes = _sinks_before_launch(settings, request, saved, warn, rolled, launching=job.id)
        latest = registry.load(job.id)
        for event, note in notes:
            latest.note(event, note)
        registry.save(latest)


def _refuse_short_stop(replaced: Job, status: dict[str, Any], stop_timeout: float) -> None:
    """Where the job being replaced runs a real-time query whose batch can outlast ``stop_timeout``: refused
    before anything starts (where that batch will be when the new driver is up, nobody knows)."""
    reported = status.get("queries") if isinstance(status, dict) else None
    lengths = [(query.name, query.real_time_batch_seconds) for query in LiveQuery.all_from(reported)
               if query.real_time_batch_seconds is not None]
    needed = max((real_time_stop_seconds(seconds) for _, seconds in lengths), default=0)
    if needed > stop_timeout:
        said = ", ".join(f"{name} (batches of {seconds:g} s)" for name, seconds in lengths)
        raise StopRefusedError(f"nothing was started: job {replaced.id} runs real-time query {said}, whose batch in "
                               f"flight its stop would cut short at --stop-timeout {stop_timeout:g} and write its "
                               f"output again after the restore; give --stop-timeout {needed} or more")


def _started(job: Job, request: RunRequest, saved: Savepoint | None, replaced: Job | None,
             rollback_of: Job | None) -> str:
    command = Path(job.app).name  # not its arguments: they may hold secrets, and the record keeps them private
    where = (f"to take over from {replaced.id}" if replaced else
             f"restored from {saved.path}" if saved else "with no savepoint")
    why = f", in place of {rollback_of.id}, which failed on probation" if rollback_of else ""
    fork = ", a fork (query ids of its own)" if saved and request.fork else ""
    return f"{command} ({request.deploy_mode} mode), {where}{fork}{why}"


def _default_name(app: str, replaced: Job | None, restored: Savepoint | None) -> str:
    """A new version goes on under its job's name (the replaced job's, or the job the savepoint was taken of): its
    savepoints beside the old ones, where retention and `--keep-last` count them, and the job's standby its own.
    A fork, or a savepoint whose job's name is not one sparkpoint gives, starts a job named after its file."""
    if replaced is not None:
        return replaced.name
    if restored is not None and is_job_name(restored.manifest["job"]):
        return restored.manifest["job"]
    return Path(app).stem.replace("_", "-")



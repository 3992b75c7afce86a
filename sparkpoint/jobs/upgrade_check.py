"""`run`'s check of an application against the saved state it restores, in the new job's own driver (see
runtime.gate) or, where it cannot be, before the launch in a driver of its own. `run -s`: the stop is behind and
the downtime under way, so no second Spark is started for it. `run --replace`: against a savepoint of the job
taken now, without pausing it, while it runs on; the new driver checks a single saved query at its start and
only then waits for the hand-over (runtime.handover), so the check costs no downtime and warms the JVM that
then loads the state. With several saved queries the application would start the first for real, held until
the hand-over, before it reached the others: they are checked in a driver of their own first. What was found is
recorded as the job's ``upgrade_check``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import fields
from typing import Any

from sparkpoint.adapters.transfer import NullProgress, Progress
from sparkpoint.config import Settings
from sparkpoint.errors import IncompatibleUpgradeError, SparkFailureError
from sparkpoint.adapters.spark_install import Spark
from sparkpoint.jobs.check import CheckRequest, Launch, await_in_driver, check_upgrade, migration_to
from sparkpoint.jobs.drivers import end_driver
from sparkpoint.jobs.protocol import START_CHECK_DIR, handover_waiting, held_start, read_agent_file
from sparkpoint.jobs.job_record import Job
from sparkpoint.jobs.job_state import ACTIVE_STATES, state_of
from sparkpoint.jobs.registry import Registry
from sparkpoint.jobs.run_request import RunRequest
from sparkpoint.jobs.savepoint import savepoint_job
from sparkpoint.savepoints import compat
from sparkpoint.savepoints.migration import SparkMove
from sparkpoint.savepoints.savepoint import Savepoint
from sparkpoint.savepoints.savepoint import load as load_savepoint
from sparkpoint.times import iso


def check_said(upgrade_check: dict[str, Any]) -> str:
    if "skipped" in upgrade_check:
        return f"skipped ({upgrade_check['skipped']})"
    where = " in its own driver" if upgrade_check.get("in_driver") else ""
    if not upgrade_check.get("compatible", True):
        return f"it does not restore (checked{where}): " + "; ".join(upgrade_check.get("problems") or [])
    unloaded = ", without loading the saved state" if upgrade_check.get("state_loaded") is False else ""
    return f"it restores (checked{where} in {upgrade_check['seconds']:.1f} s{unloaded})"


def savepoint_to_check(settings: Settings, replaced: Job, progress: Progress | None) -> tuple[Savepoint, str]:
    """`run --replace`: a savepoint of the job to replace, taken now without pausing it (the hand-over's comes
    later, at the boundary), and the scratch directory it is in, which the caller removes."""
    scratch = settings.scratch_dir("sparkpoint-precheck-")
    try:
        return load_savepoint(savepoint_job(settings, replaced.id, scratch, progress=progress).path), scratch
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise


def checkable_in_driver(saved: Savepoint, replacing: bool) -> bool:
    """Whether the new driver can check ``saved`` before anything is stopped (see the module's docstring)."""
    return not replacing or len(saved.queries) == 1


def check_before_launch(settings: Settings, request: RunRequest, saved: Savepoint, replacing: bool,
                        progress: Progress | None) -> dict[str, Any]:
    """Before anything is stopped or started: will the application restore? Raises IncompatibleUpgradeError
    if not. ``replacing``: ``saved`` is the job's savepoint_to_check."""
    checked = check_upgrade(settings, saved, check_request(request), progress)
    if not checked.compatible:
        problems = "; ".join(problem.message for problem in checked.problems)
        raise IncompatibleUpgradeError(f"{request.app} will not restore from {saved.manifest['id']}, so nothing was "
                                       f"stopped or started: {problems} (`sparkpoint check` shows the details; "
                                       f"--no-check skips it){'; driver log: ' + checked.log if checked.log else ''}")
    return {"compatible": True, "savepoint": saved.path if not replacing else None, "seconds": checked.seconds,
            "notes": checked.notes, "at": iso(), **({"confs": checked.launch_confs} if checked.launch_confs else {})}


def check_move(saved: Savepoint, spark: Spark, request: RunRequest, refuse: bool) -> SparkMove:
    """Before a restore launches: what the job's Spark needs to read the savepoint, and what the move changes;
    with ``refuse`` (a checked `run -s`), what it cannot read is refused (exit 16) with nothing started. The
    confs it needs are given whatever --no-check says: they are how that Spark reads it, not a check."""
    moved = migration_to(saved, spark, request.confs)
    if refuse and moved.refused:
        raise IncompatibleUpgradeError(f"{request.app} will not restore from {saved.manifest['id']} on Spark "
                                       f"{spark.version}, so nothing was started: {moved.refused} (`sparkpoint "
                                       f"check` shows the details; --no-check skips it)")
    return moved


def check_request(request: RunRequest) -> CheckRequest:
    return CheckRequest(**{f.name: getattr(request, f.name) for f in fields(Launch)},
                        timeout=request.restore_grace + 240.0)


class NotCheckableInDriver(Exception):  # noqa: N818 - a turn the run takes, not a failure reported
    """`run --replace`: the new driver held another query's start for the hand-over before its saved query was
    checked (an application that starts a new query first). Nothing was stopped; the run checks in a driver of its
    own and starts the new version again."""


def check_in_driver(registry: Registry, job: Job, process: subprocess.Popen | None, saved: Savepoint,
                    request: RunRequest, moved: SparkMove, before_go: Callable[[], None], progress: Progress | None,
                    sleep, clock, start_timeout: float, replaced: Job | None = None) -> None:
    """Answer the new driver's check of each saved query (runtime.gate), and record the verdict. A query
    refused: the job ends, with IncompatibleUpgradeError (exit 16), or SparkFailureError (11) when the check
    could not decide. The sinks of --rollback-sink are rolled back before the first query is let go. ``moved``:
    what the savepoint's move to the job's Spark changes, found before the launch (check_move). ``replaced``:
    the job `run --replace` replaces, which runs on whatever is found (``saved`` is its savepoint_to_check)."""
    def running() -> bool:
        if replaced is not None and handover_waiting(job.directory):
            return False  # it holds another query's start for the hand-over: the saved one was not tried before it
        return process.poll() is None if process is not None else state_of(registry.load(job.id)) in ACTIVE_STATES

    def gave_up() -> bool:  # the application did not start a saved query within --restore-grace
        agent = read_agent_file(job.directory)
        return bool(agent.get("restore_error") or agent.get("not_restored"))

    (progress or NullProgress()).waiting(f"checking {os.path.basename(job.app)} in its driver against "
                                         f"{saved.manifest['id']}")
    try:
        # A foreground -s waits as long as its application: Ctrl-C ends both. --replace is bounded: the old job
        # runs on while it waits.
        found = await_in_driver(saved, job.app, job.directory, running, gave_up, before_go,
                                None if process is not None and not request.detach and replaced is None
                                else start_timeout + check_request(request).timeout, sleep, clock)
    finally:  # the sandbox goes; the answers stay (the driver may not have read the last one yet)
        shutil.rmtree(os.path.join(job.directory, START_CHECK_DIR, "checkpoints"), ignore_errors=True)
    checked = found.checked
    if replaced is not None and found.untried and handover_waiting(job.directory):
        held = held_start(job.directory)
        end_driver(registry.load(job.id), grace=0.0, sleep=sleep, clock=clock)
        latest = registry.load(job.id)
        latest.end("cancelled", reason=f"it started query {held} before its saved query {found.untried[0]}: "
                                        "checked in a driver of its own instead, and started again")
        registry.save(latest)
        raise NotCheckableInDriver(held)
    # Nothing refused, but saved queries the driver never tried while it runs on and its agent has not given up
    # on them: the wait timed out (a driver that ended, or an agent that gave up, reports its own failure or note).
    timed_out = checked.compatible and bool(found.untried) and running() and not gave_up()
    found_problems = [p.message for p in checked.problems] or (
        [f"query {', '.join(found.untried)} was not started and checked in time"] if timed_out else [])
    problems = "; ".join(found_problems)
    latest = registry.load(job.id)
    if found.untried and not found_problems and not running() and not gave_up():
        # The driver ended before it tried them (the application failed first): nothing was checked, which the
        # record says; the application's own failure is what `run` then reports.
        latest.upgrade_check = {"skipped": f"the driver ended before it tried query {', '.join(found.untried)}",
                                "at": iso(), "in_driver": True}
        latest.note("check", check_said(latest.upgrade_check))
        registry.save(latest)
        return
    latest.upgrade_check = {"compatible": not found_problems, "savepoint": None if replaced else saved.path,
                            "seconds": checked.seconds,
                            "state_loaded": any(query.state_loaded for query in checked.queries),
                            "notes": moved.notes + checked.notes, "at": iso(), "in_driver": True,
                            **({"problems": found_problems} if found_problems else {})}
    latest.note("check", check_said(latest.upgrade_check))
    registry.save(latest)
    if latest.upgrade_check["compatible"]:
        return
    end_driver(latest, grace=30.0, sleep=sleep, clock=clock)  # a refused start() ends the application
    latest = registry.load(job.id)
    latest.end("failed", error=f"the check refused it: {problems}")
    registry.save(latest)
    where = f"its driver's log: {job.log_path}" if request.detach and not job.submission_id else "job " + job.id
    undecided = [p for p in checked.problems if p.kind in compat.UNDECIDED]
    runs_on = f"; {replaced.id} runs on" if replaced else ""
    if timed_out or (undecided and len(undecided) == len(checked.problems)):
        raise SparkFailureError(f"the check could not decide: {problems}{runs_on} (`--no-check` skips it; {where})")
    if replaced:
        raise IncompatibleUpgradeError(f"{request.app} will not restore from {replaced.id}, so nothing was "
                                       f"stopped: {problems}; {replaced.id} runs on, and the new driver, which "
                                       f"checked it before any query started, has ended (`sparkpoint check` shows "
                                       f"the details; --no-check skips it; {where})")
    refused = {problem.query for problem in checked.problems}
    started = [query.name for query in checked.queries if query.name not in refused]
    ran = f"query {', '.join(started)} had started before" if started else "no query of it started"
    raise IncompatibleUpgradeError(f"{request.app} will not restore from {saved.manifest['id']}: {problems}; the "
                                   f"job is stopped, {ran} (`sparkpoint check` shows the details; --no-check "
                                   f"skips it; {where})")

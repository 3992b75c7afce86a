"""`sparkpoint check`: whether an application will restore from a savepoint, learned before any downtime
by running it in a sandbox (savepoints.compat prepares it and words the verdict; runtime.sandbox is the
driver's half).

The driver runs here in local mode whatever master the job runs on: planning one empty batch needs no
cluster, a busy cluster's cores are not waited for, and the sandbox (a local directory) is read by
nobody else. spark-submit's other options (--py-files, --jars, --packages, ...) apply as given.
"""

from __future__ import annotations

import os
import secrets
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from sparkpoint.adapters import spark_submit
from sparkpoint.adapters.spark_install import Spark, find_spark
from sparkpoint.adapters.class_archives import built_archive
from sparkpoint.adapters.local_files import MalformedRecord, read_json_record, write_json
from sparkpoint.adapters.processes import pid_alive, process_start, terminate_group
from sparkpoint.adapters.transfer import NullProgress, Progress
from sparkpoint.config import Settings
from sparkpoint.errors import BadArgumentError, NotFoundError, SparkFailureError, SparkpointError
from sparkpoint.jobs.protocol import CHECK_REPORT, CHECK_REQUEST, START_CHECK_DIR, answer_outcome, read_outcome
from sparkpoint.jobs.sinks import roll_back_sinks
from sparkpoint.jobs.sinks_ahead import refuse_sinks_ahead
from sparkpoint.savepoints import compat, migration, restorability
from sparkpoint.savepoints.savepoint import Savepoint
from sparkpoint.times import poll_until

SANDBOX_DRIVER = str(Path(__file__).resolve().parents[1] / "runtime" / "sandbox.py")


@dataclass
class Launch:
    """An application as spark-submit runs it, and how it takes saved state: what `run` and `check` share."""

    app: str
    app_args: list[str] = field(default_factory=list)
    submit_args: list[str] = field(default_factory=list)
    master: str = "local[2]"
    confs: list[str] = field(default_factory=list)
    allow_non_restored_state: bool = False
    # A savepoint whose Kafka input is partly gone from the log is restored anyway (what is lost is said).
    allow_data_loss: bool = False
    # A Delta table the savepoint's query wrote past the cut is restored into anyway (its batches skipped).
    keep_sink_output: bool = False
    restore_grace: float = 60.0  # seconds, once the application runs, for every saved query to start
    spark_home: str | None = None  # --spark-home: else $SPARK_HOME, else this environment's pyspark


@dataclass
class CheckRequest(Launch):
    timeout: float = 300.0  # seconds for the whole check, the driver's start-up included
    # The restore will roll the outputs back to the cut (run -s --rollback-sink): checked that it can, not done.
    rollback_sink: bool = False


# The check's driver: local, whatever the master (see the module's docstring).
CHECK_MASTER = "local[2]"
# What a check needs besides the application's own waits: the JVM's start-up, the report.
MARGIN = 60.0
# Between the driver's answer being due and this process giving up on it: the last waits on each query, the report.
ANSWER_MARGIN = 15.0


def check_savepoint(settings: Settings, saved: Savepoint, request: CheckRequest, warn: Callable[[str], None],
                    progress: Progress | None = None) -> compat.Checked:
    """`sparkpoint check`: is the savepoint's input still there (refused before any Spark starts if not,
    InputGoneError), does a Delta table it writes hold batches after the cut (SinkAheadError) or, for a restore
    that will roll its outputs back, can they be (SinkRollbackRefusedError: another writer, a running job), then
    will the application restore from it (check_upgrade)."""
    if request.keep_sink_output and request.rollback_sink:
        raise BadArgumentError("--keep-sink-output keeps what --rollback-sink would undo: choose one")
    restorability.require_input(saved, settings.kafka, request.allow_data_loss, warn,
                                storage_options=settings.storage_options)
    if request.rollback_sink:
        for planned in roll_back_sinks(settings, saved, dry_run=True, writers_checked=True):
            if planned.batches:
                warn(f"--rollback-sink: {planned.said()}")
    else:
        refuse_sinks_ahead(settings, saved, False, request.keep_sink_output, warn)
    return check_upgrade(settings, saved, request, progress)


def check_upgrade(settings: Settings, saved: Savepoint, request: CheckRequest, progress: Progress | None = None,
                  sleep: Callable[[float], None] = time.sleep,
                  clock: Callable[[], float] = time.monotonic) -> compat.Checked:
    """Try the application on a throwaway restore of ``saved``; nothing it would write is written, and
    the savepoint is only read."""
    app = os.path.abspath(request.app)
    if not os.path.isfile(app):
        raise NotFoundError(f"application {request.app} does not exist")
    conf_args = spark_submit.conf_arguments(request.confs)
    spark = find_spark(request.spark_home)
    moved = migration_to(saved, spark, request.confs)
    if moved.refused:  # what that Spark cannot read is known from the savepoint: no Spark needs to start
        return compat.Checked(savepoint=saved.path, app=app, compatible=False, notes=moved.notes, queries=[],
                              problems=[compat.Problem(query, None, "spark_version", why)
                                        for query, why in moved.problems])
    progress = progress or NullProgress()
    began = clock()
    sandbox = settings.scratch_dir("sparkpoint-check-")
    checkpoints = os.path.join(sandbox, "checkpoints")
    log = os.path.join(sandbox, "driver.log")
    process, start, checked, kept = None, None, None, None
    try:
        planned = compat.prepare_sandbox(saved, checkpoints, settings.transfer_workers, progress)
        first_start = max(30.0, request.timeout - request.restore_grace - MARGIN)
        # Due before this process gives up on the driver (same machine, same clock), whatever its start-up took.
        answer_by = time.time() + request.timeout - ANSWER_MARGIN
        write_json(Path(sandbox) / CHECK_REQUEST,
                   {**compat.request(saved, request.restore_grace, first_start, planned), "answer_by": answer_by})
        argv = [spark.submit, "--master", CHECK_MASTER, "--name", "sparkpoint-check",
                "--conf", f"spark.sql.streaming.checkpointLocation={checkpoints}", *conf_args,
                *spark_submit.conf_arguments(moved.launch_confs), *request.submit_args,
                SANDBOX_DRIVER, sandbox, app, *request.app_args]
        archive = built_archive(settings.class_archives_dir(), spark)
        environment = spark_submit.driver_environment(spark, class_archive=archive)
        process = spark_submit.launch(argv, environment, log)
        start = process_start(process.pid)
        progress.waiting(f"trying {os.path.basename(app)} on a sandbox restore of {saved.manifest['id']}")
        poll_until(lambda: process.poll() is not None, request.timeout, 0.2, clock=clock, sleep=sleep)
        if process.poll() is None:
            terminate_group(process.pid, start, grace=0.0, sleep=sleep, clock=clock)
            raise SparkFailureError(f"the check did not finish within {request.timeout:g} s: "
                                    f"{_last_line(log) or 'the driver printed nothing'}")
        report = _read_report(Path(sandbox) / CHECK_REPORT, process.returncode, log)
        checked = compat.verdict(saved, app, report, request.allow_non_restored_state)
    except SparkpointError as exc:
        kept = _keep_log(settings, log, saved)
        raise type(exc)(f"{exc}{_log_said(kept)}") from None
    finally:
        try:
            if process is not None and pid_alive(process.pid, start):  # interrupted: nothing to save, no grace
                terminate_group(process.pid, start, grace=0.0, sleep=sleep, clock=clock)
        finally:
            if checked is not None and not checked.compatible:
                kept = _keep_log(settings, log, saved)
            shutil.rmtree(sandbox, ignore_errors=True)
    undecided = [p for p in checked.problems if p.kind in compat.UNDECIDED]
    if undecided and len(undecided) == len(checked.problems):
        raise SparkFailureError("the check could not decide: " + "; ".join(p.message for p in undecided)
                                + f" (`--no-check` skips it){_log_said(kept)}")
    return replace(checked, notes=moved.notes + checked.notes, seconds=round(clock() - began, 3), log=kept,
                   launch_confs=moved.launch_confs)


def migration_to(saved: Savepoint, spark: Spark, confs: list[str]) -> migration.SparkMove:
    """What running ``saved`` on ``spark`` changes, read from the savepoint: the confs the driver needs, what
    that Spark cannot read."""
    return migration.move(saved, spark.version, dict(conf.partition("=")[::2] for conf in confs))


def prepare_in_driver(settings: Settings, saved: Savepoint, job_directory: str, request: CheckRequest,
                      controller: int | None, before_handover: bool,
                      progress: Progress | None = None) -> dict[str, str]:
    """`run -s`'s check in the new job's own driver (runtime.gate): the sandbox it tries each saved query in,
    prepared in the job's directory (on the device of its checkpoints: linked, not copied); the driver's
    environment that asks for it. ``controller``: the pid of this `run`, when the driver runs on this machine.
    ``before_handover`` (`run --replace`): the check runs while the old version still serves, so its batches
    run whole (none is only planned: compat.planning_checks), loading the state in the JVM that loads it again
    after the hand-over, inside the downtime, warmer for it; in `run -s` they are inside the downtime."""
    directory = os.path.join(job_directory, START_CHECK_DIR)
    planned = compat.prepare_sandbox(saved, os.path.join(directory, "checkpoints"), settings.transfer_workers,
                                     progress)
    write_json(Path(directory) / CHECK_REQUEST,
               {**compat.request(saved, request.restore_grace, request.timeout, [] if before_handover else planned),
                "timeout": request.timeout})
    return {"SPARKPOINT_CHECK_DIR": directory, **({"SPARKPOINT_CONTROLLER": str(controller)} if controller else {})}


@dataclass(frozen=True)
class InDriverVerdict:
    checked: compat.Checked  # the saved queries the driver tried, and what was found
    untried: list[str]  # saved queries it had not tried when the wait ended (see await_in_driver)


def await_in_driver(saved: Savepoint, app: str, job_directory: str, running: Callable[[], bool],
                    gave_up: Callable[[], bool], before_go: Callable[[], None], timeout: float | None,
                    sleep: Callable[[float], None] = time.sleep,
                    clock: Callable[[], float] = time.monotonic) -> InDriverVerdict:
    """Answer each saved query the driver tried, as its outcome arrives: go, or abort with the problems found
    (then the wait ends). ``before_go`` runs once, before the first query is let go. The wait also ends when
    every saved query is answered, the driver ends (``running``), its agent gives up on the queries not
    started (``gave_up``), or ``timeout`` seconds have passed (None: never)."""
    directory = os.path.join(job_directory, START_CHECK_DIR)
    untried = list(range(len(saved.queries)))
    problems: list[compat.Problem] = []
    notes: list[str] = []
    queries: list[compat.CheckedQuery] = []
    seconds, released = 0.0, False

    def answer_what_arrived() -> bool:
        nonlocal seconds, released
        for index in list(untried):
            report = read_outcome(directory, index)
            if report is None:
                continue
            untried.remove(index)
            query, found, said = compat.query_verdict(saved, saved.queries[index], report)
            queries.append(query)
            notes.extend(said)
            seconds += float(report.get("seconds") or 0.0)
            if found:
                problems.extend(found)
                answer_outcome(directory, index, {"abort": "; ".join(problem.message for problem in found)})
                return True
            if not released:
                _before_the_first_go(directory, index, before_go)
                released = True
            answer_outcome(directory, index, {"go": True})
        return not untried or not running() or gave_up()

    poll_until(answer_what_arrived, timeout, 0.05, clock=clock, sleep=sleep)
    for index in untried:  # a driver that reaches them after the wait is refused at once
        answer_outcome(directory, index, {"abort": "the run that checks this job stopped waiting"})
    checked = compat.Checked(savepoint=saved.path, app=app, compatible=not problems, problems=problems,
                             notes=notes, queries=queries, seconds=round(seconds, 3))
    return InDriverVerdict(checked, [saved.queries[index]["name"] for index in untried])


def _before_the_first_go(directory: str, index: int, before_go: Callable[[], None]) -> None:
    try:
        before_go()
    except BaseException as exc:
        answer_outcome(directory, index, {"abort": f"{exc}"})
        raise


def _keep_log(settings: Settings, log: str, saved: Savepoint) -> str | None:
    """A check that did not pass keeps its driver's log, in ``<home>/checks/``: the sandbox goes, and one
    line of reason is not always enough to see why."""
    if not os.path.isfile(log):
        return None
    name = f"{saved.manifest['id']}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}.log"
    try:
        kept = settings.private_dir("checks") / name
        shutil.copyfile(log, kept)
    except OSError:
        return None  # a log that cannot be kept does not hide the check's answer
    return str(kept)


def _log_said(kept: str | None) -> str:
    return f" (the check's driver log: {kept})" if kept else ""


def _read_report(path: Path, exit_code: int, log: str) -> dict:
    try:
        return read_json_record(path)
    except (FileNotFoundError, MalformedRecord):
        raise SparkFailureError(f"the check's driver ended (exit {exit_code}) without an answer: "
                                f"{_last_line(log) or 'it printed nothing'}") from None


def _last_line(log: str) -> str | None:
    """The driver's last error-looking line (else its last line): what an operator needs first."""
    try:
        lines = [line.strip() for line in Path(log).read_text(errors="replace").splitlines() if line.strip()]
    except FileNotFoundError:
        return None
    errors = [line for line in lines if "Error" in line or "Exception" in line]
    return (errors or lines or [None])[-1]

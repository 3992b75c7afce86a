"""run, list, stop, cancel: thin commands over sparkpoint.jobs."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from sparkpoint.cli.metrics_cmds import metrics_file_option
from sparkpoint.cli.context import PATH_PART, SAVEPOINT, Seconds, echo, emit, output_option, pass_app
from sparkpoint.cli.rich_text import text
from sparkpoint.cli.context import console as make_console

if TYPE_CHECKING:  # the core is imported inside each command, so that --help stays fast
    from sparkpoint.jobs.listing import ListedJob
    from sparkpoint.jobs.job_view import JobView
    from sparkpoint.jobs.stop import Stopped
    from sparkpoint.savepoints.compat import Checked


class PassThrough(click.Command):
    """A command whose own options come first, then spark-submit's options, the application and its arguments,
    handed on unparsed. Click would read a value of spark-submit's that begins with a dash as a cluster of short
    options: `--driver-java-options -Dlog4j...` was refused as an `-o` of 'g4j...'."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, self.passed_through(ctx, args))

    def passed_through(self, ctx: click.Context, args: list[str]) -> list[str]:
        """``args`` as Click is to parse them: this command's own options, then ``--`` and the rest."""
        options = [param for param in self.get_params(ctx) if isinstance(param, click.Option)]
        flags = {name for o in options if o.is_flag or o.count for name in (*o.opts, *o.secondary_opts)}
        valued = {name for o in options if not (o.is_flag or o.count) for name in o.opts}
        index = 0
        while index < len(args):
            token = args[index]
            if token in valued:
                index += 2
            elif token in flags or token.split("=", 1)[0] in valued or (
                    not token.startswith("--") and token[:2] in valued):  # --name=x, -ojson
                index += 1
            else:
                break
        return [*args[:index], "--", *args[index:]] if index < len(args) else args


@click.command("run", cls=PassThrough)
@click.option("--name", type=PATH_PART,
              help="Job name [default: the replaced job's with --replace, the savepoint's job's with -s (not "
                   "--fork), else the application's file name].")
@click.option("-s", "--from-savepoint", "from_savepoint", metavar="SAVEPOINT", help="Restore from this savepoint.")
@click.option("--allow-non-restored-state", is_flag=True, help="Start even if saved state has no query to take it.")
@click.option("--allow-data-loss", is_flag=True,
              help="With -s: restore a savepoint whose Kafka input is partly gone from the log (retention, a topic "
                   "made again), saying what is lost, instead of refusing it (exit 20).")
@click.option("--fork", is_flag=True, help="With -s: new query ids (a second variant from one savepoint, an A/B "
                                           "test, is then a query of its own to sinks that key on the query id). "
                                           "Without it, -s of queries another job runs is refused (exit 23).")
@click.option("--partitions", type=click.IntRange(min=1), metavar="N",
              help="With -s: rescale the savepoint's state to N partitions first (`sparkpoint rescale`; the "
                   "rescaled savepoint joins the catalog) and restore that one.")
@click.option("--claim-mode", type=click.Choice(["no_claim", "claim"]), default="no_claim", show_default=True,
              help="claim: the savepoint is handed over to the job (disposed of after a verified restore).")
@click.option("--restore-grace", type=Seconds(min=1), default=60.0, show_default=True,
              help="Seconds after the first query starts for every saved query to start.")
@click.option("--replace", metavar="JOB", type=PATH_PART,
              help="Upgrade a running job: start this application, then stop JOB with a savepoint and continue "
                   "from it (JOB runs on until the new driver is up).")
@click.option("--savepoint-path", metavar="DIR",
              help="With --replace: where JOB's savepoint goes [default: the catalog].")
@click.option("--stop-timeout", type=Seconds(min=0), default=60.0, show_default=True,
              help="With --replace: seconds to let JOB's batch in flight commit before interrupting it. A "
                   "real-time query's batch may outlast it: then nothing is started (exit 21).")
@click.option("--probation", type=Seconds(min=0), default=30.0, show_default=True,
              help="With --replace or --rollback-to: seconds past the new version's first committed batch during "
                   "which its failure starts the version before it again from the hand-over's savepoint.")
@click.option("--rollback-to", metavar="SAVEPOINT",
              help="With -s: a savepoint of the version this one follows (`stop` took it); if this one fails on "
                   "probation, that job's version is started again from it.")
@click.option("--healthy-when", "healthy_when", multiple=True, metavar="CONDITION",
              help="With --replace or --rollback-to: the new version also fails its probation unless, over its "
                   "batches, METRIC>=N (or <=, >, <) holds; METRIC: processing_rate or input_rate (rows/s, the "
                   "median per query). Repeatable.")
@click.option("--rollback-sink", is_flag=True,
              help="With -s: roll the savepoint's file sinks and Delta tables back to its cut first "
                   "(`rollback-sink`), so that the restored version writes the later batches again instead of "
                   "skipping them.")
@click.option("--keep-sink-output", is_flag=True,
              help="With -s: restore into a Delta table the savepoint's query wrote past the cut as it is: the "
                   "restored version skips those batches (with --fork, the fork writes them again: give it another "
                   "table), instead of refusing (exit 22).")
@click.option("--no-rollback", is_flag=True, help="With --replace: no probation, no automatic rollback.")
@click.option("--no-check", is_flag=True,
              help="With -s or --replace: skip `sparkpoint check` (by default an application that will not "
                   "restore is refused before its queries start, and with --replace before anything stops).")
@click.option("--master", default="local[2]", show_default=True, help="Spark master URL.")
@click.option("--deploy-mode", type=click.Choice(["client", "cluster"]), default="client", show_default=True,
              help="cluster: the cluster manager runs the driver (a standalone master on a worker, through its "
                   "REST API; YARN in its application master). With --replace, the new driver waits there for "
                   "its hand-over.")
@click.option("--conf", "confs", multiple=True, metavar="KEY=VALUE", help="Spark configuration (repeatable).")
@click.option("--detach", is_flag=True, help="Return once the job runs; its output goes to the job's driver.log.")
@click.option("--no-standby", is_flag=True,
              help="With --detach: launch a driver even if a standby launched with the same options waits "
                   "(sparkpoint standby).")
@click.option("--spark-home", metavar="DIR",
              help="The Spark that runs the driver (its bin/spark-submit) [default: $SPARK_HOME, else this "
                   "environment's pyspark]. Spark 3.5 to 4.3.")
@output_option
@click.argument("args", nargs=-1, type=click.UNPROCESSED, required=True,
                metavar="[SPARK_SUBMIT_OPTIONS] APP.py [APP_ARGS]")
@pass_app
def run_cmd(app, name, from_savepoint, fork, partitions, allow_non_restored_state, allow_data_loss, claim_mode,
            restore_grace, replace, savepoint_path, stop_timeout, probation, rollback_to, healthy_when, rollback_sink,
            keep_sink_output, no_rollback, no_check, master, deploy_mode, confs, detach, no_standby, spark_home, output,
            args):
    """Run a streaming application under spark-submit as a managed job.

    sparkpoint's options come first; spark-submit's own (--py-files, --archives, --jars, --packages,
    --files, --driver-memory, ...) follow unchanged, then the application and its arguments. The
    job's queries checkpoint to <home>/jobs/<id>/checkpoints/<query name>: name every query with
    .queryName(...). With -s, each saved query is restored there first. With --replace JOB, the
    new driver starts first and waits; JOB is then stopped at a batch boundary with a savepoint,
    which the new job restores and continues from (the upgrade with the least downtime).

    With --replace, `sparkpoint check` runs first: an application that will not restore is refused (exit
    16) before anything is stopped. With -s, the new driver checks each saved query just before it starts
    (exit 16, none of its queries run). With --replace, the new version is then on
    probation: if it fails before --probation seconds past its first committed batch, the replaced
    version is started again, as it ran, from the hand-over's savepoint (exit 13, `rolled_back`). After a
    stop, -s SAVEPOINT --rollback-to SAVEPOINT gives the two-step upgrade the same way back. Every decision
    (check, hand-over, probation, rollback) is in the job's history (`list --all --output json`).

    Spark's file sink skips the batches its log committed: restoring an older savepoint with one warns that
    the later batches would not be written again (and refuses it, exit 22, for a query that keeps state, which
    would fail after them); --rollback-sink moves them aside first (see `rollback-sink`).
    Delta's sink skips them too: a Delta table written past the cut is refused (exit 22) unless --rollback-sink
    (the table restored to the cut) or --keep-sink-output.
    """
    from sparkpoint.adapters.spark_submit import split_arguments
    from sparkpoint.jobs import run
    from sparkpoint.jobs.run_request import RunRequest

    submit_args, application, app_args = split_arguments(list(args), RUN_OPTIONS)
    request = RunRequest(
        app=application, app_args=app_args, submit_args=submit_args, name=name, master=master,
        confs=list(confs), detach=detach, savepoint=from_savepoint, fork=fork, partitions=partitions,
        allow_non_restored_state=allow_non_restored_state, allow_data_loss=allow_data_loss,
        claim=claim_mode == "claim", restore_grace=restore_grace, replace=replace, savepoint_path=savepoint_path,
        stop_timeout=stop_timeout, deploy_mode=deploy_mode, check=not no_check,
        probation=None if no_rollback else probation, rollback_to=rollback_to, healthy_when=list(healthy_when),
        rollback_sink=rollback_sink, keep_sink_output=keep_sink_output, spark_home=spark_home,
        standby=not no_standby,
    )
    job = run.run_job(app.settings, request, progress=app.progress(), warn=_warn)
    emit(output, job, _render_job)
    if job.rolled_back:
        from sparkpoint.errors import JobFailedError

        raise JobFailedError(f"job {job.id} failed on probation ({job.rollback['error']}); rolled back: "
                             f"{job.rolled_back.id} runs the version before it from {job.rollback['savepoint']}")


def _warn(message: str) -> None:
    echo(f"sparkpoint: warning: {message}", err=True)


def own_options(command: click.Command) -> frozenset[str]:
    """A command's own option strings: one of them among spark-submit's is a mistake (it would reach
    spark-submit unseen)."""
    return frozenset(opt for param in command.params if isinstance(param, click.Option)
                     for opt in (*param.opts, *param.secondary_opts))


RUN_OPTIONS = own_options(run_cmd)


def _render_job(job: JobView) -> None:
    echo(f"Job {job.id} ({job.name}): {job.state}" + (f" — {job.error}" if job.error else ""))
    if job.replaced:
        _render_stopped(job.replaced)
    if job.rolled_back:
        echo(f"  rolled back: it failed on probation; {job.rolled_back.id} runs the replaced version again, from "
             f"{job.rollback['savepoint']} ({job.rolled_back.state})")
    if job.upgrade_check:
        check = job.upgrade_check
        from sparkpoint.jobs.upgrade_check import check_said

        echo(f"  check: {check_said(check)}")
        for note in check.get("notes") or []:
            echo(f"  note: {note}")
    if job.restored_from:
        echo(f"  restored from {job.restored_from}")
    for event in job.history:
        if event["event"] in ("probation", "state_not_restored", "sink_rollback", "standby"):
            echo(f"  {event['event'].replace('_', ' ')}: {event['detail']}")
    if job.log:
        echo(f"  driver log: {job.log}")


@click.command("check", cls=PassThrough)
@click.option("-s", "--from-savepoint", "saved", metavar="SAVEPOINT", type=SAVEPOINT, required=True,
              help="The savepoint the application would restore from.")
@click.option("--allow-non-restored-state", is_flag=True, help="A saved query the application does not start is "
                                                             "not a problem (as for run).")
@click.option("--allow-data-loss", is_flag=True,
              help="Check a savepoint whose Kafka input is partly gone from the log, saying what is lost, instead "
                   "of refusing it (exit 20; as for run).")
@click.option("--keep-sink-output", is_flag=True,
              help="Check a savepoint whose query wrote a Delta table past the cut, saying so, instead of refusing "
                   "it (exit 22; as for run).")
@click.option("--rollback-sink", is_flag=True,
              help="The restore will roll its file sinks and Delta tables back to the cut (run -s --rollback-sink): "
                   "check that it can (exit 18 if not) instead of refusing a table written past the cut. Nothing "
                   "is rolled back.")
@click.option("--restore-grace", type=Seconds(min=1), default=60.0, show_default=True,
              help="Seconds after the application starts for every saved query to start.")
@click.option("--timeout", type=Seconds(min=1), default=300.0, show_default=True,
              help="Seconds for the whole check, Spark's start-up included.")
@click.option("--conf", "confs", multiple=True, metavar="KEY=VALUE", help="Spark configuration (repeatable).")
@click.option("--spark-home", metavar="DIR",
              help="The Spark that runs the driver (its bin/spark-submit) [default: $SPARK_HOME, else this "
                   "environment's pyspark]. Spark 3.5 to 4.3.")
@output_option
@click.argument("args", nargs=-1, type=click.UNPROCESSED, required=True,
                metavar="[SPARK_SUBMIT_OPTIONS] APP.py [APP_ARGS]")
@pass_app
def check_cmd(app, saved, allow_non_restored_state, allow_data_loss, keep_sink_output, rollback_sink, restore_grace,
              timeout, confs, spark_home, output, args):
    """Will this application restore from this savepoint? Answered before any downtime.

    The application runs against a throwaway restore of the savepoint, with every sink replaced by
    sparkpoint's: each saved query plans one empty batch, where Spark checks the saved state
    (operators, key and value schemas, sources) against the new plan, and stops (from Spark 4.0 without
    running the batch's tasks: its state is not loaded). No input is read, no streaming sink of the
    application is written, the savepoint is only read. The driver runs here
    in local mode (one empty batch needs no cluster). Exits 16, one line per problem, when it will not
    restore; 11 when the check cannot decide (Spark failed for another reason, or too slowly). Before any
    Spark starts: exit 20 when the savepoint's Kafka input is gone, 22 when a Delta table its query writes
    holds batches after the cut (with --rollback-sink, 18 when the rollback would be refused).
    """
    from sparkpoint.adapters.spark_submit import split_arguments
    from sparkpoint.errors import IncompatibleUpgradeError
    from sparkpoint.jobs import check

    submit_args, application, app_args = split_arguments(list(args), CHECK_OPTIONS)
    request = check.CheckRequest(app=application, app_args=app_args, submit_args=submit_args,
                                 confs=list(confs), allow_non_restored_state=allow_non_restored_state,
                                 allow_data_loss=allow_data_loss, keep_sink_output=keep_sink_output,
                                 rollback_sink=rollback_sink, restore_grace=restore_grace, timeout=timeout,
                                 spark_home=spark_home)
    checked = check.check_savepoint(app.settings, saved, request, _warn, progress=app.progress())
    emit(output, checked, _render_checked)
    if not checked.compatible:
        raise IncompatibleUpgradeError(f"{application} will not restore from {saved.manifest['id']}: "
                                       f"{len(checked.problems)} problem(s)")


CHECK_OPTIONS = own_options(check_cmd)


def _render_checked(checked: Checked) -> None:
    verdict = "restores from" if checked.compatible else "does not restore from"
    echo(f"{checked.app} {verdict} {checked.savepoint} (checked in {checked.seconds:.1f} s)")
    for problem in checked.problems:
        echo(f"  problem: {problem.message}")
    for note in checked.notes:
        echo(f"  note: {note}")
    if checked.log:
        echo(f"  driver log: {checked.log}")
    for query in checked.queries:
        if query.started and not query.error:
            echo(f"  {query.name}: operators [{', '.join(query.operators) or 'none'}], {query.sources} source(s)")


@click.command("list")
@click.option("--all", "include_all", is_flag=True, help="Also jobs that ended.")
@click.option("--ui", "ui_urls", multiple=True, metavar="URL",
              help="Also the streaming queries of the Spark application(s) behind this driver UI (repeatable).")
@output_option
@pass_app
def list_cmd(app, include_all, ui_urls, output):
    """Jobs with their state, Spark application id and streaming queries."""
    from sparkpoint.jobs import listing

    entries = listing.list_jobs(app.settings, include_all)
    for url in ui_urls:
        entries += listing.ui_entries(url)
    emit(output, entries, _render_jobs)


def _rate(value) -> str:
    return "-" if value is None else f"{value:.1f}/s"


def _plain(value) -> str:
    return "-" if value is None else str(value)


def _reads(sources) -> str:
    """A query's Kafka sources as `list` shows them: the topics (or pattern) and the offsets left in the log."""
    shown = []
    for source in sources:
        if source.kind != "kafka":
            continue
        what = ",".join(source.topics) or source.subscribe_pattern or "kafka"
        behind = "" if source.offsets_behind_latest is None else f" ({source.offsets_behind_latest} behind)"
        shown.append(what + behind)
    return "; ".join(shown) or "-"


def _render_jobs(jobs: list[ListedJob]) -> None:
    from rich.table import Table

    from sparkpoint.jobs.listing import MALFORMED

    if not jobs:
        click.echo("No running jobs (--all lists ended ones).", err=True)
        return
    # The Kafka sources' column only when some query reads Kafka: for the others it would say nothing.
    reads = any(source.kind == "kafka" for job in jobs for query in job.queries for source in query.sources)
    table = Table()
    for column in ("job", "state", "application", "spark", "query", "batch", "input", "processed", "state rows",
                   *(["reads"] if reads else []), "last savepoint"):
        # Ids and names are never cut: when the line is too long, the list of topics wraps.
        table.add_column(column, no_wrap=column != "reads", overflow="fold")
    for job in jobs:
        for index, query in enumerate(job.queries or [None]):
            first = index == 0
            cells = (
                (job.id or f"{job.name} (ui)") if first else "", job.state if first else "",
                (job.app_id or "-") if first else "", (job.spark_version or "-") if first else "",
                *((query.name or "-", _plain(query.batch_id), _rate(query.input_rate), _rate(query.processing_rate),
                   _plain(query.state_rows)) if query else ("-",) * 5),
                *([_reads(query.sources) if query else "-"] if reads else []),
                (job.last_savepoint or "-").rsplit("/", 1)[-1] if first else "",
            )
            table.add_row(*map(text, cells))
    make_console().print(table)
    for job in jobs:
        if job.state == MALFORMED:
            echo(f"sparkpoint: warning: {job.id}: {job.error}", err=True)
        if job.lineage:
            echo(f"{job.id}: " + " → ".join(f"{v.id} ({v.command}, {v.state})" for v in job.lineage))


@click.command("stop")
@metrics_file_option
@click.argument("job_ref", metavar="JOB", type=PATH_PART)
@click.option("--savepoint-path", metavar="DIR", help="Where the savepoint goes [default: the home's catalog].")
@click.option("--timeout", type=Seconds(min=0), default=60.0, show_default=True,
              help="Seconds to let the batch in flight commit; a longer batch is interrupted (and replayed "
                   "on restore). A real-time query's batch that ends later is not: the stop is refused (exit 21).")
@output_option
@pass_app
def stop_cmd(app, job_ref, savepoint_path, timeout, output):
    """Stop a job at its next micro-batch boundary and take a savepoint.

    Each query finishes the batch it is running (or, if idle, starts none), commits it, and starts no
    other; the savepoint is cut at that commit while the application ends. It returns once both are
    done; the driver's JVM may still be shutting Spark down.
    """
    from sparkpoint.jobs import stop

    result = stop.stop_job(app.settings, job_ref, savepoint_path, timeout, progress=app.progress())
    emit(output, result, _render_stopped)


def _render_stopped(stopped: Stopped) -> None:
    for line in stopped.said():
        echo(line)


@click.command("cancel")
@metrics_file_option
@click.argument("job_ref", metavar="JOB", type=PATH_PART)
@click.option("--with-savepoint", "with_savepoint", is_flag=True,
              help="Savepoint at a batch boundary first, like stop (Flink's cancel -s).")
@click.option("--savepoint-path", metavar="DIR", help="Where that savepoint goes [default: the home's catalog].")
@click.option("--timeout", type=Seconds(min=0), default=60.0, show_default=True,
              help="With --with-savepoint: seconds to let the batch in flight commit before interrupting it (a "
                   "real-time query's batch that ends later: refused, exit 21).")
@output_option
@pass_app
def cancel_cmd(app, job_ref, with_savepoint, savepoint_path, timeout, output):
    """Cancel a job: stop it without a savepoint, even when its agent no longer answers. It returns once the
    application has ended (its queries stopped); the driver's JVM exits a moment later."""
    if with_savepoint:
        from sparkpoint.jobs import stop

        result = stop.stop_job(app.settings, job_ref, savepoint_path, timeout, progress=app.progress(),
                               cancelled=True)
        emit(output, result, _render_stopped)
        return
    from sparkpoint.jobs.cancel import cancel_job

    emit(output, cancel_job(app.settings, job_ref), _render_job)


COMMANDS = (run_cmd, check_cmd, list_cmd, stop_cmd, cancel_cmd)

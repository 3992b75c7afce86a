"""savepoint, restore, verify, inspect: thin commands over sparkpoint.savepoints.savepoint."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from sparkpoint.cli.metrics_cmds import metrics_file_option
from sparkpoint.results import human_bytes
from sparkpoint.cli.context import (PATH_PART, QUERY_NAME, SAVEPOINT, echo, emit, output_option, partition_offsets,
                                    pass_app)
from sparkpoint.cli.rich_text import text
from sparkpoint.cli.context import console as make_console
from sparkpoint.errors import BadArgumentError, RecordedFailureError, SavepointInvalidError

if TYPE_CHECKING:  # the core is imported inside each command, so that --help stays fast
    from sparkpoint.jobs.triggers import TriggerRecord
    from sparkpoint.savepoints.create import Created
    from sparkpoint.savepoints.diff import Compared
    from sparkpoint.savepoints.inspect import Inspected
    from sparkpoint.savepoints.rescale import Rescaled
    from sparkpoint.savepoints.restore import Restored
    from sparkpoint.savepoints.savepoint import Disposed, Verification

@click.command("savepoint")
@metrics_file_option
@click.argument("args", nargs=-1, metavar="[JOB] [TARGET_DIR]")
@click.option("--from-checkpoint", "checkpoint", metavar="CHECKPOINT_DIR",
              help="A query's checkpoint (live or stopped), or a root of named query checkpoints.")
@click.option("--dispose", "dispose_path", metavar="SAVEPOINT", help="Delete this savepoint (path or id).")
@click.option("--name", type=QUERY_NAME,
              help="Query name (uid) for a single query's checkpoint [default: its directory name].")
@click.option("--job", type=PATH_PART, help="Job label in the catalog [default: the checkpoint directory name].")
@click.option("--batch", type=click.IntRange(min=0), help="Cut at this committed batch [default: the latest].")
@click.option("--keep-last", type=click.IntRange(min=0), help="After success, prune the job's older savepoints.")
@click.option("--topic-ids", is_flag=True,
              help="With --from-checkpoint: record the ids its Kafka topics have now, for they are the ones it read "
                   "(its query runs, or stopped just now); without it, whether a topic was made again since "
                   "cannot be told.")
@click.option("--detached", is_flag=True, help="Return a trigger id at once; poll it with --status JOB TRIGGER_ID.")
@click.option("--status", "poll", is_flag=True, help="Report a detached savepoint: JOB TRIGGER_ID.")
@output_option
@pass_app
def savepoint_cmd(app, args, checkpoint, dispose_path, name, job, batch, keep_last, topic_ids, detached, poll,
                  output):
    """Take a savepoint of a running job or of a checkpoint, or dispose of one.

    sparkpoint savepoint JOB [TARGET_DIR]: every query of a running managed job, without pausing it.
    Exit status 12 means the job is not running; any other failure is the savepoint's.

    sparkpoint savepoint --from-checkpoint CHECKPOINT_DIR [TARGET_DIR]: a query's checkpoint, live or
    stopped, at its latest consistent cut.

    The savepoint is written to TARGET_DIR/<savepoint-id>, by default below the home's savepoints/<job>/.
    """
    from sparkpoint.jobs import savepoint as job_savepoint
    from sparkpoint.jobs import triggers
    from sparkpoint.savepoints import catalog, savepoint
    from sparkpoint.savepoints.create import savepoint_checkpoint

    settings = app.settings
    if checkpoint and dispose_path:
        raise BadArgumentError("give either --from-checkpoint or --dispose, not both")
    if dispose_path:
        if args:
            raise BadArgumentError("--dispose takes no other argument")
        path = catalog.resolve(dispose_path, settings.savepoints_dir(), settings.storage_options)
        emit(output, savepoint.dispose(path, settings.storage_options), _render_disposed)
        return
    if poll:
        if len(args) != 2:
            raise BadArgumentError("--status takes JOB TRIGGER_ID")
        record = triggers.trigger_status(settings, *(PATH_PART.convert(arg, None, None) for arg in args))
        emit(output, record, _render_trigger)
        if record.status == "failed":
            raise RecordedFailureError(record.error or "failed", record.exit_code)
        return
    if not checkpoint:
        if topic_ids:
            raise BadArgumentError("--topic-ids goes with --from-checkpoint: a running job's savepoint records them")
        if not args or len(args) > 2:
            raise BadArgumentError("give a JOB (and optionally TARGET_DIR), or --from-checkpoint CHECKPOINT_DIR")
        job_ref = PATH_PART.convert(args[0], None, None)
        target = args[1] if len(args) > 1 else None
        if detached:
            emit(output, triggers.trigger_savepoint(settings, job_ref, target, keep_last, app.config_path),
                 _render_trigger)
        else:
            emit(output, job_savepoint.savepoint_job(settings, job_ref, target, keep_last, progress=app.progress()),
                 _render_created)
        return
    if len(args) > 1:
        raise BadArgumentError("with --from-checkpoint, the only argument is TARGET_DIR")
    result = savepoint_checkpoint(settings, checkpoint, args[0] if args else None, name=name, job=job, batch_id=batch,
                                  keep_last=keep_last, topic_ids=topic_ids, progress=app.progress())
    emit(output, result, _render_created)


def _render_created(created: Created) -> None:
    for line in created.said():
        echo(line)


def _render_trigger(record: TriggerRecord) -> None:
    echo(f"Savepoint trigger {record.trigger_id} of job {record.job_id}: {record.status}")
    if record.savepoint:
        echo(f"  savepoint {record.savepoint['path']}")
    if record.error:
        echo(f"  {record.error}")


def _render_disposed(disposed: Disposed) -> None:
    for line in disposed.said():
        echo(line)


@click.command("restore")
@click.argument("loaded", metavar="SAVEPOINT", type=SAVEPOINT)
@click.argument("checkpoint_dir")
@click.option("--claim", is_flag=True, help="Hand the savepoint over: it is disposed of once the restore is verified.")
@click.option("--mode", type=click.Choice(["auto", "copy", "link"]), default="auto", show_default=True,
              help="auto: hard links on the same local file system, copies elsewhere.")
@click.option("--query", type=QUERY_NAME, help="Restore only this query, into CHECKPOINT_DIR itself.")
@click.option("--fork", is_flag=True, help="Give each restored query a new query id: a variant started next to "
                                           "another from the same savepoint is a query of its own to its sinks.")
@output_option
@pass_app
def restore_cmd(app, loaded, checkpoint_dir, claim, mode, query, fork, output):
    """Materialize SAVEPOINT as checkpoints for any launcher.

    Each query is restored to CHECKPOINT_DIR/<query name>, the location Spark uses with
    spark.sql.streaming.checkpointLocation=CHECKPOINT_DIR and .queryName(<query name>).
    The savepoint itself is never modified (unless --claim). The targets must be new or empty.
    """
    from sparkpoint.savepoints.restore import restore

    settings = app.settings
    result = restore(
        loaded, checkpoint_dir, mode="claim" if claim else mode, query=query,
        workers=settings.transfer_workers, progress=app.progress(), storage_options=settings.storage_options,
        fork=fork,
    )
    emit(output, result, _render_restored)


def _render_restored(restored: Restored) -> None:
    echo(f"Restored savepoint {restored.id} ({restored.transfer}):")
    for q in restored.queries:
        echo(f"  {q.name} -> {q.checkpoint} (resumes after batch {q.batch_id}, as query {q.query_id})")


@click.command("verify")
@click.argument("loaded", metavar="SAVEPOINT", type=SAVEPOINT)
@output_option
@pass_app
def verify_cmd(app, loaded, output):
    """Check that every file of SAVEPOINT is present and matches its checksum (exit 6 if not)."""
    from sparkpoint.savepoints import savepoint

    settings = app.settings
    report = savepoint.verify(loaded, settings.transfer_workers, app.progress())
    emit(output, report, _render_verified)
    if not report.valid:
        raise SavepointInvalidError(f"savepoint {report.path} failed verification ({len(report.problems)} problems)")


def _render_verified(report: Verification) -> None:
    for line in report.said():
        echo(line)


@click.command("inspect")
@click.argument("loaded", metavar="SAVEPOINT", type=SAVEPOINT)
@click.option("--state", "with_state", is_flag=True, help="Also read the state rows through Spark's state data source.")
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True, help="State rows shown per store.")
@output_option
@pass_app
def inspect_cmd(app, loaded, with_state, limit, output):
    """Show a savepoint: its cut, source offsets, operators and sizes, optionally the state rows."""
    from sparkpoint.adapters.class_archives import local_class_archive
    from sparkpoint.savepoints.inspect import inspect

    archive = local_class_archive(app.settings.class_archives_dir()) if with_state else None
    emit(output, inspect(loaded, limit if with_state else None, app.settings.kafka, app.settings.storage_options,
                         scratch=app.settings.scratch_dir, class_archive=archive),
         _render_inspected)


@click.command("diff")
@click.argument("before", metavar="BEFORE", type=SAVEPOINT)
@click.argument("after", metavar="AFTER", type=SAVEPOINT)
@output_option
@pass_app
def diff_cmd(app, before, after, output):
    """What changed from one savepoint to another: the Spark that wrote them, queries, cuts and offsets per
    source, stateful operators, their partitions, state schemas and state variables, sizes, pinned confs.

    Read from the two manifests and the state schema files; no Spark is needed. Exits 0 whether or not
    they differ (an empty `differences` list when they do not)."""
    from sparkpoint.savepoints.diff import diff

    emit(output, diff(before, after), _render_compared)


def _render_compared(compared: Compared) -> None:
    echo(f"{compared.before} → {compared.after}: "
         + (f"{len(compared.differences)} difference(s)" if compared.differences else "no difference"))
    for difference in compared.differences:
        echo(f"  {difference.said}")


def _offsets_shown(offset, read: dict) -> str:
    """A source's offset at the cut: Kafka's per topic, ``partition@offset`` read next, with the broker it reads;
    any other source's as Spark wrote it."""
    from sparkpoint.spark.sources import kafka_offsets

    topics = kafka_offsets(offset)
    if not topics:
        return str(offset)
    where = f" from {read['bootstrap_servers']}" if read.get("bootstrap_servers") else ""
    return f"kafka{where}: " + "; ".join(partition_offsets(topic, partitions)
                                         for topic, partitions in sorted(topics.items()))


def _render_inspected(inspected: Inspected) -> None:
    from rich.table import Table

    console = make_console()
    manifest = inspected.manifest
    console.print(text(manifest["id"], "bold") + text(f"  job {manifest['job']}  created {manifest['created_at']}  "
                                                      f"{human_bytes(manifest['bytes'])} in {manifest['file_count']} "
                                                      "files"))
    console.print(text(f"path: {inspected.path}"))
    console.print(text(f"written by Spark {manifest.get('spark_version') or 'unknown (a plain checkpoint)'}"))
    if manifest.get("restored_from"):
        console.print(text(f"restored from: {manifest['restored_from']}"))
    if inspected.input is not None:
        checked = inspected.input
        said = {"restorable": "every record it reads next is in the log", "unknown": checked.why,
                "unrestorable": checked.summary()}[checked.status]
        console.print(text(f"input ({checked.broker or 'no broker'}): {checked.status}: {said}"), highlight=False)
        for new in checked.new_partitions:
            console.print(text(f"  {new.topic}[{new.partition}] is new since: a query that subscribes to the topic "
                               f"({new.query}) reads it from offset 0"), highlight=False)
        if checked.doubt():
            console.print(text(f"  {checked.doubt()}"), highlight=False)
    if inspected.delta_input is not None:
        gone, unchecked = inspected.delta_input["gone"], inspected.delta_input["unchecked"]
        console.print(text("Delta input: " + ("unrestorable: " + "; ".join(gone) if gone else
                                              "every commit and file it reads is in its table")), highlight=False)
        for line in unchecked:
            console.print(text(f"  not checked: {line}"), highlight=False)
    for q in inspected.queries:
        planned = f" (batch {q['planned_batch_id']} planned)" if q.get("planned_batch_id") is not None else ""
        console.print()
        console.print(text(q["name"], "bold") + text(f"  query id {q['query_id']}  batch {q['batch_id']}{planned}  "
                                                     f"state v{q['state_version']}  {q['provider']}"))
        inputs = q.get("inputs") or []
        for index, offset in enumerate(q.get("offsets") or []):
            read = inputs[index] if index < len(inputs) else {}
            console.print(text(f"  source {index}: {_offsets_shown(offset, read)}"), highlight=False)
        if q.get("sink"):
            console.print(text(f"  sink: {q['sink']['description']}{_sink_cut(q['sink'])}"), highlight=False)
        for write in q.get("delta_writes") or []:
            console.print(text(f"  writes: {write['description']}{_sink_cut(write)}"), highlight=False)
        table = Table("operator", "name", "stores", "partitions", "size")
        for op in q.get("operators") or []:
            table.add_row(text(op["id"]), text(op["name"] or "?"), text(", ".join(op["stores"])),
                          text(op["partitions"]), human_bytes(op["bytes"]))
        if q.get("operators"):
            console.print(table)
    for store in inspected.state or []:
        # A line of its own: as a table title it would wrap to the width of a narrow table of samples.
        console.print()
        console.print(text(f"{store.query} operator {store.operator} {store.store} ({store.rows} rows)"))
        table = Table()
        for column in store.columns:
            table.add_column(text(column))
        for row in store.sample:
            table.add_row(*map(text, row))
        console.print(table)


@click.command("rescale")
@click.argument("loaded", metavar="SAVEPOINT", type=SAVEPOINT)
@click.argument("target_dir", required=False)
@click.option("--partitions", type=click.IntRange(min=1), required=True,
              help="The number of state partitions (spark.sql.shuffle.partitions) the new savepoint pins.")
@click.option("--query", type=QUERY_NAME, help="Rescale only this query [default: every stateful query].")
@click.option("--replan", is_flag=True,
              help="A savepoint of a running query has its next batch planned: plan its input again after the "
                   "rescale (its sink may write that batch twice). Refused without it.")
@output_option
@pass_app
def rescale_cmd(app, loaded, target_dir, partitions, query, replan, output):
    """Write a new savepoint of SAVEPOINT with its state repartitioned to N partitions.

    Each key goes where Spark's hash partitioning puts it with N partitions, and the offset log pins N,
    so the restored query runs with N. SAVEPOINT is not modified. The new savepoint goes to TARGET_DIR,
    or by default to the home's catalog under SAVEPOINT's job label. Needs a local Spark (pyspark): HDFS-backed
    state, and the RocksDB state of aggregations and deduplication (Spark 4.2 or later, and the shapes
    docs/howto/rescale.md lists), are repartitioned by sparkpoint, other RocksDB state by Spark's own
    repartitioner; the new state is read back (rows, placement) and checked before the savepoint is written.
    """
    from sparkpoint.savepoints.rescale import rescale

    emit(output, rescale(app.settings, loaded, partitions, target_dir, query=query, replan=replan,
                         progress=app.progress()), _render_rescaled)


def _render_rescaled(rescaled: Rescaled) -> None:
    created = rescaled.savepoint
    echo(f"Rescaled savepoint {rescaled.source_id} in {rescaled.seconds:.1f} s: {created.id}")
    echo(f"  path: {created.path}")
    for q in rescaled.queries:
        if q.partitions_before is None or q.partitions_before == q.partitions:
            echo(f"  {q.name}: unchanged ({'no state' if q.partitions is None else f'{q.partitions} partitions'})")
            continue
        rows = sum(store["rows"] for store in q.stores)
        echo(f"  {q.name}: {q.partitions_before} -> {q.partitions} partitions, {rows} state rows, "
             f"resumes after batch {q.batch_id}")
        if q.dropped_planned_batch is not None:
            echo(f"    its planned batch {q.dropped_planned_batch} is planned again after the rescale")


@click.command("rollback-sink")
@click.argument("loaded", metavar="SAVEPOINT", type=SAVEPOINT)
@click.argument("output_dir", required=False)
@click.option("--query", type=QUERY_NAME, help="The query that writes to OUTPUT_DIR, when SAVEPOINT holds several.")
@click.option("--dry-run", is_flag=True, help="List the batches and files that would move, with sizes; move nothing.")
@click.option("--compact-interval", type=click.IntRange(min=1), metavar="N",
              help="The job's spark.sql.streaming.fileSink.log.compactInterval [default: as the savepoint recorded "
                   "it; needed when the log fits several].")
@output_option
@pass_app
def rollback_sink_cmd(app, loaded, output_dir, query, dry_run, compact_interval, output):
    """Roll a file sink's output or a Delta table back to SAVEPOINT's cut, for a restore that rewrites the later
    batches.

    Spark's file sink skips every batch id its log (OUTPUT/_spark_metadata) committed: a query restored from
    an older savepoint re-runs the later batches and writes nothing. This truncates the log to the savepoint's
    batch and moves those batches' data files (and log files) into OUTPUT.sparkpoint-trash-<time>/ beside the
    output, their paths kept: nothing is deleted, and readers of the log see a whole table at every moment.
    Without OUTPUT_DIR, every file sink SAVEPOINT recorded is rolled back. Refused (exit 18) when the output is
    not a file sink's, a running job writes there, or the log no longer says what the cut held. Run it with the
    query stopped, before its restore; `run -s SAVEPOINT --rollback-sink` does both.

    A Delta table is restored (Delta's RESTORE, by the deltalake package) to its version just before the query's
    first commit after the cut, in one commit that also sets the query's transaction back to the cut's batch:
    Delta's sink then writes the later batches again. The files taken out stay on disk, reachable by Delta's
    time travel until VACUUM. Refused (exit 18, nothing changed) when another writer committed after the cut
    (the commit is named: the restore would drop its rows), VACUUM deleted files of the version to restore (they
    are named; the dry run says so too), or a commit landed while it planned.
    """
    from sparkpoint.jobs.sinks import roll_back_sinks

    emit(output, roll_back_sinks(app.settings, loaded, output_dir, query, dry_run, compact_interval),
         _render_sink_rollbacks)


def _sink_cut(sink: dict) -> str:
    if not sink.get("cut_known"):
        return ""
    if sink["kind"] == "delta":
        return f" (at batch {sink['batch_id']}: table version {sink['table_version']})"
    return f" (at batch {sink['batch_id']}: {sink['last_file'] or 'no file'})"


def _render_sink_rollbacks(rollbacks: list) -> None:
    for rolled in rollbacks:
        if rolled.kind == "delta":
            _render_table_rollback(rolled)
            continue
        verb = "would move" if rolled.dry_run else "moved"
        if not rolled.batches:
            echo(f"{rolled.query}: {rolled.output} is at batch {rolled.latest_batch}, not after the cut "
                 f"{rolled.cut}: nothing to roll back")
            continue
        echo(f"{rolled.query}: {rolled.output} back to batch {rolled.cut}; batches "
             f"{rolled.batches[0]}..{rolled.batches[-1]} {verb} {'to ' + rolled.trash if rolled.trash else 'aside'}:"
             f" {len(rolled.files)} files, {human_bytes(rolled.bytes)}, {len(rolled.log_files)} log files"
             + (" (the log at the cut rebuilt from the savepoint's record)" if rolled.rebuilt_log else ""))
        if rolled.dry_run:
            for trashed in rolled.files:
                echo(f"  {human_bytes(trashed.size):>10}  {trashed.path}")


def _render_table_rollback(rolled) -> None:
    if not rolled.batches:
        echo(f"{rolled.query}: Delta table {rolled.output} holds nothing after batch {rolled.cut} (version "
             f"{rolled.latest_version}): nothing to roll back")
        return
    batches = f"batches {rolled.batches[0]}..{rolled.batches[-1]}"
    if rolled.dry_run:
        echo(f"{rolled.query}: Delta table {rolled.output} would be restored from version {rolled.latest_version} to "
             f"{rolled.restored_to} (batch {rolled.cut}); {batches} undone, their files kept until VACUUM")
    else:
        echo(f"{rolled.query}: Delta table {rolled.output} restored to version {rolled.restored_to} (batch "
             f"{rolled.cut}) in version {rolled.commit}: {batches} undone, {rolled.removed_files} files out of the "
             "table, kept on disk until VACUUM")


COMMANDS = (savepoint_cmd, restore_cmd, verify_cmd, inspect_cmd, diff_cmd, rescale_cmd, rollback_sink_cmd)

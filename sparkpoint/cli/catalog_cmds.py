"""savepoints, prune and horizon: thin commands over sparkpoint.savepoints.catalog and .horizon."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from sparkpoint.results import human_bytes
from sparkpoint.cli.context import PATH_PART, echo, emit, output_option, partition_offsets, pass_app
from sparkpoint.cli.rich_text import text
from sparkpoint.cli.context import console as make_console
from sparkpoint.times import iso

if TYPE_CHECKING:  # the core is imported inside each command, so that --help stays fast
    from sparkpoint.savepoints.catalog import Entry, Node, Pruned
    from sparkpoint.savepoints.horizon import Horizon
    from sparkpoint.savepoints.source_horizons import SourceHorizon
    from sparkpoint.savepoints.restorability import InputCheck

@click.command("savepoints")
@click.option("--job", type=PATH_PART, help="Only this job's savepoints.")
@click.option("--dir", "directory", metavar="DIR", help="A savepoints directory [default: the home's].")
@click.option("--tree", is_flag=True, help="Show the lineage: each savepoint under the one it derives from (its job "
                                           "was restored from it, or it was rescaled from it), across jobs.")
@output_option
@pass_app
def savepoints_cmd(app, job, directory, tree, output):
    """List savepoints, newest first, with incomplete leftovers that prune removes."""
    from sparkpoint.savepoints import catalog

    settings = app.settings
    entries = catalog.check_inputs(catalog.scan(directory or settings.savepoints_dir(), settings.storage_options),
                                   settings.kafka)
    if tree:
        roots = catalog.lineage(entries)
        emit(output, [r for r in roots if job is None or _has_job(r, job)], _render_tree)
        return
    emit(output, [e for e in entries if job is None or e.job == job], _render_list)


def _has_job(node: Node, job: str) -> bool:
    return node.entry.job == job or any(_has_job(child, job) for child in node.children)


def _render_tree(roots: list[Node]) -> None:
    from rich.tree import Tree

    if not roots:
        click.echo("No savepoints.", err=True)
        return
    console = make_console()
    for root in roots:
        tree = Tree(_node_label(root))
        _grow(tree, root)
        console.print(tree)


def _grow(tree, node: Node) -> None:
    for child in node.children:
        _grow(tree.add(_node_label(child)), child)


def _node_label(node: Node):
    entry, origin = node.entry, node.entry.origin or {}
    queries = ", ".join(f"{q['name']}@{q['batch_id']}" for q in entry.queries) or "-"
    how = {"rescale": f"rescaled to {origin.get('partitions')} partitions", "job": f"job {origin.get('job_id')}",
           "checkpoint": "of a checkpoint"}.get(origin.get("kind"), origin.get("kind") or "")
    spark = f"  Spark {entry.spark_version}" if entry.spark_version else ""
    return text(entry.id, "bold") + text(f"  {entry.job}  {entry.created_at}  {queries}  {how}{spark}")


def _render_list(entries: list[Entry]) -> None:
    from rich.table import Table

    if not entries:
        click.echo("No savepoints.", err=True)
        return
    kafka = any(entry.input is not None for entry in entries)
    table = Table("job", "created", "queries @ batch", "size", "spark", "status",
                  *(("input", "reads next") if kafka else ()))
    # Ids are what operators copy into the next command: never truncate them.
    table.add_column("id", overflow="fold")
    for entry in entries:
        queries = ", ".join(f"{q['name']}@{q['batch_id']}" for q in entry.queries) or "-"
        status = (text(entry.status) if entry.status == "complete"
                  else text(f"{entry.status}: {entry.problem}", "red"))
        said = [_input_said(entry.input), _reads_next(entry)] if kafka else []
        table.add_row(text(entry.job or "-"), text(entry.created_at or "-"), text(queries), human_bytes(entry.bytes),
                      text(entry.spark_version or "-"), status, *said, text(entry.id))
    make_console().print(table)
    for entry in entries:
        if entry.input is not None and entry.input.gaps:
            echo(f"{entry.id}: {entry.input.summary()}")
        if entry.input is not None and entry.input.doubt():
            echo(f"{entry.id}: {entry.input.doubt()}")
    # Why the input is unknown is the same for every savepoint the broker was asked about: said once.
    for why in dict.fromkeys(e.input.why for e in entries if e.input is not None and e.input.status == "unknown"):
        echo(f"input unknown: {why}")


READS_SHOWN = 6  # partitions per topic in the table; inspect and -o json give them all


def _reads_next(entry: Entry):
    """Where each Kafka source of the savepoint reads next, per topic and partition: a line a topic."""
    from rich.text import Text

    lines = [text(partition_offsets(read.topic, read.partitions, READS_SHOWN)) for read in entry.reads]
    return Text("\n").join(lines) if lines else text("-")


def _input_said(checked: InputCheck | None):
    """A savepoint's input, in a word: all in the log (restorable), part gone (unrestorable), or not known."""
    if checked is None:
        return text("-")
    lost = f" ({checked.lost} lost)" if checked.status == "unrestorable" and checked.lost is not None else ""
    unsure = " (re-made? unknown)" if checked.status == "restorable" and checked.unidentified else ""
    return text(checked.status + lost + unsure, "red" if checked.status == "unrestorable" else "")


@click.command("prune")
@click.option("--keep-last", type=click.IntRange(min=0), help="Keep the newest N savepoints of each job.")
@click.option("--max-age", metavar="DURATION", help="Delete savepoints older than this (e.g. 7d, 12h, 1d12h).")
@click.option("--job", type=PATH_PART, help="Only this job's savepoints.")
@click.option("--dir", "directory", metavar="DIR", help="A savepoints directory [default: the home's].")
@click.option("--unrestorable", is_flag=True,
              help="Also delete the savepoints whose Kafka input is partly gone from the log (as `savepoints` "
                   "shows them: unrestorable); nothing is deleted when the broker cannot tell.")
@click.option("--dry-run", is_flag=True, help="Show what would be deleted; delete nothing.")
@output_option
@pass_app
def prune_cmd(app, keep_last, max_age, job, directory, unrestorable, dry_run, output):
    """Delete old savepoints by retention, and leftovers of interrupted ones.

    With both limits, a savepoint goes only when it is beyond the newest N of its job AND older
    than DURATION. --unrestorable also deletes those whose Kafka input is partly gone from the log.
    Savepoints whose creation or disposal was interrupted are removed too; one
    still being written (its process alive) is left alone.
    """
    from sparkpoint.savepoints import catalog, horizon

    settings = app.settings
    result = catalog.prune(directory or settings.savepoints_dir(), **_retention(keep_last, max_age), job=job,
                           dry_run=dry_run, storage_options=settings.storage_options,
                           unrestorable_of=settings.kafka if unrestorable else None)
    if dry_run:
        result = horizon.preview(result, job=job, jobs=_running_jobs(settings),
                                 storage_options=settings.storage_options, kafka=settings.kafka)
    emit(output, result, _render_pruned)


def _retention(keep_last: int | None, max_age: str | None) -> dict:
    """--keep-last and --max-age as the catalog takes them."""
    from sparkpoint.savepoints import catalog

    return {"keep_last": keep_last, "max_age": catalog.parse_duration(max_age) if max_age is not None else None}


def _running_jobs(settings):
    from sparkpoint.jobs.listing import list_jobs

    return list_jobs(settings)


def _render_pruned(pruned: Pruned) -> None:
    verb = "Would delete" if pruned.dry_run else "Deleted"
    for entry in pruned.deleted:
        echo(f"{verb} {entry.id} ({entry.status}, {human_bytes(entry.bytes)}): {entry.path}")
    echo(f"{verb} {len(pruned.deleted)} savepoint(s), {human_bytes(pruned.freed_bytes)}; kept {len(pruned.kept)}.")
    move = getattr(pruned, "horizon", None)
    if move is None:
        return
    before, after = _positions(move.before), _positions(move.after)
    table = _folding_table("source", "oldest needed now", "held by", "after the prune", "held by")
    table.title = "Retention horizon"
    for key in dict.fromkeys([*before, *after]):
        kind, source, what, _holder = key
        now, then = before.get(key, ("-", "-")), after.get(key, ("no holder left", "-"))
        table.add_row(text(" ".join(filter(None, (kind, source, what)))), text(now[0]), text(now[1]),
                      text(then[0], "" if then == now else "bold"), text(then[1]))
    make_console().print(table)
    _warn(move.after.warnings)


@click.command("horizon")
@click.option("--job", type=PATH_PART, help="Only this job's savepoints and running jobs.")
@click.option("--keep-last", type=click.IntRange(min=0),
              help="Count only the savepoints `prune --keep-last N` keeps [default: every complete one].")
@click.option("--max-age", metavar="DURATION", help="Count only the savepoints `prune --max-age DURATION` keeps.")
@click.option("--dir", "directory", metavar="DIR", help="A savepoints directory [default: the home's].")
@output_option
@pass_app
def horizon_cmd(app, job, keep_last, max_age, directory, output):
    """The oldest input each source must still keep, for the savepoints and running jobs.

    Per source, the oldest position that a savepoint the retention policy keeps, or a running job's
    checkpoint, still reads, and which one pins it: the file source's oldest file still to be read
    (older files, read by all, can be archived), Kafka's offset per topic and partition, the rate
    source's offset, other sources' raw offsets. `prune --dry-run` shows how a prune moves it.
    """
    from sparkpoint.savepoints import horizon

    settings = app.settings
    result = horizon.horizon(directory or settings.savepoints_dir(), **_retention(keep_last, max_age), job=job,
                             jobs=_running_jobs(settings), storage_options=settings.storage_options,
                             kafka=settings.kafka)
    emit(output, result, _render_horizon)


def _render_horizon(result: Horizon) -> None:
    if not result.sources:
        click.echo("No savepoint or running job reads any input.", err=True)
    else:
        table = _folding_table("kind", "source", "partition / query", "oldest needed", "held by", "archivable")
        for source in result.sources:
            for what, position, holder in _lines(source):
                archivable = str(len(source.archivable)) if hasattr(source, "archivable") else ""
                if hasattr(source, "listed") and not source.listed:
                    archivable += " (not listed)"
                table.add_row(text(source.kind), text(source.source), text(what), text(position), text(holder or "-"),
                              text(archivable))
        make_console().print(table)
    kinds = [h.kind for h in result.holders]
    echo(f"Held by {kinds.count('savepoint')} savepoint(s) and {kinds.count('checkpoint')} running job(s).", err=True)
    _warn(result.warnings)


def _folding_table(*columns: str):
    """Ids and positions are what operators copy: whole on one line; sources (paths) folded, never cut."""
    from rich.table import Table

    table = Table()
    for column in columns:
        table.add_column(column, overflow="fold", no_wrap=column in _WHOLE)
    return table


_WHOLE = ("held by", "oldest needed", "oldest needed now", "after the prune")


def _positions(result: Horizon) -> dict[tuple[str, str, str, str], tuple[str, str]]:
    """(kind, source, what, holder for another source's lines: one per holder) → (position, holder)."""
    return {(source.kind, source.source, what, holder if source.kind == "other" else ""): (position, holder or "-")
            for source in result.sources for what, position, holder in _lines(source)}


def _lines(source: SourceHorizon) -> list[tuple[str, str, str | None]]:
    """(what, the oldest position still needed, the holder that pins it): one line per partition of a Kafka
    topic, per holder of another source, one for the others."""
    if source.kind == "file":
        oldest = source.oldest_file
        if oldest is None:
            return [("", "every file read", None)]
        name = oldest.path.removeprefix(source.source.rstrip("/") + "/")
        when = f" ({iso(oldest.timestamp_ms / 1000)})" if oldest.timestamp_ms is not None else ""
        return [("", name + when, oldest.held_by)]
    if source.kind == "kafka":
        return [(f"partition {p.partition}", f"offset {p.offset}" + (
            f" ({iso(p.timestamp_ms / 1000)})" if p.timestamp_ms is not None else ""), p.held_by)
            for p in source.partitions]
    if source.kind in ("rate", "rate-micro-batch"):
        return [("", f"offset {source.offset}", source.held_by)]
    if source.kind == "delta":
        return [("", f"version {source.version}" + (" (its snapshot)" if source.snapshot else ""), source.held_by)]
    return [(held.query, held.offset, held.held_by) for held in source.offsets]


def _warn(warnings: list[str]) -> None:
    for warning in warnings:
        echo(f"warning: {warning}", err=True)


COMMANDS = (savepoints_cmd, prune_cmd, horizon_cmd)

"""savepoints and prune: thin commands over sparkpoint.savepoints.catalog."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from sparkpoint.cli.context import PATH_PART, echo, emit, human_bytes, output_option, pass_app, text
from sparkpoint.cli.context import console as make_console

if TYPE_CHECKING:  # the core is imported inside each command, so that --help stays fast
    from sparkpoint.savepoints.catalog import Entry, Node, Pruned

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
    entries = catalog.scan(directory or settings.savepoints_dir(), settings.storage_options)
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
    return text(entry.id, "bold") + text(f"  {entry.job}  {entry.created_at}  {queries}  {how}")


def _render_list(entries: list[Entry]) -> None:
    from rich.table import Table

    if not entries:
        click.echo("No savepoints.", err=True)
        return
    table = Table("job", "created", "queries @ batch", "size", "status")
    # Ids are what operators copy into the next command: never truncate them.
    table.add_column("id", overflow="fold")
    for entry in entries:
        queries = ", ".join(f"{q['name']}@{q['batch_id']}" for q in entry.queries) or "-"
        status = (text(entry.status) if entry.status == "complete"
                  else text(f"{entry.status}: {entry.problem}", "red"))
        table.add_row(text(entry.job or "-"), text(entry.created_at or "-"), text(queries), human_bytes(entry.bytes),
                      status, text(entry.id))
    make_console().print(table)


@click.command("prune")
@click.option("--keep-last", type=click.IntRange(min=0), help="Keep the newest N savepoints of each job.")
@click.option("--max-age", metavar="DURATION", help="Delete savepoints older than this (e.g. 7d, 12h, 1d12h).")
@click.option("--job", type=PATH_PART, help="Only this job's savepoints.")
@click.option("--dir", "directory", metavar="DIR", help="A savepoints directory [default: the home's].")
@click.option("--dry-run", is_flag=True, help="Show what would be deleted; delete nothing.")
@output_option
@pass_app
def prune_cmd(app, keep_last, max_age, job, directory, dry_run, output):
    """Delete old savepoints by retention, and leftovers of interrupted ones.

    With both limits, a savepoint goes only when it is beyond the newest N of its job AND older
    than DURATION. Savepoints whose creation or disposal was interrupted are removed too; one
    still being written (its process alive) is left alone.
    """
    from sparkpoint.savepoints import catalog

    settings = app.settings
    result = catalog.prune(
        directory or settings.savepoints_dir(),
        keep_last=keep_last,
        max_age=catalog.parse_duration(max_age) if max_age is not None else None,
        job=job,
        dry_run=dry_run,
        storage_options=settings.storage_options,
    )
    emit(output, result, _render_pruned)


def _render_pruned(pruned: Pruned) -> None:
    verb = "Would delete" if pruned.dry_run else "Deleted"
    for entry in pruned.deleted:
        echo(f"{verb} {entry.id} ({entry.status}, {human_bytes(entry.bytes)}): {entry.path}")
    echo(f"{verb} {len(pruned.deleted)} savepoint(s), {human_bytes(pruned.freed_bytes)}; kept {len(pruned.kept)}.")


COMMANDS = (savepoints_cmd, prune_cmd)

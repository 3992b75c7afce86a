"""Sink rollback for a savepoint: the file sinks' outputs (``spark.sink_rollback``) and Delta tables (Delta's
restore, ``adapters.delta_tables``) brought back to its cut, `rollback-sink` and `run -s --rollback-sink`, all
planned (and refused, exit 18) before any is changed, with the check that no running job writes there."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sparkpoint.adapters import delta_tables
from sparkpoint.adapters.storage import storage_for
from sparkpoint.config import Settings
from sparkpoint.errors import SinkRollbackRefusedError, SparkpointError
from sparkpoint.jobs.agents import client_for
from sparkpoint.jobs.job_state import ACTIVE_STATES, state_of
from sparkpoint.jobs.registry import Registry
from sparkpoint.jobs.sink_outputs import (app_id_of, behind_the_cut, file_sink_cut, output_queries, outputs_of,
                                         sink_batch, unrecorded)
from sparkpoint.results import Result
from sparkpoint.savepoints.savepoint import Savepoint
from sparkpoint.spark import sink_rollback
from sparkpoint.spark.delta_log import DELTA_SINK, LOG_DIR, DeltaLog, SinkCut, missing_files, sink_cut
from sparkpoint.spark.file_sink import parse_interval
from sparkpoint.spark.sinks import FILE_SINK, batch_write_records, sink_record


@dataclass(frozen=True)
class TrashedFile(Result):
    path: str  # relative to the output (and to the trash)
    size: int


@dataclass(frozen=True)
class SinkRolledBack(Result):
    """One output brought back to a savepoint's cut (or, with ``dry_run``, what would be)."""

    kind: str  # "file": Spark's file sink
    query: str
    output: str
    cut: int  # the log's newest batch afterwards: the savepoint's batch of the query
    latest_batch: int | None  # the log's newest batch before
    batches: list[int]  # rolled back: the restored version writes them again
    files: list[TrashedFile]  # data files of those batches, moved to the trash
    bytes: int
    log_files: list[str]  # the sink log's files moved to the trash
    rebuilt_log: bool  # Spark had compacted past the cut: the log at the cut was written from the savepoint's record
    trash: str | None
    dry_run: bool

    def said(self) -> str:
        if self.dry_run:
            return f"{self.query}: {self.output} would be rolled back to batch {self.cut}" + (
                f", batches {self.batches[0]}..{self.batches[-1]} moved aside" if self.batches
                else ", nothing after it")
        return f"{self.query}: {self.output} rolled back to batch {self.cut}" + (
            f", batches {self.batches[0]}..{self.batches[-1]} moved to {self.trash}" if self.batches
            else ", nothing after it")


@dataclass(frozen=True)
class TableRolledBack(Result):
    """A Delta table brought back to a savepoint's cut by Delta's restore (or, with ``dry_run``, what would be)."""

    kind: str  # "delta"
    query: str
    output: str  # the table
    cut: int  # the savepoint's batch of the query
    batches: list[int]  # the query's batches after the cut the table held: the restored version writes them again
    latest_version: int | None  # the table's newest version before
    restored_to: int | None  # the version whose files the table holds again; null when nothing was after the cut
    commit: int | None  # the restore's own commit (null in a dry run, or with nothing to do)
    removed_files: int | None  # data files taken out of the table (kept on disk until VACUUM); null in a dry run
    dry_run: bool

    def said(self) -> str:
        if not self.batches:
            return f"{self.query}: Delta table {self.output} holds nothing after batch {self.cut}"
        batches = f"batches {self.batches[0]}..{self.batches[-1]}"
        if self.dry_run:
            return (f"{self.query}: Delta table {self.output} would be restored from version {self.latest_version} "
                    f"to {self.restored_to} (batch {self.cut}), {batches} undone")
        return (f"{self.query}: Delta table {self.output} restored to version {self.restored_to} (batch {self.cut}), "
                f"{batches} undone in version {self.commit}")


def roll_back_sinks(settings: Settings, savepoint: Savepoint, output: str | None = None, query: str | None = None,
                    dry_run: bool = False, compact_interval: int | None = None, only: str | None = None,
                    writers_checked: bool = False, on_refused: Callable[[str], None] | None = None,
                    launching: str | None = None) -> list[SinkRolledBack | TableRolledBack]:
    """Bring the file sinks' outputs and Delta tables back to the savepoint's cut: every recorded one (of kind
    ``only``, when given), or ``output``. All are planned (and refused) before any is changed; with
    ``on_refused``, an output whose rollback is refused is said to it and passed over, and the others are
    rolled back (a probation's way back, which does not stop half-way). ``compact_interval``: the file sink
    log's, as the restored version sets it (else what the savepoint recorded). A running job writing there
    refuses it, in a dry run too with ``writers_checked`` (a check for the restore that will roll it back), but
    for ``launching``: the job whose start rolls them back, which holds its first query until then."""
    pairs = [pair for pair in output_queries(savepoint, output, query, settings) if only in (None, pair[1]["kind"])]
    if output is None and not pairs and only is None:
        missing = unrecorded(savepoint)
        raise SinkRollbackRefusedError(
            f"savepoint {savepoint.manifest['id']} records no file sink or Delta table"
            + (f" (query {', '.join(missing)} records no sink at all: a savepoint of a plain checkpoint, or by "
               "sparkpoint < 0.13); name the output: sparkpoint rollback-sink SAVEPOINT OUTPUT_DIR" if missing else ""))
    if not pairs:
        return []
    writers = _running_writers(settings, launching) if writers_checked or not dry_run else {}
    with contextlib.ExitStack() as locks:
        planned = []
        for saved, written in pairs:
            try:
                planned.append(_plan_one(settings, saved, written, writers, locks, dry_run, compact_interval))
            except SinkRollbackRefusedError as exc:
                if on_refused is None:
                    raise
                on_refused(str(exc))
        return [_table_done(saved, plan, dry_run) if isinstance(plan, SinkCut)
                else _done(saved, plan, None if dry_run else sink_rollback.apply(storage, plan), dry_run)
                for saved, storage, plan in planned]


def _plan_one(settings: Settings, saved: dict[str, Any], written: dict[str, Any], writers: dict[str, str],
              locks: contextlib.ExitStack, dry_run: bool, compact_interval: int | None):
    """(saved query, storage, plan) of one output's rollback, its lock taken unless a dry run."""
    location = written["path"]
    storage, path = storage_for(location, settings.storage_options)
    writer = writers.get(path)
    if writer:
        raise SinkRollbackRefusedError(f"{writer} still writes to {location}: stop or cancel it first")
    if not dry_run:
        locks.enter_context(sink_rollback.exclusive(storage, path))
    if written["kind"] == DELTA_SINK:
        return saved, storage, _table_plan(storage, path, saved, written)
    return saved, storage, sink_rollback.plan(storage, path, file_sink_cut(saved, written, compact_interval))


def _table_plan(storage, table: str, saved: dict[str, Any], written: dict[str, Any]) -> SinkCut:
    """The query's commits after the cut; refused when the table cannot be brought back to it without undoing
    another writer's rows, or Delta's log no longer reaches the cut."""
    log = DeltaLog(storage, table)
    if not log.present or not log.versions:
        raise SinkRollbackRefusedError(f"{table} has no {LOG_DIR} commits: it is not a Delta table")
    if log.unread():
        raise SinkRollbackRefusedError(f"{log.unread()}; nothing was changed")
    if written.get("follows_batches") is False:
        raise SinkRollbackRefusedError(
            f"{table}: query {saved['name']}'s foreachBatch writes it with txnVersion values that are not its batch "
            "ids, so its commits do not say which batches they hold; nothing was changed")
    cut = sink_cut(log, app_id_of(saved, written), sink_batch(saved, written))
    behind = behind_the_cut(cut, saved, written)
    if behind:
        raise SinkRollbackRefusedError(f"{table}: {behind}; nothing was changed")
    if cut.later_batches and cut.target is None:
        raise SinkRollbackRefusedError(
            f"{table}: Delta's log no longer holds the commits from where query {saved['name']}'s batches after "
            f"{cut.batch} begin (its oldest is version {log.versions[0]}: log retention removed the rest), "
            "so the version to restore is not known")
    if cut.target is not None and cut.target < 0:
        raise SinkRollbackRefusedError(
            f"{table}: the table's first commit is the query's batch {cut.later_batches[0]}, after the savepoint's "
            f"batch {cut.batch}: it was made after the cut, and there is no version to restore; nothing was changed")
    foreign = cut.foreign()
    if foreign:
        raise SinkRollbackRefusedError(
            f"{table}: {foreign[0].describe()} was committed by another writer after the cut"
            + (f" ({len(foreign)} such commits)" if len(foreign) > 1 else "")
            + f": restoring version {cut.target} would drop its rows too; nothing was changed")
    gone = missing_files(storage, table, cut.restore_needs())
    if gone:
        named = ", ".join(gone[:3]) + (f" and {len(gone) - 3} more" if len(gone) > 3 else "")
        raise SinkRollbackRefusedError(
            f"{table}: restoring version {cut.target} needs {len(gone)} data file{'s' if len(gone) > 1 else ''} "
            f"that later commits took out of the table and that are gone from storage ({named}): VACUUM deleted "
            "them (past delta.deletedFileRetentionDuration), so the table cannot be taken back to the cut; "
            "nothing was changed")
    return cut


def _table_done(saved: dict[str, Any], cut: SinkCut, dry_run: bool) -> TableRolledBack:
    latest = cut.ahead[0].version if cut.ahead else cut.table_version
    if not cut.later_batches:
        return TableRolledBack(DELTA_SINK, saved["name"], cut.table, cut.batch, [], latest, None, None,
                               None, dry_run)
    restored = None if dry_run else delta_tables.restore(cut.table, cut.target, latest, cut.app_id, cut.batch)
    return TableRolledBack(DELTA_SINK, saved["name"], cut.table, cut.batch, cut.later_batches, latest,
                           cut.target, restored.version if restored else None,
                           restored.removed_files if restored else None, dry_run)


def log_interval(confs: list[str]) -> int | None:
    """The file sink log's compaction interval a version's ``--conf KEY=VALUE`` list sets, if it sets one."""
    given = dict(conf.partition("=")[::2] for conf in confs).get(sink_rollback.COMPACT_INTERVAL_CONF, "")
    return parse_interval(given)


def _done(saved: dict[str, Any], plan: sink_rollback.RollbackPlan, trash: str | None, dry_run: bool) -> SinkRolledBack:
    return SinkRolledBack(
        kind=FILE_SINK, query=saved["name"], output=plan.output, cut=saved["batch_id"], latest_batch=plan.latest,
        batches=plan.batches, files=[TrashedFile(path, size) for path, size in plan.moved], bytes=plan.bytes,
        log_files=plan.log_moved, rebuilt_log=plan.rebuilt, trash=trash, dry_run=dry_run,
    )


def _running_writers(settings: Settings, launching: str | None = None) -> dict[str, str]:
    """The outputs the file sinks of running (or starting) jobs write to: "job J's query Q" by output. A job whose
    agent does not answer, or does not say where it writes (an agent of an earlier sparkpoint), could write
    anywhere: it refuses the rollback. ``launching``, the job starting from the rollback, is not one."""
    registry = Registry(settings.home_url())
    writers = {}
    for job in registry.all():
        state = state_of(job)
        if state not in ACTIVE_STATES or job.id == launching:
            continue
        unknown = (f"job {job.id} is {state}, and whether it writes to the output is unknown: wait for it, "
                   "or stop or cancel it first")
        try:
            status = client_for(registry, job, timeout=2.0).status()
        except SparkpointError:
            raise SinkRollbackRefusedError(f"{unknown} (its agent does not answer)") from None
        for live in status.get("queries") or []:
            if "sink" not in live:
                raise SinkRollbackRefusedError(f"{unknown} (its agent, of an earlier sparkpoint, does not say)")
            live_outputs = outputs_of({"sink": sink_record(live["sink"]),
                                       "delta_writes": batch_write_records(live.get("delta_writes"))})
            for output in live_outputs:
                writers[storage_for(output["path"], settings.storage_options)[1]] = (
                    f"job {job.id}'s query {live.get('name')}")
    return writers

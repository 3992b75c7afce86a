"""Sink rollback for a savepoint: which outputs a restore from it must roll back, the check that no running job
writes there, and the rollback itself: a file sink's output (``spark.sink_rollback``), a Delta table (Delta's
restore, ``adapters.delta_tables``): `rollback-sink` and `run -s --rollback-sink`. And what a restore without it
would get wrong: a file sink warned of, a Delta table refused (``refuse_sinks_ahead``)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from collections.abc import Callable
from typing import Any

from sparkpoint.adapters import delta_tables
from sparkpoint.adapters.storage import join, storage_for
from sparkpoint.config import Settings
from sparkpoint.errors import (BadArgumentError, NotACheckpointError, SinkAheadError, SinkRollbackRefusedError,
                               SparkpointError)
from sparkpoint.jobs.agents import client_for
from sparkpoint.jobs.job_state import ACTIVE_STATES, state_of
from sparkpoint.jobs.registry import Registry
from sparkpoint.results import Result
from sparkpoint.savepoints.savepoint import Savepoint
from sparkpoint.spark import sink_rollback
from sparkpoint.spark.delta_log import DELTA_SINK, LOG_DIR, DeltaLog, SinkCut, missing_files, sink_cut
from sparkpoint.spark.file_sink import METADATA_DIR, parse_interval
from sparkpoint.spark.sinks import FILE_SINK, WITH_OUTPUT, batch_write_records, sink_record


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


def output_queries(savepoint: Savepoint, output: str | None, query: str | None,
                   settings: Settings | None = None) -> list[tuple[dict, dict]]:
    """(saved query, its output's record) to roll back: every recorded file sink and Delta table (a query's sink,
    and the tables its foreachBatch writes with a transaction), or the one ``output`` is given for (``query``
    names the query when the savepoint holds several). A record's ``path`` is where the output is."""
    queries = savepoint.queries
    if query is not None:
        queries = [q for q in queries if q["name"] == query]
        if not queries:
            raise BadArgumentError(f"savepoint {savepoint.manifest['id']} has no query {query!r}: it holds "
                                   + ", ".join(q["name"] for q in savepoint.queries))
    if output is None:
        return [(q, record) for q in queries for record in outputs_of(q)]
    if len(queries) != 1:
        raise BadArgumentError(f"savepoint {savepoint.manifest['id']} holds {len(queries)} queries: name the one "
                               "that writes to the output with --query")
    (saved,) = queries
    options = settings.storage_options if settings else None
    storage, path = storage_for(output, options)
    written = next((w for w in saved.get("delta_writes") or [] if storage_for(w["path"], options)[1] == path), None)
    if written is not None:
        return [(saved, {**written, "path": output})]
    sink = _recognised(saved.get("sink"))
    if sink is not None and sink["kind"] not in WITH_OUTPUT:
        raise SinkRollbackRefusedError(f"query {saved['name']} writes to {sink['description']}, not to Spark's file "
                                       "sink or a Delta table: only those can be rolled back")
    if sink is not None:
        return [(saved, {**sink, "path": output})]
    return [(saved, {"kind": DELTA_SINK if storage.is_dir(join(path, LOG_DIR)) else FILE_SINK, "path": output})]


def outputs_of(saved: dict[str, Any]) -> list[dict[str, Any]]:
    """The outputs a saved query records a cut of: its file sink or Delta sink, and its foreachBatch's Delta
    writes with a transaction."""
    sink = _recognised(saved.get("sink"))
    return ([sink] if sink is not None and sink["kind"] in WITH_OUTPUT else []) + list(saved.get("delta_writes") or [])


def _recognised(sink: dict[str, Any] | None) -> dict[str, Any] | None:
    """A recorded sink; one a sparkpoint before Delta was known recorded as "other" is recognised again from
    Spark's description of it (its cut then unknown)."""
    if sink is not None and sink["kind"] == "other":
        return {**sink, **(sink_record(sink["description"]) or {})}
    return sink


def sink_batch(saved: dict[str, Any], output: dict[str, Any]) -> int:
    """The batch an output stands at in the savepoint: the query's own, but for a rescaled savepoint, whose own
    batch wrote nothing to it (its source's is kept)."""
    return output.get("batch_id", saved["batch_id"])


def app_id_of(saved: dict[str, Any], output: dict[str, Any]) -> str:
    """Whose transaction a Delta table keeps for the output: Delta's sink's is the query id; a foreachBatch write
    names its own (txnAppId), the same whatever the query id."""
    return output.get("app_id") or saved["query_id"]


def unrecorded(savepoint: Savepoint) -> list[str]:
    """The queries of the savepoint that record no sink (savepoints of plain checkpoints, or by sparkpoint < 0.13)."""
    return [q["name"] for q in savepoint.queries if "sink" not in q]


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
    return saved, storage, sink_rollback.plan(storage, path, _cut(saved, written, compact_interval))


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
    behind = _behind(cut, saved, written)
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


def _behind(cut: SinkCut, saved: dict[str, Any], written: dict[str, Any]) -> str | None:
    """Why the table stands before the savepoint's cut (an earlier rollback to an older savepoint took it there):
    the restored query would never write the batches between. None when it does not."""
    recorded = written.get("cut_batch")
    if cut.cut_batch is None or recorded is None or cut.cut_batch >= recorded:
        return None
    return (f"the table holds query {saved['name']}'s batches up to {cut.cut_batch} only (version "
            f"{cut.table_version}), before the savepoint's batch {recorded}: an earlier rollback took it past the cut, "
            f"and the restored query would not write batches {cut.cut_batch + 1}..{recorded}; restore the savepoint "
            "that rollback went to, or one older")


def _table_done(saved: dict[str, Any], cut: SinkCut, dry_run: bool) -> TableRolledBack:
    latest = cut.ahead[0].version if cut.ahead else cut.table_version
    if not cut.later_batches:
        return TableRolledBack(DELTA_SINK, saved["name"], cut.table, cut.batch, [], latest, None, None,
                               None, dry_run)
    restored = None if dry_run else delta_tables.restore(cut.table, cut.target, latest, cut.app_id, cut.batch)
    return TableRolledBack(DELTA_SINK, saved["name"], cut.table, cut.batch, cut.later_batches, latest,
                           cut.target, restored.version if restored else None,
                           restored.removed_files if restored else None, dry_run)


def _cut(saved: dict[str, Any], sink: dict[str, Any], compact_interval: int | None) -> sink_rollback.SinkCut:
    return sink_rollback.SinkCut(
        sink_batch=sink_batch(saved, sink), query_batch=saved["batch_id"],
        known=bool(sink.get("cut_known")), last_file=sink.get("last_file"),
        compact_interval=compact_interval or sink.get("compact_interval"),
    )


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


def pending(settings: Settings, savepoint: Savepoint, compact_interval: int | None = None) -> list[str]:
    """What a restore from ``savepoint`` without --rollback-sink would get wrong, one warning per file sink: the
    batches after the cut its log has (the restored query skips them), a batch the log lacks, or why it could not
    be rolled back. An output that does not exist, or cannot be read, is passed over."""
    said = []
    for saved, written in output_queries(savepoint, None, None):
        if written["kind"] != FILE_SINK:
            continue
        location = written["path"]
        where = f"the file sink of query {saved['name']} ({location})"
        try:
            storage, path = storage_for(location, settings.storage_options)
            if not storage.exists(join(path, METADATA_DIR)):
                continue
            plan = sink_rollback.plan(storage, path, _cut(saved, written, compact_interval))
        except SinkRollbackRefusedError as exc:
            said.append(f"{where} cannot be rolled back to the savepoint, and the restored version may fail or skip "
                        f"batches there: {exc}")
            continue
        except SparkpointError:
            continue
        if plan.batches:
            said.append(f"{where} has committed batches {plan.batches[0]}..{plan.batches[-1]} after the savepoint's "
                        f"batch {plan.sink_batch}: the restored version will skip them and write nothing for them "
                        "(the old results stay); pass --rollback-sink to move them aside so that they are written "
                        "again")
        elif plan.filler:
            said.append(f"{where} ends at batch {plan.latest}, and the restored query's next batch is "
                        f"{saved['batch_id'] + 1}: Spark will fail to write it without the batches between; pass "
                        "--rollback-sink to add them to the log, empty")
    return said


def refuse_sinks_ahead(settings: Settings, savepoint: Savepoint, fork: bool, keep: bool,
                       warn: Callable[[str], None], handover: bool = False) -> list[str]:
    """Refuse (SinkAheadError) a restore from ``savepoint`` into a Delta table its query wrote past the cut, or
    into a file sink's output past it when the query keeps state (``_refuse_stateful_file_skip``):
    Delta's sink would skip those batches, or write them twice under a new query id (``fork``); a foreachBatch
    write with a transaction of its own is skipped under its app id, a fork's too (and a fork running beside the
    job would take its batches). With ``keep``, each is said instead (to ``warn``) and returned; but a stateful
    query's skip is refused all the same: Delta skips a batch's write before running its plan, so no state
    version is written for it, and the next batch fails to load it (seen on Spark 4.2 with Delta 4.4:
    CANNOT_READ_DELTA_FILE_NOT_EXISTS). ``handover``: the savepoint of a `run --replace` stop cut short, whose
    batch in flight the old version's sink committed: kept (the new version skips the old version's own batch)
    unless the query keeps state. Refused too: a table an earlier rollback took past the cut. A table that is
    gone is passed over (the restored query makes it again); one that cannot be read is warned of."""
    said = []
    for saved, written in output_queries(savepoint, None, None):
        if written["kind"] == FILE_SINK:
            _refuse_stateful_file_skip(settings, saved, written)
            continue
        batches, cut, short = _batches_ahead(settings, saved, written, warn)
        own = "app_id" in written
        if fork and own:
            said.extend(_refuse_fork_beside_the_job(saved, written, keep, warn))
        elif fork and not batches and cut is not None and cut.other_streams():
            said.extend(_refuse_fork_over_a_fork(saved, written, cut, keep, warn))
        if batches:
            said.extend(_refuse_batches_ahead(saved, written, batches, short, fork, keep or handover, handover, warn))
    return said


def _refuse_batches_ahead(saved: dict[str, Any], written: dict[str, Any], batches: list[int], short: str | None,
                          fork: bool, keep: bool, handover: bool, warn: Callable[[str], None]) -> list[str]:
    """``short``: why ``batches`` may be only some of them."""
    own = "app_id" in written
    held = (f"Delta table {written['path']} holds {'at least ' if short else ''}{len(batches)} "
            f"batch{'es' if len(batches) > 1 else ''} of query {saved['name']} after the savepoint's batch "
            f"{sink_batch(saved, written)} ({batches[0]}..{batches[-1]}{f'; {short}' if short else ''})"
            + (f", written by its foreachBatch under txnAppId {written['app_id']}" if own else "")
            + (", committed by the old version in the batch its stop cut short" if handover else ""))
    doubled = fork and not own
    # Each refusal offers only what is then accepted: a stateful query's skip never is (Spark writes no state for
    # a batch Delta skips), a fork's writes to another table are (under another txnAppId for a foreachBatch's).
    elsewhere = ("as a fork whose foreachBatch writes another table under another txnAppId" if own
                 else "as a fork into another table") + " (--fork --keep-sink-output)"
    if keep and not fork and saved["operators"]:
        raise SinkAheadError(
            f"{held}: {'' if handover else '--keep-sink-output cannot keep them for this query: '}it keeps state, "
            "and Delta skips a batch's write before its plan runs, so Spark writes no state for it and the restored "
            "query would fail at its first batch after them (a state file missing); restore with --rollback-sink"
            + ("" if handover else f", or {elsewhere}"))
    if not keep:
        if doubled:
            raise SinkAheadError(
                f"{held}: the fork, a query of its own to Delta, would write them a second time beside them; write "
                "the fork to another table and pass --keep-sink-output, or restore with --rollback-sink to take the "
                "table back to the cut")
        skips = ("Delta skips a write whose txnVersion the table holds for its txnAppId" if own
                 else "Delta's sink takes them as done")
        raise SinkAheadError(
            f"{held}: the restored version would skip them ({skips}) and keep the old version's rows; "
            + ("the query keeps state, so the skip cannot be kept (Spark writes no state for a skipped batch): "
               if saved["operators"] else "")
            + "restore with --rollback-sink to take the table back to the cut with the state, or "
            + (elsewhere if saved["operators"] else "pass --keep-sink-output to accept the skip"))
    if handover:
        kept = f"{held}: the new version skips them (the old version's own batch)"
    else:
        kept = f"{held}, kept as they are (--keep-sink-output): " + (
            "the fork writes them again" if doubled else "the fork writes another table under another txnAppId"
            if fork else "the restored version skips them")
    warn(kept)
    return [kept]


def _refuse_fork_beside_the_job(saved: dict[str, Any], written: dict[str, Any], keep: bool,
                                warn: Callable[[str], None]) -> list[str]:
    """A fork whose foreachBatch writes a table under the app id the savepoint's query writes it under: the two
    take each other's batches (Delta keeps the first write of a txnVersion and skips the other's)."""
    held = (f"query {saved['name']}'s foreachBatch writes Delta table {written['path']} under txnAppId "
            f"{written['app_id']}, which a fork running the same code writes under too")
    if not keep:
        raise SinkAheadError(f"{held}: Delta keeps whichever writes a batch first and skips the other's; give the "
                             "fork's writes another txnAppId and table, then pass --keep-sink-output")
    kept = f"{held}, kept (--keep-sink-output): the fork's writes must use another txnAppId and table"
    warn(kept)
    return [kept]


def _refuse_fork_over_a_fork(saved: dict[str, Any], written: dict[str, Any], cut: SinkCut, keep: bool,
                             warn: Callable[[str], None]) -> list[str]:
    """A fork into a table other streaming queries wrote after the cut (an earlier fork of this savepoint, most
    likely): it would write the same batches beside theirs. Refused (SinkAheadError) unless ``keep``; then said."""
    streams = "; ".join(f"{app_id}: batches {batches[0]}..{batches[-1]}" for app_id, batches
                        in cut.other_streams().items())
    held = (f"Delta table {written['path']} holds batches of other streaming queries after the savepoint's cut "
            f"(version {cut.table_version}; {streams})")
    if not keep:
        raise SinkAheadError(f"{held}: if one is an earlier fork of this savepoint, this fork would write the same "
                             "batches a second time beside it; write the fork to another table, or pass "
                             "--keep-sink-output to write there all the same")
    kept = f"{held}, kept as they are (--keep-sink-output): the fork writes its batches beside them"
    warn(kept)
    return [kept]


def _batches_ahead(settings: Settings, saved: dict[str, Any], written: dict[str, Any],
                   warn: Callable[[str], None]) -> tuple[list[int], SinkCut | None, str | None]:
    """The batches after the cut a Delta table holds of the query (under its app id), the cut read from its log,
    and why those may be only some of them (None: they are all): refused (SinkAheadError) when an earlier
    rollback took it past the cut; no batches and perhaps no cut, with a warning, when that cannot be told."""
    location, batch, app_id = written["path"], sink_batch(saved, written), app_id_of(saved, written)
    unchecked = (f"whether Delta table {location} holds batches of query {saved['name']} after the savepoint's cut "
                 "was not checked")
    if written.get("follows_batches") is False:
        warn(f"{unchecked}: its foreachBatch writes it with txnVersion values that are not its batch ids")
        return [], None, None
    try:
        storage, path = storage_for(location, settings.storage_options)
        log = DeltaLog(storage, path)
        if not log.present:
            return [], None, None  # gone: the restored query makes it again
        if log.unread():
            raise NotACheckpointError(log.unread())
        cut = sink_cut(log, app_id, batch)
    except SparkpointError as exc:
        warn(f"{unchecked}: {exc}")
        return [], None, None
    behind = _behind(cut, saved, written)
    if behind:
        raise SinkAheadError(f"Delta table {location}: {behind}")
    if cut.complete:
        return cut.later_batches, cut, None
    batches, short = _past_log_cleanup(path, log, cut)
    if short and not batches:
        warn(f"{unchecked}: {short}")
        return [], cut, None
    return batches, cut, short


def _past_log_cleanup(path: str, log: DeltaLog, cut: SinkCut) -> tuple[list[int], str | None]:
    """The query's batches after the cut where Delta's log cleanup took the commits from the cut on, and why they
    may be only some of them (None: they are all). A checkpoint the walk reached keeps the query's txn at its
    version, the newest batch written by then (Delta commits every batch, an empty one too); the commits after it
    say the rest."""
    newest = log.latest if log.versions else max(log.checkpoints, default=-1)
    walked = min(c.version for c in cut.ahead) if cut.ahead else newest + 1
    covering = [v for v in log.checkpoints if walked - 1 <= v <= newest]
    cleaned = f"Delta's log cleanup removed the commits before version {walked}"
    if not covering:
        return cut.later_batches, f"{cleaned}, and no checkpoint after them says which batches they held"
    try:
        at = delta_tables.transaction_version(path, cut.app_id, covering[-1])
    except SparkpointError as exc:
        return cut.later_batches, f"{cleaned}, and their checkpoint cannot be read: {exc}"
    after = {b for c in cut.ahead if c.version > covering[-1] and (b := c.by(cut.app_id)) is not None
             and b > cut.batch}
    return sorted(after.union(range(cut.batch + 1, (cut.batch if at is None else at) + 1))), None


def _refuse_stateful_file_skip(settings: Settings, saved: dict[str, Any], sink: dict[str, Any]) -> None:
    """A query that keeps state, restored into a file sink whose log holds batches after the cut, fails: the sink
    skips them, Spark writes no state version for a skipped batch, and the next batch cannot load its state (seen
    on Spark 4.3: CANNOT_READ_DELTA_FILE_NOT_EXISTS). Refused; a stateless query's skip is only warned of
    (``pending``). An output that does not exist, or cannot be read or rolled back, is passed over here."""
    if not saved["operators"]:
        return
    location = sink["path"]
    try:
        storage, path = storage_for(location, settings.storage_options)
        if not storage.exists(join(path, METADATA_DIR)):
            return
        batches = sink_rollback.plan(storage, path, _cut(saved, sink, None)).batches
    except SparkpointError:
        return
    if batches:
        raise SinkAheadError(
            f"the file sink of query {saved['name']} ({location}) has committed batches {batches[0]}..{batches[-1]} "
            f"after the savepoint's batch {saved['batch_id']}: the restored version would skip them, and as the "
            "query keeps state, Spark writes no state for a skipped batch and the query would fail at its first "
            "batch after them; pass --rollback-sink to move them aside so that they are written again")

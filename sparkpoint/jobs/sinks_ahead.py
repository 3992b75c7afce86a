"""What a restore from a savepoint without --rollback-sink would get wrong in the outputs its queries wrote past
the cut: a file sink's skip warned of (``pending``), or refused for a query that keeps state; a Delta table's skip,
or a fork's second copy, refused unless chosen (``refuse_sinks_ahead``, exit 22). Each refusal offers only what
is then accepted."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sparkpoint.adapters import delta_tables
from sparkpoint.adapters.storage import join, storage_for
from sparkpoint.config import Settings
from sparkpoint.errors import NotACheckpointError, SinkAheadError, SinkRollbackRefusedError, SparkpointError
from sparkpoint.jobs.sink_outputs import app_id_of, behind_the_cut, file_sink_cut, output_queries, sink_batch
from sparkpoint.savepoints.savepoint import Savepoint
from sparkpoint.spark import sink_rollback
from sparkpoint.spark.delta_log import DeltaLog, SinkCut, sink_cut
from sparkpoint.spark.file_sink import METADATA_DIR
from sparkpoint.spark.sinks import FILE_SINK


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
            plan = sink_rollback.plan(storage, path, file_sink_cut(saved, written, compact_interval))
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
    behind = behind_the_cut(cut, saved, written)
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
        batches = sink_rollback.plan(storage, path, file_sink_cut(saved, sink, None)).batches
    except SparkpointError:
        return
    if batches:
        raise SinkAheadError(
            f"the file sink of query {saved['name']} ({location}) has committed batches {batches[0]}..{batches[-1]} "
            f"after the savepoint's batch {saved['batch_id']}: the restored version would skip them, and as the "
            "query keeps state, Spark writes no state for a skipped batch and the query would fail at its first "
            "batch after them; pass --rollback-sink to move them aside so that they are written again")

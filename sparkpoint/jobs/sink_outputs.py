"""Which outputs a savepoint's queries write, as it records them (a file sink, Delta's sink, a foreachBatch's Delta
writes with a transaction), and where each stood at the cut: what `rollback-sink` and a restore's checks of the
sinks (``jobs.sinks``, ``jobs.sinks_ahead``) start from."""

from __future__ import annotations

from typing import Any

from sparkpoint.adapters.storage import join, storage_for
from sparkpoint.config import Settings
from sparkpoint.errors import BadArgumentError, SinkRollbackRefusedError
from sparkpoint.savepoints.savepoint import Savepoint
from sparkpoint.spark import sink_rollback
from sparkpoint.spark.delta_log import DELTA_SINK, LOG_DIR, SinkCut
from sparkpoint.spark.sinks import FILE_SINK, WITH_OUTPUT, sink_record


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


def behind_the_cut(cut: SinkCut, saved: dict[str, Any], written: dict[str, Any]) -> str | None:
    """Why the table stands before the savepoint's cut (an earlier rollback to an older savepoint took it there):
    the restored query would never write the batches between. None when it does not."""
    recorded = written.get("cut_batch")
    if cut.cut_batch is None or recorded is None or cut.cut_batch >= recorded:
        return None
    return (f"the table holds query {saved['name']}'s batches up to {cut.cut_batch} only (version "
            f"{cut.table_version}), before the savepoint's batch {recorded}: an earlier rollback took it past the cut, "
            f"and the restored query would not write batches {cut.cut_batch + 1}..{recorded}; restore the savepoint "
            "that rollback went to, or one older")


def file_sink_cut(saved: dict[str, Any], sink: dict[str, Any], compact_interval: int | None) -> sink_rollback.SinkCut:
    return sink_rollback.SinkCut(
        sink_batch=sink_batch(saved, sink), query_batch=saved["batch_id"],
        known=bool(sink.get("cut_known")), last_file=sink.get("last_file"),
        compact_interval=compact_interval or sink.get("compact_interval"),
    )

"""Sink rollback for a savepoint: which outputs a restore from it must roll back, the check that no running job
writes there, and the rollback itself (``spark.sink_rollback``): `rollback-sink` and `run -s --rollback-sink`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from sparkpoint.adapters.storage import storage_for
from sparkpoint.config import Settings
from sparkpoint.errors import BadArgumentError, SinkRollbackRefusedError, SparkpointError
from sparkpoint.jobs.registry import Registry, client_for, state_of
from sparkpoint.results import Result
from sparkpoint.savepoints.savepoint import Savepoint
from sparkpoint.spark import sink_rollback
from sparkpoint.spark.file_sink import FILE_SINK, sink_record


@dataclass(frozen=True)
class TrashedFile(Result):
    path: str  # relative to the output (and to the trash)
    size: int


@dataclass(frozen=True)
class SinkRolledBack(Result):
    """One output brought back to a savepoint's cut (or, with ``dry_run``, what would be)."""

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


def file_sink_queries(savepoint: Savepoint, output: str | None, query: str | None) -> list[tuple[dict, str]]:
    """(saved query, output) pairs to roll back: every query with a recorded file sink, or the one ``output``
    is given for (``query`` names it when the savepoint holds several)."""
    queries = savepoint.queries
    if query is not None:
        queries = [q for q in queries if q["name"] == query]
        if not queries:
            raise BadArgumentError(f"savepoint {savepoint.manifest['id']} has no query {query!r}: it holds "
                                   + ", ".join(q["name"] for q in savepoint.queries))
    if output is None:
        return [(q, q["sink"]["path"]) for q in queries if (q.get("sink") or {}).get("kind") == FILE_SINK]
    if len(queries) != 1:
        raise BadArgumentError(f"savepoint {savepoint.manifest['id']} holds {len(queries)} queries: name the one "
                               "that writes to the output with --query")
    (saved,) = queries
    sink = saved.get("sink")
    if sink is not None and sink["kind"] != FILE_SINK:
        raise SinkRollbackRefusedError(f"query {saved['name']} writes to {sink['description']}, not to Spark's file "
                                       "sink: only a file sink's output can be rolled back")
    return [(saved, output)]


def unrecorded(savepoint: Savepoint) -> list[str]:
    """The queries of the savepoint that record no sink (savepoints of plain checkpoints, or by sparkpoint < 0.13)."""
    return [q["name"] for q in savepoint.queries if "sink" not in q]


def roll_back_sinks(settings: Settings, savepoint: Savepoint, output: str | None = None, query: str | None = None,
                    dry_run: bool = False, confs: list[str] | None = None) -> list[SinkRolledBack]:
    """Bring the file sinks' outputs back to the savepoint's cut: every recorded one, or ``output``. All are
    planned (and refused) before any is changed. ``confs``: the restored version's ``--conf KEY=VALUE`` (its
    file sink's compaction interval)."""
    pairs = file_sink_queries(savepoint, output, query)
    if output is None and not pairs:
        missing = unrecorded(savepoint)
        raise SinkRollbackRefusedError(
            f"savepoint {savepoint.manifest['id']} records no file sink"
            + (f" (query {', '.join(missing)} records no sink at all: a savepoint of a plain checkpoint, or by "
               "sparkpoint < 0.13); name the output: sparkpoint rollback-sink SAVEPOINT OUTPUT_DIR" if missing else ""))
    writers = {} if dry_run else _running_writers(settings)
    planned = []
    for saved, location in pairs:
        storage, path = storage_for(location, settings.storage_options)
        writer = writers.get(path)
        if writer:
            raise SinkRollbackRefusedError(f"{writer} still writes to {location}: stop or cancel it first")
        planned.append((saved, storage, sink_rollback.plan(storage, path, _cut(saved, confs))))
    return [_done(saved, plan, None if dry_run else sink_rollback.apply(storage, plan), dry_run)
            for saved, storage, plan in planned]


def _cut(saved: dict[str, Any], confs: list[str] | None) -> sink_rollback.Cut:
    sink = saved.get("sink") or {}
    # Spark's offset log does not pin it: only the version's own --conf says it (else Spark's default).
    interval = dict(conf.partition("=")[::2] for conf in confs or []).get(sink_rollback.COMPACT_INTERVAL_CONF)
    return sink_rollback.Cut(
        sink_batch=sink.get("batch_id", saved["batch_id"]), query_batch=saved["batch_id"],
        known=bool(sink.get("cut_known")), last_file=sink.get("last_file"),
        compact_interval=int(interval) if re.fullmatch(r"[1-9][0-9]{0,8}", interval or "")
        else sink_rollback.DEFAULT_COMPACT_INTERVAL,
    )


def _done(saved: dict[str, Any], plan: sink_rollback.Plan, trash: str | None, dry_run: bool) -> SinkRolledBack:
    return SinkRolledBack(
        query=saved["name"], output=plan.output, cut=saved["batch_id"], latest_batch=plan.latest,
        batches=plan.batches, files=[TrashedFile(path, size) for path, size in plan.moved], bytes=plan.bytes,
        log_files=plan.log_moved, rebuilt_log=plan.rebuilt, trash=trash, dry_run=dry_run,
    )


def _running_writers(settings: Settings) -> dict[str, str]:
    """The outputs the running jobs' file sinks write to: "job J's query Q" by output. A running job whose agent
    does not answer could write anywhere: it refuses the rollback."""
    registry = Registry(settings.home_url())
    writers = {}
    for job in registry.all():
        if state_of(job) != "running":
            continue
        try:
            status = client_for(registry, job, timeout=2.0).status()
        except SparkpointError:
            raise SinkRollbackRefusedError(
                f"job {job.id} runs but its agent does not answer, so whether it writes to the output is unknown: "
                "retry, or cancel it first") from None
        for live in status.get("queries") or []:
            record = sink_record(live.get("sink"))
            if record and record["kind"] == FILE_SINK:
                output = storage_for(record["path"], settings.storage_options)[1]
                writers[output] = f"job {job.id}'s query {live.get('name')}"
    return writers


def pending(settings: Settings, savepoint: Savepoint) -> list[SinkRolledBack]:
    """What a restore from ``savepoint`` without --rollback-sink leaves behind: outputs whose log has batches after
    the cut, which the restored query will skip. An output that cannot be read or planned is passed over."""
    found = []
    for saved, location in file_sink_queries(savepoint, None, None):
        try:
            storage, path = storage_for(location, settings.storage_options)
            plan = sink_rollback.plan(storage, path, _cut(saved, None))
        except SparkpointError:
            continue
        if plan.batches:
            found.append(_done(saved, plan, None, True))
    return found

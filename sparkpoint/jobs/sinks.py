"""Sink rollback for a savepoint: which outputs a restore from it must roll back, the check that no running job
writes there, and the rollback itself (``spark.sink_rollback``): `rollback-sink` and `run -s --rollback-sink`."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from sparkpoint.adapters.storage import join, storage_for
from sparkpoint.config import Settings
from sparkpoint.errors import BadArgumentError, SinkRollbackRefusedError, SparkpointError
from sparkpoint.jobs.registry import ACTIVE_STATES, Registry, client_for, state_of
from sparkpoint.results import Result
from sparkpoint.savepoints.savepoint import Savepoint
from sparkpoint.spark import sink_rollback
from sparkpoint.spark.file_sink import FILE_SINK, METADATA_DIR, parse_interval, sink_record


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
                    dry_run: bool = False, compact_interval: int | None = None) -> list[SinkRolledBack]:
    """Bring the file sinks' outputs back to the savepoint's cut: every recorded one, or ``output``. All are
    planned (and refused) before any is changed. ``compact_interval``: the file sink log's, as the restored
    version sets it (else what the savepoint recorded)."""
    pairs = file_sink_queries(savepoint, output, query)
    if output is None and not pairs:
        missing = unrecorded(savepoint)
        raise SinkRollbackRefusedError(
            f"savepoint {savepoint.manifest['id']} records no file sink"
            + (f" (query {', '.join(missing)} records no sink at all: a savepoint of a plain checkpoint, or by "
               "sparkpoint < 0.13); name the output: sparkpoint rollback-sink SAVEPOINT OUTPUT_DIR" if missing else ""))
    writers = {} if dry_run else _running_writers(settings)
    with contextlib.ExitStack() as locks:
        planned = []
        for saved, location in pairs:
            storage, path = storage_for(location, settings.storage_options)
            writer = writers.get(path)
            if writer:
                raise SinkRollbackRefusedError(f"{writer} still writes to {location}: stop or cancel it first")
            if not dry_run:
                locks.enter_context(sink_rollback.exclusive(storage, path))
            planned.append((saved, storage, sink_rollback.plan(storage, path, _cut(saved, compact_interval))))
        return [_done(saved, plan, None if dry_run else sink_rollback.apply(storage, plan), dry_run)
                for saved, storage, plan in planned]


def _cut(saved: dict[str, Any], compact_interval: int | None) -> sink_rollback.Cut:
    sink = saved.get("sink") or {}
    return sink_rollback.Cut(
        sink_batch=sink.get("batch_id", saved["batch_id"]), query_batch=saved["batch_id"],
        known=bool(sink.get("cut_known")), last_file=sink.get("last_file"),
        compact_interval=compact_interval or sink.get("compact_interval"),
    )


def log_interval(confs: list[str]) -> int | None:
    """The file sink log's compaction interval a version's ``--conf KEY=VALUE`` list sets, if it sets one."""
    given = dict(conf.partition("=")[::2] for conf in confs).get(sink_rollback.COMPACT_INTERVAL_CONF, "")
    return parse_interval(given)


def _done(saved: dict[str, Any], plan: sink_rollback.Plan, trash: str | None, dry_run: bool) -> SinkRolledBack:
    return SinkRolledBack(
        query=saved["name"], output=plan.output, cut=saved["batch_id"], latest_batch=plan.latest,
        batches=plan.batches, files=[TrashedFile(path, size) for path, size in plan.moved], bytes=plan.bytes,
        log_files=plan.log_moved, rebuilt_log=plan.rebuilt, trash=trash, dry_run=dry_run,
    )


def _running_writers(settings: Settings) -> dict[str, str]:
    """The outputs the file sinks of running (or starting) jobs write to: "job J's query Q" by output. A job whose
    agent does not answer, or does not say where it writes (an agent of an earlier sparkpoint), could write
    anywhere: it refuses the rollback."""
    registry = Registry(settings.home_url())
    writers = {}
    for job in registry.all():
        state = state_of(job)
        if state not in ACTIVE_STATES:
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
            record = sink_record(live["sink"])
            if record and record["kind"] == FILE_SINK:
                output = storage_for(record["path"], settings.storage_options)[1]
                writers[output] = f"job {job.id}'s query {live.get('name')}"
    return writers


def pending(settings: Settings, savepoint: Savepoint, compact_interval: int | None = None) -> list[str]:
    """What a restore from ``savepoint`` without --rollback-sink would get wrong, one warning per file sink: the
    batches after the cut its log has (the restored query skips them), a batch the log lacks, or why it could not
    be rolled back. An output that does not exist, or cannot be read, is passed over."""
    said = []
    for saved, location in file_sink_queries(savepoint, None, None):
        where = f"the file sink of query {saved['name']} ({location})"
        try:
            storage, path = storage_for(location, settings.storage_options)
            if not storage.exists(join(path, METADATA_DIR)):
                continue
            plan = sink_rollback.plan(storage, path, _cut(saved, compact_interval))
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

"""Creating a savepoint from checkpoints, live or stopped.

Creation copies exactly the files of one consistent cut per query (see ``checkpoint.CopyPlan``),
hashing them as it copies, and writes ``manifest.json`` last. A live checkpoint may lose files
to Spark's cleanup mid-copy: the query's copy is thrown away and taken again at a newer cut,
up to ``attempts`` times. A savepoint whose manifest is not written is never listed or restored.
"""

from __future__ import annotations

import getpass
import importlib.metadata
import json
import os
import re
import secrets
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from sparkpoint.adapters import transfer
from sparkpoint.adapters.storage import (
    HASH_ALGORITHM,
    Storage,
    basename,
    is_inside,
    join,
    storage_for,
    translate_errors,
)
from sparkpoint.config import Settings
from sparkpoint.errors import (
    BadArgumentError,
    CutUnavailableError,
    NotACheckpointError,
    NotFoundError,
    SavepointInvalidError,
    TargetNotEmptyError,
)
from sparkpoint.results import WHEN_SET, Result, human_bytes
from sparkpoint.savepoints import catalog
from sparkpoint.savepoints import manifest as mf
from sparkpoint.savepoints.restorability import identify_topics, topics_read
from sparkpoint.savepoints.savepoint import discard
from sparkpoint.spark import sinks
from sparkpoint.spark.checkpoint import CheckpointReader, CopyPlan, is_checkpoint
from sparkpoint.spark.checkpoint_files import VanishedError
from sparkpoint.spark.query_location import named_checkpoints
from sparkpoint.times import iso


@dataclass(frozen=True)
class QuerySource:
    """A query's checkpoint to savepoint, and the name (uid) it will be restored under."""

    name: str
    location: str
    # What the query writes to (``sinks.sink_record``); its position is added at the savepoint's cut.
    sink: dict[str, Any] | None = field(default=None, compare=False)
    # What each of its sources reads, in the order of its offsets (spark.sources.source_record), when the running
    # query's plan told: the savepoint's `inputs`.
    inputs: list[dict[str, str]] | None = field(default=None, compare=False)
    # The Delta tables its foreachBatch writes with a transaction of its own (``sinks.batch_write_records``).
    delta_writes: list[dict[str, Any]] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        # The name comes from the application (its queryName), and names a directory of the savepoint, escaped
        # (manifest.query_directory): checked before anything is written.
        mf.check_query_name(self.name)


def discover_queries(storage: Storage, location: str, name: str | None = None) -> list[QuerySource]:
    """One query's checkpoint, or a checkpoint root whose subdirectories are named queries."""
    with translate_errors(location):
        if not storage.exists(location):
            raise NotFoundError(f"checkpoint {location} does not exist")
    if is_checkpoint(storage, location):
        return [QuerySource(name or basename(location), location)]
    if not storage.is_dir(location):
        raise NotACheckpointError(f"{location} is a file, not a checkpoint directory")
    found = [QuerySource(name, join(location, name)) for name in named_checkpoints(storage, location)]
    if not found:
        raise NotACheckpointError(
            f"{location} is not a Structured Streaming checkpoint, nor a root of named query checkpoints"
        )
    if name is not None:
        raise BadArgumentError(f"{location} holds {len(found)} query checkpoints; --name applies to a single one")
    return found


def new_savepoint_id(job: str, now: float) -> str:
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", job).strip("-.") or "job"
    stamp = datetime.fromtimestamp(now, UTC).strftime("%Y%m%d-%H%M%S")
    return f"savepoint-{slug[:60]}-{stamp}-{secrets.token_hex(3)}"


def create(
    sources: Sequence[QuerySource],
    source_storage: Storage,
    target_parent: str,
    target_storage: Storage,
    *,
    job: str,
    batch_id: int | None = None,
    origin: dict[str, Any] | None = None,
    restored_from: str | None = None,
    spark_version: str | None = None,
    workers: int = 4,
    attempts: int = 5,
    progress: transfer.Progress | None = None,
    clock: Callable[[], float] = time.time,
    storage_options: dict | None = None,
    kafka: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Write a savepoint of ``sources`` below ``target_parent``; return its manifest (with ``path``). With
    ``kafka`` (the configuration's settings), the ids its Kafka topics have are asked and recorded."""
    progress = progress or transfer.NullProgress()
    _check_sources(sources, target_parent)
    # Plan every query before writing anything: bad input fails with nothing written.
    plans = {source.name: _plan(source_storage, source, batch_id, attempts) for source in sources}
    dir_mode = _private_as(sources, source_storage)
    now = clock()
    savepoint_id = new_savepoint_id(job, now)
    path = join(target_parent, savepoint_id)
    with translate_errors(path):
        if target_storage.exists(path):
            raise TargetNotEmptyError(f"{path} already exists")
        target_storage.makedirs(path, dir_mode)
        target_storage.write_atomic(join(path, mf.IN_PROGRESS), _owner_marker(now))
    with_topic_ids = _topic_ids_asked_meanwhile(sources, plans, kafka) if kafka is not None else None
    try:
        queries = []
        for source in sources:
            plan, results = _copy_query(
                source_storage, source, plans[source.name], target_storage, path, batch_id, workers, attempts, progress,
                dir_mode,
            )
            queries.append(_query_entry(source, plan, results, storage_options))
        if with_topic_ids is not None:
            queries = with_topic_ids(queries)
        data = _manifest(savepoint_id, job, now, clock(), origin or {}, restored_from, spark_version, queries)
        with translate_errors(path):
            target_storage.write_atomic(join(path, mf.MANIFEST), mf.dumps(mf.validate(data, path)))
    except BaseException:
        discard(target_storage, path)
        raise
    with translate_errors(path):
        target_storage.remove_file(join(path, mf.IN_PROGRESS))
    return dict(data, path=path)


def _topic_ids_asked_meanwhile(sources: Sequence[QuerySource], plans: dict[str, CopyPlan],
                               kafka: Mapping[str, Any]) -> Callable[[list[dict[str, Any]]], list[dict[str, Any]]]:
    """The topics' ids of the planned cuts, asked on a thread of their own while the files are copied (a stop's
    savepoint is in its downtime: it need not wait for a broker's answer, up to its timeout when it does not
    answer); returns what gives them to the query entries once copied, asked again should the copy's cut read
    other topics than the plan's (a copy taken again at a newer cut)."""
    planned = [{"offsets": plans[s.name].cut.offsets.sources, "inputs": s.inputs,
                "planned_offsets": plans[s.name].cut.planned_offsets.sources if plans[s.name].cut.planned_offsets
                else None} for s in sources]
    answer: dict[str, list[dict[str, Any]]] = {}
    asking = threading.Thread(target=lambda: answer.update(identified=identify_topics(planned, kafka)),
                              name="sparkpoint-topic-ids", daemon=True)
    asking.start()

    def given(queries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        asking.join()
        identified = answer.get("identified")
        if identified is None or [topics_read(q) for q in queries] != [topics_read(q) for q in planned]:
            return identify_topics(queries, kafka)
        return [dict(query, inputs=early["inputs"]) if early.get("inputs") is not None else query
                for query, early in zip(queries, identified, strict=True)]

    return given


def _check_sources(sources: Sequence[QuerySource], target_parent: str) -> None:
    names = [source.name for source in sources]
    if len(set(names)) != len(names):
        raise SavepointInvalidError(f"two queries share one name ({', '.join(sorted(names))}): "
                                    "each needs a name of its own (.queryName(...))")
    for source in sources:
        if is_inside(target_parent, source.location):
            raise BadArgumentError(f"target {target_parent} lies inside the checkpoint {source.location}; "
                                   "choose another")


def _private_as(sources: Sequence[QuerySource], storage: Storage) -> int:
    """The mode of a savepoint's directories: a private checkpoint makes a private savepoint, so they get no
    permission a source lacks."""
    dir_mode = 0o777
    for source in sources:
        with translate_errors(source.location):
            dir_mode &= storage.mode(source.location)
    return dir_mode


def _manifest(savepoint_id: str, job: str, created: float, completed: float, origin: dict[str, Any],
              restored_from: str | None, spark_version: str | None, queries: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "format": mf.FORMAT,
        "format_version": mf.FORMAT_VERSION,
        "id": savepoint_id,
        "job": job,
        "created_at": iso(created),
        "completed_at": iso(completed),
        "sparkpoint_version": importlib.metadata.version("sparkpoint"),
        # The Spark that wrote the checkpoint (the job's, as its driver said); unknown for a plain checkpoint's.
        "spark_version": spark_version,
        "checksum_algorithm": HASH_ALGORITHM,
        "origin": origin,
        "restored_from": restored_from,
        "bytes": sum(q["bytes"] for q in queries),
        "file_count": sum(len(q["files"]) for q in queries),
        "queries": queries,
    }


def savepoint_checkpoint(settings: Settings, checkpoint: str, target_dir: str | None = None, *,
                         name: str | None = None, job: str | None = None, batch_id: int | None = None,
                         keep_last: int | None = None, topic_ids: bool = False,
                         progress: transfer.Progress | None = None) -> Created:
    """`savepoint --from-checkpoint`: a savepoint of a query's checkpoint (live or stopped) or of a root of
    named query checkpoints, below the job label ``job`` (by default the query's name where it is a plain one,
    else the directory's: the label names a directory of the catalog). Its Kafka topics' ids are recorded only
    with ``topic_ids``, the operator's word that the topics are still the ones it read: a checkpoint does not
    say when it was written, and a topic made again since would pass for the one it read."""
    source_storage, location = storage_for(checkpoint, settings.storage_options)
    sources = discover_queries(source_storage, location, name)
    label = job or (name if name and mf.is_plain_name(name) else basename(location))
    return take(settings, label, sources, source_storage, target_dir,
                origin={"kind": "checkpoint", "location": location}, batch_id=batch_id, keep_last=keep_last,
                progress=progress, ask_topic_ids=topic_ids)


def take(settings: Settings, job: str, sources: Sequence[QuerySource], source_storage: Storage,
         target_dir: str | None, *, origin: dict[str, Any], restored_from: str | None = None,
         batch_id: int | None = None, keep_last: int | None = None, spark_version: str | None = None,
         progress: transfer.Progress | None = None, ask_topic_ids: bool = True) -> Created:
    """A savepoint as the settings ask (workers, attempts), in ``target_dir`` or by default in the catalog
    below the job label; with ``keep_last``, the label's older savepoints pruned (``pruned``). Not
    ``ask_topic_ids``: the sources' records (their topics' ids) are kept as they are, not asked again."""
    target_storage, parent = storage_for(target_dir or join(settings.savepoints_dir(), job),
                                         settings.storage_options)
    result = _created_summary(create(
        sources, source_storage, parent, target_storage, job=job, batch_id=batch_id, origin=origin,
        restored_from=restored_from, spark_version=spark_version, workers=settings.transfer_workers,
        attempts=settings.savepoint_attempts,
        progress=progress, storage_options=settings.storage_options,
        kafka=settings.kafka if ask_topic_ids else None,
    ))
    if keep_last is not None:
        result = replace(result, pruned=catalog.keep_newest(settings, job, keep_last))
    return result


@dataclass(frozen=True)
class SavedQuery(Result):
    name: str
    query_id: str
    batch_id: int  # the cut: the last committed batch
    planned_batch_id: int | None  # planned, not committed at the cut: replayed on restore
    bytes: int


@dataclass(frozen=True)
class Created(Result):
    """What commands report of a new savepoint: its manifest without the file lists."""

    path: str
    id: str
    job: str
    created_at: str
    bytes: int
    file_count: int
    queries: list[SavedQuery]
    pruned: list[catalog.Entry] | None = field(default=None, metadata=WHEN_SET)  # with --keep-last

    def said(self) -> list[str]:
        """As the CLI and the page report it."""
        lines = [f"Savepoint {self.id} completed: {self.path}"]
        for q in self.queries:
            replay = (f", batch {q.planned_batch_id} planned (replayed on restore)" if q.planned_batch_id is not None
                      else "")
            lines.append(f"  {q.name}: cut at batch {q.batch_id}{replay}, {human_bytes(q.bytes)}")
        if self.pruned is not None:  # --keep-last
            lines.append(f"  pruned older savepoints: {', '.join(entry.id for entry in self.pruned) or 'none'}")
        return lines


def _created_summary(result: dict[str, Any]) -> Created:
    return Created(
        path=result["path"], id=result["id"], job=result["job"], created_at=result["created_at"],
        bytes=result["bytes"], file_count=result["file_count"],
        queries=[SavedQuery(q["name"], q["query_id"], q["batch_id"], q["planned_batch_id"], q["bytes"])
                 for q in result["queries"]],
    )


def _owner_marker(now: float) -> bytes:
    return json.dumps(
        {"pid": os.getpid(), "host": socket.gethostname(), "user": getpass.getuser(), "started_at": iso(now)}
    ).encode()


def _plan(storage: Storage, source: QuerySource, batch_id: int | None, attempts: int) -> CopyPlan:
    """Plan a cut; Spark may purge a file between listing and reading it, so plan again, within bounds."""
    vanished = ""
    for _attempt in range(attempts):
        try:
            return CheckpointReader(storage, source.location).plan(batch_id)
        except VanishedError as exc:
            vanished = str(exc)
    raise _purged_too_fast(source, batch_id, attempts, vanished)


def _purged_too_fast(source: QuerySource, batch_id: int | None, attempts: int, vanished: str) -> CutUnavailableError:
    if batch_id is not None:
        return CutUnavailableError(
            f"Spark purged {vanished} while batch {batch_id} of {source.name} was copied: "
            "savepoint a newer batch, or omit --batch for the latest"
        )
    return CutUnavailableError(
        f"{source.name}: Spark kept purging files faster than they were copied ({attempts} attempts, "
        f"last: {vanished}); "
        "raise spark.sql.streaming.minBatchesToRetain or the transfer workers, or stop the query first"
    )


def _copy_query(
    storage: Storage,
    source: QuerySource,
    plan: CopyPlan,
    target: Storage,
    path: str,
    batch_id: int | None,
    workers: int,
    attempts: int,
    progress: transfer.Progress,
    dir_mode: int,
) -> tuple[CopyPlan, list[transfer.Result]]:
    query_dir = join(path, mf.QUERIES_DIR, mf.query_directory(source.name))
    for attempt in range(attempts):
        if attempt:
            plan = _plan(storage, source, None, attempts - attempt)
        items = [
            transfer.Transfer(storage, join(source.location, f.path), target, join(query_dir, f.path), "copy", f.size)
            for f in plan.files
        ]
        try:
            return plan, transfer.run(items, workers, progress, f"savepoint {source.name} @ batch {plan.cut.batch_id}",
                                      dir_mode)
        except transfer.SourceMissing as missing:
            vanished = missing.path
        with translate_errors(query_dir):
            if target.exists(query_dir):
                target.remove_tree(query_dir)
        if batch_id is not None:
            break
    raise _purged_too_fast(source, batch_id, attempts, vanished)


def _query_entry(source: QuerySource, plan: CopyPlan, results: list[transfer.Result],
                 storage_options: dict | None) -> dict[str, Any]:
    prefix = mf.query_prefix(source.name)
    cut = plan.cut
    entry = {
        "name": source.name,
        "query_id": plan.query_id,
        "source_location": source.location,
        "batch_id": cut.batch_id,
        "planned_batch_id": cut.planned_batch_id,
        "state_version": cut.state_version,
        "batch_timestamp_ms": cut.offsets.metadata.get("batchTimestampMs"),
        "watermark_ms": cut.commit.get("nextBatchWatermarkMs", cut.offsets.metadata.get("batchWatermarkMs")),
        "offsets": cut.offsets.sources,
        "planned_offsets": cut.planned_offsets.sources if cut.planned_offsets else None,
        "provider": plan.provider,
        "checkpoint_format_version": plan.checkpoint_format_version,
        "confs": cut.offsets.confs,
        "operators": [op.to_json() for op in plan.operators],
        "bytes": plan.bytes,
        "files": [
            {"path": prefix + f.path, "size": r.size, "digest": r.digest}
            for f, r in zip(plan.files, results, strict=True)
        ],
        "relocate": [prefix + rel for rel in plan.relocate],
    }
    if source.sink is not None:
        entry["sink"] = sinks.at_cut(source.sink, plan.query_id, cut.batch_id, storage_options)
    if source.delta_writes:
        entry["delta_writes"] = [sinks.at_cut(write, plan.query_id, cut.batch_id, storage_options)
                                 for write in source.delta_writes]
    if source.inputs is not None:
        entry["inputs"] = source.inputs
    return entry

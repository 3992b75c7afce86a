"""The holders of a retention horizon (``savepoints.horizon``): the savepoints kept and the checkpoints of the
jobs running now, each read for what it still needs of each source, from the offsets of its cut (a query's
``offsets`` in the manifest, ``offsets/<cut>`` in a live checkpoint). ``savepoints.source_horizons`` says how
each kind of source is recognised."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from sparkpoint.adapters.storage import join, storage_for, translate_errors
from sparkpoint.errors import CutUnavailableError, NotACheckpointError, NotFoundError, SavepointInvalidError
from sparkpoint.results import Result
from sparkpoint.savepoints import catalog
from sparkpoint.savepoints import manifest as mf
from sparkpoint.savepoints import savepoint as sp
from sparkpoint.spark.checkpoint import CheckpointReader
from sparkpoint.spark.query_location import named_checkpoints
from sparkpoint.spark.checkpoint_files import VanishedError
from sparkpoint.spark.sources import (
    DELTA,
    FILE,
    KAFKA,
    OTHER,
    RATE,
    RATE_MICRO_BATCH,
    delta_offset,
    kafka_offsets,
    kind_of,
)

ACTIVE = ("starting", "running")  # the job states whose checkpoints count (jobs.job_state.ACTIVE_STATES)
UNREADABLE = "malformed"  # the state of a job whose record cannot be read (jobs.listing.MALFORMED)
ATTEMPTS = 3  # reads of a live checkpoint that Spark's cleanup raced


@dataclass(frozen=True)
class Holder(Result):
    """A savepoint, or a running job's checkpoints: where a query may resume, and so what it still needs."""

    kind: str  # savepoint | checkpoint
    id: str  # the savepoint's id, or the job's
    job: str | None  # the job's name (a savepoint's catalog label)
    created_at: str | None  # a savepoint's; null for a checkpoint
    path: str  # the savepoint, or the job's checkpoint root
    queries: list[dict[str, Any]]  # name, batch_id (the cut)


@dataclass
class Need:
    """One source of one query of one holder: what it still needs."""

    holder: str
    query: str
    kind: str
    key: str  # the source, before file sources nested in one another are merged
    value: Any  # file: FileLog; kafka: {partition: offset}; rate: int; delta: (version, snapshot); other: str
    timestamp_ms: int | None = None  # rate: when the row at ``value`` was generated
    bootstrap: str | None = None  # kafka: the brokers the source reads, as the holder recorded them


@dataclass
class FileLog:
    read: dict[str, int | None]  # path → timestamp: logged at a batch up to the cut
    pending: dict[str, int | None]  # logged after the cut: read again after a restore


@dataclass
class Loaded:
    holder: Holder
    needs: list[Need]


def _directory(paths: list[str]) -> str:
    """The deepest directory holding every path."""
    common = paths[0].rsplit("/", 1)[0].split("/")
    for path in paths[1:]:
        parts = path.rsplit("/", 1)[0].split("/")
        size = 0
        while size < min(len(common), len(parts)) and common[size] == parts[size]:
            size += 1
        common = common[:size]
    return "/".join(common)


def _query_needs(holder: str, query: str, offsets: list[Any], reader: CheckpointReader,
                 warnings: list[str], brokers: list[str | None] = (), tables: list[str | None] = ()) -> list[Need]:
    """What one query of a holder needs of each source; ``brokers``: each source's Kafka brokers, ``tables``: each
    source's Delta table, where known."""
    needs = []
    for index, offset in enumerate(offsets):
        kind, own = kind_of(offset), f"{query}[{index}]"
        if offset is None:
            warnings.append(f"{holder}: source {own} had no offset at its cut: it reads that source from its "
                            "start, which the checkpoint does not say")
            needs.append(Need(holder, query, OTHER, own, "-"))
        elif kind == FILE:
            logged = reader.file_source(index)
            if not logged:
                warnings.append(f"{holder}: the file source {own} has logged no file: it reads its whole input "
                                "directory, which the checkpoint does not name")
                continue
            cut = offset["logOffset"]
            log = FileLog({}, {})
            for entry in logged:
                (log.read if entry.batch_id <= cut else log.pending)[unquote(entry.path)] = entry.timestamp_ms
            needs.append(Need(holder, query, FILE, _directory([*log.read, *log.pending]), log))
        elif kind == KAFKA:
            bootstrap = brokers[index] if index < len(brokers) else None
            needs += [Need(holder, query, KAFKA, topic, partitions, bootstrap=bootstrap)
                      for topic, partitions in kafka_offsets(offset).items()]
        elif kind == RATE and (started_ms := reader.rate_start(index)) is not None:
            needs.append(Need(holder, query, RATE, own, offset, started_ms + offset * 1000))
        elif kind == RATE_MICRO_BATCH:
            needs.append(Need(holder, query, RATE_MICRO_BATCH, own, offset["offset"]))
        elif kind == DELTA and index < len(tables) and tables[index]:
            needs.append(Need(holder, query, DELTA, tables[index], delta_offset(offset)))
        else:
            needs.append(Need(holder, query, OTHER, own, offset if isinstance(offset, str) else json.dumps(offset)))
    return needs


def _load_savepoint(entry: catalog.Entry, storage_options: dict | None, warnings: list[str]) -> Loaded | None:
    storage, path = storage_for(entry.path, storage_options)
    try:
        savepoint = sp.load_from(storage, path)
    except NotFoundError:
        return None  # disposed of since the catalog was read
    except SavepointInvalidError as exc:
        warnings.append(f"savepoint {entry.id} is not counted: {exc}")
        return None
    manifest = savepoint.manifest
    needs = []
    for query in savepoint.queries:
        reader = CheckpointReader(storage, join(path, mf.QUERIES_DIR, mf.query_directory(query["name"])))
        try:
            reads = query.get("inputs") or []
            needs += _query_needs(manifest["id"], query["name"], query["offsets"], reader, warnings,
                                  [read.get("bootstrap_servers") for read in reads],
                                  [read.get("path") for read in reads])
        except VanishedError as gone:
            raise SavepointInvalidError(f"savepoint {manifest['id']} lacks {query['name']}/{gone}: run "
                                        "`sparkpoint verify` on it") from None
    holder = Holder(kind="savepoint", id=manifest["id"], job=manifest["job"], created_at=manifest["created_at"],
                    path=path, queries=[{"name": q["name"], "batch_id": q["batch_id"]} for q in savepoint.queries])
    return Loaded(holder, needs)


def _job_checkpoints(job: Any, storage_options: dict | None) -> dict[str, str]:
    """Query name → checkpoint of a running job: the named queries' checkpoints under its checkpoint root (all
    there is when its agent does not answer), and the others its agent reports."""
    storage, root = storage_for(job.checkpoint_root, storage_options)
    found = {}
    with contextlib.suppress(NotFoundError), translate_errors(root):
        found = {name: join(root, name) for name in named_checkpoints(storage, root)}
    for query in job.queries:  # a query that sets its own checkpointLocation
        if query.name and query.checkpoint:
            found.setdefault(query.name, query.checkpoint)
    return found


def _load_job(job: Any, storage_options: dict | None, warnings: list[str]) -> Loaded | None:
    locations = _job_checkpoints(job, storage_options)
    if not locations:
        warnings.append(f"job {job.id} ({job.state}) has no checkpoint yet: not counted")
        return None
    queries, needs = [], []
    brokers = {query.name: [source.bootstrap_servers for source in query.sources] for query in job.queries}
    tables = {query.name: [source.path for source in query.sources] for query in job.queries}
    for name, location in locations.items():
        storage, path = storage_for(location, storage_options)
        for attempt in range(1, ATTEMPTS + 1):
            reader = CheckpointReader(storage, path)
            try:
                cut = reader.cut()
                found = _query_needs(job.id, name, cut.offsets.sources, reader, warnings, brokers.get(name, []),
                                     tables.get(name, []))
            except CutUnavailableError:  # Spark purged a log file meanwhile (VanishedError): read its newer state
                if attempt == ATTEMPTS:
                    raise
                continue
            except (NotACheckpointError, NotFoundError) as exc:
                warnings.append(f"job {job.id}: query {name} is not counted: {exc}")
                break
            queries.append({"name": name, "batch_id": cut.batch_id})
            needs += found
            break
    holder = Holder(kind="checkpoint", id=job.id, job=job.name, created_at=None, path=job.checkpoint_root,
                    queries=queries)
    return Loaded(holder, needs) if queries else None


def load(entries: list[catalog.Entry], job: str | None, jobs: Iterable[Any], storage_options: dict | None,
          warnings: list[str]) -> tuple[list[Loaded], list[Loaded]]:
    """(savepoints oldest first, running jobs) among ``entries`` and ``jobs``, read."""
    saved = []
    for entry in sorted(entries, key=lambda e: (e.created or 0, e.id)):
        if entry.status == "invalid":
            warnings.append(f"savepoint {entry.id} is invalid and not counted: {entry.problem}")
        elif entry.status == "complete":
            saved.append(_load_savepoint(entry, storage_options, warnings))
    jobs = list(jobs)
    live = [_load_job(j, storage_options, warnings) for j in jobs
            if j.state in ACTIVE and (job is None or job in (j.name, j.id))]
    warnings += [f"job {j.id} is not counted: its record cannot be read ({j.error}); if it runs, its checkpoints "
                 "may need older input than this says" for j in jobs if j.state == UNREADABLE and job in (None, j.id)]
    return [s for s in saved if s], [j for j in live if j]

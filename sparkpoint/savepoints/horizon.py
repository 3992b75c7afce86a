"""The retention horizon: per source, the oldest input that a savepoint kept or a running job still needs.

The *holders* are the complete savepoints the retention policy keeps (all of them without a policy; with
``keep_last``/``max_age``, those ``prune`` would keep) and the checkpoints of the jobs running now. Each may
resume at its cut, and then reads its sources from the offsets of that cut: a query's ``offsets`` in the
manifest, ``offsets/<cut>`` in a live checkpoint (a batch planned after the cut reads from there too). Per
source, the horizon is the oldest position any holder still needs, and the holder that pins it. Input older
than the horizon can be retired (Kafka retention, old input files archived) without breaking any restore.

Sources are recognised by their offsets, as Spark 4.3 writes them:

- the file source, ``{"logOffset": N}``. Its log (``sources/<i>``: the savepoint's copy, or the checkpoint)
  lists every file with the batch that reads it. A restore at cut N never reads again a file logged at a batch
  up to N (Spark rebuilds its seen-files list from the log); the others are read after the restore, as is
  every file of the directory the log does not name. A source is its input directory: the deepest directory
  holding every file its log names (directories nested in one another are one source). Its files that every
  holder has read are *archivable*.
- Kafka, ``{"<topic>": {"<partition>": <offset>}}`` (KafkaSourceOffset): per topic and partition, the smallest
  offset. A holder whose offsets name a topic but not one of its partitions reads that partition from the
  earliest offset when it resumes (Spark's handling of a new partition): it pins that partition at 0. Asked
  (``kafka``), the broker tells the time of the oldest record still needed in each partition: the timestamp of
  the first record at or after that offset (restorability's broker: the configured one, else the holder's own).
- the rate source, a number (seconds since the start it logs in ``sources/<i>/0``), and ``rate-micro-batch``,
  ``{"offset": N, "timestamp": T}`` (N values read): the smallest, per query and source.
- a Delta table, ``{"reservoirVersion": V, "isStartingVersion": B, ...}`` (DeltaSourceOffset): the table
  version each holder reads on from (its snapshot at V when B), the smallest per table. VACUUM and Delta's log
  cleanup must keep what that version needs (restorability says whether they have).
- any other source: each holder's offset as Spark wrote it; no order is assumed.
"""

from __future__ import annotations

import contextlib
import functools
import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any
from urllib.parse import unquote

from sparkpoint.adapters.kafka_log import BROKER_SECONDS, record_times
from sparkpoint.adapters.storage import join, storage_for, translate_errors
from sparkpoint.errors import (
    CutUnavailableError,
    NotACheckpointError,
    NotFoundError,
    SavepointInvalidError,
    SparkpointError,
    StorageError,
)
from sparkpoint.results import WHEN_SET, Result
from sparkpoint.savepoints import catalog
from sparkpoint.savepoints import manifest as mf
from sparkpoint.savepoints import savepoint as sp
from sparkpoint.savepoints.restorability import ask_brokers, client_options
from sparkpoint.spark.checkpoint import CheckpointReader, is_checkpoint
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

ACTIVE = ("starting", "running")  # the job states whose checkpoints count (jobs.registry.ACTIVE_STATES)
UNREADABLE = "malformed"  # the state of a job whose record cannot be read (jobs.listing.MALFORMED)
ATTEMPTS = 3  # reads of a live checkpoint that Spark's cleanup raced


# -- results ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Holder(Result):
    """A savepoint, or a running job's checkpoints: where a query may resume, and so what it still needs."""

    kind: str  # savepoint | checkpoint
    id: str  # the savepoint's id, or the job's
    job: str | None  # the job's name (a savepoint's catalog label)
    created_at: str | None  # a savepoint's; null for a checkpoint
    path: str  # the savepoint, or the job's checkpoint root
    queries: list[dict[str, Any]]  # name, batch_id (the cut)


@dataclass(frozen=True)
class NeededFile(Result):
    path: str  # its URL as Spark logs it, percent-decoded
    timestamp_ms: int | None  # its modification time as logged; null for a file no holder has logged
    held_by: str  # a holder that still reads it (the oldest)


@dataclass(frozen=True)
class PartitionOffset(Result):
    topic: str
    partition: int
    offset: int  # the first offset still needed: records below it can go
    held_by: str
    # When the record at ``offset`` (or the first after it) was written, as the broker says; null when not asked,
    # unknown, or no record is needed yet (the offset is the log's end).
    timestamp_ms: int | None = None


@dataclass(frozen=True)
class HeldOffset(Result):
    held_by: str
    query: str
    offset: str  # as Spark wrote it in the offsets log


@dataclass(frozen=True)
class SourceHorizon(Result):
    kind: str  # file | kafka | rate | rate-micro-batch | other
    source: str  # the input directory, the topic, or <query>[<index>]
    queries: list[str]  # the names of the queries that read it
    holders: list[str]  # the ids of the holders that read it


@dataclass(frozen=True)
class FileSourceHorizon(SourceHorizon):
    oldest_file: NeededFile | None  # the oldest file some holder still reads; null: none
    archivable: list[str]  # files every holder has read, oldest first: they may be archived or deleted
    listed: bool  # the directory was listed: its files no holder has logged count as needed


@dataclass(frozen=True)
class KafkaHorizon(SourceHorizon):
    partitions: list[PartitionOffset]


@dataclass(frozen=True)
class CountingHorizon(SourceHorizon):
    """rate: seconds since the source's start; rate-micro-batch: the values read."""

    offset: int
    held_by: str
    # rate: when the oldest row still needed was generated (the source's start plus the offset); null for
    # rate-micro-batch, whose timestamps are made up from its options, not the clock.
    timestamp_ms: int | None = None


@dataclass(frozen=True)
class DeltaHorizon(SourceHorizon):
    """A Delta table (``source``: its path): the oldest version some holder reads on from."""

    version: int
    snapshot: bool  # that holder reads the version's snapshot whole, then the commits after it
    held_by: str


@dataclass(frozen=True)
class OtherHorizon(SourceHorizon):
    offsets: list[HeldOffset]


@dataclass(frozen=True)
class Horizon(Result):
    directory: str
    job: str | None
    holders: list[Holder]
    sources: list[SourceHorizon]
    warnings: list[str]  # what was not counted, or is already wrong, one line each


@dataclass(frozen=True)
class HorizonShift(Result):
    before: Horizon
    after: Horizon


@dataclass(frozen=True)
class PrunePreview(catalog.Pruned):
    """``prune --dry-run``: what it would delete, and how the horizon would move."""

    horizon: HorizonShift | None = field(default=None, metadata=WHEN_SET)


# -- what one holder needs -------------------------------------------------------------------------


@dataclass
class _Need:
    """One source of one query of one holder: what it still needs."""

    holder: str
    query: str
    kind: str
    key: str  # the source, before file sources nested in one another are merged
    value: Any  # file: _FileLog; kafka: {partition: offset}; rate: int; delta: (version, snapshot); other: str
    timestamp_ms: int | None = None  # rate: when the row at ``value`` was generated
    bootstrap: str | None = None  # kafka: the brokers the source reads, as the holder recorded them


@dataclass
class _FileLog:
    read: dict[str, int | None]  # path → timestamp: logged at a batch up to the cut
    pending: dict[str, int | None]  # logged after the cut: read again after a restore


@dataclass
class _Loaded:
    holder: Holder
    needs: list[_Need]


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
                 warnings: list[str], brokers: list[str | None] = (), tables: list[str | None] = ()) -> list[_Need]:
    """What one query of a holder needs of each source; ``brokers``: each source's Kafka brokers, ``tables``: each
    source's Delta table, where known."""
    needs = []
    for index, offset in enumerate(offsets):
        kind, own = kind_of(offset), f"{query}[{index}]"
        if offset is None:
            warnings.append(f"{holder}: source {own} had no offset at its cut: it reads that source from its "
                            "start, which the checkpoint does not say")
            needs.append(_Need(holder, query, OTHER, own, "-"))
        elif kind == FILE:
            logged = reader.file_source(index)
            if not logged:
                warnings.append(f"{holder}: the file source {own} has logged no file: it reads its whole input "
                                "directory, which the checkpoint does not name")
                continue
            cut = offset["logOffset"]
            log = _FileLog({}, {})
            for entry in logged:
                (log.read if entry.batch_id <= cut else log.pending)[unquote(entry.path)] = entry.timestamp_ms
            needs.append(_Need(holder, query, FILE, _directory([*log.read, *log.pending]), log))
        elif kind == KAFKA:
            bootstrap = brokers[index] if index < len(brokers) else None
            needs += [_Need(holder, query, KAFKA, topic, partitions, bootstrap=bootstrap)
                      for topic, partitions in kafka_offsets(offset).items()]
        elif kind == RATE and (started_ms := reader.rate_start(index)) is not None:
            needs.append(_Need(holder, query, RATE, own, offset, started_ms + offset * 1000))
        elif kind == RATE_MICRO_BATCH:
            needs.append(_Need(holder, query, RATE_MICRO_BATCH, own, offset["offset"]))
        elif kind == DELTA and index < len(tables) and tables[index]:
            needs.append(_Need(holder, query, DELTA, tables[index], delta_offset(offset)))
        else:
            needs.append(_Need(holder, query, OTHER, own, offset if isinstance(offset, str) else json.dumps(offset)))
    return needs


def _load_savepoint(entry: catalog.Entry, storage_options: dict | None, warnings: list[str]) -> _Loaded | None:
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
    return _Loaded(holder, needs)


def _job_checkpoints(job: Any, storage_options: dict | None) -> dict[str, str]:
    """Query name → checkpoint of a running job: the named queries' checkpoints under its checkpoint root (all
    there is when its agent does not answer), and the others its agent reports."""
    storage, root = storage_for(job.checkpoint_root, storage_options)
    found = {}
    with contextlib.suppress(NotFoundError), translate_errors(root):
        for entry in sorted(storage.list(root), key=lambda e: e.name):
            if entry.is_dir and is_checkpoint(storage, join(root, entry.name)):
                found[entry.name] = join(root, entry.name)
    for query in job.queries:  # a query that sets its own checkpointLocation
        if query.name and query.checkpoint:
            found.setdefault(query.name, query.checkpoint)
    return found


def _load_job(job: Any, storage_options: dict | None, warnings: list[str]) -> _Loaded | None:
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
    return _Loaded(holder, needs) if queries else None


# -- the horizon of a set of holders ---------------------------------------------------------------


def _distinct(values: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(values))


def _listing(directory: str, storage_options: dict | None, warnings: list[str]) -> set[str] | None:
    """The files Spark would read in ``directory`` (not its hidden ones), as URLs; None if it cannot be listed."""
    inside = directory.split("://", 1)[1] if "://" in directory else directory.removeprefix("file:")
    if not inside.strip("/"):
        return None  # files logged in unrelated directories: their common one is the file system's root
    try:
        storage, path = storage_for(directory, storage_options)
        with translate_errors(path):
            relative = [rel for rel, _size in storage.walk_files(path)]
    except NotFoundError:
        return set()
    except (StorageError, SavepointInvalidError) as exc:  # refused, or an unsafe entry (a link)
        warnings.append(f"the input directory {directory} cannot be listed ({exc}): only the files its logs "
                        "name count")
        return None
    return {join(directory, rel) for rel in relative if not _hidden(rel)}


def _hidden(relative: str) -> bool:
    """What Spark's file index leaves out: names starting with '.' or '_' (but partition directories
    ``_x=1``), and files still being copied."""
    return any(part.startswith(".") or (part.startswith("_") and "=" not in part) or part.endswith("._COPYING_")
               for part in relative.split("/"))


def _file_horizon(common: dict[str, Any], needs: list[_Need], storage_options: dict | None,
                  warnings: list[str]) -> FileSourceHorizon:
    directory = common["source"]
    logs: list[_FileLog] = [n.value for n in needs]
    timestamps: dict[str, int | None] = {}
    for log in logs:
        for path, stamp in [*log.read.items(), *log.pending.items()]:
            if timestamps.get(path) is None:
                timestamps[path] = stamp
    present = _listing(directory, storage_options, warnings)
    universe = present if present is not None else set(timestamps)

    def age(path: str) -> tuple:
        return timestamps.get(path) is None, timestamps.get(path) or 0, path

    needed: dict[str, str] = {}
    for need in needs:  # oldest holder first: the one named for a file is the oldest that reads it
        log = need.value
        for path in {*log.pending, *(universe - log.read.keys() - log.pending.keys())}:
            needed.setdefault(path, need.holder)
    gone: dict[str, list[str]] = {}
    for path in sorted((p for p in needed if present is not None and p not in present), key=age):
        gone.setdefault(needed[path], []).append(path)
    for holder, paths in gone.items():
        warnings.append(f"{holder} still reads {len(paths)} file(s) of {directory} that are gone (the oldest: "
                        f"{paths[0]}): its restore would fail")
    oldest = min(needed, key=age, default=None)
    return FileSourceHorizon(
        **common,
        oldest_file=NeededFile(oldest, timestamps.get(oldest), needed[oldest]) if oldest is not None else None,
        archivable=sorted((p for p in universe if all(p in log.read for log in logs)), key=age),
        listed=present is not None,
    )


def _kafka_horizon(common: dict[str, Any], needs: list[_Need], order: dict[str, int],
                   times: dict[tuple[str, int], int | None]) -> KafkaHorizon:
    partitions = sorted({p for need in needs for p in need.value})
    pinned = []
    for partition in partitions:
        # A holder that does not know a partition of its topic reads it from the earliest offset.
        offset, _, holder = min((need.value.get(partition, 0), order[need.holder], need.holder) for need in needs)
        pinned.append(PartitionOffset(topic=common["source"], partition=partition, offset=offset, held_by=holder,
                                      timestamp_ms=times.get((common["source"], partition))))
    return KafkaHorizon(**common, partitions=pinned)


def _kafka_times(needs: list[_Need], order: dict[str, int], kafka: Mapping[str, Any] | None, seconds: float,
                 warnings: list[str]) -> dict[tuple[str, int], int | None]:
    """(topic, partition) → the time of the oldest record still needed there, each broker asked once, all at once
    and ``seconds`` at most; {} when not asked (``kafka`` None). What cannot be told is a warning."""
    kafka_needs = [need for need in needs if need.kind == KAFKA]
    if kafka is None or not kafka_needs:
        return {}
    configured, options = client_options(kafka)
    topics: dict[str, list[_Need]] = {}
    for need in kafka_needs:
        topics.setdefault(need.key, []).append(need)
    by_broker: dict[str, dict[tuple[str, int], int]] = {}
    unknown = False
    for topic, group in topics.items():
        known = next((need.bootstrap for need in group if need.bootstrap), None)
        for partition in {p for need in group for p in need.value}:
            offset, _, pinned_by = min((need.value.get(partition, 0), order[need.holder], need.bootstrap or "")
                                       for need in group)
            broker = configured or pinned_by or known
            if broker:
                by_broker.setdefault(broker, {})[(topic, partition)] = offset
            unknown = unknown or not broker
    if unknown:
        warnings.append("the time of the oldest Kafka record still needed is unknown where no broker is known: a "
                        "savepoint of a plain checkpoint names none (set kafka.bootstrap_servers)")
    answers, failures = ask_brokers({broker: functools.partial(record_times, broker, positions, options, seconds)
                                     for broker, positions in by_broker.items()}, seconds)
    times: dict[tuple[str, int], int | None] = {}
    for broker, answer in answers.items():
        if answer is None:
            failure = failures.get(broker)
            why = str(failure) if isinstance(failure, SparkpointError) else f"it did not answer within {seconds:g} s"
            warnings.append(f"the time of the oldest Kafka record still needed is unknown for the topics of {broker}: "
                            f"{why}")
        else:
            times.update(answer)
    return times


def _assemble(directory: str, job: str | None, loaded: list[_Loaded], storage_options: dict | None,
              warnings: list[str], kafka: Mapping[str, Any] | None = None,
              kafka_seconds: float = BROKER_SECONDS) -> Horizon:
    order = {item.holder.id: rank for rank, item in enumerate(loaded)}
    needs = [need for item in loaded for need in item.needs]  # oldest holder first
    times = _kafka_times(needs, order, kafka, kafka_seconds, warnings)
    # File sources: a directory nested in another one's is that source (partitioned input, read in part).
    directories = sorted({n.key for n in needs if n.kind == FILE}, key=len)

    def source_of(need: _Need) -> str:
        if need.kind != FILE:
            return need.key
        return next(d for d in directories if need.key == d or need.key.startswith(d.rstrip("/") + "/"))

    groups: dict[tuple[str, str], list[_Need]] = {}
    for need in needs:
        groups.setdefault((need.kind, source_of(need)), []).append(need)
    sources: list[SourceHorizon] = []
    for (kind, key), group in sorted(groups.items()):
        common = {"kind": kind, "source": key, "queries": sorted({n.query for n in group}),
                  "holders": _distinct(n.holder for n in group)}
        if kind == FILE:
            sources.append(_file_horizon(common, group, storage_options, warnings))
        elif kind == KAFKA:
            sources.append(_kafka_horizon(common, group, order, times))
        elif kind == DELTA:
            # At one version, a snapshot read needs more than reading on from its commits: it holds older files.
            version, reads_commits, _, holder = min((n.value[0], not n.value[1], order[n.holder], n.holder)
                                                    for n in group)
            sources.append(DeltaHorizon(**common, version=version, snapshot=not reads_commits, held_by=holder))
        elif kind in (RATE, RATE_MICRO_BATCH):
            offset, _, holder, timestamp_ms = min((n.value, order[n.holder], n.holder, n.timestamp_ms)
                                                  for n in group)
            sources.append(CountingHorizon(**common, offset=offset, held_by=holder, timestamp_ms=timestamp_ms))
        else:
            sources.append(OtherHorizon(**common, offsets=[HeldOffset(n.holder, n.query, n.value) for n in group]))
    return Horizon(directory=directory, job=job, holders=[item.holder for item in loaded], sources=sources,
                   warnings=warnings)


def _load(entries: list[catalog.Entry], job: str | None, jobs: Iterable[Any], storage_options: dict | None,
          warnings: list[str]) -> tuple[list[_Loaded], list[_Loaded]]:
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


def of(directory: str, entries: list[catalog.Entry], *, job: str | None = None, jobs: Iterable[Any] = (),
       storage_options: dict | None = None, kafka: Mapping[str, Any] | None = None,
       kafka_seconds: float = BROKER_SECONDS) -> Horizon:
    """The horizon of the savepoints ``entries`` (only complete ones count) and of the running ``jobs``
    (``JobView``s as ``list`` gives them: ``id``, ``name``, ``state``, ``checkpoint_root``, ``queries``). With
    ``kafka`` (the configuration's, {} for none), the brokers are asked when Kafka's oldest needed records were
    written, ``kafka_seconds`` at most."""
    warnings: list[str] = []
    saved, live = _load(entries, job, jobs, storage_options, warnings)
    return _assemble(directory, job, saved + live, storage_options, warnings, kafka, kafka_seconds)


def horizon(directory: str, *, keep_last: int | None = None, max_age: float | None = None, job: str | None = None,
            jobs: Iterable[Any] = (), storage_options: dict | None = None, kafka: Mapping[str, Any] | None = None,
            clock: Callable[[], float] = time.time) -> Horizon:
    """The horizon of the catalog in ``directory``: the savepoints the retention policy keeps (every complete
    one without ``keep_last`` and ``max_age``; only ``job``'s with it) and ``job``'s (or every) running job."""
    entries = catalog.scan(directory, storage_options)
    if keep_last is None and max_age is None:
        kept = [e for e in entries if job is None or e.job == job]
    else:
        _delete, kept = catalog.prune_plan(entries, keep_last, max_age, job, clock())
    return of(directory, kept, job=job, jobs=jobs, storage_options=storage_options, kafka=kafka)


def preview(pruned: catalog.Pruned, *, job: str | None = None, jobs: Iterable[Any] = (),
            storage_options: dict | None = None, kafka: Mapping[str, Any] | None = None) -> PrunePreview:
    """A dry run of ``prune`` with the horizon now (its savepoints in scope, and the running jobs) and after
    it (without those it would delete); ``kafka`` as for ``of``."""
    warnings: list[str] = []
    saved, live = _load([*pruned.deleted, *pruned.kept], job, jobs, storage_options, warnings)
    going = {e.id for e in pruned.deleted}
    before = _assemble(pruned.directory, job, saved + live, storage_options, list(warnings), kafka)
    kept = [item for item in saved if item.holder.id not in going]
    after = _assemble(pruned.directory, job, kept + live, storage_options, list(warnings), kafka)
    return PrunePreview(**{f.name: getattr(pruned, f.name) for f in fields(catalog.Pruned)},
                        horizon=HorizonShift(before=before, after=after))


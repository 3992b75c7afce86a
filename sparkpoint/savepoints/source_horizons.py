"""The horizon of one source, by its kind: what the holders reading it still need, and what can go.

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

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sparkpoint.adapters.kafka_log import record_times
from sparkpoint.adapters.storage import join, storage_for, translate_errors
from sparkpoint.errors import NotFoundError, SavepointInvalidError, SparkpointError, StorageError
from sparkpoint.results import Result
from sparkpoint.savepoints.holders import FileLog, Need
from sparkpoint.savepoints.restorability import ask_brokers, client_options
from sparkpoint.spark.sources import KAFKA


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


def file_horizon(common: dict[str, Any], needs: list[Need], storage_options: dict | None,
                  warnings: list[str]) -> FileSourceHorizon:
    directory = common["source"]
    logs: list[FileLog] = [n.value for n in needs]
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


def kafka_horizon(common: dict[str, Any], needs: list[Need], order: dict[str, int],
                   times: dict[tuple[str, int], int | None]) -> KafkaHorizon:
    partitions = sorted({p for need in needs for p in need.value})
    pinned = []
    for partition in partitions:
        # A holder that does not know a partition of its topic reads it from the earliest offset.
        offset, _, holder = min((need.value.get(partition, 0), order[need.holder], need.holder) for need in needs)
        pinned.append(PartitionOffset(topic=common["source"], partition=partition, offset=offset, held_by=holder,
                                      timestamp_ms=times.get((common["source"], partition))))
    return KafkaHorizon(**common, partitions=pinned)


def kafka_times(needs: list[Need], order: dict[str, int], kafka: Mapping[str, Any] | None, seconds: float,
                 warnings: list[str]) -> dict[tuple[str, int], int | None]:
    """(topic, partition) → the time of the oldest record still needed there, each broker asked once, all at once
    and ``seconds`` at most; {} when not asked (``kafka`` None). What cannot be told is a warning."""
    kafka_needs = [need for need in needs if need.kind == KAFKA]
    if kafka is None or not kafka_needs:
        return {}
    configured, options = client_options(kafka)
    topics: dict[str, list[Need]] = {}
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

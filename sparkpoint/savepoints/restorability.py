"""Is a savepoint's input still there? A savepoint resumes each Kafka source at the offsets of its cut; a restore
can only be exact if every record from there on is still in the topic's log. Retention deletes old records
whether a savepoint still needs them or not, and Spark, restored past them, either fails its first batch or
(failOnDataLoss=false) skips them without a word. This is the one place that asks, for `check`, `run -s`,
`inspect` and `savepoints`.

For each partition a savepoint reads: the offset it reads next (``needed``) against the log's bounds now
(``first``, the oldest record kept; ``next``, the offset of the next record):
- ``needed < first``: retention deleted ``first - needed`` records it has not read;
- ``needed > next``: the log is shorter than the savepoint has read: the topic was deleted and made again (or
  truncated); what it would read is not the input it read before;
- the topic, or the partition, is gone.
A partition the topic has now and the savepoint never read is reported: Spark reads it from its earliest offset.

The broker is the one ``kafka.bootstrap_servers`` names in the configuration, with the client options given
there (secrets included: they are never written to a savepoint). All the savepoints asked about at once cost
one round trip to it, whatever their number.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sparkpoint.errors import InputGoneError, SparkpointError, UnreachableError
from sparkpoint.results import WHEN_SET, Result
from sparkpoint.savepoints.savepoint import Savepoint
from sparkpoint.spark.sources import kafka_offsets

RESTORABLE, UNRESTORABLE, UNKNOWN = "restorable", "unrestorable", "unknown"
BROKER_SECONDS = 5.0


@dataclass(frozen=True)
class Gap(Result):
    """A partition whose records the savepoint needs are not all in the log."""

    query: str
    topic: str
    partition: int
    needed: int  # the offset the savepoint reads next
    first: int | None  # the log's oldest offset now; null when the topic or partition is gone
    lost: int | None  # records it has not read that are gone; null when unknown (the topic made again, or gone)
    reason: str  # retention | recreated | topic_gone | partition_gone

    def line(self) -> str:
        where = f"{self.topic}[{self.partition}]"
        if self.reason == "retention":
            return (f"{where} from offset {self.needed}: the log starts at {self.first}, "
                    f"{self.lost} record(s) gone")
        if self.reason == "recreated":
            return (f"{where} from offset {self.needed}: the log ends before it (at {self.first}..): the topic "
                    "was deleted and made again, or truncated")
        return f"{where}: the {'topic' if self.reason == 'topic_gone' else 'partition'} no longer exists"


@dataclass(frozen=True)
class NewPartition(Result):
    query: str
    topic: str
    partition: int  # Spark reads it from its earliest offset


@dataclass(frozen=True)
class InputCheck(Result):
    """Whether every record a savepoint's Kafka sources still have to read is in the log."""

    status: str  # restorable | unrestorable | unknown
    broker: str | None  # the bootstrap servers asked
    gaps: list[Gap]
    new_partitions: list[NewPartition]
    unknown: str | None = field(default=None, metadata=WHEN_SET)  # why it could not be told

    @property
    def lost(self) -> int | None:
        """Records gone in all; None when some gap's count is unknown."""
        counts = [gap.lost for gap in self.gaps]
        return None if None in counts else sum(counts)

    def summary(self) -> str:
        lost = self.lost
        gone = f"{lost} record(s) it has not read are gone" if lost is not None else "part of its input is gone"
        return f"{gone}: " + "; ".join(gap.line() for gap in self.gaps)


@dataclass(frozen=True)
class _Read:
    query: str
    topic: str
    partitions: dict[int, int]  # partition → the offset read next


def kafka_reads(savepoint: Savepoint) -> list[_Read]:
    """What a savepoint's Kafka sources read next, per query and topic."""
    return [_Read(query["name"], topic, partitions)
            for query in savepoint.queries for offset in query["offsets"]
            for topic, partitions in kafka_offsets(offset).items()]


def check_input(savepoints: Iterable[Savepoint], kafka: Mapping[str, Any],
                ask: Callable[..., dict] | None = None,
                timeout: float = BROKER_SECONDS) -> dict[str, InputCheck | None]:
    """Per savepoint (by path): its input check, or None when it reads no Kafka topic. One round trip to the
    broker for them all. A broker that does not answer, or none configured, makes each check ``unknown``."""
    return check_reads({savepoint.path: kafka_reads(savepoint) for savepoint in savepoints}, kafka, ask, timeout)


def check_reads(reads: Mapping[str, list[_Read]], kafka: Mapping[str, Any], ask: Callable[..., dict] | None = None,
                timeout: float = BROKER_SECONDS) -> dict[str, InputCheck | None]:
    """check_input of what each savepoint reads (kafka_reads), by any key."""
    topics = {read.topic for each in reads.values() for read in each}
    if not topics:
        return dict.fromkeys(reads)
    options = dict(kafka)
    broker = options.pop("bootstrap_servers", None)
    if not broker:
        return {path: _unknown(None, "no Kafka broker is configured (kafka.bootstrap_servers)") if each else None
                for path, each in reads.items()}
    if ask is None:
        from sparkpoint.adapters.kafka_log import log_bounds as ask
    try:
        logs = ask(str(broker), topics, options, timeout)
    except SparkpointError as exc:
        return {path: _unknown(str(broker), str(exc)) if each else None for path, each in reads.items()}
    return {path: _judged(each, logs, str(broker)) if each else None for path, each in reads.items()}


def _unknown(broker: str | None, why: str) -> InputCheck:
    return InputCheck(status=UNKNOWN, broker=broker, gaps=[], new_partitions=[], unknown=why)


def _judged(reads: list[_Read], logs: dict, broker: str) -> InputCheck:
    gaps, new = [], []
    for read in reads:
        log = logs.get(read.topic)
        for partition, needed in sorted(read.partitions.items()):
            bounds = None if log is None else log.get(partition)
            if log is None:
                gaps.append(Gap(read.query, read.topic, partition, needed, None, None, "topic_gone"))
            elif bounds is None:
                gaps.append(Gap(read.query, read.topic, partition, needed, None, None, "partition_gone"))
            elif needed > bounds.next:
                gaps.append(Gap(read.query, read.topic, partition, needed, bounds.first, None, "recreated"))
            elif needed < bounds.first:
                gaps.append(Gap(read.query, read.topic, partition, needed, bounds.first, bounds.first - needed,
                                "retention"))
        new += [NewPartition(read.query, read.topic, partition)
                for partition in sorted(set(log or {}) - set(read.partitions))]
    return InputCheck(status=UNRESTORABLE if gaps else RESTORABLE, broker=broker, gaps=gaps, new_partitions=new)


def require_input(savepoint: Savepoint, kafka: Mapping[str, Any], allow_data_loss: bool,
                  warn: Callable[[str], None], ask: Callable[..., dict] | None = None) -> InputCheck | None:
    """Before a restore starts anything: refuse a savepoint whose input is partly gone (InputGoneError, exit 20),
    or whose broker does not answer (UnreachableError, exit 14), unless ``allow_data_loss``; then say what is
    lost. A savepoint that reads no Kafka topic passes as it is; one whose broker is not configured is let
    through with a warning (nothing can be asked)."""
    checked = check_input([savepoint], kafka, ask)[savepoint.path]
    if checked is None:
        return None
    name = savepoint.manifest["id"]
    if checked.status == UNKNOWN:
        if checked.broker is None:
            warn(f"savepoint {name} reads Kafka, and whether its input is still in the log was not checked: "
                 "set kafka.bootstrap_servers in the configuration")
        elif allow_data_loss:
            warn(f"--allow-data-loss: whether the input of {name} is still in the log is unknown: {checked.unknown}")
        else:
            raise UnreachableError(f"{checked.unknown}; whether the input of savepoint {name} is still in the log "
                                   "cannot be told, so nothing was started (--allow-data-loss restores it "
                                   "unchecked)")
    elif checked.status == UNRESTORABLE:
        if not allow_data_loss:
            raise InputGoneError(f"savepoint {name} cannot be restored exactly, so nothing was started: "
                                 f"{checked.summary()} (restore a newer savepoint, or --allow-data-loss to restore "
                                 "it without them)")
        warn(f"--allow-data-loss: savepoint {name} is restored without what is gone: {checked.summary()}")
    for partition in checked.new_partitions:
        warn(f"{partition.topic}[{partition.partition}] is new since savepoint {name}: query {partition.query} "
             "reads it from its earliest offset")
    return checked

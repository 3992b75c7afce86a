"""Is a savepoint's input still there? A savepoint resumes each Kafka source at the offsets of its cut; a restore
can only be exact if every record from there on is still in the topic's log. Retention deletes old records
whether a savepoint still needs them or not, and Spark restored past them fails its first batch (the default,
failOnDataLoss=true) or skips them with only a warning in its log (failOnDataLoss=false). This is the one
place that asks, for `check`, `run -s`, `inspect`, `savepoints`, `prune --unrestorable` and `metrics`.

For each partition a savepoint reads, the offset it reads next (``needed``) and, for a batch planned but not
committed at the cut (replayed first on restore), the offset that batch ends at, against the log's bounds now
(``first``, the oldest offset kept; ``end``, the offset of the next record):
- ``needed < first``: retention deleted ``first - needed`` offsets it has not read (records, and transaction
  markers where the topic has transactions);
- ``needed > end``, or the planned batch ends past ``end``: the log is shorter than what the savepoint has read
  or planned: the topic was deleted and made again, or truncated;
- the topic's id is not the one the savepoint recorded: the topic was deleted and made again, whatever its
  log's length (one that has grown past the savepoint's offsets shows nothing else);
- the topic, or the partition, is gone;
- a partition the topic has now and the savepoint never read, whose log no longer starts at 0: a query that
  subscribes to the topic reads a new partition from offset 0 (Spark's rule for added partitions), and those
  records are gone. (A query that `assign`s partitions does not read it; the offsets cannot tell which.)

A topic's id (Kafka's, KIP-516) is recorded when a savepoint is taken, from its broker (``identify_topics``;
``kafka_log.topic_ids``), under its source's record (``inputs[].topic_ids``). A savepoint that has none for a
topic (taken before sparkpoint recorded them, of a checkpoint with no broker known, or its broker did not answer
then) cannot tell a re-created topic that has grown past its offsets from the one it read: its check says so
(``unidentified``) rather than call it restorable without a word.

The broker asked is the one ``kafka.bootstrap_servers`` names in the configuration when it is set (every
savepoint is then taken to read that cluster); otherwise each source's own, as the savepoint recorded it from
the running query's plan. The client's other options (security protocol, SASL and SSL settings, secrets
included) come from the configuration only: a savepoint never holds them. All the savepoints asked about at
once cost a fixed number of requests to each broker, whatever their number; the brokers are asked together,
and waited for BROKER_SECONDS at most.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sparkpoint.adapters.kafka_log import BROKER_SECONDS, TopicLog, log_bounds, topic_ids
from sparkpoint.adapters.storage import storage_for
from sparkpoint.errors import InputGoneError, SparkpointError, UnreachableError
from sparkpoint.results import WHEN_SET, Result
from sparkpoint.savepoints.savepoint import Savepoint
from sparkpoint.spark.delta_log import DeltaLog, source_gone
from sparkpoint.spark.sources import KAFKA, OTHER, TOPIC_IDS, delta_offset, kafka_offsets
from sparkpoint.times import answers_within

T = TypeVar("T")
RESTORABLE, UNRESTORABLE, UNKNOWN = "restorable", "unrestorable", "unknown"
ASK_MARGIN = 0.5  # past the client's own timeouts, the answer is no longer waited for (see log_bounds)


@dataclass(frozen=True)
class Gap(Result):
    """A partition whose records the savepoint needs are not all in the log."""

    query: str
    source: int  # the source's place in the query (its offsets' index)
    topic: str
    partition: int
    needed: int  # the offset the savepoint reads next (0 for a partition new since it)
    first: int | None  # the log's oldest offset now; null when the topic or partition is gone
    end: int | None  # the offset of the log's next record now; null likewise
    lost: int | None  # offsets it has not read that are gone; null when unknown (the topic made again, or gone)
    reason: str  # retention | new_partition_trimmed | recreated | topic_gone | partition_gone
    # When the topic's id is not the one the savepoint recorded: the id the topic has now, and that one.
    topic_id: str | None = field(default=None, metadata=WHEN_SET)
    recorded_topic_id: str | None = field(default=None, metadata=WHEN_SET)

    def line(self) -> str:
        where = f"{self.topic}[{self.partition}]"
        if self.reason == "retention":
            return f"{where} from offset {self.needed}: the log starts at {self.first}, {self.lost} gone"
        if self.reason == "new_partition_trimmed":
            return (f"{where}, new since the savepoint, is read from offset 0 by a query that subscribes to the "
                    f"topic: the log starts at {self.first}, {self.lost} gone")
        if self.reason == "recreated" and self.topic_id is not None:
            return (f"{where} from offset {self.needed}: the topic was deleted and made again since the savepoint "
                    f"(its id is {self.topic_id}, the savepoint read {self.recorded_topic_id}); its log ends at "
                    f"{self.end}")
        if self.reason == "recreated":
            return (f"{where} from offset {self.needed}: the log ends at {self.end}, before what the savepoint read "
                    "or planned: the topic was deleted and made again, or truncated")
        return f"{where}: the {'topic' if self.reason == 'topic_gone' else 'partition'} no longer exists"


@dataclass(frozen=True)
class NewPartition(Result):
    query: str
    topic: str
    partition: int  # a query subscribed to the topic reads it from offset 0, all of it still in the log


@dataclass(frozen=True)
class Unidentified(Result):
    """A topic whose id cannot be compared with the savepoint's: whether it was deleted and made again since, and
    has grown past the offsets the savepoint reads, cannot be told."""

    query: str
    source: int
    topic: str
    recorded_topic_id: str | None  # null: the savepoint recorded none; else the broker gives none now


@dataclass(frozen=True)
class InputCheck(Result):
    """Whether every record a savepoint's Kafka sources still have to read is in the log."""

    status: str  # restorable | unrestorable | unknown
    broker: str | None  # the bootstrap servers asked
    gaps: list[Gap]
    new_partitions: list[NewPartition]
    unidentified: list[Unidentified] = field(default_factory=list)  # topics whose re-creation cannot be told
    why: str | None = field(default=None, metadata=WHEN_SET)  # why the status is unknown

    @property
    def lost(self) -> int | None:
        """Offsets gone in all; None when some gap's count is unknown."""
        counts = [gap.lost for gap in self.gaps]
        return None if None in counts else sum(counts)

    def doubt(self) -> str | None:
        """One line on the topics whose re-creation cannot be told (``unidentified``); None when there are none."""
        if not self.unidentified:
            return None
        topics = sorted({u.topic for u in self.unidentified})
        unrecorded = sorted({u.topic for u in self.unidentified if u.recorded_topic_id is None})
        unanswered = sorted({u.topic for u in self.unidentified if u.recorded_topic_id is not None})
        why = []
        if unrecorded:
            why.append(f"the savepoint recorded no id for {', '.join(unrecorded)} (taken before sparkpoint recorded "
                       "topic ids, or its broker did not answer then)")
        if unanswered:
            why.append(f"the broker gives no id for {', '.join(unanswered)} (Kafka before 2.8)")
        return (f"whether {', '.join(topics)} {'was' if len(topics) == 1 else 'were'} deleted and made again since "
                f"the savepoint cannot be told: {'; '.join(why)}; one made again and grown past its offsets would be "
                "read from them")

    def summary(self) -> str:
        lost = self.lost
        gone = f"{lost} record(s) it has not read are gone" if lost is not None else "part of its input is gone"
        return f"{gone}: " + "; ".join(gap.line() for gap in self.gaps)


@dataclass(frozen=True)
class KafkaRead:
    """What one Kafka source of a savepoint's query reads next, on one topic."""

    query: str
    source: int
    topic: str
    partitions: dict[int, int]  # partition → the offset read next
    planned_end: dict[int, int]  # partition → where the batch planned at the cut ends ({} when none is)
    bootstrap: str | None = None  # the source's bootstrap servers, as the savepoint recorded them
    topic_id: str | None = None  # the topic's id when the savepoint was taken, where it recorded one


def kafka_reads(savepoint: Savepoint) -> list[KafkaRead]:
    """What a savepoint's Kafka sources read next, per query, source and topic."""
    reads = []
    for query in savepoint.queries:
        planned = query.get("planned_offsets") or []
        inputs = query.get("inputs") or []
        for index, offset in enumerate(query["offsets"]):
            ends = kafka_offsets(planned[index]) if index < len(planned) else {}
            read = inputs[index] if index < len(inputs) else {}
            ids = read.get(TOPIC_IDS) or {}
            reads += [KafkaRead(query["name"], index, topic, partitions, ends.get(topic, {}),
                                read.get("bootstrap_servers"), ids.get(topic))
                      for topic, partitions in kafka_offsets(offset).items()]
    return reads


def identify_topics(queries: list[dict[str, Any]], kafka: Mapping[str, Any], ask: Callable[..., dict] = topic_ids,
                    timeout: float = BROKER_SECONDS) -> list[dict[str, Any]]:
    """The query entries of a savepoint being taken, each Kafka source's record given its topics' ids now
    (``topic_ids``), asked of the broker check_reads would ask, all at once. Where the broker is not known, does
    not answer within ``timeout`` or cannot be asked (no client), none is recorded and the savepoint is taken all
    the same. A plain checkpoint's query, which records no sources, gets a record per source (kind ``kafka`` or
    ``other``) to hold them. Asked after the copy: a topic made again meanwhile passes for the one read."""
    configured, options = client_options(kafka)
    wanted: dict[tuple[int, int], tuple[str, set[str]]] = {}  # (query, source) → (its broker, the topics it reads)
    for place, query in enumerate(queries):
        inputs = query.get("inputs") or []
        for index, topics in enumerate(topics_read(query)):
            broker = configured or (inputs[index].get("bootstrap_servers") if index < len(inputs) else None)
            if topics and broker:
                wanted[(place, index)] = (broker, topics)
    asks: dict[str, set[str]] = {}
    for broker, topics in wanted.values():
        asks.setdefault(broker, set()).update(topics)
    answers, _failed = ask_brokers({broker: functools.partial(ask, broker, topics, options, timeout)
                                    for broker, topics in asks.items()}, timeout)
    identified = [dict(query) for query in queries]
    for (place, index), (broker, topics) in wanted.items():
        ids = {topic: answers[broker][topic] for topic in sorted(topics) if (answers[broker] or {}).get(topic)}
        query = identified[place]
        if ids and index < len(query.get("inputs") or query["offsets"]):
            query["inputs"] = [dict(read) for read in query.get("inputs")
                               or [{"kind": KAFKA if kafka_offsets(offset) else OTHER} for offset in query["offsets"]]]
            query["inputs"][index][TOPIC_IDS] = ids
    return identified


def topics_read(query: dict[str, Any]) -> list[set[str]]:
    """Per source of a savepoint's query entry (in the order of its offsets), the Kafka topics its cut reads: those
    of its offsets and of the batch planned at the cut."""
    planned = query.get("planned_offsets") or []
    return [set(kafka_offsets(offset)) | set(kafka_offsets(planned[index]) if index < len(planned) else ())
            for index, offset in enumerate(query["offsets"])]


def check_input(savepoints: Iterable[Savepoint], kafka: Mapping[str, Any],
                ask: Callable[..., dict] = log_bounds) -> dict[str, InputCheck | None]:
    """Per savepoint (by path): its input check, or None when it reads no Kafka topic."""
    return check_reads({savepoint.path: kafka_reads(savepoint) for savepoint in savepoints}, kafka, ask)


def ask_brokers(asks: Mapping[str, Callable[[], T]],
                seconds: float) -> tuple[dict[str, T | None], dict[str, BaseException]]:
    """Each broker's answer to its call, all asked at once and waited for ``seconds`` (past the client's own
    timeouts by ASK_MARGIN): None for one that did not answer in time or raised; and what each that raised
    raised, for the caller to say or raise."""
    brokers = sorted(asks)
    failures: dict[str, BaseException] = {}

    def asking(broker: str) -> Callable[[], T]:
        def asked() -> T:
            try:
                return asks[broker]()
            except BaseException as exc:  # handed to the caller's thread
                failures[broker] = exc
                raise
        return asked

    answers = answers_within([asking(broker) for broker in brokers], seconds + ASK_MARGIN, lambda _index: None)
    return dict(zip(brokers, answers, strict=True)), failures


def client_options(kafka: Mapping[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """The configuration's ``kafka`` settings as (the broker it names for every savepoint, or None; the client's
    other options: security protocol, SASL, SSL)."""
    options = dict(kafka)
    configured = options.pop("bootstrap_servers", None)
    if isinstance(configured, (list, tuple)):  # kafka-python takes a list as well as "host:port,host:port"
        configured = ",".join(map(str, configured))
    return (str(configured) if configured else None), options


def check_reads(reads: Mapping[str, list[KafkaRead]], kafka: Mapping[str, Any], ask: Callable[..., dict] = log_bounds,
                timeout: float = BROKER_SECONDS) -> dict[str, InputCheck | None]:
    """check_input of what each savepoint reads (kafka_reads), by any key. Each broker is asked once for all of
    them, all brokers at once; one that does not answer within ``timeout`` (or none known) makes the checks that
    need it ``unknown``. A configuration the client refuses, or no client installed, is raised (exit 3, exit 10)."""
    configured, options = client_options(kafka)

    def broker_of(read: KafkaRead) -> str | None:
        return configured or read.bootstrap

    topics: dict[str, set[str]] = {}
    for each in reads.values():
        for read in each:
            if broker_of(read):
                topics.setdefault(broker_of(read), set()).add(read.topic)
    logs, failures = ask_brokers({broker: functools.partial(ask, broker, brokers_topics, options, timeout)
                                  for broker, brokers_topics in topics.items()}, timeout)
    for failure in failures.values():
        if not isinstance(failure, UnreachableError):
            raise failure

    def judged(each: list[KafkaRead]) -> InputCheck | None:
        if not each:
            return None
        asked = sorted({broker_of(read) or "" for read in each})
        if "" in asked:
            return _unknown(None, "no Kafka broker is known for it: the savepoint names none, and the configuration "
                                  "sets no kafka.bootstrap_servers")
        silent = [broker for broker in asked if logs[broker] is None]
        if silent:
            why = "; ".join(str(failures[broker]) if broker in failures
                            else f"the Kafka broker {broker} did not answer within {timeout:g} s" for broker in silent)
            return _unknown(", ".join(asked), why)
        return _judged(each, {broker: logs[broker] for broker in asked}, broker_of)

    return {key: judged(each) for key, each in reads.items()}


def _unknown(broker: str | None, why: str) -> InputCheck:
    return InputCheck(status=UNKNOWN, broker=broker, gaps=[], new_partitions=[], why=why)


def _judged(reads: list[KafkaRead], logs: dict[str, dict[str, TopicLog | None]],
            broker_of: Callable[[KafkaRead], str | None]) -> InputCheck:
    gaps, new, unidentified = [], [], []
    for read in reads:
        log = logs[broker_of(read)].get(read.topic)
        if log is not None and read.topic_id is not None and log.id is not None and log.id != read.topic_id:
            gaps += _recreated(read, log)
            continue
        if log is not None and (read.topic_id is None or log.id is None):
            unidentified.append(Unidentified(read.query, read.source, read.topic, read.topic_id))
        for partition, needed in sorted(read.partitions.items()):
            gap = _gap(read, partition, needed, log)
            if gap is not None:
                gaps.append(gap)
        for partition in sorted(set(log.partitions if log else ()) - set(read.partitions)):
            bounds = log.partitions[partition]
            if bounds.first > 0:
                gaps.append(Gap(read.query, read.source, read.topic, partition, 0, bounds.first, bounds.end,
                                bounds.first, "new_partition_trimmed"))
            else:
                new.append(NewPartition(read.query, read.topic, partition))
    return InputCheck(status=UNRESTORABLE if gaps else RESTORABLE, broker=", ".join(sorted(logs)), gaps=gaps,
                      new_partitions=new, unidentified=unidentified)


def _recreated(read: KafkaRead, log: TopicLog) -> list[Gap]:
    """Each partition a savepoint reads of a topic made again since: none of its offsets are the new topic's (a
    partition the new topic lacks is said gone)."""
    gaps = []
    for partition, needed in sorted(read.partitions.items()):
        bounds = log.partitions.get(partition)
        if bounds is None:
            gaps.append(Gap(read.query, read.source, read.topic, partition, needed, None, None, None, "partition_gone"))
        else:
            gaps.append(Gap(read.query, read.source, read.topic, partition, needed, bounds.first, bounds.end, None,
                            "recreated", log.id, read.topic_id))
    return gaps


def _gap(read: KafkaRead, partition: int, needed: int, log: TopicLog | None) -> Gap | None:
    def gap(first: int | None, end: int | None, lost: int | None, reason: str) -> Gap:
        return Gap(read.query, read.source, read.topic, partition, needed, first, end, lost, reason)

    if log is None:
        return gap(None, None, None, "topic_gone")
    bounds = log.partitions.get(partition)
    if bounds is None:
        return gap(None, None, None, "partition_gone")
    if max(needed, read.planned_end.get(partition, needed)) > bounds.end:
        return gap(bounds.first, bounds.end, None, "recreated")
    if needed < bounds.first:
        return gap(bounds.first, bounds.end, bounds.first - needed, "retention")
    return None


def require_input(savepoint: Savepoint, kafka: Mapping[str, Any], allow_data_loss: bool,
                  warn: Callable[[str], None], ask: Callable[..., dict] = log_bounds,
                  storage_options: Mapping[str, Any] | None = None) -> InputCheck | None:
    """Before a restore starts anything: refuse a savepoint whose input is partly gone (InputGoneError, exit 20),
    or whose broker does not answer (UnreachableError, exit 14), unless ``allow_data_loss``; then say what is
    lost, and what Spark will do of it. A savepoint that reads no Kafka topic passes as it is; one whose broker
    is known neither to it nor to the configuration is let through with a warning (nothing can be asked).
    Its Delta sources are checked too (``delta_gone``)."""
    _require_delta_input(savepoint, allow_data_loss, warn, storage_options)
    checked = check_input([savepoint], kafka, ask)[savepoint.path]
    if checked is None:
        return None
    name = savepoint.manifest["id"]
    if checked.status == UNKNOWN:
        if checked.broker is None:
            warn(f"savepoint {name} reads Kafka, and whether its input is still in the log was not checked: it "
                 "names no broker (taken before sparkpoint recorded them, or from a checkpoint): set "
                 "kafka.bootstrap_servers in the configuration")
        elif allow_data_loss:
            warn(f"--allow-data-loss: whether the input of {name} is still in the log is unknown: {checked.why}")
        else:
            raise UnreachableError(f"{checked.why}; whether the input of savepoint {name} is still in the log "
                                   "cannot be told, so nothing was started (kafka.bootstrap_servers in the "
                                   "configuration names a broker of the cluster this machine reaches; "
                                   "--allow-data-loss restores it unchecked)")
    elif checked.status == UNRESTORABLE:
        if not allow_data_loss:
            raise InputGoneError(f"savepoint {name} cannot be restored exactly, so nothing was started: "
                                 f"{checked.summary()} (restore a newer savepoint, or --allow-data-loss to restore "
                                 "it without them)")
        warn(f"--allow-data-loss: savepoint {name} is restored although {checked.summary()}; Spark skips what is "
             "gone only where the application reads Kafka with failOnDataLoss=false, and otherwise fails its "
             "first batch")
    for partition in checked.new_partitions:
        warn(f"{partition.topic}[{partition.partition}] is new since savepoint {name}: a query that subscribes to "
             f"the topic ({partition.query}) reads it from offset 0")
    if checked.doubt():
        warn(f"savepoint {name}: {checked.doubt()}")
    return checked


@dataclass(frozen=True)
class DeltaRead:
    """What one Delta source of a savepoint's query reads next."""

    query: str
    source: int
    table: str | None  # the table's path, as the savepoint recorded it from the running plan
    version: int  # the table version it reads on from
    snapshot: bool  # it reads that version's snapshot whole (a first batch), then the commits after


def delta_reads(savepoint: Savepoint) -> list[DeltaRead]:
    reads = []
    for query in savepoint.queries:
        inputs = query.get("inputs") or []
        for index, offset in enumerate(query["offsets"]):
            parsed = delta_offset(offset)
            if parsed is not None:
                table = inputs[index].get("path") if index < len(inputs) else None
                reads.append(DeltaRead(query["name"], index, table, *parsed))
    return reads


def delta_gone(savepoint: Savepoint, storage_options: Mapping[str, Any] | None = None) -> tuple[list[str], list[str]]:
    """(what each Delta source of the savepoint reads that its table no longer holds, one line each; the sources
    that could not be checked, and why). Delta's twin of Kafka's retention: VACUUM deletes the data files, log
    cleanup the commits, that a savepoint taken long enough ago still reads."""
    gone, unchecked = [], []
    for read in delta_reads(savepoint):
        where = f"query {read.query}'s Delta source {read.source}"
        if read.table is None:
            unchecked.append(f"{where}: the savepoint does not record its table (taken of a plain checkpoint, or "
                             "before sparkpoint recorded it)")
            continue
        try:
            storage, path = storage_for(read.table, storage_options)
            why = source_gone(DeltaLog(storage, path), read.version, read.snapshot)
        except SparkpointError as exc:
            unchecked.append(f"{where} ({read.table}): {exc}")
            continue
        if why is not None:
            gone.append(f"{where} ({read.table}) reads on from version {read.version}: {why}")
    return gone, unchecked


def _require_delta_input(savepoint: Savepoint, allow_data_loss: bool, warn: Callable[[str], None],
                         storage_options: Mapping[str, Any] | None) -> None:
    gone, unchecked = delta_gone(savepoint, storage_options)
    name = savepoint.manifest["id"]
    for line in unchecked:
        warn(f"whether the input of savepoint {name} is still there was not checked for {line}")
    if gone and not allow_data_loss:
        raise InputGoneError(f"savepoint {name} cannot be restored exactly, so nothing was started: "
                             f"{'; '.join(gone)} (restore a newer savepoint, or --allow-data-loss to restore it "
                             "without them)")
    for line in gone:
        warn(f"--allow-data-loss: savepoint {name} is restored although {line}; Spark's Delta source fails on "
             "what is gone unless the application reads it so that it tolerates that")

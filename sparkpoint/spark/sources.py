"""What the offsets log says of each source: its kind, told by the shape of the offset Spark wrote for it (Spark
4.3's, the same back to 3.5), and for Kafka the offset of each topic and partition. Every reader of source
offsets (the horizon, a savepoint's restorability) asks here.

- the file source, ``{"logOffset": N}``;
- Kafka, ``{"<topic>": {"<partition>": <offset>}}`` (KafkaSourceOffset);
- the rate source, a number (seconds since its start), and ``rate-micro-batch``, ``{"offset": N, "timestamp": T}``;
- a Delta table, ``{"sourceVersion": 1, "reservoirId": <the table's id>, "reservoirVersion": V, "index": I,
  "isStartingVersion": B}`` (DeltaSourceOffset, Delta 3.3 to 4.4): it reads on from the table's version V (its
  snapshot at V when B, as a first batch does; else the commits from V, past the file action I of V);
- any other source: ``other``, no order assumed.

What a source reads, as a savepoint records it (``source_record``), comes from its reader's options in the
running query's plan: for Kafka, where (the bootstrap servers) and what (the topics, a pattern, or assigned
partitions); for a Delta table, its path (qualified in the driver). Nothing else of the options: they also
carry the client's secrets (``kafka.sasl.jaas.config``, ``kafka.ssl.*.password``), which never enter a savepoint.
"""

from __future__ import annotations


from collections.abc import Callable
from typing import Any

from sparkpoint import json_input
from sparkpoint.spark.fields import is_number

FILE, KAFKA, RATE, RATE_MICRO_BATCH, DELTA, OTHER = "file", "kafka", "rate", "rate-micro-batch", "delta", "other"
_DELTA_OFFSET = {"reservoirId", "reservoirVersion", "index", "isStartingVersion"}
# The Kafka reader's options a savepoint records, and the keys it records them under.
KAFKA_READS = {"kafka.bootstrap.servers": "bootstrap_servers", "subscribe": "subscribe",
               "subscribePattern": "subscribe_pattern", "assign": "assign"}
MAX_OPTION_CHARS = 4096  # a topic list or servers list longer than this is not recorded (no reader needs it)
# A Kafka source's record, in a savepoint: {topic: its id (Kafka's, KIP-516)} as the broker gave it when the
# savepoint was taken; a topic deleted and made again under its name has another (restorability compares them).
TOPIC_IDS = "topic_ids"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def kind_of(offset: Any) -> str:
    """The kind of source that wrote ``offset``: FILE, KAFKA, RATE, RATE_MICRO_BATCH or OTHER."""
    if isinstance(offset, dict):
        if offset.keys() == {"logOffset"} and _is_int(offset["logOffset"]):
            return FILE
        if offset.keys() == {"offset", "timestamp"} and all(_is_int(v) for v in offset.values()):
            return RATE_MICRO_BATCH
        if offset.keys() >= _DELTA_OFFSET:
            return DELTA if _is_int(offset["reservoirVersion"]) and offset["reservoirVersion"] >= 0 and isinstance(
                offset["isStartingVersion"], bool) else OTHER
        if offset and all(isinstance(partitions, dict) and partitions
                          and all(is_number(p) and _is_int(o) and o >= 0 for p, o in partitions.items())
                          for partitions in offset.values()):
            return KAFKA
    return RATE if _is_int(offset) else OTHER


def kafka_offsets(offset: Any) -> dict[str, dict[int, int]]:
    """A Kafka source's offset as {topic: {partition: the offset it reads next}}; {} for another source's."""
    if kind_of(offset) != KAFKA:
        return {}
    return {topic: {int(partition): value for partition, value in partitions.items()}
            for topic, partitions in offset.items()}


def delta_offset(offset: Any) -> tuple[int, bool] | None:
    """A Delta source's offset as (the table version it reads on from, whether it reads that version's snapshot
    whole); None for another source's."""
    if kind_of(offset) != DELTA:
        return None
    return offset["reservoirVersion"], offset["isStartingVersion"]


def source_record(source_name: str, option: Callable[[str], str | None]) -> dict[str, str]:
    """What a savepoint records of a source: its kind (Spark's short name, e.g. ``kafka``) and, for Kafka, the
    options KAFKA_READS names, ``option(name)`` giving each (None when unset)."""
    # The file source is of Spark's first source API, named after its path ("FileSource[/in]").
    record = {"kind": FILE if source_name.startswith("FileSource[") else source_name[:MAX_OPTION_CHARS]}
    if source_name == DELTA:
        path = option("path")
        if isinstance(path, str) and 0 < len(path) <= MAX_OPTION_CHARS:
            record["path"] = path
    if source_name == KAFKA:
        for name, key in KAFKA_READS.items():
            value = option(name)
            if isinstance(value, str) and 0 < len(value) <= MAX_OPTION_CHARS:
                record[key] = value
    return record


def as_recorded(report: Any) -> dict[str, str] | None:
    """A source record (source_record's) taken from another process's report, holding only what a record holds,
    each a string; None when it is not one."""
    if not isinstance(report, dict) or not isinstance(report.get("kind"), str):
        return None
    keys = ("kind", "path", *KAFKA_READS.values())
    return {key: report[key][:MAX_OPTION_CHARS] for key in keys if isinstance(report.get(key), str)}


def is_source_record(read: Any) -> bool:
    """Whether ``read`` is a source's record as a manifest holds it: as_recorded's, with a Kafka source's
    ``topic_ids`` where the broker gave them. A driver's report never brings those (as_recorded drops them)."""
    if not isinstance(read, dict):
        return False
    own = {key: value for key, value in read.items() if key != TOPIC_IDS}
    ids = read.get(TOPIC_IDS, {})
    return as_recorded(own) == own and isinstance(ids, dict) and all(
        isinstance(topic, str) and isinstance(topic_id, str) and 0 < len(topic_id) <= 64
        for topic, topic_id in ids.items())


def topics_of(record: dict[str, Any]) -> list[str]:
    """The topics a Kafka source's record names (subscribe's list, or assign's JSON's keys); [] otherwise."""
    if isinstance(record.get("subscribe"), str):
        return [topic.strip() for topic in record["subscribe"].split(",") if topic.strip()]
    if isinstance(record.get("assign"), str):
        try:
            assigned = json_input.loads(record["assign"])
        except ValueError:
            return []
        return sorted(assigned) if isinstance(assigned, dict) else []
    return []


def offsets_behind(end: Any, latest: Any) -> int | None:
    """How many offsets a Kafka source has yet to read: per partition of ``latest`` (the log's end when the batch
    was planned, as Spark's progress reports it), its offset less ``end``'s (where the batch read to), summed;
    None for another source's offsets."""
    ends, latests = kafka_offsets(end), kafka_offsets(latest)
    if not latests:
        return None
    return sum(max(0, offset - ends.get(topic, {}).get(partition, 0))
               for topic, partitions in latests.items() for partition, offset in partitions.items())

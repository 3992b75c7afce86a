"""What the offsets log says of each source: its kind, told by the shape of the offset Spark wrote for it (Spark
4.3's, the same back to 3.5), and for Kafka the offset of each topic and partition. Every reader of source
offsets (the horizon, a savepoint's restorability) asks here.

- the file source, ``{"logOffset": N}``;
- Kafka, ``{"<topic>": {"<partition>": <offset>}}`` (KafkaSourceOffset);
- the rate source, a number (seconds since its start), and ``rate-micro-batch``, ``{"offset": N, "timestamp": T}``;
- any other source: ``other``, no order assumed.
"""

from __future__ import annotations

from typing import Any

from sparkpoint.spark.fields import is_number

FILE, KAFKA, RATE, RATE_MICRO_BATCH, OTHER = "file", "kafka", "rate", "rate-micro-batch", "other"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def kind_of(offset: Any) -> str:
    """The kind of source that wrote ``offset``: FILE, KAFKA, RATE, RATE_MICRO_BATCH or OTHER."""
    if isinstance(offset, dict):
        if offset.keys() == {"logOffset"} and _is_int(offset["logOffset"]):
            return FILE
        if offset.keys() == {"offset", "timestamp"} and all(_is_int(v) for v in offset.values()):
            return RATE_MICRO_BATCH
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

"""The rules by which a savepoint's Kafka input is judged still there, on log bounds as a broker reports them
(tests/spark/test_kafka_input.py asks a real broker). Found by the review of the first version: a new partition
already trimmed, and a planned batch that ends past the log, were judged restorable; Spark fails both."""

from __future__ import annotations

from sparkpoint.adapters.kafka_log import LogBounds
from sparkpoint.savepoints.restorability import KafkaRead, _judged
from sparkpoint.spark.sources import KAFKA, OTHER, kind_of


def judged(partitions, log, planned_end=None):
    read = KafkaRead("q", 0, "t", partitions, planned_end or {})
    return _judged([read], {"t": {p: LogBounds(*bounds) for p, bounds in log.items()}}, "broker:9092")


def test_a_partition_added_since_and_already_trimmed_is_a_gap_from_offset_0():
    checked = judged({0: 100, 1: 100}, {0: (0, 200), 1: (0, 200), 2: (500, 900)})
    assert checked.status == "unrestorable" and [(g.partition, g.needed, g.lost, g.reason) for g in checked.gaps] == [
        (2, 0, 500, "new_partition_trimmed")]
    whole = judged({0: 100}, {0: (0, 200), 1: (0, 5)})
    assert whole.status == "restorable" and [n.partition for n in whole.new_partitions] == [1]


def test_a_planned_batch_that_ends_past_the_log_is_a_gap():
    checked = judged({0: 100}, {0: (0, 120)}, planned_end={0: 150})
    assert [(g.reason, g.end, g.lost) for g in checked.gaps] == [("recreated", 120, None)]
    assert judged({0: 100}, {0: (0, 150)}, planned_end={0: 150}).status == "restorable"


def test_the_edges_of_the_log():
    assert judged({0: 100}, {0: (100, 100)}).status == "restorable"  # reads exactly where the log starts and ends
    assert [(g.reason, g.lost) for g in judged({0: 99}, {0: (100, 120)}).gaps] == [("retention", 1)]
    assert [g.reason for g in judged({0: 121}, {0: (100, 120)}).gaps] == ["recreated"]
    assert [g.reason for g in judged({5: 1}, {0: (0, 9)}).gaps] == ["partition_gone"]
    assert [g.reason for g in _judged([KafkaRead("q", 0, "gone", {0: 1}, {})], {"gone": None}, "b").gaps] == [
        "topic_gone"]


def test_negative_offsets_are_not_kafka_s():
    """Spark resolves latest (-1) and earliest (-2) before it writes an offset: a negative one is not a position."""
    assert kind_of({"t": {"0": 5}}) == KAFKA and kind_of({"t": {"0": -2}}) == OTHER

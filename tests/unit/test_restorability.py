"""The rules by which a savepoint's Kafka input is judged still there, on log bounds as a broker reports them
(tests/spark/test_kafka_input.py asks a real broker). Found by the review of the first version: a new partition
already trimmed, and a planned batch that ends past the log, were judged restorable; Spark fails both."""

from __future__ import annotations

from sparkpoint.adapters.kafka_log import LogBounds
from sparkpoint.errors import UnreachableError
from sparkpoint.savepoints.restorability import KafkaRead, check_reads
from sparkpoint.spark.sources import KAFKA, OTHER, kind_of


def answering(logs_by_broker, asked=None):
    """A broker's answers as log_bounds gives them, per bootstrap address; each call noted in ``asked``."""
    def ask(broker, topics, options, timeout):
        if asked is not None:
            asked.append((broker, sorted(topics)))
        return {topic: logs_by_broker[broker].get(topic) for topic in topics}
    return ask


def judged(partitions, log, planned_end=None, topic="t"):
    read = KafkaRead("q", 0, topic, partitions, planned_end or {}, "broker:9092")
    bounds = {"t": {p: LogBounds(*b) for p, b in log.items()}}
    return check_reads({"s": [read]}, {}, answering({"broker:9092": bounds}))["s"]


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
    assert [g.reason for g in judged({0: 1}, {}, topic="gone").gaps] == ["topic_gone"]


def test_each_source_is_judged_against_the_broker_it_reads_unless_the_configuration_names_one():
    east = {"a": {0: LogBounds(50, 90)}}
    west = {"a": {0: LogBounds(0, 90)}, "b": {0: LogBounds(0, 10)}}
    reads = {"one": [KafkaRead("q", 0, "a", {0: 10}, {}, "east:9092")],
             "two": [KafkaRead("q", 0, "a", {0: 10}, {}, "west:9092"), KafkaRead("q", 1, "b", {0: 3}, {}, "west:9092")],
             "none": [KafkaRead("q", 0, "a", {0: 10}, {}, None)], "files": []}
    asked = []
    checked = check_reads(reads, {}, answering({"east:9092": east, "west:9092": west}, asked))
    assert sorted(asked) == [("east:9092", ["a"]), ("west:9092", ["a", "b"])]  # once each, for every savepoint
    assert (checked["one"].status, checked["one"].broker, checked["one"].lost) == ("unrestorable", "east:9092", 40)
    assert (checked["two"].status, checked["two"].broker) == ("restorable", "west:9092")
    assert checked["none"].status == "unknown" and checked["none"].broker is None and "names no" in checked["none"].why
    assert checked["files"] is None
    # A configured broker is every savepoint's: the savepoints' own addresses are not asked.
    asked.clear()
    checked = check_reads(reads, {"bootstrap_servers": ["west:9092"]}, answering({"west:9092": west}, asked))
    assert asked == [("west:9092", ["a", "b"])] and {key: c.status for key, c in checked.items() if c} == {
        "one": "restorable", "two": "restorable", "none": "restorable"}


def test_a_broker_that_does_not_answer_makes_only_its_savepoints_unknown():
    def ask(broker, topics, options, timeout):
        if broker == "down:9092":
            raise UnreachableError("the Kafka broker down:9092 does not answer within 1 s")
        return {"a": {0: LogBounds(0, 90)}}

    reads = {"up": [KafkaRead("q", 0, "a", {0: 10}, {}, "up:9092")],
             "down": [KafkaRead("q", 0, "a", {0: 10}, {}, "down:9092")]}
    checked = check_reads(reads, {}, ask, timeout=1)
    assert checked["up"].status == "restorable"
    assert checked["down"].status == "unknown" and "down:9092 does not answer" in checked["down"].why


def test_negative_offsets_are_not_kafka_s():
    """Spark resolves latest (-1) and earliest (-2) before it writes an offset: a negative one is not a position."""
    assert kind_of({"t": {"0": 5}}) == KAFKA and kind_of({"t": {"0": -2}}) == OTHER

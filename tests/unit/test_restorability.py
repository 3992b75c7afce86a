"""The rules by which a savepoint's Kafka input is judged still there, on log bounds as a broker reports them
(tests/spark/test_kafka_input.py asks a real broker). Found by the review of the first version: a new partition
already trimmed, and a planned batch that ends past the log, were judged restorable; Spark fails both."""

from __future__ import annotations

import time

from sparkpoint.adapters.kafka_log import LogBounds, TopicLog
from sparkpoint.errors import EnvironmentSetupError, UnreachableError
from sparkpoint.savepoints.restorability import KafkaRead, check_reads, identify_topics, topics_read
from sparkpoint.spark.sources import KAFKA, OTHER, as_recorded, is_source_record, kind_of


def answering(logs_by_broker, asked=None, ids=None):
    """A broker's answers as log_bounds gives them, per bootstrap address, from each topic's partitions' bounds
    and its id in ``ids`` ("id-<topic>" unless it says otherwise); each call noted in ``asked``."""
    def ask(broker, topics, options, timeout):
        if asked is not None:
            asked.append((broker, sorted(topics)))
        return {topic: None if logs_by_broker[broker].get(topic) is None else
                TopicLog((ids or {}).get(topic, f"id-{topic}"), logs_by_broker[broker][topic]) for topic in topics}
    return ask


def judged(partitions, log, planned_end=None, topic="t", recorded="id-t", now="id-t"):
    read = KafkaRead("q", 0, topic, partitions, planned_end or {}, "broker:9092", recorded)
    bounds = {"t": {p: LogBounds(*b) for p, b in log.items()}}
    return check_reads({"s": [read]}, {}, answering({"broker:9092": bounds}, ids={"t": now}))["s"]


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
        return {"a": TopicLog("id-a", {0: LogBounds(0, 90)})}

    reads = {"up": [KafkaRead("q", 0, "a", {0: 10}, {}, "up:9092")],
             "down": [KafkaRead("q", 0, "a", {0: 10}, {}, "down:9092")]}
    checked = check_reads(reads, {}, ask, timeout=1)
    assert checked["up"].status == "restorable"
    assert checked["down"].status == "unknown" and "down:9092 does not answer" in checked["down"].why


def test_negative_offsets_are_not_kafka_s():
    """Spark resolves latest (-1) and earliest (-2) before it writes an offset: a negative one is not a position."""
    assert kind_of({"t": {"0": 5}}) == KAFKA and kind_of({"t": {"0": -2}}) == OTHER


def test_a_topic_whose_id_changed_is_recreated_even_when_its_log_has_grown_past_the_offsets():
    # Issue 57: 0@10 1@10 2@10 read, the topic made again with 20 records a partition: the bounds see nothing.
    checked = judged({0: 10, 1: 10, 2: 10}, {0: (0, 20), 1: (0, 20), 2: (0, 20)}, recorded="old", now="new")
    assert checked.status == "unrestorable" and checked.lost is None and checked.unidentified == []
    assert [(g.partition, g.reason, g.first, g.end, g.topic_id, g.recorded_topic_id) for g in checked.gaps] == [
        (p, "recreated", 0, 20, "new", "old") for p in range(3)]
    assert "deleted and made again since the savepoint (its id is new, the savepoint read old)" in checked.summary()
    assert checked.to_json()["gaps"][0]["topic_id"] == "new"
    # A partition the new topic lacks is gone; the same id with a grown log is restorable, as it always was.
    assert [g.reason for g in judged({0: 10, 3: 1}, {0: (0, 20)}, recorded="old", now="new").gaps] == [
        "recreated", "partition_gone"]
    same = judged({0: 10}, {0: (0, 20)}, recorded="same", now="same")
    assert same.status == "restorable" and same.unidentified == [] and same.doubt() is None
    assert "topic_id" not in judged({0: 99}, {0: (100, 120)}).to_json()["gaps"][0]  # only where ids differ


def test_a_topic_whose_id_was_not_recorded_is_said_to_be_unknown_not_silently_restorable():
    older = judged({0: 10}, {0: (0, 20)}, recorded=None)
    assert older.status == "restorable" and [(u.topic, u.recorded_topic_id) for u in older.unidentified] == [
        ("t", None)]
    assert older.to_json()["unidentified"] == [{"query": "q", "source": 0, "topic": "t", "recorded_topic_id": None}]
    assert "whether t was deleted and made again since the savepoint cannot be told" in older.doubt()
    assert "recorded no id for t" in older.doubt()
    # The bounds still judge it: shorter than its offsets, it is refused as before.
    assert [g.reason for g in judged({0: 30}, {0: (0, 20)}, recorded=None).gaps] == ["recreated"]
    # A broker that gives no ids now (before Kafka 2.8) cannot be compared with the one recorded either.
    unanswered = judged({0: 10}, {0: (0, 20)}, recorded="old", now=None)
    assert unanswered.status == "restorable" and "the broker gives no id for t" in unanswered.doubt()
    # A topic gone is said gone, not unknown.
    assert judged({0: 1}, {}, topic="gone", recorded=None).unidentified == []


def entry(offsets, inputs=None, planned=None):
    query = {"name": "q", "offsets": offsets, "planned_offsets": planned}
    return query if inputs is None else {**query, "inputs": inputs}


def test_a_savepoint_records_its_topics_ids_from_the_broker_each_source_reads():
    asked = []

    def ask(broker, topics, options, timeout):
        asked.append((broker, sorted(topics), options))
        return {"a": "id-a", "b": "id-b", "old": None}.copy() if broker == "up:9092" else {}

    live = entry([{"a": {"0": 5}, "b": {"0": 1}}, {"logOffset": 3}],
                 [{"kind": "kafka", "bootstrap_servers": "up:9092", "subscribe": "a,b"}, {"kind": "file"}],
                 planned=[{"a": {"0": 9}, "old": {"0": 1}}, {"logOffset": 4}])
    plain = entry([{"logOffset": 3}, {"a": {"0": 5}}])
    (recorded, untouched) = identify_topics([live, plain], {"security_protocol": "SSL"}, ask)
    assert asked == [("up:9092", ["a", "b", "old"], {"security_protocol": "SSL"})]  # once, with the client's options
    assert recorded["inputs"] == [{"kind": "kafka", "bootstrap_servers": "up:9092", "subscribe": "a,b",
                                   "topic_ids": {"a": "id-a", "b": "id-b"}}, {"kind": "file"}]
    assert untouched == plain and live["inputs"][0].get("topic_ids") is None  # no broker known: nothing asked
    # A plain checkpoint's query, with the broker configured, gets a record per source to hold them.
    (_, configured) = identify_topics([live, plain], {"bootstrap_servers": "up:9092"}, ask)
    assert configured["inputs"] == [{"kind": "other"}, {"kind": "kafka", "topic_ids": {"a": "id-a"}}]
    for query in (recorded, configured):
        assert all(is_source_record(read) for read in query["inputs"])


def test_a_savepoint_whose_broker_cannot_be_asked_is_taken_without_ids():
    def ask(broker, topics, options, timeout):
        if broker == "none:9092":
            raise EnvironmentSetupError("asking a Kafka broker needs its client")
        raise UnreachableError(f"the Kafka broker {broker} does not answer")

    queries = [entry([{"a": {"0": 5}}], [{"kind": "kafka", "bootstrap_servers": broker}])
               for broker in ("none:9092", "down:9092")]
    assert identify_topics(queries, {}, ask, timeout=1) == queries
    slow = [entry([{"a": {"0": 5}}], [{"kind": "kafka", "bootstrap_servers": "slow:9092"}])]
    began = time.monotonic()
    assert identify_topics(slow, {}, lambda *args: time.sleep(5), timeout=0.2) == slow
    assert time.monotonic() - began < 2


def test_a_manifest_holds_topic_ids_only_as_a_map_of_names_to_ids():
    assert is_source_record({"kind": "kafka", "subscribe": "a"})  # an older savepoint's, without them
    assert is_source_record({"kind": "kafka", "topic_ids": {"a": "eZGtsb3hTXKJ3HTe7bKeUw"}})
    for bad in ({"kind": "kafka", "topic_ids": ["a"]}, {"kind": "kafka", "topic_ids": {"a": 1}},
                {"kind": "kafka", "topic_ids": {"a": "x" * 65}}, {"kind": "kafka", "other": "x"}, "kafka"):
        assert not is_source_record(bad), bad
    # What a driver reports never carries them into a savepoint.
    assert as_recorded({"kind": "kafka", "topic_ids": {"a": "forged"}}) == {"kind": "kafka"}


def test_a_savepoints_topic_ids_are_asked_while_its_files_are_copied_not_after(tmp_path, monkeypatch):
    """A stop's savepoint is in the job's downtime: the broker's answer (up to its timeout) overlaps the copy."""
    import json
    import threading

    from checkpoints import hdfs_checkpoint, write

    from sparkpoint.adapters import transfer
    from sparkpoint.adapters.storage import storage_for
    from sparkpoint.savepoints import create as create_module
    from sparkpoint.savepoints.create import QuerySource, create

    checkpoint = hdfs_checkpoint(tmp_path / "ckpt", committed=2)
    for batch in range(3):  # a Kafka source's offsets
        meta = {"batchWatermarkMs": 0, "batchTimestampMs": 1, "conf": {"spark.sql.shuffle.partitions": "2"}}
        write(checkpoint / "offsets" / str(batch), "\n".join(["v1", json.dumps(meta), '{"orders":{"0":10}}']))
    events, answered = [], threading.Event()

    def identify(queries, kafka):
        events.append(("asked", threading.current_thread().name,
                       [sorted(topics) for query in queries for topics in topics_read(query)]))
        answered.wait(10)  # answers only once the copy has begun
        return [dict(q, inputs=[{"kind": "kafka", "topic_ids": {"orders": "id-orders"}}]) for q in queries]

    class Copying(transfer.NullProgress):
        def start(self, description, total_bytes):
            events.append(("copy",))
            answered.set()

    monkeypatch.setattr(create_module, "identify_topics", identify)
    storage, path = storage_for(str(checkpoint))
    made = create([QuerySource("counts", path)], storage, str(tmp_path / "sps"), storage, job="counts",
                  progress=Copying(), kafka={"bootstrap_servers": "broker:9092"})
    assert events == [("asked", "sparkpoint-topic-ids", [["orders"]]), ("copy",)]
    assert made["queries"][0]["inputs"] == [{"kind": "kafka", "topic_ids": {"orders": "id-orders"}}]

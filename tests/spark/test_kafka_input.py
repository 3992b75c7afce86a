"""A savepoint of a Kafka-source job against a real broker (issue 33, part): whether the input it needs is still
in the log, as `savepoints`, `inspect`, `check` and `run -s` see it. The job is a real Spark job reading the topic
through Spark's Kafka connector; retention is made to overtake the savepoint with DeleteRecords, as
`kafka-delete-records` does; the topic is made again; the broker is unreachable. Nothing is mocked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from clitools import cli, closed_port
from topics import topic_id

pytestmark = pytest.mark.spark

APPS = Path(__file__).parent / "apps"
# Not the walk-through's topic (clicks): test_demo runs it on the same broker, earlier.
TOPIC = "visits"


def admin(broker):
    from kafka.admin import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)


# Record i is stamped EPOCH_MS + i seconds: an hour ago, within the broker's retention by time (7 days), which
# reads the records' own timestamps.
EPOCH_MS = (int(time.time()) - 3600) * 1000


def produce(broker, topic: str, count: int, start: int = 0, partitions: int = 3) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    for index in range(start, start + count):
        producer.send(topic, key=f"k{index % 7}".encode(), value=b"x", partition=index % partitions,
                      timestamp_ms=EPOCH_MS + index * 1000)
    producer.flush()
    producer.close()


def metric(sparkpoint, name: str, labels: dict[str, str]) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    code, out, err = sparkpoint("metrics")
    assert code == 0, err
    (value,) = [sample.value for family in text_string_to_metric_families(out) for sample in family.samples
                if sample.name == name and sample.labels == labels]
    return value


def restorable_metric(sparkpoint) -> float:
    return metric(sparkpoint, "sparkpoint_catalog_newest_savepoint_input_restorable", {"name": "clicks"})


def drained_checkpoint(broker, root: Path, topic: str = TOPIC) -> Path:
    """The checkpoint of the job after it read all ``topic`` holds (spark-submit with the connector's jars)."""
    import local_kafka  # conftest's kafka_broker put scripts/ on the path

    submit = Path(sys.executable).parent / "spark-submit"
    confs = {"spark.sql.streaming.checkpointLocation": str(root), "spark.ui.enabled": "false",
             "spark.sql.shuffle.partitions": "2"}
    done = subprocess.run([str(submit), "--master", "local[2]", "--jars", ",".join(local_kafka.connector_jars("4.3")),
                           *[arg for key, value in confs.items() for arg in ("--conf", f"{key}={value}")],
                           str(APPS / "topic_counts.py"), "v1", broker.bootstrap, topic, str(root.parent / "out")],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "SPARKPOINT_TEST_DRAIN": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    return root / "counts"


def made_again(client, topic: str, partitions: int) -> None:
    client.delete_topics([topic])
    deadline = time.monotonic() + 30
    while topic in client.list_topics() and time.monotonic() < deadline:
        time.sleep(0.2)
    client.create_topics({topic: {"num_partitions": partitions, "replication_factor": 1}}, wait_for_metadata=True)


def test_a_savepoint_whose_input_retention_deleted_is_refused_with_what_is_lost(kafka_broker, tmp_path):
    from kafka import TopicPartition

    client = admin(kafka_broker)
    client.create_topics({TOPIC: {"num_partitions": 3, "replication_factor": 1}}, wait_for_metadata=True)
    produce(kafka_broker, TOPIC, 300)  # 100 a partition
    checkpoint = drained_checkpoint(kafka_broker, tmp_path / "checkpoints")
    config = tmp_path / "sparkpoint.yaml"
    config.write_text(json.dumps({"kafka": {"bootstrap_servers": kafka_broker.bootstrap}}))
    home = tmp_path / "home"

    def sparkpoint(*args, config_file=config):
        return cli(home, "--config", str(config_file), *args, timeout=120)

    code, out, err = sparkpoint("savepoint", "--from-checkpoint", str(checkpoint), "--job", "clicks", "--topic-ids",
                                "-o", "json")
    assert code == 0, err
    savepoint = json.loads(out)["path"]
    produce(kafka_broker, TOPIC, 60, start=300)  # the job's input goes on after the savepoint

    code, out, err = sparkpoint("savepoints", "-o", "json")
    (entry,) = json.loads(out)
    assert code == 0 and entry["input"]["status"] == "restorable" and entry["input"]["gaps"] == [], err
    assert entry["reads"] == [{"query": "counts", "source": 0, "topic": TOPIC, "bootstrap_servers": None,
                               "topic_id": topic_id(kafka_broker.bootstrap, TOPIC),
                               "partitions": [{"partition": p, "offset": 100} for p in range(3)]}]
    code, out, err = sparkpoint("savepoints")
    assert code == 0 and f"{TOPIC} 0@100 1@100 2@100" in out, err
    code, out, _ = sparkpoint("inspect", savepoint, "-o", "json")
    assert json.loads(out)["input"]["status"] == "restorable"
    assert restorable_metric(sparkpoint) == 1
    # The horizon: offset 100 of each partition, written when the producer's record 300 + partition was.
    code, out, err = sparkpoint("horizon", "-o", "json")
    (source,) = json.loads(out)["sources"]
    assert [(p["partition"], p["offset"], p["timestamp_ms"]) for p in source["partitions"]] == [
        (partition, 100, EPOCH_MS + (300 + partition) * 1000) for partition in range(3)], err
    assert metric(sparkpoint, "sparkpoint_horizon_timestamp_seconds", {"kind": "kafka", "source": TOPIC}) == (
        EPOCH_MS + 300_000) / 1000
    code, out, err = sparkpoint("prune", "--keep-last", "1", "--dry-run", "-o", "json")
    assert code == 0 and json.loads(out)["horizon"]["before"]["sources"] == [source], err

    # Retention overtakes the savepoint on one partition: 100 read, 120 there, the log now starts at 110.
    client.delete_records({TopicPartition(TOPIC, 1): 110})
    code, out, err = sparkpoint("savepoints", "-o", "json")
    (entry,) = json.loads(out)
    assert entry["input"]["status"] == "unrestorable"
    assert entry["input"]["gaps"] == [{"query": "counts", "source": 0, "topic": TOPIC, "partition": 1, "needed": 100,
                                       "first": 110, "end": 120, "lost": 10, "reason": "retention"}]
    code, out, err = sparkpoint("savepoints")
    assert code == 0 and "unrestorable (10 lost)" in out and f"{TOPIC}[1] from offset 100: the log starts at 110" in out
    assert restorable_metric(sparkpoint) == 0  # the alert's expression fires
    code, out, err = sparkpoint("prune", "--unrestorable", "--dry-run", "-o", "json")
    assert code == 0 and [entry["path"] for entry in json.loads(out)["deleted"]] == [savepoint], err

    app = str(APPS / "topic_counts.py")
    began = time.monotonic()
    for command in (["check", "-s", savepoint, app], ["run", "--name", "clicks", "-s", savepoint, app]):
        code, out, err = sparkpoint(*command)
        assert code == 20 and err.count("\n") == 1, (command, err)
        assert "10 record(s) it has not read are gone" in err and "--allow-data-loss" in err
    assert time.monotonic() - began < 30  # refused before any Spark starts
    code, out, err = sparkpoint("list", "--all", "-o", "json")
    assert json.loads(out) == []  # nothing was started

    # --allow-data-loss lets it past, saying what is lost (here to the next refusal: no such application).
    code, out, err = sparkpoint("check", "--allow-data-loss", "-s", savepoint, str(tmp_path / "none.py"))
    assert code == 4 and "--allow-data-loss: savepoint" in err and "10 record(s)" in err

    # The topic deleted and made again: the savepoint's offsets lie past the new log's end.
    made_again(client, TOPIC, 2)
    produce(kafka_broker, TOPIC, 2, partitions=2)  # a record in each of its two partitions (the third is gone)
    code, out, err = sparkpoint("inspect", savepoint, "-o", "json")
    gaps = {(gap["partition"], gap["reason"]) for gap in json.loads(out)["input"]["gaps"]}
    assert gaps == {(0, "recreated"), (1, "recreated"), (2, "partition_gone")}, out
    code, _, err = sparkpoint("check", "-s", savepoint, app)
    # Its topic's id was recorded: the new topic is told by it, as it would be were its log longer.
    assert code == 20 and "deleted and made again since the savepoint" in err and "its log ends at 1" in err, err
    assert "no longer exists" in err

    # A broker that does not answer: one line within the bound, and the catalog still lists.
    down = tmp_path / "down.yaml"
    down.write_text(json.dumps({"kafka": {"bootstrap_servers": f"127.0.0.1:{closed_port()}"}}))
    began = time.monotonic()
    code, _, err = sparkpoint("check", "-s", savepoint, app, config_file=down)
    # The client's own time-out, or the deadline past it when the machine is slower: either says so.
    assert code == 14 and err.count("\n") == 1 and "answer within" in err, err
    code, out, err = sparkpoint("savepoints", "-o", "json", config_file=down)
    assert code == 0 and json.loads(out)[0]["input"]["status"] == "unknown"
    code, _, err = sparkpoint("prune", "--unrestorable", config_file=down)
    assert code == 14 and "nothing was deleted" in err and Path(savepoint, "manifest.json").exists()
    code, out, err = sparkpoint("metrics", config_file=down)
    assert code == 0 and 'sparkpoint_scrape_errors{what="input"} 1.0' in out
    assert time.monotonic() - began < 40
    client.close()


def test_a_topic_made_again_and_grown_past_a_savepoints_offsets_is_refused_as_recreated(kafka_broker, tmp_path):
    """Issue 57: `orders`, 3 partitions of 10 records, a savepoint that reads next 0@10 1@10 2@10; the topic deleted,
    made again and 20 records written to each partition. Its offsets are all within the new log: only the topic's
    id (recorded when the savepoint was taken) tells. A savepoint that recorded none says it cannot tell."""
    topic, bootstrap = "orders", kafka_broker.bootstrap
    client = admin(kafka_broker)
    client.create_topics({topic: {"num_partitions": 3, "replication_factor": 1}}, wait_for_metadata=True)
    produce(kafka_broker, topic, 30)  # 10 a partition
    checkpoint = drained_checkpoint(kafka_broker, tmp_path / "checkpoints", topic)
    config, unset = tmp_path / "sparkpoint.yaml", tmp_path / "unset.yaml"
    config.write_text(json.dumps({"kafka": {"bootstrap_servers": bootstrap}}))
    unset.write_text("{}")
    home, app = tmp_path / "home", str(APPS / "topic_counts.py")

    def sparkpoint(*args, config_file=config):
        return cli(home, "--config", str(config_file), *args, timeout=120)

    def savepoint_as(job: str, config_file: Path, *topic_ids: str) -> str:
        code, out, err = sparkpoint("savepoint", "--from-checkpoint", str(checkpoint), "--job", job, *topic_ids,
                                    "-o", "json", config_file=config_file)
        assert code == 0, err
        return json.loads(out)["path"]

    # Taken with the broker known and the operator's word that the topic is the one read (its id recorded); as a
    # savepoint before topic ids were (none known); and of the checkpoint as it is, which does not say when it
    # was written (none asked).
    identified, older = savepoint_as("orders", config, "--topic-ids"), savepoint_as("older", unset, "--topic-ids")
    unasked = savepoint_as("unasked", config)
    first_id = topic_id(bootstrap, topic)
    code, out, err = sparkpoint("savepoints", "-o", "json")
    assert code == 0 and {entry["job"]: entry["input"]["status"] for entry in json.loads(out)} == {
        "orders": "restorable", "older": "restorable", "unasked": "restorable"}, err
    (query,) = json.loads(sparkpoint("inspect", unasked, "-o", "json")[1])["queries"]
    assert not any("topic_ids" in read for read in query.get("inputs") or [])

    made_again(client, topic, 3)
    produce(kafka_broker, topic, 60)  # 20 a partition: past the savepoint's offsets
    code, _, err = sparkpoint("check", "-s", identified, app)
    assert code == 20 and err.count("\n") == 1, err
    assert "orders[0] from offset 10: the topic was deleted and made again since the savepoint" in err

    (query,) = json.loads(sparkpoint("inspect", identified, "-o", "json")[1])["queries"]
    assert query["inputs"] == [{"kind": "kafka", "topic_ids": {topic: first_id}}]
    code, out, err = sparkpoint("savepoints", "-o", "json")
    entries = {entry["job"]: entry for entry in json.loads(out)}
    now_id = topic_id(bootstrap, topic)
    assert entries["orders"]["input"]["status"] == "unrestorable" and now_id != first_id
    assert entries["orders"]["input"]["gaps"] == [
        {"query": "counts", "source": 0, "topic": topic, "partition": p, "needed": 10, "first": 0, "end": 20,
         "lost": None, "reason": "recreated", "topic_id": now_id, "recorded_topic_id": first_id} for p in range(3)]
    assert [read["topic_id"] for read in entries["orders"]["reads"]] == [first_id]

    # The savepoint with no id: its offsets are within the log, and whether the topic was made again cannot be told.
    unknown = entries["older"]["input"]
    assert unknown["status"] == "restorable" and unknown["unidentified"] == [
        {"query": "counts", "source": 0, "topic": topic, "recorded_topic_id": None}]
    said = "whether orders was deleted and made again since the savepoint cannot be told"
    code, out, err = sparkpoint("savepoints")
    assert code == 0 and "restorable (re-made? unknown)" in out and f"{Path(older).name}: {said}" in out, out
    code, out, err = sparkpoint("inspect", older)
    assert code == 0 and said in out, out
    code, _, err = sparkpoint("check", "-s", older, str(tmp_path / "none.py"))  # on to the next refusal
    assert code == 4 and said in err and "application" in err, err
    client.close()

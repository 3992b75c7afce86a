"""The Kafka application of tests/spark/apps/topic_counts.py, as the tests drive it: a producer writing to its
topic while they run, its outputs, and the connector's jars for each Spark minor."""

from __future__ import annotations

import base64
import json
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

APP = str(Path(__file__).parent / "apps" / "topic_counts.py")
KEYS, PARTITIONS = 40, 3


def create_topics(bootstrap: str, partitions: dict[str, int]) -> None:
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    admin.create_topics({topic: {"num_partitions": count, "replication_factor": 1}
                         for topic, count in partitions.items()}, wait_for_metadata=True)
    admin.close()


def topic_id(bootstrap: str, topic: str) -> str:
    """The topic's id as the broker gives it now, in Kafka's own form (as kafka-topics.sh --describe shows it)."""
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    (described,) = admin.describe_topics([topic])
    admin.close()
    return base64.urlsafe_b64encode(uuid.UUID(described["topic_id"]).bytes).rstrip(b"=").decode()


class Producer:
    """Writes records to ``topic``, keys k0..k39 in turn over its PARTITIONS partitions, at about ``rate`` a second,
    until stopped; counts each key."""

    def __init__(self, bootstrap: str, topic: str, rate: int = 100):
        from kafka import KafkaProducer

        self.producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=20)
        self.topic = topic
        self.sent: Counter = Counter()
        self.rate = rate
        self.ended = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        index = 0
        while not self.ended.is_set():
            for _ in range(self.rate // 10):
                key = f"k{index % KEYS}"
                self.producer.send(self.topic, key=key.encode(), value=b"1", partition=index % PARTITIONS)
                self.sent[key] += 1
                index += 1
            time.sleep(0.1)

    def stop(self) -> Counter:
        self.ended.set()
        self.thread.join()
        self.producer.flush()
        self.producer.close()
        return self.sent


def newest(*outputs: Path) -> dict[str, int]:
    """Each key's count as the newest batch that updated it says, over the outputs of the versions in turn."""
    counts = {}
    for out in outputs:
        for path in sorted(out.glob("batch-*.json"), key=lambda p: int(p.stem.split("-")[1])):
            counts.update(json.loads(path.read_text()))
    return counts


def topic_counts(bootstrap: str, topic: str) -> dict[str, int]:
    """Each key's newest count in ``topic`` up to its end now, as Spark's Kafka sink wrote it (the last record per
    key wins)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    partitions = [TopicPartition(topic, index) for index in sorted(consumer.partitions_for_topic(topic) or ())]
    consumer.assign(partitions)
    consumer.seek_to_beginning()
    ends, counts = consumer.end_offsets(partitions), {}
    deadline = time.monotonic() + 30
    while any(consumer.position(tp) < ends[tp] for tp in partitions) and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            counts.update((record.key.decode(), int(record.value)) for record in records)
    consumer.close()
    return counts


def batches(out: Path) -> list[int]:
    return sorted(int(p.stem.split("-")[1]) for p in out.glob("batch-*.json"))


def jars(minor: str = "4.3") -> str:
    """The --jars value of Spark's Kafka connector for a job on Spark ``minor``."""
    import local_kafka  # conftest's kafka_broker put scripts/ on the path

    return ",".join(local_kafka.connector_jars(minor))

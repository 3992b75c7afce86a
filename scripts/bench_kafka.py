"""Benchmark: a Kafka-source job's stop and restore, and the input check over a catalog of Kafka savepoints.

1. A job with a million keys of state over a topic (scripts/demo_apps/keyed_topic.py) while a producer writes
   --rate records a second of random keys: `sparkpoint stop` (at a boundary, with a savepoint) and its phases,
   then `run -s` from the command's start to the restored job's first new commit (the commit log's file time).
2. `sparkpoint savepoints` over --savepoints savepoints of a job reading a --partitions-partition topic, with the
   broker asked whether each one's input is still in the log (one round trip for all of them), beside the same
   listing with no broker configured (nothing asked).
A broker is started for it (scripts/local_kafka.py) on 127.0.0.1 and stopped at the end. It prints figures;
it is never a pass/fail test.

    .venv/bin/python scripts/bench_kafka.py [--rounds 3] [--rate 1000] [--savepoints 100] [--partitions 50]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import local_kafka
from bench_jobs import ENV, commit_time, sparkpoint, wait_for_commit_after

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "scripts" / "demo_apps" / "keyed_topic.py")
SMALL_APP = str(ROOT / "tests" / "spark" / "apps" / "topic_counts.py")
SPARK_SUBMIT = str(Path(sys.executable).parent / "spark-submit")


class Producer(threading.Thread):
    """Random keys of the seed's million at about ``rate`` records a second, until stopped."""

    def __init__(self, bootstrap: str, topic: str, rate: int):
        super().__init__(daemon=True)
        from kafka import KafkaProducer

        self.producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=50)
        self.topic, self.rate, self.ended = topic, rate, threading.Event()

    def run(self) -> None:
        rng = random.Random(7)
        while not self.ended.is_set():
            for _ in range(max(1, self.rate // 10)):
                self.producer.send(self.topic, key=str(rng.randrange(1_000_000)).encode(), value=b"tick")
            time.sleep(0.1)

    def stop(self) -> None:
        self.ended.set()
        self.join()
        self.producer.close()


def jars() -> str:
    return ",".join(local_kafka.connector_jars("4.3"))


def await_first_batches(checkpoint: Path, count: int, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        directory = checkpoint / "commits"
        if directory.is_dir() and sum(p.name.isdigit() for p in directory.iterdir()) >= count:
            return
        time.sleep(0.5)
    raise TimeoutError(f"no {count} commits in {checkpoint}")


def stop_and_restore(work: Path, bootstrap: str, rounds: int, rate: int) -> None:
    from kafka.admin import KafkaAdminClient

    home, topic = work / "home", "keyed"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics({topic: {"num_partitions": 8, "replication_factor": 1}}, wait_for_metadata=True)
    admin.close()
    job = sparkpoint(home, "run", "--detach", "--name", "keyed", "--jars", jars(), APP, bootstrap, topic)
    await_first_batches(Path(job["checkpoint_root"]) / "keyed", 1)  # the seed read: a million keys of state
    producer = Producer(bootstrap, topic, rate)  # only now: the job seeds an empty topic
    producer.start()
    stops, boundaries, savepoints, restores = [], [], [], []
    try:
        for round_ in range(rounds):
            checkpoint = Path(job["checkpoint_root"]) / "keyed"
            await_first_batches(checkpoint, 3)
            (listed,) = sparkpoint(home, "list")
            rows = listed["queries"][0]["state_rows"]
            began = time.monotonic()
            stopped = sparkpoint(home, "stop", job["id"])
            stops.append(time.monotonic() - began)
            phases, cut = stopped["phases"], stopped["queries"][0]
            boundaries.append(phases["boundary"])
            savepoints.append(phases["savepoint"])
            began = time.time()
            job = sparkpoint(home, "run", "--detach", "--name", "keyed", "-s", stopped["path"], "--jars", jars(),
                             APP, bootstrap, topic)
            restored = Path(job["checkpoint_root"]) / "keyed"
            restores.append(commit_time(restored, wait_for_commit_after(restored, cut["batch_id"])) - began)
            print(f"  round {round_ + 1}, {rows:,} keys of state: stop {stops[-1]:.2f} s (boundary "
                  f"{phases['boundary']:.2f}, savepoint {phases['savepoint']:.2f}, application end "
                  f"{phases['application_end']:.2f}; at boundary "
                  f"{cut['at_boundary']}, {stopped['bytes'] / 1e6:.0f} MB), run -s to its first commit "
                  f"{restores[-1]:.2f} s", flush=True)
    finally:
        producer.stop()
        sparkpoint(home, "cancel", job["id"])
    print(f"1M keys over Kafka, producer at {rate}/s, median of {rounds}: stop {statistics.median(stops):.2f} s "
          f"(boundary {statistics.median(boundaries):.2f} s, savepoint {statistics.median(savepoints):.2f} s), "
          f"run -s to the first new commit {statistics.median(restores):.2f} s")


def catalog_listing(work: Path, bootstrap: str, count: int, partitions: int) -> None:
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient

    from sparkpoint.config import load_settings
    from sparkpoint.savepoints.create import savepoint_checkpoint

    topic, home = "wide", work / "catalog-home"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics({topic: {"num_partitions": partitions, "replication_factor": 1}}, wait_for_metadata=True)
    admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for index in range(partitions * 20):
        producer.send(topic, key=f"k{index}".encode(), value=b"x", partition=index % partitions)
    producer.close()
    checkpoints = work / "wide-checkpoints"
    subprocess.run([SPARK_SUBMIT, "--master", "local[2]", "--jars", jars(), "--conf",
                    f"spark.sql.streaming.checkpointLocation={checkpoints}", SMALL_APP, "v1", bootstrap, topic,
                    str(work / "wide-out")], env={**ENV, "SPARKPOINT_TEST_DRAIN": "1"}, check=True,
                   capture_output=True)
    os.environ["SPARKPOINT_HOME"] = str(home)
    settings = load_settings(None)
    began = time.monotonic()
    for _ in range(count):
        savepoint_checkpoint(settings, str(checkpoints / "counts"), job="wide")
    print(f"  {count} savepoints of a {partitions}-partition topic taken in {time.monotonic() - began:.1f} s",
          flush=True)
    config = work / "sparkpoint.yaml"
    config.write_text(json.dumps({"kafka": {"bootstrap_servers": bootstrap}}))
    timings = {}
    for label, extra in (("with the broker asked", ("--config", str(config))), ("no broker configured", ())):
        seconds = []
        for _ in range(5):
            began = time.monotonic()
            done = subprocess.run([sys.executable, "-m", "sparkpoint", "--home", str(home), *extra, "savepoints",
                                   "-o", "json"], env=ENV, capture_output=True, text=True, check=True)
            seconds.append(time.monotonic() - began)
        listed = json.loads(done.stdout)
        statuses = {entry["input"]["status"] for entry in listed if entry.get("input")}
        timings[label] = statistics.median(seconds)
        print(f"  savepoints ({label}): {timings[label]:.3f} s median of 5, {len(listed)} listed, input "
              f"{', '.join(sorted(statuses))}", flush=True)
    asked, silent = timings["with the broker asked"], timings["no broker configured"]
    print(f"savepoints over {count} savepoints of a {partitions}-partition topic: {asked:.3f} s, of which the "
          f"broker's answer {asked - silent:.3f} s (the whole command, a process of its own)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate", type=int, default=1000, help="records a second the producer writes")
    parser.add_argument("--savepoints", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=50)
    parser.add_argument("--skip-job", action="store_true", help="only the catalog listing")
    options = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sparkpoint-bench-kafka-"))
    print(f"machine: nproc={os.cpu_count()}, python {sys.version.split()[0]}; command: {' '.join(sys.argv)}")
    broker = local_kafka.Broker(work / "kafka").start()
    try:
        if not options.skip_job:
            stop_and_restore(work, broker.bootstrap, options.rounds, options.rate)
        catalog_listing(work, broker.bootstrap, options.savepoints, options.partitions)
    finally:
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

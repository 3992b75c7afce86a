"""A Kafka-source job through the feature table, against a real broker, with a producer writing the whole time:
`list` (its topic, how far behind the log), a live savepoint (the offsets per topic and partition, the broker it
reads), `stop` at a boundary, `run -s`, `run --replace` whose new version fails on probation and is rolled back,
`--fork` to another topic through Spark's Kafka sink, and `rescale` then `restore` for a plain spark-submit.
Each ends exact: every key's newest count equals the count, in Python, of every record the producer wrote, each
record counted once across every stop and restore."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from clitools import cli, cli_json, process_gone, wait_for

from topics import APP, Producer, batches, create_topics, jars, newest, topic_counts, topic_id

from sparkpoint.times import poll_until

pytestmark = [pytest.mark.spark, pytest.mark.slow]

TOPIC, FORK_TOPIC = "events", "counts-b"


def test_a_kafka_job_stops_restores_rolls_back_forks_and_rescales_exactly(kafka_broker, tmp_path):
    bootstrap, home = kafka_broker.bootstrap, tmp_path / "home"
    create_topics(bootstrap, {TOPIC: 3, FORK_TOPIC: 1})
    producer = Producer(bootstrap, TOPIC)
    jobs_left = []  # cancelled at the end, whatever happens
    try:
        out1, out2, out3 = tmp_path / "v1", tmp_path / "v1-again", tmp_path / "fails"

        def run(*options: str, out: Path) -> tuple[int, str, str]:
            return cli(home, "run", "--output", "json", "--detach", "--name", "counts", *options, "--jars", jars(),
                       APP, "v1", bootstrap, TOPIC, str(out), timeout=600)

        code, out, err = run(out=out1)
        assert code == 0, err[-3000:]
        v1 = json.loads(out)
        wait_for(lambda: len(batches(out1)) >= 3, what="v1's batches", timeout=180)

        # list: the topic, and the offsets its last batch left in the log.
        (listed,) = cli_json(home, "list")
        (source,) = listed["queries"][0]["sources"]
        assert (source["kind"], source["topics"], source["bootstrap_servers"]) == ("kafka", [TOPIC], bootstrap)
        assert source["description"] == f"KafkaV2[Subscribe[{TOPIC}]]" and source["offsets_behind_latest"] >= 0
        code, table, _ = cli(home, "list")
        assert f"{TOPIC} (" in table and " behind)" in table

        # A live savepoint: the offsets per partition, and the broker it reads, recorded from the running plan,
        # with the topic's id that broker gives; with no broker configured, `inspect` asks that one whether its
        # input is still there.
        live = cli_json(home, "savepoint", v1["id"])
        shown = cli_json(home, "inspect", live["path"])
        (query,) = shown["queries"]
        assert query["inputs"] == [{"kind": "kafka", "bootstrap_servers": bootstrap, "subscribe": TOPIC,
                                    "topic_ids": {TOPIC: topic_id(bootstrap, TOPIC)}}]
        assert set(query["offsets"][0][TOPIC]) == {"0", "1", "2"}
        assert shown["input"]["status"] == "restorable" and shown["input"]["broker"] == bootstrap

        # stop at a boundary while records keep coming, then run -s: the counts go on from the cut.
        stopped = cli_json(home, "stop", v1["id"], "--timeout", "60")
        cut = stopped["queries"][0]
        assert cut["at_boundary"] is True and cut["replayed_batch_id"] is None
        # stop returns once the application has ended; its JVM's shutdown follows.
        wait_for(lambda: process_gone(v1["pid"]), timeout=30, what="the stopped driver's exit")
        assert max(batches(out1)) == cut["batch_id"]
        assert cli_json(home, "inspect", stopped["path"])["queries"][0]["inputs"] == query["inputs"]
        code, out, err = run("-s", stopped["path"], out=out2)
        assert code == 0, err[-3000:]
        v1_again = json.loads(out)
        wait_for(lambda: len(batches(out2)) >= 2, what="batches after the restore", timeout=180)
        assert min(batches(out2)) == cut["batch_id"] + 1

        # run --replace with a version that fails its second batch: rolled back to v1 from the hand-over's cut.
        code, out, err = cli(home, "run", "--output", "json", "--replace", v1_again["id"], "--detach",
                             "--probation", "60", "--jars", jars(), APP, "fails-second", bootstrap, TOPIC, str(out3),
                             timeout=600)
        assert code == 13 and "this version cannot handle the input" in err, err[-3000:]
        failed = json.loads(out)
        again = failed["rolled_back"]
        assert again["restored_from"] == failed["replaced"]["path"] and again["state"] == "running"
        handover_cut = failed["replaced"]["queries"][0]["batch_id"]
        wait_for(lambda: max(batches(out2)) > handover_cut + 1, what="v1, rolled back, to run on", timeout=180)

        # A fork of the hand-over's savepoint, writing its counts to another topic (Spark's Kafka sink).
        code, out, err = cli(home, "run", "--output", "json", "--detach", "--no-check", "--name", "counts-b",
                             "-s", failed["replaced"]["path"], "--fork", "--jars", jars(), APP, "to-topic", bootstrap,
                             TOPIC, FORK_TOPIC, timeout=600)
        assert code == 0, err[-3000:]
        fork = json.loads(out)
        wait_for(lambda: topic_counts(bootstrap, FORK_TOPIC), what="the fork's first counts", timeout=180)
        # Its savepoint records its Kafka sink, and `check` says what a restore of it writes again.
        forked = cli_json(home, "savepoint", fork["id"])
        assert cli_json(home, "inspect", forked["path"])["queries"][0]["sink"]["kind"] == "kafka"
        code, out, err = cli(home, "check", "-o", "json", "-s", forked["path"], "--jars", jars(), APP, "to-topic",
                             bootstrap, TOPIC, FORK_TOPIC, timeout=600)
        assert code == 0 and any("writes to Kafka, at least once" in note for note in json.loads(out)["notes"]), err
        jobs_left += [again["id"], fork["id"]]
    finally:
        sent = producer.stop()
        if not jobs_left:  # failed before the end: whatever still runs
            jobs_left = [job["id"] for job in json.loads(cli(home, "list", "-o", "json")[1] or "[]")]
    expected = dict(sent)

    try:
        # v1 → stop → v1 again → (the failed version's batches are not v1's) → v1 rolled back: every record once.
        # (Waited for, then compared: a count that never matches shows how it differs.)
        poll_until(lambda: newest(out1, out2) == expected, 180, 0.5)
        assert newest(out1, out2) == expected
        poll_until(lambda: topic_counts(bootstrap, FORK_TOPIC) == expected, 180, 1)
        assert topic_counts(bootstrap, FORK_TOPIC) == expected
    finally:
        for job_id in jobs_left:
            cli(home, "cancel", job_id)

    # rescale the stop's savepoint, restore it for a plain spark-submit, which drains the topic: exact again.
    rescaled = cli_json(home, "rescale", stopped["path"], "--partitions", "3")
    # What the stop's savepoint read, its topic's id included, is the rescaled one's: not asked again.
    assert cli_json(home, "inspect", rescaled["savepoint"]["path"])["queries"][0]["inputs"] == query["inputs"]
    checkpoints = tmp_path / "launcher"
    cli_json(home, "restore", rescaled["savepoint"]["path"], str(checkpoints))
    drained = subprocess.run(
        [str(Path(sys.executable).parent / "spark-submit"), "--master", "local[2]", "--jars", jars(),
         "--conf", f"spark.sql.streaming.checkpointLocation={checkpoints}", APP, "v1", bootstrap, TOPIC,
         str(tmp_path / "rescaled")],
        capture_output=True, text=True, timeout=600, env={**os.environ, "SPARKPOINT_TEST_DRAIN": "1"})
    assert drained.returncode == 0, drained.stderr[-3000:]
    # The rescale added a batch of its own (empty: it read nothing); the next is the first to read past the cut.
    assert min(batches(tmp_path / "rescaled")) == rescaled["queries"][0]["batch_id"] + 1 == cut["batch_id"] + 2
    assert newest(out1, tmp_path / "rescaled") == expected

"""Live checkpoints on S3 through Hadoop's s3a (hadoop-aws and the AWS SDK's modules, scripts/local_s3a.py) on a
real S3-compatible server (moto's, checking credentials): the room-count pit stop with its checkpoints on s3a,
savepoints taken from them onto S3 and local disk, the restore back onto s3a continued exactly; and Spark's
refusal of a checkpoint whose restore did not finish (the placeholder an object-store restore writes first)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from clitools import cli, cli_json, reported, wait_for
from s3server import BUCKET, S3Server
from test_managed_jobs import APP, expected_counts, feed, outputs

from sparkpoint.spark.relocate import INCOMPLETE_RESTORE

pytestmark = [pytest.mark.spark, pytest.mark.slow]

PYSPARK = Path(__import__("pyspark").__file__).parent


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    server = S3Server(tmp_path_factory.mktemp("s3") / "moto.log")
    yield server
    server.stop()


def s3a_options(s3, spark_home: Path = PYSPARK) -> list[str]:
    """spark-submit's options for s3a on the test server. Credentials reach s3a from the environment
    (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, its default provider chain), never a --conf: the job's record keeps
    its options."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    import local_s3a

    confs = [f"spark.hadoop.fs.s3a.endpoint={s3.url}", "spark.hadoop.fs.s3a.path.style.access=true",
             # Moto's server answers the SDK's asynchronous client (s3a's copyFromLocalFile, which RocksDB's
             # state upload calls) with a bare "100 Continue", which the client takes as the response: seen, an
             # upload retried forever. Real S3 does not; the synchronous path works with both.
             "spark.hadoop.fs.s3a.optimized.copy.from.local.enabled=false"]
    return [*(arg for conf in confs for arg in ("--conf", conf)), "--jars", ",".join(local_s3a.s3a_jars(spark_home))]


@pytest.fixture
def on_s3a(s3, monkeypatch, tmp_path):
    """The server's credentials and endpoint for the CLI (s3fs) and the jobs (s3a); the jobs' checkpoints on it.
    A job the test leaves running (a failed assertion) is cancelled."""
    for key, value in s3.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("SPARKPOINT_CHECKPOINTS", f"s3a://{BUCKET}/{tmp_path.name}/checkpoints")
    yield s3
    for job in cli_json(tmp_path / "home", "list") if (tmp_path / "home").exists() else []:
        cli(tmp_path / "home", "cancel", job["id"])


def test_pit_stop_with_live_checkpoints_on_s3a(on_s3a, tmp_path):
    home, inputs, out = tmp_path / "home", tmp_path / "in", tmp_path / "out"
    options = ["--master", "local[2]", *s3a_options(on_s3a)]
    for batch in range(3):
        feed(inputs, batch)
    v1 = cli_json(home, "run", "--detach", "--name", "rooms", *options, APP, str(inputs), str(out))
    assert v1["checkpoint_root"].startswith("s3a://"), v1
    wait_for(lambda: 2 in outputs(out), timeout=180, what="batch 2 of v1")
    reported(home, v1["id"], 2)
    # A live savepoint from s3a onto S3 (s3://, s3fs), and the stop's onto local disk.
    live = cli_json(home, "savepoint", v1["id"], f"s3://{BUCKET}/{tmp_path.name}/savepoints")
    assert live["path"].startswith("s3://") and live["queries"][0]["batch_id"] >= 2, live
    feed(inputs, 3)
    wait_for(lambda: 3 in outputs(out), timeout=120, what="batch 3 of v1")
    stopped = cli_json(home, "stop", v1["id"])
    assert stopped["job"]["state"] == "finished" and stopped["queries"][0]["batch_id"] == 3, stopped
    assert stopped["path"].startswith(str(home))

    # The stop's savepoint back onto s3a, by run -s: restored (every file checked) and continued exactly.
    for batch in (4, 5):
        feed(inputs, batch)
    v2 = cli_json(home, "run", "--detach", "--name", "rooms", "-s", stopped["path"], *options, APP, str(inputs),
                  str(out))
    assert v2["checkpoint_root"].startswith(f"s3a://{BUCKET}/{tmp_path.name}/checkpoints/"), v2
    wait_for(lambda: 5 in outputs(out), timeout=180, what="batch 5 of v2")
    assert cli_json(home, "cancel", v2["id"])["state"] == "cancelled"
    newest: dict[str, int] = {}
    for batch in sorted(outputs(out)):
        newest.update(outputs(out)[batch])
    assert newest == expected_counts(range(6))  # the state went on from the stop's cut: nothing lost or doubled

    # The live savepoint on S3, restored onto local disk: a checkpoint whose own savepoint verifies, at its cut.
    cli_json(home, "restore", live["path"], str(tmp_path / "local"))
    again = cli_json(home, "savepoint", "--from-checkpoint", str(tmp_path / "local" / "counts"), "--job", "again")
    assert again["queries"][0]["batch_id"] == live["queries"][0]["batch_id"]
    assert cli_json(home, "verify", again["path"])["valid"]


def test_spark_refuses_a_checkpoint_whose_restore_did_not_finish(spark, tmp_path):
    """What an object-store restore killed half-way leaves (tests/unit/test_object_storage.py) makes Spark fail
    at the query's start, naming the placeholder, where a missing `metadata` would start a new query."""
    from py4j.protocol import Py4JJavaError

    source = tmp_path / "in"
    source.mkdir()
    (source / "a.json").write_text('{"k": "a"}\n')
    checkpoint = tmp_path / "checkpoint"

    def run():
        query = (spark.readStream.schema("k string").json(str(source)).groupBy("k").count().writeStream
                 .outputMode("update").format("noop").option("checkpointLocation", str(checkpoint))
                 .trigger(availableNow=True).start())
        query.awaitTermination()

    run()
    (checkpoint / "metadata").write_bytes(INCOMPLETE_RESTORE)
    with pytest.raises(Py4JJavaError) as refused:  # at start(): Spark reads `metadata` before its first batch
        run()
    assert INCOMPLETE_RESTORE.decode() in str(refused.value)

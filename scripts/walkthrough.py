"""The how-to guides' walk-through, run for real: the output the docs show is this script's.

The demo's motion-alarm job (scripts/demo_apps/motion_alarms.py, v1 and v2) goes through the operator tasks the
guides describe, each command printed as a shell line (`$ sparkpoint ...`) and followed by what it printed: upgrade
(check, then replace with probation), a scheduled savepoint with retention and the horizon, pause and resume, an A/B
fork, a rescale, a restore for another launcher, a move to another cluster (another home), an upgrade `check`
refuses (exit 16), reprocessing a file sink's output and a Delta table's (on Spark 4.2, when
scripts/spark-versions.sh has installed it), a job that reads Kafka and a savepoint whose input retention deleted
(exit 20), a job on YARN with its checkpoints on HDFS (Hadoop's mini clusters), a move from Spark 3.5 to 4.3 (when
scripts/spark-versions.sh has installed 3.5), a standalone cluster, and the lineage of the savepoints all this made.
Paths are relative to a fresh work directory (printed first) whose home is `home/` (SPARKPOINT_HOME); tables are 110
columns wide. The Kafka part runs a broker of its own (scripts/local_kafka.py), or uses the one KAFKA_BOOTSTRAP
names (the tests' own); the YARN part starts Hadoop's mini clusters (scripts/local_hadoop.py), or uses those
WALKTHROUGH_HADOOP_CONF_DIR names.

usage: .venv/bin/python scripts/walkthrough.py [--keep]   (after scripts/setup.sh)
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import local_delta
import local_hadoop
import local_kafka
from demo import APP, alarms, appears, drop, feed, reported, say

from sparkpoint.adapters.hadoop_conf import read_site

ROOT = Path(__file__).resolve().parents[1]
# The test suite's applications: a state key changed between versions (room_counts.py v2-incompatible), and a
# file sink whose v1 has a bug (file_sink_values.py).
APPS = ROOT / "tests" / "spark" / "apps"


class Shell:
    """Runs sparkpoint in the work directory as an operator would type it, and shows what it printed. Its home is
    `home/` (SPARKPOINT_HOME), or another one given as `--home` on every command (another cluster's)."""

    def __init__(self, work: Path, home: str | None = None):
        self.work = work
        self.env = {**os.environ, "SPARKPOINT_HOME": str(work / "home"), "COLUMNS": "110",
                    "SPARK_LOCAL_IP": "127.0.0.1"}
        self.home = ("--home", home) if home else ()
        self.running: list[str] = []
        self.variables: dict[str, str] = {}  # value → the shell variable an operator would hold it in

    def export(self, name: str, value: str, how: str) -> None:
        """A shell variable, shown as set by ``how``; commands that pass its value show it as "$NAME"."""
        print(f"$ export {name}=$({how})", flush=True)
        self.variables[value] = name

    def __call__(self, *args: str, expect: int = 0) -> None:
        args = (*self.home, *args)
        shown = " ".join(f'"${self.variables[arg]}"' if arg in self.variables else shlex.quote(arg) for arg in args)
        print(f"$ sparkpoint {shown}", flush=True)
        done = subprocess.run([sys.executable, "-m", "sparkpoint", *args], cwd=self.work, env=self.env,
                              capture_output=True, text=True, check=False)
        if done.returncode != expect:
            sys.exit(f"sparkpoint exited {done.returncode}, not {expect}: {done.stderr.strip()}")
        # stderr holds the driver's own output too: only sparkpoint's lines are the command's.
        sys.stdout.write(done.stdout + "".join(line + "\n" for line in done.stderr.splitlines()
                                               if line.startswith(("sparkpoint:", "check:"))))

    def unseen(self, *args: str):
        """A command's JSON, not shown: what the walk-through needs to go on (a job's new id)."""
        done = subprocess.run([sys.executable, "-m", "sparkpoint", *self.home, "-o", "json", *args], cwd=self.work,
                              env=self.env, capture_output=True, text=True, check=True)
        return json.loads(done.stdout)

    def reported(self, job_id: str, batch: int) -> None:
        reported(lambda: self.unseen("list"), job_id, batch)

    def cancel_running(self) -> None:
        """On the way out, early or not: no driver is left behind."""
        for job_id in self.running:
            subprocess.run([sys.executable, "-m", "sparkpoint", *self.home, "cancel", job_id], cwd=self.work,
                           env=self.env, capture_output=True, check=False)

    def job(self, *args: str) -> dict:
        """`run --detach`, shown; the job it started (the one running job not known before)."""
        self("run", "--detach", *args)
        job = next(job for job in self.unseen("list") if job["id"] not in self.running)
        self.running.append(job["id"])
        return job


def kafka(sh: Shell, work: Path) -> None:
    """A keyed count over a topic (tests/spark/apps/topic_counts.py): listed with its input, stopped with a
    savepoint, which retention then overtakes on one partition; check refuses it (exit 20)."""
    from kafka import KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient

    say("Kafka: a job that reads a topic; a savepoint whose input retention deleted")
    broker = None
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP")
    if not bootstrap:
        broker = local_kafka.Broker(work / "kafka").start()
        bootstrap = broker.bootstrap
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    sent: Counter = Counter()

    def produce(count: int) -> None:
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
        for index in range(sum(sent.values()), sum(sent.values()) + count):
            producer.send("clicks", key=f"page{index % 5}".encode(), value=b"1", partition=index % 3)
            sent[f"page{index % 5}"] += 1
        producer.flush()
        producer.close()

    def counted(output: Path) -> dict[str, int]:
        newest: dict[str, int] = {}
        for batch in sorted(output.glob("batch-*.json"), key=lambda path: int(path.stem.split("-")[1])):
            newest.update(json.loads(batch.read_text()))
        return newest

    try:
        admin.create_topics({"clicks": {"num_partitions": 3, "replication_factor": 1}}, wait_for_metadata=True)
        shutil.copy(APPS / "topic_counts.py", work / "topic_counts.py")
        sh.export("KAFKA_JARS", ",".join(local_kafka.connector_jars("4.3")),
                  ".venv/bin/python scripts/local_kafka.py jars 4.3")
        produce(300)
        job = sh.job("--name", "clicks", "--jars", ",".join(local_kafka.connector_jars("4.3")), "topic_counts.py",
                     "v1", bootstrap, "clicks", "clicks-out")
        deadline = time.monotonic() + 120
        while counted(work / "clicks-out") != dict(sent):
            if time.monotonic() > deadline:
                sys.exit(f"the Kafka job did not count the {sum(sent.values())} records in 120 s")
            time.sleep(0.3)
        sh.reported(job["id"], 0)
        sh("list")
        sh("stop", job["id"])
        sh.running.remove(job["id"])
        sh("savepoints", "--job", "clicks")
        saved = sh.unseen("savepoints", "--job", "clicks")[0]
        sh("inspect", saved["id"])
        # The topic goes on; then retention deletes the start of partition 1, past what the savepoint read.
        produce(60)
        needed = {read["partitions"][1]["offset"] for read in saved["reads"]}.pop()
        admin.delete_records({TopicPartition("clicks", 1): needed + 10})
        sh("savepoints", "--job", "clicks")
        sh("check", "-s", saved["id"], "topic_counts.py", "v1", bootstrap, "clicks", "clicks-out", expect=20)
    finally:
        admin.close()
        if broker is not None:
            broker.stop()


def delta(sh: Shell, work: Path) -> None:
    """A stateful job writing a Delta table with Delta's own sink (tests/spark/apps/delta_values.py) on Spark 4.2,
    the newest with a Delta release: v1's wrong values reach past a savepoint; the restore that would skip them is
    refused (exit 22); v2 restored with the table rolled back to the cut replaces them."""
    say("Reprocess a Delta table: v2 replaces v1's values from a savepoint, the table rolled back with the state")
    spark_42 = ROOT / ".venv-spark" / "4.2" / "pyspark"
    if not (spark_42 / "bin" / "spark-submit").is_file():
        print(f"skipped: no Spark 4.2 in {spark_42} (scripts/spark-versions.sh installs it)")
        return
    shutil.copy(APPS / "delta_values.py", work / "delta_values.py")
    jars = ",".join(local_delta.delta_jars("4.2"))
    sh.export("DELTA_JARS", jars, ".venv/bin/python scripts/local_delta.py jars 4.2")
    launch = ["--spark-home", str(spark_42), *(arg for conf in local_delta.SESSION_CONFS for arg in ("--conf", conf)),
              "--jars", jars]
    (work / "totals-in").mkdir()
    v1 = sh.job("--name", "totals", *launch, "delta_values.py", "v1", "totals-in", "totals")
    drop(work / "totals-in", "rows-0.json", [{"file": 0, "n": 1}])
    appears(Path(v1["checkpoint_root"]) / "values" / "commits" / "0")  # Spark's commit, after Delta's
    sh("savepoint", v1["id"])
    at_0 = sh.unseen("savepoints", "--job", "totals")[0]["id"]
    for number in (1, 2):
        drop(work / "totals-in", f"rows-{number}.json", [{"file": number, "n": number + 1}])
        appears(Path(v1["checkpoint_root"]) / "values" / "commits" / str(number))
    sh("stop", v1["id"])
    sh.running.remove(v1["id"])
    sh("inspect", at_0)
    sh("run", "--name", "totals", "-s", at_0, *launch, "delta_values.py", "v2", "totals-in", "totals", expect=22)
    sh("rollback-sink", at_0, "--dry-run")
    fixed = sh.job("--name", "totals", "-s", at_0, "--rollback-sink", *launch, "delta_values.py", "v2", "totals-in",
                   "totals")
    appears(Path(fixed["checkpoint_root"]) / "values" / "commits" / "2")
    sh("stop", fixed["id"])
    sh.running.remove(fixed["id"])


def yarn(sh: Shell, work: Path) -> None:
    """The room-count job on YARN (client mode) with its checkpoints on HDFS, on Hadoop's mini clusters
    (scripts/local_hadoop.py: started here, or those whose client configuration WALKTHROUGH_HADOOP_CONF_DIR names,
    the tests' own): run, listed with its YARN application, stopped with its savepoint on HDFS, restored by run -s."""
    say("YARN, with the checkpoints on HDFS: run, list, stop, run -s")
    given = os.environ.get("WALKTHROUGH_HADOOP_CONF_DIR")
    cluster = None if given else local_hadoop.HadoopCluster(work / "hadoop").start()
    conf_dir = given or str(cluster.conf_dir)
    hdfs = read_site(conf_dir, "core-site.xml")["fs.defaultFS"]
    pyspark = Path(__import__("pyspark").__file__).parent
    # The mini clusters' container sizes and loopback addresses, as an operator keeps a cluster's settings.
    confs = local_hadoop.spark_submit_confs(False, pyspark)[1::2]
    (work / "spark-conf").mkdir()
    (work / "spark-conf" / "spark-defaults.conf").write_text("".join(
        "{} {}\n".format(*conf.split("=", 1)) for conf in confs))
    print(f"$ export HADOOP_CONF_DIR={'hadoop/conf' if cluster else conf_dir}  # the clusters' client configuration")
    print("$ export SPARK_CONF_DIR=spark-conf  # spark-defaults.conf: " + ", ".join(c.split("=")[0] for c in confs))
    print(f"$ export SPARKPOINT_CHECKPOINTS={hdfs}/checkpoints SPARKPOINT_SAVEPOINTS={hdfs}/savepoints")
    sh.env.update(HADOOP_CONF_DIR=conf_dir, SPARK_CONF_DIR=str(work / "spark-conf"),
                  SPARKPOINT_CHECKPOINTS=f"{hdfs}/checkpoints", SPARKPOINT_SAVEPOINTS=f"{hdfs}/savepoints")
    launch = ["--master", "yarn", "--name", "rooms"]
    try:
        (work / "yarn-in").mkdir()
        source = f"file:{work / 'yarn-in'}"  # the cluster's default file system is HDFS: a local input says so
        drop(work / "yarn-in", "events-0.json", [{"room": "hall", "event": "motion"}])
        v1 = sh.job(*launch, "room_counts.py", source, "yarn-out")
        appears(work / "yarn-out" / "batch-0.json")
        sh.reported(v1["id"], 0)
        sh("list")
        sh("stop", v1["id"])
        sh.running.remove(v1["id"])
        saved = sh.unseen("savepoints", "--job", "rooms")[0]["id"]
        drop(work / "yarn-in", "events-1.json", [{"room": "hall", "event": "motion"}])
        v2 = sh.job(*launch, "-s", saved, "room_counts.py", source, "yarn-out")
        appears(work / "yarn-out" / "batch-1.json")
        sh.reported(v2["id"], 1)
        sh("list")
        sh("stop", v2["id"])
        sh.running.remove(v2["id"])
    finally:
        for variable in ("HADOOP_CONF_DIR", "SPARK_CONF_DIR", "SPARKPOINT_CHECKPOINTS", "SPARKPOINT_SAVEPOINTS"):
            sh.env.pop(variable, None)
        if cluster:
            sh.cancel_running()
            cluster.stop()


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="sparkpoint-walk-"))
    shutil.copy(APP, work / "motion_alarms.py")
    shutil.copy(APPS / "room_counts.py", work / "room_counts.py")
    shutil.copy(APPS / "file_sink_values.py", work / "values.py")
    sh, elsewhere = Shell(work), Shell(work, "home-b")
    events = work / "events"
    print(f"work directory {work}")
    try:
        say("Upgrade: v1 runs; check v2 against a savepoint; replace v1 with v2")
        events.mkdir()  # before the job reads it, however soon its driver gets there
        v1 = sh.job("--name", "alarms", "motion_alarms.py", "v1", "events", "out-v1")
        feed(events, 0, [("kitchen", "activate", 100), ("hall", "activate", 105), ("kitchen", "motion", 120)])
        alarms(work / "out-v1", 0)
        sh.reported(v1["id"], 0)
        sh("list")
        sh("savepoint", v1["id"])
        sh("check", "-s", sh.unseen("savepoints")[0]["id"], "motion_alarms.py", "v2", "events", "out-v2")
        v2_id = sh.job("--name", "alarms", "--replace", v1["id"], "--restore-grace", "30", "--probation", "5",
                       "motion_alarms.py", "v2", "events", "out-v2")["id"]
        sh.running.remove(v1["id"])  # replaced: only now (a replace that fails leaves v1 running, to cancel)
        feed(events, 1, [("hall", "motion", 200)])
        alarms(work / "out-v2", 1)

        say("Scheduled savepoints and retention")
        for _ in range(3):
            sh("savepoint", v2_id, "--keep-last", "2")
        sh("savepoints", "--job", "alarms")
        sh("prune", "--keep-last", "2", "--dry-run")
        sh("horizon")

        say("Pause and resume: stop with a savepoint, start again later from it")
        sh("stop", v2_id)
        stopped = sh.unseen("savepoints")[0]
        sh.running.remove(v2_id)
        sh("list", "--all")
        resumed = sh.job("--name", "alarms", "-s", stopped["id"], "motion_alarms.py", "v2", "events", "out-v2")
        feed(events, 2, [("garage", "activate", 300), ("garage", "motion", 400)])
        alarms(work / "out-v2", 2)

        say("A/B test: a second variant from the same savepoint, with query ids of its own")
        variant = sh.job("--name", "alarms-b", "-s", stopped["id"], "--fork", "motion_alarms.py", "v1", "events",
                         "out-b")
        alarms(work / "out-b", 2)
        sh.reported(variant["id"], 2)
        sh("list")

        say("Rescale: the savepoint's state to 4 partitions")
        sh("rescale", stopped["id"], "--partitions", "4")

        say("Restore for another launcher, and a savepoint of a checkpoint sparkpoint did not make")
        sh("restore", stopped["id"], "ckpt-v3")
        sh("savepoint", "--from-checkpoint", "ckpt-v3/alarms", "--job", "plain")
        sh("stop", variant["id"])
        sh.running.remove(variant["id"])

        say("Move the job to another cluster: stopped here, started there (its own home) from the savepoint's path")
        sh("stop", resumed["id"])
        sh.running.remove(resumed["id"])
        moved_from = Path(sh.unseen("savepoints", "--job", "alarms")[0]["path"]).relative_to(work)
        moved = elsewhere.job("--name", "alarms", "-s", str(moved_from), "motion_alarms.py", "v2", "events", "out-v2")
        feed(events, 3, [("hall", "motion", 500)])
        alarms(work / "out-v2", 3)
        elsewhere("list")
        elsewhere("stop", moved["id"])
        elsewhere.running.remove(moved["id"])
        elsewhere("metrics")  # one finished job, one savepoint: what a scrape (or --metrics-file) holds

        say("An upgrade that will not restore: the state's key changed")
        (work / "rooms-in").mkdir()
        rooms = sh.job("--name", "rooms", "room_counts.py", "rooms-in", "rooms-out")
        drop(work / "rooms-in", "events-0.json", [{"room": "hall", "event": "motion"}])
        appears(work / "rooms-out" / "batch-0.json")
        sh("stop", rooms["id"])
        sh.running.remove(rooms["id"])
        sh("check", "-s", sh.unseen("savepoints", "--job", "rooms")[0]["id"], "room_counts.py", "rooms-in",
           "rooms-out", "v2-incompatible", expect=16)

        say("Reprocess: v1 wrote wrong values; v2 replaces them from a savepoint at batch 0")
        (work / "values-in").mkdir()
        values = sh.job("--name", "values", "values.py", "v1", "values-in", "values-out")
        drop(work / "values-in", "rows-0.json", [{"file": 0, "n": 1}])
        appears(work / "values-out" / "_spark_metadata" / "0")
        sh("savepoint", values["id"])
        at_0 = sh.unseen("savepoints", "--job", "values")[0]["id"]
        for number in (1, 2):
            drop(work / "values-in", f"rows-{number}.json", [{"file": number, "n": number + 1}])
            appears(work / "values-out" / "_spark_metadata" / str(number))
        sh("stop", values["id"])
        sh.running.remove(values["id"])
        sh("rollback-sink", at_0, "--dry-run")
        fixed = sh.job("--name", "values", "-s", at_0, "--rollback-sink", "values.py", "v2", "values-in", "values-out")
        appears(work / "values-out" / "_spark_metadata" / "2")
        sh("stop", fixed["id"])
        sh.running.remove(fixed["id"])

        delta(sh, work)
        kafka(sh, work)
        yarn(sh, work)

        say("Move a job to a newer Spark: started on Spark 3.5, stopped with a savepoint, continued on Spark 4.3")
        spark_35 = ROOT / ".venv-spark" / "3.5" / "pyspark"
        if not (spark_35 / "bin" / "spark-submit").is_file():
            print(f"skipped: no Spark 3.5 in {spark_35} (scripts/spark-versions.sh installs it)")
        else:
            (work / "counts-in").mkdir()
            old = sh.job("--name", "counts", "--spark-home", str(spark_35), "room_counts.py", "counts-in", "counts-out")
            drop(work / "counts-in", "events-0.json", [{"room": "hall", "event": "motion"}])
            appears(work / "counts-out" / "batch-0.json")
            sh("stop", old["id"])
            sh.running.remove(old["id"])
            saved = sh.unseen("savepoints", "--job", "counts")[0]["id"]
            sh("check", "-s", saved, "room_counts.py", "counts-in", "counts-out")
            new = sh.job("--name", "counts", "-s", saved, "room_counts.py", "counts-in", "counts-out")
            drop(work / "counts-in", "events-1.json", [{"room": "hall", "event": "motion"}])
            appears(work / "counts-out" / "batch-1.json")
            sh.reported(new["id"], 1)
            sh("list")
            sh("stop", new["id"])
            sh.running.remove(new["id"])

        say("A standalone cluster to try it on (other ports than Spark's defaults, which may be taken)")
        ports = ("--master-port", "7177", "--master-ui-port", "8180", "--worker-ui-port", "8181", "--rest-port", "6166")
        sh("cluster", "start", "--dir", "cluster", *ports, "--cores", "1", "--memory", "1g")
        sh("cluster", "status", "--dir", "cluster")
        sh("cluster", "stop", "--dir", "cluster")

        say("The catalog's lineage: each savepoint under the one it derives from")
        sh("savepoints", "--tree")
    finally:
        sh.cancel_running()
        elsewhere.cancel_running()
        subprocess.run([sys.executable, "-m", "sparkpoint", "cluster", "stop", "--dir", "cluster"], cwd=work,
                       env=sh.env, capture_output=True, check=False)
        if "--keep" in sys.argv:
            print(f"\nkept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

"""On a real YARN with the checkpoints on a real HDFS (Hadoop's mini clusters, scripts/local_hadoop.py): the
room-count pit stop in client mode (list through the ResourceManager, live savepoint, stop, run -s, exact; the
application killed by YARN), and in cluster mode (live savepoint, stop, run -s, a --replace in cluster mode that
fails its probation and is rolled back, exact throughout; the rolled-back driver, its agent frozen, cancelled
through YARN)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from clitools import FIRST_TIER_ONLY, cli, cli_json, reported, wait_for
from test_managed_jobs import APP, expected_counts, feed, outputs

pytestmark = [pytest.mark.spark, pytest.mark.slow]

PYSPARK = Path(__import__("pyspark").__file__).parent


def yarn_confs(cluster_mode: bool, spark_home: Path = PYSPARK) -> list[str]:
    """The mini clusters' options, and the first tier of the JIT for the JVMs in YARN's containers (the executors,
    the application master, a cluster-mode driver), which SPARK_SUBMIT_OPTS does not reach."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    import local_hadoop

    in_containers = ["spark.executor.extraJavaOptions", "spark.driver.extraJavaOptions" if cluster_mode
                     else "spark.yarn.am.extraJavaOptions"]
    return [*local_hadoop.spark_submit_confs(cluster_mode, spark_home),
            *(arg for conf in in_containers for arg in ("--conf", f"{conf}={FIRST_TIER_ONLY}"))]


@pytest.fixture
def on_yarn(hadoop_cluster, monkeypatch, tmp_path):
    """The cluster's client configuration for the CLI and spark-submit; the jobs' checkpoints on its HDFS. A job
    the test leaves running (a failed assertion) is cancelled: the cluster serves the whole run."""
    monkeypatch.setenv("HADOOP_CONF_DIR", str(hadoop_cluster.conf_dir))
    monkeypatch.setenv("SPARKPOINT_CHECKPOINTS", f"{hadoop_cluster.fs}/{tmp_path.name}/checkpoints")
    yield hadoop_cluster
    for job in cli_json(tmp_path / "home", "list") if (tmp_path / "home").exists() else []:
        cli(tmp_path / "home", "cancel", job["id"])


def rm_app(cluster, app_id: str) -> dict:
    import requests

    return requests.get(f"{cluster.rm_web}/ws/v1/cluster/apps/{app_id}", timeout=10).json()["app"]


def listed(home, job_id: str) -> dict:
    return next(j for j in cli_json(home, "list", "--all") if j["id"] == job_id)


def test_pit_stop_on_yarn_client_mode_with_checkpoints_on_hdfs(on_yarn, tmp_path):
    home, inputs, out = tmp_path / "home", tmp_path / "in", tmp_path / "out"
    for batch in range(3):
        feed(inputs, batch)
    source = f"file:{inputs}"  # the cluster's default file system is HDFS: a local input says so
    v1 = cli_json(home, "run", "--detach", "--master", "yarn", "--name", "rooms", *yarn_confs(False), APP, source,
                  str(out))
    assert v1["app_id"].startswith("application_") and v1["checkpoint_root"].startswith("hdfs://"), v1
    wait_for(lambda: 2 in outputs(out), timeout=180, what="batch 2 of v1")
    entry = listed(home, v1["id"])
    assert (entry["state"], entry["app_state"]) == ("running", "RUNNING")

    live = cli_json(home, "savepoint", v1["id"])
    assert live["queries"][0]["batch_id"] >= 2
    feed(inputs, 3)
    wait_for(lambda: 3 in outputs(out), timeout=120, what="batch 3 of v1")
    stopped = cli_json(home, "stop", v1["id"])
    assert stopped["job"]["state"] == "finished" and all(q["at_boundary"] for q in stopped["queries"])
    # A client-mode driver's application is over when stop returns; YARN hears of it as its JVM shuts Spark down.
    wait_for(lambda: rm_app(on_yarn, v1["app_id"])["finalStatus"] == "SUCCEEDED", timeout=60,
             what="YARN's record of v1's end")

    for batch in (4, 5):
        feed(inputs, batch)
    v2 = cli_json(home, "run", "--detach", "--master", "yarn", "--name", "rooms", "-s", stopped["path"],
                  *yarn_confs(False), APP, source, str(out))
    wait_for(lambda: 5 in outputs(out), timeout=180, what="batch 5 of v2")
    newest: dict[str, int] = {}
    for batch in sorted(outputs(out)):
        newest.update(outputs(out)[batch])
    assert newest == expected_counts(range(6))  # the state went on from the stop's cut: nothing lost or doubled

    # YARN kills the application: the client-mode driver ends with it, and `list` says so.
    import requests

    killed = requests.put(f"{on_yarn.rm_web}/ws/v1/cluster/apps/{v2['app_id']}/state", json={"state": "KILLED"},
                          timeout=10)
    assert killed.status_code in (200, 202), killed.text
    entry = wait_for(lambda: (e := listed(home, v2["id"]))["state"] not in ("running", "starting") and e,
                     timeout=60, what="the killed job's end")
    assert (entry["state"], entry["app_state"]) == ("failed", "KILLED"), entry


def test_cluster_mode_on_yarn_pit_stop_replace_rolled_back_and_a_deaf_agent_cancelled(on_yarn, tmp_path):
    home, inputs, out = tmp_path / "home", tmp_path / "in", tmp_path / "out"
    launch = ["--master", "yarn", "--deploy-mode", "cluster", "--name", "rooms", *yarn_confs(True)]
    source = f"file:{inputs}"
    for batch in range(2):
        feed(inputs, batch)
    v1 = cli_json(home, "run", "--detach", *launch, APP, source, str(out))
    assert v1["submission_id"].startswith("application_") and v1["driver_state"] == "RUNNING", v1
    assert v1["log"].startswith("http://") and v1["submission_id"].split("_", 1)[1] in v1["log"]
    wait_for(lambda: 1 in outputs(out), timeout=180, what="batch 1")
    reported(home, v1["id"], 1)  # committed: its output alone comes before the commit
    live = cli_json(home, "savepoint", v1["id"])
    assert live["queries"][0]["batch_id"] >= 1
    stopped = cli_json(home, "stop", v1["id"])
    assert all(q["at_boundary"] for q in stopped["queries"]) and stopped["job"]["state"] == "finished"
    assert rm_app(on_yarn, v1["submission_id"])["finalStatus"] == "SUCCEEDED"

    # v2 in cluster mode from the stop's savepoint, continued exactly.
    for batch in (2, 3):
        feed(inputs, batch)
    v2 = cli_json(home, "run", "--detach", "-s", stopped["path"], *launch, APP, source, str(out))
    assert v2["restored_from"] == stopped["path"] and v2["upgrade_check"]["compatible"] is True, v2
    wait_for(lambda: 3 in outputs(out), timeout=180, what="batch 3 of v2")

    # A new version replacing v2 in one step, its driver in cluster mode too (it waits for its hand-over in its
    # YARN container, reading the home), with a condition it cannot meet: given a batch once it has taken over,
    # it fails its probation, and v2's version runs again, in cluster mode as it ran before, from the hand-over's
    # savepoint.
    def feed_the_new_version() -> None:
        wait_for(lambda: any(j["id"] != v2["id"] and j["state"] == "running" for j in cli_json(home, "list")),
                 timeout=240, what="the new version to take over")
        feed(inputs, 4)

    feeder = threading.Thread(target=feed_the_new_version, daemon=True)
    feeder.start()
    code, replaced, err = cli(home, "run", "--output", "json", "--detach", "--replace", v2["id"], "--no-check",
                              "--probation", "20", "--healthy-when", "processing_rate>=1e9", "--restore-grace", "180",
                              *launch, APP, source,
                              str(out))
    feeder.join(timeout=10)
    assert code == 13 and "failed on probation (unhealthy: processing_rate of counts: " in err, err
    failed = json.loads(replaced)
    again = failed["rolled_back"]
    assert again["state"] == "running" and again["submission_id"].startswith("application_"), again
    assert again["restored_from"] == failed["replaced"]["path"] and again["rollback"]["rollback_of"] == failed["id"]
    assert failed["replaced"]["job"]["state"] == "finished" and failed["submission_id"].startswith("application_")
    # Its JVM and Spark session came up while v2 still ran: only then did v2 stop.
    assert list(failed["start"]["phases"])[:5] == ["spark_submit", "spark_session", "waiting", "stop", "restore"], \
        failed["start"]
    assert rm_app(on_yarn, failed["submission_id"])["state"] in ("FINISHED", "KILLED")
    feed(inputs, 5)
    wait_for(lambda: 5 in outputs(out), timeout=180, what="batch 5 after the rollback")
    newest: dict[str, int] = {}
    for batch in sorted(outputs(out)):
        newest.update(outputs(out)[batch])
    assert newest == expected_counts(range(6))  # through a stop, a restore, a hand-over and a way back: exact

    # Its agent frozen, the rolled-back version is cancelled through YARN.
    driver = subprocess.run(["pgrep", "-f", f"bootstrap.py {home}/jobs/{again['id']} "], capture_output=True,
                            text=True).stdout.split()
    assert len(driver) == 1, driver  # the driver's Python, in its YARN container
    os.kill(int(driver[0]), signal.SIGSTOP)  # alive, and deaf
    try:
        started = time.monotonic()
        cancelled = cli_json(home, "cancel", again["id"])
        assert time.monotonic() - started < 20
    finally:
        os.kill(int(driver[0]), signal.SIGCONT)
    assert cancelled["state"] == "cancelled"
    assert rm_app(on_yarn, again["submission_id"])["state"] == "KILLED"
    entry = listed(home, again["id"])
    assert (entry["state"], entry["app_state"]) == ("cancelled", "KILLED")
    assert [v["id"] for v in entry["lineage"]] == [v1["id"], v2["id"], failed["id"], again["id"]]
    wait_for(lambda: not subprocess.run(["pgrep", "-f", again["id"]], capture_output=True).stdout, timeout=30,
             what="the driver's processes to end")

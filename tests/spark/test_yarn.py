"""On a real YARN with the checkpoints on a real HDFS (Hadoop's mini clusters, scripts/local_hadoop.py): the
room-count pit stop in client mode (list through the ResourceManager, live savepoint, stop, run -s, exact; the
application killed by YARN), and a cluster-mode driver whose agent no longer answers, cancelled through YARN."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from clitools import cli, cli_json, wait_for
from test_managed_jobs import APP, expected_counts, feed, outputs

pytestmark = [pytest.mark.spark, pytest.mark.slow]

PYSPARK = Path(__import__("pyspark").__file__).parent


def yarn_confs(cluster_mode: bool, spark_home: Path = PYSPARK) -> list[str]:
    """spark-submit's options for the mini cluster: the Spark's own jars read where they are (the NodeManager
    runs here: nothing to upload), small containers, and every address on loopback."""
    confs = [f"spark.yarn.jars=local:{spark_home}/jars/*", "spark.executor.instances=1", "spark.executor.memory=512m",
             "spark.yarn.am.memory=512m", "spark.driver.memory=512m"]
    # In cluster mode YARN sets spark.driver.host to the container's host itself (which an explicit one
    # breaks: its executors never reach the driver); the driver's own SPARK_LOCAL_IP keeps it on loopback.
    confs += (["spark.yarn.appMasterEnv.SPARK_LOCAL_IP=127.0.0.1", "spark.yarn.maxAppAttempts=1"] if cluster_mode
              else ["spark.driver.host=127.0.0.1", "spark.driver.bindAddress=127.0.0.1"])
    return [arg for conf in confs for arg in ("--conf", conf)]


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
    assert rm_app(on_yarn, v1["app_id"])["finalStatus"] == "SUCCEEDED"

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


def test_cluster_mode_driver_on_yarn_cancelled_through_yarn_when_its_agent_is_deaf(on_yarn, tmp_path):
    home, inputs, out = tmp_path / "home", tmp_path / "in", tmp_path / "out"
    for batch in range(2):
        feed(inputs, batch)
    job = cli_json(home, "run", "--detach", "--master", "yarn", "--deploy-mode", "cluster", "--name", "rooms",
                   *yarn_confs(True), APP, f"file:{inputs}", str(out))
    assert job["submission_id"].startswith("application_") and job["driver_state"] == "RUNNING", job
    assert job["log"].startswith("http://") and job["submission_id"].split("_", 1)[1] in job["log"]
    wait_for(lambda: 1 in outputs(out), timeout=180, what="batch 1")
    live = cli_json(home, "savepoint", job["id"])
    assert live["queries"][0]["batch_id"] >= 1

    driver = subprocess.run(["pgrep", "-f", f"bootstrap.py {home}/jobs/{job['id']} "], capture_output=True,
                            text=True).stdout.split()
    assert len(driver) == 1, driver  # the driver's Python, in its YARN container
    os.kill(int(driver[0]), signal.SIGSTOP)  # alive, and deaf
    try:
        started = time.monotonic()
        cancelled = cli_json(home, "cancel", job["id"])
        assert time.monotonic() - started < 20
    finally:
        os.kill(int(driver[0]), signal.SIGCONT)
    assert cancelled["state"] == "cancelled"
    assert rm_app(on_yarn, job["submission_id"])["state"] == "KILLED"
    entry = listed(home, job["id"])
    assert (entry["state"], entry["app_state"]) == ("cancelled", "KILLED")
    wait_for(lambda: not subprocess.run(["pgrep", "-f", job["id"]], capture_output=True).stdout, timeout=30,
             what="the driver's processes to end")

"""On a real standalone master and worker (started by `sparkpoint cluster`), with the savepoints on a real
S3-compatible server: the motion-alarm pit stop in client mode then cluster mode, cancel through the
master, and a migration of the job from the cluster to local mode."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from clitools import FIRST_TIER_ONLY, cli, cli_json, free_ports, processes_mentioning, reported, wait_for
from s3server import BUCKET, S3Server

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
APP = str(ROOT / "scripts" / "demo_apps" / "motion_alarms.py")
_demo = importlib.util.spec_from_file_location("demo", ROOT / "scripts" / "demo.py")
demo = importlib.util.module_from_spec(_demo)
_demo.loader.exec_module(demo)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    directory = tmp_path_factory.mktemp("cluster")
    master, master_ui, rest, worker_ui = free_ports(4)
    ports = ["--master-port", str(master), "--master-ui-port", str(master_ui), "--rest-port", str(rest),
             "--worker-ui-port", str(worker_ui)]
    started = subprocess.run([sys.executable, "-m", "sparkpoint", "cluster", "start", "-o", "json", "--dir",
                              str(directory), "--cores", "4", *ports], capture_output=True, text=True, timeout=180)
    assert started.returncode == 0, started.stderr
    info = json.loads(started.stdout)
    assert info["workers_alive"] == 1
    # The first tier of the JIT for the executors and cluster-mode drivers the worker starts, as tests/conftest.py
    # gives the client-mode drivers (SPARK_SUBMIT_OPTS does not reach the worker's JVMs).
    with open(Path(info["conf_dir"]) / "spark-defaults.conf", "a") as defaults:
        defaults.writelines(f"{conf} {FIRST_TIER_ONLY}\n"
                            for conf in ("spark.executor.extraJavaOptions", "spark.driver.extraJavaOptions"))
    yield info
    subprocess.run([sys.executable, "-m", "sparkpoint", "cluster", "stop", "--dir", str(directory)], timeout=60)


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    server = S3Server(tmp_path_factory.mktemp("s3") / "moto.log")
    yield server
    server.stop()


def alarms(output: Path, batch: int) -> set[tuple[str, int]]:
    path = output / f"batch-{batch}.json"
    wait_for(path.exists, timeout=180, what=f"{path}")
    return {(a["room"], a["ts"]) for a in json.loads(path.read_text())}


def test_pit_stop_on_a_cluster_with_savepoints_on_s3_then_migration_to_local(cluster, s3, tmp_path, monkeypatch):
    for key, value in {**s3.env, "SPARK_CONF_DIR": cluster["conf_dir"],
                       "SPARKPOINT_SAVEPOINTS": f"s3://{BUCKET}/cluster-savepoints"}.items():
        monkeypatch.setenv(key, value)
    home, events = tmp_path / "home", tmp_path / "events"
    master = cluster["master_url"]

    # v1 in client mode: the driver here, executors on the worker.
    v1 = cli_json(home, "run", "--detach", "--master", master, "--name", "alarms", APP, "v1", str(events),
                  str(tmp_path / "out-v1"))
    assert v1["state"] == "running" and v1["app_id"].startswith("app-")  # a standalone application, not local-
    demo.feed(events, 0, [("kitchen", "activate", 100), ("hall", "activate", 105), ("kitchen", "motion", 120)])
    assert alarms(tmp_path / "out-v1", 0) == {("kitchen", 120)}
    live = cli_json(home, "savepoint", v1["id"])
    assert live["path"].startswith(f"s3://{BUCKET}/cluster-savepoints/alarms/")
    demo.feed(events, 1, [("kitchen", "deactivate", 200), ("kitchen", "motion", 210), ("hall", "motion", 220)])
    assert alarms(tmp_path / "out-v1", 1) == {("hall", 220)}
    stopped = cli_json(home, "stop", v1["id"])
    assert stopped["queries"][0]["batch_id"] == 1 and stopped["path"].startswith("s3://")
    # stop returns once the application has ended; its JVM's shutdown follows.
    wait_for(lambda: not processes_mentioning(f"jobs/{v1['id']}"), timeout=30, what="v1's processes to end")

    # v2 in cluster mode, restored from S3: the master runs its driver on the worker.
    v2 = cli_json(home, "run", "--detach", "--master", master, "--deploy-mode", "cluster", "--name", "alarms",
                  "-s", stopped["id"], APP, "v2", str(events), str(tmp_path / "out-v2"))
    assert v2["state"] == "running" and v2["submission_id"].startswith("driver-")
    assert v2["driver_state"] == "RUNNING" and v2["restored_from"] == stopped["path"]
    # run -s checked v2 first: its driver here, its executors on the worker, the sandbox restored from S3.
    assert v2["upgrade_check"]["compatible"] is True and v2["upgrade_check"]["savepoint"] == stopped["path"]
    demo.feed(events, 2, [("hall", "motion", 300), ("garage", "activate", 310), ("garage", "motion", 320),
                          ("garage", "motion", 400)])
    found = alarms(tmp_path / "out-v2", 2)
    assert ("hall", 300) in found  # armed under v1, still armed under v2
    assert ("garage", 320) not in found and ("garage", 400) in found  # v2's tolerance
    assert not (tmp_path / "out-v2" / "batch-1.json").exists()  # nothing before the cut re-ran
    reported(home, v2["id"], 2)
    listed = {j["id"]: j for j in cli_json(home, "list")}
    assert listed[v2["id"]]["state"] == "running" and listed[v2["id"]]["queries"][0]["batch_id"] == 2
    assert listed[v2["id"]]["app_state"] == "RUNNING"

    live_v2 = cli_json(home, "savepoint", v2["id"])
    assert live_v2["queries"][0]["batch_id"] == 2 and cli(home, "verify", live_v2["id"])[0] == 0
    cancelled = cli_json(home, "cancel", v2["id"])
    assert cancelled["state"] == "cancelled"
    # The master agrees, and nothing of the driver is left on the worker: not its JVM, not its Python.
    assert wait_for(lambda: not processes_mentioning(f"jobs/{v2['id']}"), timeout=30, what="v2's processes to end")
    after = {j["id"]: j for j in cli_json(home, "list", "--all")}
    assert after[v2["id"]]["state"] == "cancelled" and after[v2["id"]]["app_state"] in ("FINISHED", "KILLED")
    assert after[v1["id"]]["app_state"] == "FINISHED"  # v1 ran in client mode: the master saw it end
    code, _, err = cli(home, "savepoint", v2["id"])
    assert code == 12 and "not running" in err

    # Migration: the cluster job's savepoint continues in local mode (another cluster manager entirely).
    v3 = cli_json(home, "run", "--detach", "--name", "alarms", "-s", live_v2["id"], APP, "v2", str(events),
                  str(tmp_path / "out-v3"))
    assert v3["app_id"].startswith("local-")
    demo.feed(events, 3, [("hall", "motion", 500), ("kitchen", "motion", 510), ("garage", "motion", 520)])
    assert alarms(tmp_path / "out-v3", 3) == {("hall", 500), ("garage", 520)}
    assert not (tmp_path / "out-v3" / "batch-2.json").exists()
    assert cli_json(home, "stop", v3["id"])["queries"][0]["batch_id"] == 3

    # A way back on the cluster: a new version in cluster mode, from v2's live savepoint, with --rollback-to that
    # savepoint (v2 ran in cluster mode) and a condition it cannot meet. It runs batch 3, fails its probation, is
    # cancelled, and v2's version runs again, in cluster mode, from the savepoint's cut, as v2's record says.
    code, out, err = cli(home, "run", "--output", "json", "--detach", "--master", master, "--deploy-mode", "cluster",
                         "--name", "alarms", "-s", live_v2["id"], "--rollback-to", live_v2["id"], "--no-check",
                         "--probation", "5", "--healthy-when", "processing_rate>=1e9", "--restore-grace", "180",
                         APP, "v2", str(events),
                         str(tmp_path / "out-v4"))
    assert code == 13 and "failed on probation (unhealthy: processing_rate of alarms: " in err, err
    v4 = json.loads(out)
    again = v4["rolled_back"]
    assert alarms(tmp_path / "out-v4", 3) == {("hall", 500), ("garage", 520)}  # it ran before it was judged
    assert v4["state"] == "failed" and v4["rollback"]["rolled_back_to"] == again["id"]
    assert again["state"] == "running" and again["submission_id"].startswith("driver-")
    assert again["restored_from"] == live_v2["path"] and again["rollback"]["rollback_of"] == v4["id"]
    assert alarms(tmp_path / "out-v2", 3) == {("hall", 500), ("garage", 520)}  # v2's version, again, at the cut
    listed = {j["id"]: j for j in cli_json(home, "list", "--all")}
    assert [v["id"] for v in listed[again["id"]]["lineage"]] == [v1["id"], v2["id"], v4["id"], again["id"]]
    assert listed[v4["id"]]["app_state"] in ("FINISHED", "KILLED")
    assert cli_json(home, "cancel", again["id"])["state"] == "cancelled"
    assert wait_for(lambda: not processes_mentioning(f"jobs/{again['id']}"), timeout=30, what="its processes to end")

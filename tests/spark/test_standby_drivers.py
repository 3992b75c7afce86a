"""Standby drivers end to end: warmed up beside a running job, adopted by the restored version's `run`, and retired
when no run comes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clitools import cli, cli_json, process_gone, wait_for
from test_managed_jobs import APP, expected_counts, feed, outputs

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def standby_json(home: Path, *args: str):
    code, out, err = cli(home, "-o", "json", "standby", *args)
    assert code == 0, err[-3000:]
    return json.loads(out)


def test_a_standby_driver_becomes_the_restored_version_and_one_not_adopted_retires(tmp_path):
    home, inputs = tmp_path / "home", tmp_path / "in"
    for batch in range(3):
        feed(inputs, batch)
    job = cli_json(home, "run", "--detach", "--name", "counts", APP, str(inputs), str(tmp_path / "out1"))
    wait_for(lambda: 2 in outputs(tmp_path / "out1"), what="batch 2 of v1")

    standby = standby_json(home, "start", job["id"], "--idle-timeout", "600")
    assert standby["state"] == "ready" and standby["like"] == job["id"] and standby["warm_up_seconds"] > 0
    assert [s["id"] for s in standby_json(home, "list")] == [standby["id"]]
    assert [j["id"] for j in cli_json(home, "list")] == [job["id"]]  # waiting, it is no job yet

    for batch in (3, 4):
        feed(inputs, batch)
    wait_for(lambda: 4 in outputs(tmp_path / "out1"), what="batch 4 of v1")
    stopped = cli_json(home, "stop", job["id"], "--timeout", "30")
    assert stopped["queries"][0]["batch_id"] == 4

    resumed = cli_json(home, "run", "--detach", "--name", "counts", "-s", stopped["path"], APP, str(inputs),
                       str(tmp_path / "out2"))
    # The standby is the job's driver: its id, its process, its directory and log.
    assert (resumed["id"], resumed["pid"]) == (standby["id"], standby["pid"]), resumed
    assert [e["detail"] for e in resumed["history"] if e["event"] == "standby"] == [
        f"adopted standby {standby['id']}, launched with {job['id']}'s options"]
    assert standby_json(home, "list") == []
    for batch in (5, 6):
        feed(inputs, batch)
    wait_for(lambda: 6 in outputs(tmp_path / "out2"), what="batch 6 after the restore into the standby")
    out2 = outputs(tmp_path / "out2")
    assert min(out2) == 5  # nothing before the cut ran again, and the state went on from it
    totals = expected_counts(range(7))
    assert out2[6] == {room: totals[room] for room in out2[6]}
    started = wait_for(lambda: next((j for j in cli_json(home, "list") if j["id"] == resumed["id"]
                                     and "first_batch" in j["start"]["phases"]), None), what="the start's phases")
    phases = list(started["start"]["phases"])
    assert "standby" in phases and "spark_submit" not in phases and phases[-2:] == ["queries_started", "first_batch"]

    # A standby no run adopts retires by itself after its idle time, and leaves nothing behind.
    idle = standby_json(home, "start", resumed["id"], "--idle-timeout", "1")
    wait_for(lambda: not Path(idle["log"]).parent.exists(), what="the idle standby's retirement", timeout=60)
    wait_for(lambda: process_gone(idle["pid"]), what="the idle standby's exit", timeout=30)
    assert standby_json(home, "list") == []
    # The cancel returns once the application has ended; its JVM exits a moment later.
    assert cli_json(home, "cancel", resumed["id"])["state"] == "cancelled"
    wait_for(lambda: process_gone(resumed["pid"]), timeout=30, what="the cancelled driver's exit")

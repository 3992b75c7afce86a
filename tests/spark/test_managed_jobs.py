"""Managed jobs end to end, with real spark-submit processes and the real CLI, as an operator runs them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from clitools import cli, cli_json, process_gone, reported, wait_for

pytestmark = [pytest.mark.spark, pytest.mark.slow]

APP = str(Path(__file__).parent / "apps" / "room_counts.py")
ROOMS = ["kitchen", "hall", "garage"]
# A name Spark accepts and no directory can be: Spark keeps its checkpoint two directories down ("room counts<",
# then "v1"), the savepoint in one escaped directory, and the restore where the new version's Spark looks.
QUERY = "room counts</v1"


def events(batch):
    return [{"room": ROOMS[(batch + i) % 3], "event": "motion"} for i in range(batch % 3 + 2)]


def feed(directory: Path, batch: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"events-{batch:03d}.json"
    tmp = directory / f".events-{batch:03d}.tmp"
    tmp.write_text("\n".join(json.dumps(e) for e in events(batch)))
    os.utime(tmp, (1_700_000_000 + batch,) * 2)
    os.replace(tmp, path)


def expected_counts(batches) -> dict:
    return dict(Counter(e["room"] for b in batches for e in events(b)))


def metric_samples(path: Path) -> dict[tuple, float]:
    """A textfile's samples, parsed by prometheus_client: (name, then the values of job, query or state, phase)."""
    from prometheus_client.parser import text_string_to_metric_families

    found = {}
    for family in text_string_to_metric_families(path.read_text()):
        for sample in family.samples:
            keys = [sample.labels.get(label) for label in ("job", "query", "state", "phase")]
            found[(sample.name, *(key for key in keys if key is not None))] = sample.value
    return found


def outputs(directory: Path) -> dict[int, dict]:
    return {int(p.stem.split("-")[1]): json.loads(p.read_text()) for p in directory.glob("batch-*.json")}


def test_pit_stop_savepoint_stop_and_resume(tmp_path):
    home, inputs = tmp_path / "home", tmp_path / "in"
    for batch in range(3):
        feed(inputs, batch)
    job = cli_json(home, "run", "--detach", "--name", "counts", APP, str(inputs), str(tmp_path / "out1"), "v1", QUERY)
    assert job["state"] == "running", job
    wait_for(lambda: 2 in outputs(tmp_path / "out1"), what="batch 2 of v1")

    reported(home, job["id"], 2)
    listed = cli_json(home, "list")
    assert [(j["id"], j["state"]) for j in listed] == [(job["id"], "running")]
    query = listed[0]["queries"][0]
    assert query["name"] == QUERY and query["batch_id"] >= 2 and listed[0]["app_id"].startswith("local-")

    prom = tmp_path / "sparkpoint.prom"  # the cron line's textfile, rewritten by each command given it
    live = cli_json(home, "savepoint", job["id"], "--metrics-file", str(prom))
    assert live["queries"][0]["batch_id"] >= 2
    found = metric_samples(prom)
    assert found[("sparkpoint_job_state", job["id"], "running")] == 1
    assert found[("sparkpoint_job_agent_up", job["id"])] == 1
    assert found[("sparkpoint_job_savepoints_total", job["id"])] == 1
    assert found[("sparkpoint_job_last_savepoint_bytes", job["id"])] == live["bytes"]
    assert found[("sparkpoint_query_state_rows", job["id"], QUERY)] == 3  # kitchen, hall, garage
    assert found[("sparkpoint_query_batch_id", job["id"], QUERY)] >= live["queries"][0]["batch_id"]
    assert cli(home, "verify", live["path"])[0] == 0
    # Restored beside the job that runs its query, with the same query id: refused before anything starts.
    code, _, said = cli(home, "run", "-s", live["path"], APP, str(inputs), str(tmp_path / "out-twin"), "v1", QUERY)
    assert code == 23 and f"{QUERY} already run in job {job['id']} (running)" in said, said
    assert not (tmp_path / "out-twin").exists()

    trigger = cli_json(home, "savepoint", "--detached", job["id"])
    assert trigger["status"] == "in_progress"

    def finished_trigger():
        record = cli_json(home, "savepoint", "--status", job["id"], trigger["trigger_id"])
        return record if record["status"] != "in_progress" else None

    polled = wait_for(finished_trigger, what="the detached savepoint")
    assert polled["status"] == "completed" and cli(home, "verify", polled["savepoint"]["path"])[0] == 0

    for batch in (3, 4):
        feed(inputs, batch)
    wait_for(lambda: 4 in outputs(tmp_path / "out1"), what="batch 4 of v1")
    stopped = cli_json(home, "stop", job["id"], "--timeout", "30", "--metrics-file", str(prom))
    cut = stopped["queries"][0]
    assert cut["batch_id"] == 4 and cut["replayed_batch_id"] is None and cut["at_boundary"] is True
    found = metric_samples(prom)
    assert found[("sparkpoint_job_state", job["id"], "finished")] == 1
    assert found[("sparkpoint_job_savepoints_total", job["id"])] == 3  # live, detached, at the stop
    assert found[("sparkpoint_job_last_savepoint_bytes", job["id"])] == stopped["bytes"]
    assert found[("sparkpoint_job_last_stop_at_boundary", job["id"])] == 1
    assert {phase: found[("sparkpoint_job_last_stop_phase_seconds", job["id"], phase)]
            for phase in stopped["phases"]} == stopped["phases"]
    assert stopped["job"]["state"] == "finished"
    assert [d.name for d in (Path(stopped["path"]) / "queries").iterdir()] == ["room%20counts%3C%2Fv1"]
    assert [q["name"] for q in cli_json(home, "inspect", stopped["path"])["queries"]] == [QUERY]
    # How each was taken, in its manifest (the page's time line reads it there).
    assert [cli_json(home, "inspect", taken)["origin"]["taken"] for taken in (
        live["path"], polled["savepoint"]["path"], stopped["path"])] == ["live", "scheduled", "stop"]
    wait_for(lambda: process_gone(job["pid"]), timeout=30, what="the stopped driver's exit")
    assert cli_json(home, "list") == []

    resumed = cli_json(home, "run", "--detach", "--name", "counts", "-s", stopped["path"],
                       APP, str(inputs), str(tmp_path / "out2"), "v1", QUERY)
    assert resumed["restored_from"] == stopped["path"]
    for batch in (5, 6):
        feed(inputs, batch)
    wait_for(lambda: 6 in outputs(tmp_path / "out2"), what="batch 6 after restore")
    out2 = outputs(tmp_path / "out2")
    assert min(out2) == 5  # nothing before the cut ran again
    totals = expected_counts(range(7))
    assert out2[6] == {room: totals[room] for room in out2[6]}
    # Where the restored start went, phase by phase, from the CLI's milestones and the driver's.
    # The restore runs alongside the driver's start: on this disk (links) it is usually over first, but it may end
    # after spark-submit's milestone on a loaded machine.
    said = list(resumed["start"]["phases"])
    assert set(said[:3]) == {"restore", "spark_submit", "spark_session"} and said.index("spark_submit") < said.index(
        "spark_session"), resumed["start"]
    started = next(j for j in cli_json(home, "list") if j["id"] == resumed["id"])
    phases = started["start"]["phases"]
    assert list(phases)[3:] == ["queries_started", "first_batch"] and set(list(phases)[:3]) == set(said[:3]), phases
    assert started["start"]["queries"][QUERY]["first_batch"]["batch_id"] == 5
    labels = {"restore": "restore", "spark_submit": "spark-submit", "spark_session": "Spark session",
              "queries_started": "queries started", "first_batch": "first batch"}
    assert [e["detail"] for e in started["history"] if e["event"] == "started_up"] == [
        ", ".join(f"{labels[phase]} {seconds:.1f} s" for phase, seconds in phases.items())]

    # An upgrade whose new driver cannot start leaves the running job alone.
    code, _, err = cli(home, "run", "--replace", resumed["id"], "--no-check", "--driver-memory", "lots", APP,
                       str(inputs), str(tmp_path / "never"), "v1", QUERY)
    assert code == 13 and f"take over from {resumed['id']}" in err
    assert [(j["id"], j["state"]) for j in cli_json(home, "list")] == [(resumed["id"], "running")]

    upgraded = cli_json(home, "run", "--detach", "--name", "counts", "--replace", resumed["id"], "--no-rollback",
                        APP, str(inputs), str(tmp_path / "out3"), "v1", QUERY)
    # Checked in the new driver before the hand-over, while the old version serves: its batch runs whole.
    assert upgraded["upgrade_check"]["compatible"] is True and upgraded["upgrade_check"]["in_driver"] is True
    assert upgraded["upgrade_check"]["state_loaded"] is True
    handover = upgraded["replaced"]
    assert handover["job"]["id"] == resumed["id"] and handover["job"]["state"] == "finished"
    assert handover["queries"][0]["batch_id"] == 6 and upgraded["restored_from"] == handover["path"]
    wait_for(lambda: process_gone(resumed["pid"]), timeout=30, what="the replaced driver's exit")
    for batch in (7, 8):
        feed(inputs, batch)
    wait_for(lambda: 8 in outputs(tmp_path / "out3"), what="batch 8 after the hand-over")
    out3 = outputs(tmp_path / "out3")
    assert min(out3) == 7
    totals = expected_counts(range(9))
    assert out3[8] == {room: totals[room] for room in out3[8]}

    cancelled = cli_json(home, "cancel", upgraded["id"])
    # The cancel returns once the application has ended; its JVM exits a moment later.
    assert cancelled["state"] == "cancelled"
    wait_for(lambda: process_gone(upgraded["pid"]), timeout=30, what="the cancelled driver's exit")
    code, _, err = cli(home, "savepoint", upgraded["id"], "--metrics-file", str(prom))
    assert code == 12 and "not running (state: cancelled)" in err
    found = metric_samples(prom)
    assert found[("sparkpoint_job_savepoint_failures_total", upgraded["id"])] == 1
    assert found[("sparkpoint_job_rollbacks_total", upgraded["id"])] == 0
    assert found[("sparkpoint_job_restores_total", upgraded["id"])] == 1


def test_restore_refusals_are_one_clear_line(tmp_path):
    home, inputs = tmp_path / "home", tmp_path / "in"
    for batch in range(2):
        feed(inputs, batch)
    job = cli_json(home, "run", "--detach", APP, str(inputs), str(tmp_path / "out"))
    wait_for(lambda: 1 in outputs(tmp_path / "out"), what="batch 1")
    saved = cli_json(home, "stop", job["id"])
    feed(inputs, 2)  # Spark checks the state schema when a batch first loads the state

    # The check, in the new driver, refuses it before its query starts; past the check, Spark refuses it at its
    # first batch. In the foreground the driver's output comes first: the last line is the refusal.
    code, out, err = cli(home, "run", "-s", saved["path"], APP, str(inputs), str(tmp_path / "o2"), "v2-incompatible")
    last = err.strip().splitlines()[-1]
    assert code == 16 and out == "", err[-2000:]
    assert last.startswith("sparkpoint: error: ") and "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE" in last
    assert "the job is stopped, no query of it started" in last and "Traceback" not in err
    assert not (tmp_path / "o2").exists() and cli_json(home, "list") == []
    refused = cli_json(home, "list", "--all")[0]
    assert refused["state"] == "failed" and refused["upgrade_check"]["compatible"] is False
    assert refused["upgrade_check"]["in_driver"] is True and "STATE_STORE_KEY_SCHEMA" in refused["error"]
    assert not (Path(refused["checkpoint_root"]).parent / "check" / "checkpoints").exists()  # the sandbox is gone
    cut = saved["queries"][0]["batch_id"]  # the refused query never ran: its checkpoint is the savepoint's cut
    assert max(int(n) for n in os.listdir(Path(refused["checkpoint_root"]) / "counts" / "offsets")
               if n.isdigit()) == cut
    code, out, err = cli(home, "run", "-s", saved["path"], "--no-check", APP, str(inputs), str(tmp_path / "o2"),
                         "v2-incompatible")
    assert code == 13, err[-2000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("sparkpoint: error: job ") and "query 'counts' failed" in last
    assert "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE" in last

    code, out, err = cli(home, "run", "-s", saved["path"], "--no-check", "--restore-grace", "5", APP, str(inputs),
                         str(tmp_path / "o3"), "v1-renamed")
    assert code == 13, err[-2000:]
    assert "holds state for counts but the application did not start that query" in err.strip().splitlines()[-1]


def test_cancel_a_job_whose_driver_was_killed(tmp_path):
    home, inputs = tmp_path / "home", tmp_path / "in"
    feed(inputs, 0)
    job = cli_json(home, "run", "--detach", APP, str(inputs), str(tmp_path / "out"))
    python_driver = json.loads((Path(job["checkpoint_root"]).parent / "agent.json").read_text())["pid"]
    os.kill(job["pid"], signal.SIGKILL)  # the driver JVM, as an OOM killer would
    wait_for(lambda: cli_json(home, "list", "--all")[0]["state"] == "lost", what="the job to show as lost")
    cancelled = cli_json(home, "cancel", job["id"])
    assert cancelled["state"] == "cancelled"
    wait_for(lambda: process_gone(python_driver), timeout=20, what="the Python driver to be gone")
    assert cli_json(home, "list", "--all")[0]["state"] == "cancelled"


def committed_batches(checkpoint: Path) -> list[int]:
    return sorted(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())


def test_stop_under_load_then_ab_test_and_reprocessing(tmp_path):
    home, inputs = tmp_path / "home", tmp_path / "in"
    feed(inputs, 0)
    v1 = cli_json(home, "run", "--detach", "--name", "counts", APP, str(inputs), str(tmp_path / "v1"))
    wait_for(lambda: 0 in outputs(tmp_path / "v1"), what="v1's first batch")

    fed = [1]
    def keep_feeding():
        while not done.is_set():
            feed(inputs, fed[0])
            fed[0] += 1
            time.sleep(0.35)  # a little slower than the 200 ms trigger: load without an endless backlog

    done = threading.Event()
    feeder = threading.Thread(target=keep_feeding)
    feeder.start()
    try:
        wait_for(lambda: len(outputs(tmp_path / "v1")) >= 3, what="v1 to process under load")
        older = cli_json(home, "savepoint", v1["id"])
        wait_for(lambda: len(outputs(tmp_path / "v1")) >= 6, what="more batches")
        stopped = cli_json(home, "stop", v1["id"], "--timeout", "20")
    finally:
        done.set()
        feeder.join()

    cut = stopped["queries"][0]
    checkpoint = Path(v1["checkpoint_root"]) / "counts"
    assert committed_batches(checkpoint)[-1] == cut["batch_id"]  # no committed batch after the cut
    assert max(outputs(tmp_path / "v1")) <= cut["batch_id"] + (cut["replayed_batch_id"] is not None)

    # A/B: two jobs from one savepoint, side by side, each with its own checkpoints and output; the second a fork
    # (query ids of its own): without, it is refused while the first runs its queries.
    a = cli_json(home, "run", "--detach", "--name", "variant-a", "-s", stopped["path"], APP, str(inputs),
                 str(tmp_path / "a"))
    code, _, said = cli(home, "run", "--detach", "--name", "variant-b", "-s", stopped["path"], APP, str(inputs),
                        str(tmp_path / "b"))
    assert code == 23 and f"already run in job {a['id']}" in said, said
    b = cli_json(home, "run", "--detach", "--name", "variant-b", "-s", stopped["path"], "--fork", APP, str(inputs),
                 str(tmp_path / "b"))
    assert a["checkpoint_root"] != b["checkpoint_root"]
    last = fed[0] - 1  # every file fed so far is one batch: batch ids equal file numbers
    wait_for(lambda: last in outputs(tmp_path / "a") and last in outputs(tmp_path / "b"), timeout=180,
             what="both variants to catch up")
    out_a, out_b = outputs(tmp_path / "a"), outputs(tmp_path / "b")
    assert out_a == out_b and min(out_a) == cut["batch_id"] + 1
    totals = expected_counts(range(last + 1))
    assert out_a[last] == {room: totals[room] for room in out_a[last]}

    # Reprocessing from the older savepoint, beside variant a (a fork), re-runs the later batches identically.
    again = cli_json(home, "run", "--detach", "--name", "reprocess", "-s", older["path"], "--fork", APP, str(inputs),
                     str(tmp_path / "again"))
    wait_for(lambda: last in outputs(tmp_path / "again"), timeout=180, what="the reprocessing job")
    replayed = outputs(tmp_path / "again")
    assert min(replayed) == older["queries"][0]["batch_id"] + 1
    reference = {**outputs(tmp_path / "v1"), **out_a}
    assert all(replayed[batch] == reference[batch] for batch in replayed)
    for job in (a, b, again):
        assert cli_json(home, "cancel", job["id"])["state"] == "cancelled"


def test_list_ui_shows_queries_of_an_application_sparkpoint_did_not_launch(tmp_path):
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
    app = subprocess.Popen([sys.executable, str(Path(__file__).parent / "apps" / "ui_ticks.py"), str(port)],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert app.stdout.readline().strip() == "started"

        def ticks_seen():
            code, out, _ = cli(tmp_path / "home", "list", "--output", "json", "--ui", f"http://127.0.0.1:{port}")
            entries = json.loads(out) if code == 0 else []
            queries = [q for e in entries for q in e["queries"] if e["source"] == "ui"]
            named = [q for q in queries if q["name"] == "ticks" and q["batch_id"] >= 2]
            return (entries, queries) if named and len(queries) == 2 else None

        entries, queries = wait_for(ticks_seen, timeout=180, what="the UI to show both queries")
        assert entries[0]["name"] == "ticks-app" and entries[0]["app_id"].startswith("local-")
        assert sorted(q["name"] or "" for q in queries) == ["", "ticks"]  # the unnamed query shows as such
    finally:
        app.kill()
        app.wait()

    def closed():
        # The UI is the JVM's, a child of the app: it goes a little after the app, when it sees its stdin close.
        with socket.socket() as client:
            return client.connect_ex(("127.0.0.1", port)) != 0

    wait_for(closed, timeout=60, what=f"the Spark UI on port {port} to close")
    code, _, err = cli(tmp_path / "home", "list", "--ui", f"http://127.0.0.1:{port}")
    assert code == 12 and "no Spark UI answers" in err

"""`sparkpoint metrics`: the exposition parsed back with prometheus_client's own parser, exact values per home."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests
from checkpoints import hdfs_checkpoint
from clitools import SilentServer, cli, closed_port, free_ports, wait_for
from prometheus_client.parser import text_string_to_metric_families
from test_horizon import posts, savepoint  # noqa: F401 - posts is a fixture

from sparkpoint.adapters.processes import process_start
from sparkpoint.config import Settings
from sparkpoint.errors import SparkpointError
from sparkpoint.jobs import metrics
from sparkpoint.jobs.listing import list_jobs
from sparkpoint.jobs.protocol import write_agent_file
from sparkpoint.jobs.registry import Registry
from sparkpoint.jobs.savepoint import create_savepoint
from sparkpoint.savepoints.create import QuerySource
from sparkpoint.times import parse_iso

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "howto" / "metrics.md"


def samples(text: str) -> dict[tuple, float]:
    """{(name, ((label, value), ...)): value} of an exposition, every metric family checked for HELP and TYPE."""
    found = {}
    for family in text_string_to_metric_families(text):
        assert family.documentation and family.type in ("gauge", "counter"), family.name
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def of_job(found: dict[tuple, float], job) -> dict[str, float]:
    """The per-job series of ``job`` (no other label than job and name), by name."""
    labels = (("job", job.id), ("name", job.name))
    return {name: value for (name, got), value in found.items() if got == labels}


def states(found: dict[tuple, float], job) -> dict[str, float]:
    return {dict(labels)["state"]: value for (name, labels), value in found.items()
            if name == "sparkpoint_job_state" and dict(labels)["job"] == job.id}


def exposed(home: Path, **settings) -> dict[tuple, float]:
    data, _scrape = metrics.exposition(Settings(home=str(home), **settings))
    return samples(data.decode())


def new_job(registry: Registry, name: str = "alarms"):
    return registry.new_job(name, app="app.py", app_args=[], master="local[2]", submit_args=[])


def test_an_empty_home_has_every_metric_described_and_no_error(tmp_path):
    data, scrape = metrics.exposition(Settings(home=str(tmp_path / "home")))
    text = data.decode()
    assert scrape.problems == []
    described = re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M)
    assert described == [(m.name, m.kind) for m in metrics.METRICS]
    found = samples(text)
    assert {key: value for key, value in found.items() if key[0] != "sparkpoint_scrape_duration_seconds"} == {
        ("sparkpoint_scrape_errors", (("what", what),)): 0.0 for what in metrics.SCRAPE_ERROR_KINDS}


def test_a_stopped_job_its_savepoints_and_a_failed_one(tmp_path):
    home = tmp_path / "home"
    settings = Settings(home=str(home))
    registry = Registry(settings.home_url())
    checkpoint = hdfs_checkpoint(tmp_path / "ckpt" / "posts", committed=2)
    job = new_job(registry, "posts")
    taken = [create_savepoint(settings, job, [QuerySource("posts", str(checkpoint))], None, None) for _ in range(2)]
    with pytest.raises(SparkpointError):
        create_savepoint(settings, job, [QuerySource("posts", str(tmp_path / "gone"))], None, None)
    job = registry.load(job.id)
    job.stop = {"at": "2026-11-24T10:00:00.000Z",
                "phases": {"boundary": 1.25, "savepoint": 2.5, "application_end": 0.75}, "at_boundary": True,
                "savepoint": taken[1].path}
    job.end("finished", reason="stopped")
    registry.save(job)
    restarted = registry.new_job("posts", app="app.py", app_args=[], master="local[2]", submit_args=[],
                                 restored_from=taken[1].path, follows=job.id)
    restarted.end("failed", error="probation")
    restarted.note("rolled_back", "failed on probation")
    registry.save(restarted)

    found = exposed(home)
    record = registry.load(job.id).savepoints
    assert of_job(found, job) == {
        "sparkpoint_job_last_savepoint_timestamp_seconds": parse_iso(record.last["at"]),
        "sparkpoint_job_last_savepoint_duration_seconds": record.last["seconds"],
        "sparkpoint_job_last_savepoint_bytes": float(taken[1].bytes),
        "sparkpoint_job_last_savepoint_failure_timestamp_seconds": parse_iso(record.last_failure["at"]),
        "sparkpoint_job_savepoints_total": 2.0,
        "sparkpoint_job_savepoint_failures_total": 1.0,
        "sparkpoint_job_last_stop_timestamp_seconds": parse_iso("2026-11-24T10:00:00.000Z"),
        "sparkpoint_job_last_stop_at_boundary": 1.0,
        "sparkpoint_job_restores_total": 0.0,
        "sparkpoint_job_rollbacks_total": 0.0,
    }
    assert record.last["path"] == taken[1].path and record.last["bytes"] == taken[1].bytes
    assert {dict(labels)["phase"]: value for (name, labels), value in found.items()
            if name == "sparkpoint_job_last_stop_phase_seconds"} == {"boundary": 1.25, "savepoint": 2.5,
                                                                     "application_end": 0.75}
    assert states(found, job) == {"starting": 0, "running": 0, "finished": 1, "failed": 0, "cancelled": 0, "lost": 0}
    assert of_job(found, restarted) == {"sparkpoint_job_savepoints_total": 0.0,
                                        "sparkpoint_job_savepoint_failures_total": 0.0,
                                        "sparkpoint_job_restores_total": 1.0, "sparkpoint_job_rollbacks_total": 1.0}
    assert states(found, restarted)["failed"] == 1
    newest = max(parse_iso(t.created_at) for t in taken)
    assert {key: value for key, value in found.items() if key[0].startswith("sparkpoint_catalog_")} == {
        ("sparkpoint_catalog_savepoints", (("name", "posts"), ("status", "complete"))): 2.0,
        ("sparkpoint_catalog_savepoints", (("name", "posts"), ("status", "incomplete"))): 0.0,
        ("sparkpoint_catalog_savepoints", (("name", "posts"), ("status", "invalid"))): 0.0,
        ("sparkpoint_catalog_bytes", (("name", "posts"),)): float(sum(t.bytes for t in taken)),
        ("sparkpoint_catalog_newest_savepoint_timestamp_seconds", (("name", "posts"),)): pytest.approx(newest, abs=1),
    }


def test_malformed_records_are_counted_not_fatal(tmp_path):
    home = tmp_path / "home"
    registry = Registry(str(home))
    broken, unreadable, fine = new_job(registry, "broken"), new_job(registry, "unreadable"), new_job(registry)
    (Path(broken.directory) / "job.json").write_text('{"id": 7}')
    (Path(unreadable.directory) / "savepoints.json").write_text('{"taken": "many"}')
    (home / "savepoints" / "alarms" / "savepoint-alarms-1").mkdir(parents=True)
    (home / "savepoints" / "alarms" / "savepoint-alarms-1" / "manifest.json").write_text("{")

    data, scrape = metrics.exposition(Settings(home=str(home)))
    found = samples(data.decode())
    assert {dict(labels)["what"]: value for (name, labels), value in found.items()
            if name == "sparkpoint_scrape_errors"} == {"job_record": 1, "savepoint_record": 1, "catalog": 0,
                                                       "horizon": 0, "input": 0}
    assert len(scrape.problems) == 2 and "job.json" in scrape.problems[0] and "savepoints.json" in scrape.problems[1]
    assert states(found, fine)["starting"] == 0 and "sparkpoint_job_savepoints_total" in of_job(found, fine)
    assert "sparkpoint_job_savepoints_total" not in of_job(found, unreadable)
    assert found[("sparkpoint_catalog_savepoints", (("name", "alarms"), ("status", "invalid")))] == 1

    code, out, err = cli(home, "metrics")  # the command: the exposition on stdout, each problem a line on stderr
    assert code == 0 and samples(out)[("sparkpoint_scrape_errors", (("what", "job_record"),))] == 1
    assert err.count("sparkpoint: warning: metrics: ") == 2 and "Traceback" not in err
    code, out, _ = cli(home, "metrics", "-o", "json")
    listed = {m["name"]: m for m in json.loads(out)["metrics"]}
    assert code == 0 and list(listed) == [m.name for m in metrics.METRICS]
    assert {"labels": {"what": "job_record"}, "value": 1.0} in listed["sparkpoint_scrape_errors"]["samples"]


class AnsweringAgent:
    """Answers every request with ``body`` (JSON text)."""

    def __init__(self, body: str):
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                data = body.encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.port = self.server.server_address[1]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_values_and_answers_no_sparkpoint_writes_are_left_out_not_a_traceback(tmp_path):
    """Found in review: a 400-digit number in a record raised OverflowError, NaN reached the exposition, and an
    agent naming a query 5 made prometheus_client raise while rendering."""
    home = tmp_path / "home"
    registry = Registry(str(home))
    edited = new_job(registry, "edited")
    (Path(edited.directory) / "savepoints.json").write_text(
        '{"taken": 1, "failed": 0, "last": {"path": "/sp", "at": "2026-11-24T10:00:00.000Z", "seconds": '
        + "9" * 400 + ', "bytes": NaN}}')
    record = json.loads((Path(edited.directory) / "job.json").read_text())
    record["stop"] = {"at": 7, "phases": {"boundary": 10**400, "savepoint": "fast"}, "at_boundary": "yes"}
    (Path(edited.directory) / "job.json").write_text(json.dumps(record))
    odd, listing = (AnsweringAgent('{"queries": [{"name": 5, "id": 7, "batch_id": 3, "state_rows": "many"}]}'),
                    AnsweringAgent("[1, 2]"))
    try:
        named_five, answers_a_list = running(registry, "odd", odd.port), running(registry, "listing", listing.port)
        data, scrape = metrics.exposition(Settings(home=str(home)))
        listed = {job.id: job for job in list_jobs(Settings(home=str(home)))}  # `list` asks the same way
    finally:
        odd.close()
        listing.close()
    found = samples(data.decode())
    assert of_job(found, edited) == {
        "sparkpoint_job_savepoints_total": 1.0, "sparkpoint_job_savepoint_failures_total": 0.0,
        "sparkpoint_job_last_savepoint_timestamp_seconds": parse_iso("2026-11-24T10:00:00.000Z"),
        "sparkpoint_job_restores_total": 0.0, "sparkpoint_job_rollbacks_total": 0.0}
    assert found[("sparkpoint_query_batch_id", (("job", named_five.id), ("query", "5")))] == 3
    assert of_job(found, named_five)["sparkpoint_job_agent_up"] == 1
    assert of_job(found, answers_a_list)["sparkpoint_job_agent_up"] == 0
    assert (listed[answers_a_list.id].state, listed[answers_a_list.id].queries) == ("running", [])
    assert listed[named_five.id].queries[0].batch_id == 3
    assert scrape.problems == []


def test_a_fifo_in_place_of_a_record_is_reported_not_waited_on(tmp_path):
    """Found trying hostile inputs: a FIFO as savepoints.json made `metrics` wait for a writer for ever, in a
    worker thread that even Ctrl-C and SIGTERM could not end."""
    home = tmp_path / "home"
    registry = Registry(str(home))
    jobs = {record: new_job(registry, record.split(".")[0]) for record in ("savepoints.json", "agent.json", "token")}
    for record, job in jobs.items():
        (Path(job.directory) / record).unlink(missing_ok=True)
        os.mkfifo(Path(job.directory) / record)
    broken = new_job(registry, "broken")
    (Path(broken.directory) / "job.json").unlink()
    os.mkfifo(Path(broken.directory) / "job.json")
    jobs["token"].pid, jobs["token"].pid_start = os.getpid(), process_start(os.getpid())
    registry.save(jobs["token"])
    write_agent_file(jobs["token"].directory, {"state": "running", "host": "127.0.0.1", "port": closed_port(),
                                               "pid": os.getpid(), "pid_start": process_start(os.getpid())})
    started = time.monotonic()
    code, out, err = cli(home, "metrics", timeout=60)
    assert code == 0 and time.monotonic() - started < 30, err
    found = samples(out)
    assert found[("sparkpoint_scrape_errors", (("what", "savepoint_record"),))] == 1
    assert "savepoints.json is not a regular file (a FIFO)" in err
    # job.json, agent.json and a running job's token as FIFOs: each counted and said, never a job silently gone
    assert found[("sparkpoint_scrape_errors", (("what", "job_record"),))] == 3
    assert f"{jobs['token'].id}/token is not a regular file (a FIFO)" in err
    assert f"{broken.id}/job.json is not a regular file (a FIFO)" in err
    assert f"{jobs['agent.json'].id}/agent.json is not a regular file (a FIFO)" in err
    assert states(found, jobs["agent.json"])["lost"] == 1  # an agent record that is not one says nothing
    assert of_job(found, jobs["token"])["sparkpoint_job_agent_up"] == 0
    code, out, err = cli(home, "list", "--all", "-o", "json", timeout=60)
    listed = {entry["id"]: entry for entry in json.loads(out)}
    assert code == 0 and len(listed) == 4, err
    assert listed[broken.id]["state"] == "malformed" and "is not a regular file (a FIFO)" in listed[broken.id]["error"]


def test_the_horizon_has_the_time_of_the_oldest_input_still_needed(tmp_path, posts):  # noqa: F811
    root, _inputs = posts
    savepoint(tmp_path, root, 3, 20)
    savepoint(tmp_path, root, 5, 10)
    found = exposed(tmp_path / "home", savepoints=str(tmp_path / "savepoints"))
    # The savepoint at batch 3 has read f0..f3 and planned f4: f4 (logged with its mtime) is the oldest needed.
    assert {key: value for key, value in found.items() if key[0] == "sparkpoint_horizon_timestamp_seconds"} == {
        ("sparkpoint_horizon_timestamp_seconds", (("kind", "file"), ("source", f"file://{_inputs}"))): 1_795_000_004.0}


def test_the_textfile_is_never_seen_half_written(tmp_path):
    home = tmp_path / "home"
    registry = Registry(str(home))
    for index in range(30):
        new_job(registry, f"job{index:02d}")
    target = tmp_path / "textfile" / "sparkpoint.prom"
    target.parent.mkdir()
    settings = Settings(home=str(home))
    metrics.write_textfile(str(target), metrics.exposition(settings)[0])
    done, seen = threading.Event(), []

    def read_in_a_loop():
        while not done.is_set():
            text = target.read_text()
            seen.append(text.endswith("\n") and "sparkpoint_scrape_duration_seconds " in text
                        and len(samples(text)) > 180)

    reader = threading.Thread(target=read_in_a_loop)
    reader.start()
    try:
        for _ in range(40):
            metrics.write_textfile(str(target), metrics.exposition(settings)[0])
    finally:
        done.set()
        reader.join()
    assert len(seen) > 40 and all(seen)
    assert oct(target.stat().st_mode & 0o777) == "0o644"  # node_exporter often runs as another user
    assert [p.name for p in target.parent.iterdir()] == ["sparkpoint.prom"]


def test_a_failed_savepoint_still_writes_the_metrics_file(tmp_path):
    home = tmp_path / "home"
    registry = Registry(str(home))
    job = new_job(registry)
    job.end("cancelled", reason="cancel")
    registry.save(job)
    target = tmp_path / "sparkpoint.prom"
    code, _, err = cli(home, "savepoint", job.id, "--metrics-file", str(target))
    assert code == 12 and "not running" in err
    found = samples(target.read_text())
    assert of_job(found, job)["sparkpoint_job_savepoint_failures_total"] == 1
    assert registry.load(job.id).savepoints.last_failure["exit_code"] == 12
    code, _, err = cli(home, "metrics", "--metrics-file", str(tmp_path / "no-such-dir" / "x.prom"))
    assert code == 2 and "does not exist" in err
    code, _, err = cli(home, "savepoint", job.id, "--detached", "--metrics-file", str(target))
    assert code == 2 and "not with --detached" in err
    # A metrics file that cannot be written in a directory that does not exist is refused before the savepoint.
    checkpoint = hdfs_checkpoint(tmp_path / "ckpt" / "posts", committed=2)
    code, _, err = cli(home, "savepoint", "--from-checkpoint", str(checkpoint), "--metrics-file",
                       str(tmp_path / "no-such-dir" / "x.prom"))
    assert code == 2 and "does not exist" in err and not (home / "savepoints").exists()
    # A savepoint that worked keeps its exit status when the metrics file then cannot be written (a directory it
    # may not write; root is made subject to modes): a warning says so.
    (tmp_path / "read-only").mkdir(mode=0o555)
    no_dac = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"] if os.geteuid() == 0 else []
    code, _, err = cli(home, "savepoint", "--from-checkpoint", str(checkpoint), "--metrics-file",
                       str(tmp_path / "read-only" / "x.prom"), prefix=no_dac)
    assert code == 0 and "sparkpoint: warning: the metrics file" in err and "was not written" in err, err
    gone = running(registry, "gone", closed_port())  # its driver lives, its agent does not answer
    code, _, err = cli(home, "stop", gone.id, "--metrics-file", str(target))
    assert code == 12, err
    assert of_job(samples(target.read_text()), gone)["sparkpoint_job_savepoint_failures_total"] == 1


def running(registry: Registry, name: str, port: int):
    job = new_job(registry, name)
    job.pid, job.pid_start = os.getpid(), process_start(os.getpid())  # this process stands in for the driver
    registry.save(job)
    write_agent_file(job.directory, {"state": "running", "host": "127.0.0.1", "port": port, "pid": os.getpid(),
                                     "pid_start": process_start(os.getpid())})
    return job


def test_serve_answers_in_under_a_second_with_a_hanging_agent_and_only_with_the_token(tmp_path):
    home = tmp_path / "home"
    registry = Registry(str(home))
    hanging = SilentServer()
    for index in range(19):
        job = new_job(registry, f"ended{index:02d}")
        job.end("finished", reason="done")
        registry.save(job)
    stuck = running(registry, "stuck", hanging.socket.getsockname()[1])
    (port,) = free_ports(1)
    server = subprocess.Popen([sys.executable, "-m", "sparkpoint", "--home", str(home), "metrics", "--serve",
                               str(port)], stderr=subprocess.PIPE, text=True)
    try:
        said = server.stderr.readline()
        assert f"http://127.0.0.1:{port}/metrics" in said and str(home / "metrics.token") in said
        token = (home / "metrics.token").read_text().strip()
        assert oct((home / "metrics.token").stat().st_mode & 0o777) == "0o600"
        url = f"http://127.0.0.1:{port}/metrics"
        assert requests.get(url, timeout=10).status_code == 401
        assert requests.get(url, headers={"Authorization": "Bearer wrong"}, timeout=10).status_code == 401
        wait_for(lambda: requests.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=10).ok,
                 what="the first scrape")
        timings = []
        for _ in range(3):
            started = time.monotonic()
            answer = requests.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=10)
            timings.append(time.monotonic() - started)
        assert max(timings) < 1.0, timings
        found = samples(answer.text)
        assert of_job(found, stuck)["sparkpoint_job_agent_up"] == 0 and states(found, stuck)["running"] == 1
        assert sum(1 for name, _ in found if name == "sparkpoint_job_savepoints_total") == 20
        asked = requests.get(url, headers={"Authorization": f"Bearer {token}",
                                           "Accept": "application/openmetrics-text; version=1.0.0"}, timeout=10)
        assert asked.headers["Content-Type"].startswith("application/openmetrics-text")
        assert asked.text.endswith("# EOF\n")
        assert listening_on(port) == {"127.0.0.1"}  # loopback only, unless told otherwise
    finally:
        server.terminate()
        server.wait(timeout=30)
        hanging.close()


def listening_on(port: int) -> set[str]:
    """The addresses a socket of this machine listens on at ``port`` (IPv4), from /proc/net/tcp."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, port_hex = local.split(":")
        if state == "0A" and int(port_hex, 16) == port:
            found.add(socket.inet_ntoa(bytes.fromhex(address)[::-1]))
    return found


def test_the_guide_s_table_is_the_exposition():
    rows = re.findall(r"^\| `(sparkpoint_[a-z_]+)` \| (gauge|counter) \| ([^|]*) \| (.*) \|$", GUIDE.read_text(), re.M)
    assert [(name, kind, tuple(re.findall(r"`([a-z_]+)`", labels)), meaning) for name, kind, labels, meaning
            in rows] == [(m.name, m.kind, m.labels, m.help) for m in metrics.METRICS]

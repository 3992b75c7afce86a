"""The agent's control endpoint refuses everything but its own job's authenticated, bounded requests."""

from __future__ import annotations

import json
import os
import contextlib
import signal
import socket
import threading
import time
import stat

import pytest
import requests
from clitools import closed_port

from sparkpoint.adapters.agent_client import AgentClient
from sparkpoint.jobs.registry import Registry
from sparkpoint.jobs.protocol import read_agent_file
from sparkpoint.errors import JobNotRunningError, SparkpointError
from sparkpoint.runtime.agent import Agent
from sparkpoint.runtime.query_report import spark_error_line, spark_moment
from sparkpoint.runtime.query_stop import Stop
from sparkpoint.times import iso, parse_iso, poll_until


@pytest.fixture
def agent(tmp_path):
    registry = Registry(str(tmp_path))
    job = registry.new_job("alarms", app="app.py", app_args=[], master="local[2]", submit_args=[])
    running = Agent(job.id, job.directory, registry.token(job), session_provider=lambda: None)
    running.start()
    yield running, registry, job
    running.finish(0, None)


def url(agent_, path):
    host, port = agent_.address
    return f"http://{host}:{port}{path}"


def test_token_file_is_private_and_agent_binds_loopback(agent):
    running, registry, job = agent
    mode = stat.S_IMODE(os.stat(os.path.join(job.directory, "token")).st_mode)
    assert mode == 0o600
    assert running.address[0] == "127.0.0.1"
    assert read_agent_file(job.directory)["port"] == running.address[1]


def blocked_signals(thread_id: int) -> set[signal.Signals]:
    """The signals a thread of this process blocks, as the kernel has them."""
    with open(f"/proc/self/task/{thread_id}/status") as status:
        mask = int(next(line.split()[1] for line in status if line.startswith("SigBlk:")), 16)
    return {number for number in signal.Signals if mask >> (number - 1) & 1}


def test_the_agent_leaves_sigint_and_sigterm_to_the_drivers_main_thread(agent):
    serving = next(thread for thread in threading.enumerate() if thread.name == "sparkpoint-agent")
    assert {signal.SIGINT, signal.SIGTERM} <= blocked_signals(serving.native_id)
    assert not {signal.SIGINT, signal.SIGTERM} & blocked_signals(threading.get_native_id())


def test_the_right_job_and_token_are_answered(agent):
    running, registry, job = agent
    client = AgentClient(*running.address, job.id, registry.token(job))
    assert client.status() == {"job_id": job.id, "app_id": None, "queries": [], "failures": {}, "recent_batches": {}}
    with pytest.raises(SparkpointError, match="no stop was requested"):
        client.stop_report()
    first = client.request_stop(0.1)
    assert first["done"] is True and first["queries"] == []
    assert client.request_stop(30)["queries"] == [] and client.stop_report()["done"]  # joins the stop made
    assert client.cancel() == []


@pytest.mark.parametrize("headers", [
    {},
    {"X-Sparkpoint-Job": "JOB"},
    {"X-Sparkpoint-Job": "JOB", "Authorization": "Bearer wrong"},
    {"X-Sparkpoint-Job": "other-job", "Authorization": "Bearer TOKEN"},
    {"Authorization": "Bearer TOKEN"},
])
def test_missing_or_wrong_credentials_are_refused(agent, headers):
    running, registry, job = agent
    filled = {k: v.replace("JOB", job.id).replace("TOKEN", registry.token(job)) for k, v in headers.items()}
    for method, path in (("GET", "/v1/status"), ("POST", "/v1/stop"), ("POST", "/v1/cancel")):
        response = requests.request(method, url(running, path), headers=filled, timeout=5)
        assert response.status_code == 401, (method, path, filled)


def test_oversized_bodies_foreign_hosts_and_unknown_paths_are_refused(agent):
    running, registry, job = agent
    auth = {"X-Sparkpoint-Job": job.id, "Authorization": f"Bearer {registry.token(job)}"}
    big = requests.post(url(running, "/v1/stop"), headers=auth, data=b"{" + b" " * (65 * 1024) + b"}", timeout=5)
    assert big.status_code == 413
    rebound = requests.get(url(running, "/v1/status"), headers={**auth, "Host": "evil.example:80"}, timeout=5)
    assert rebound.status_code == 403
    assert requests.get(url(running, "/v1/secrets"), headers=auth, timeout=5).status_code == 404
    assert requests.post(url(running, "/v1/stop"), headers=auth, data=b"not json", timeout=5).status_code == 400
    assert requests.post(url(running, "/v1/stop"), headers=auth, json={"timeout": "soon"}, timeout=5).status_code == 400


def test_client_errors_are_sparkpoint_errors(agent):
    running, registry, job = agent
    with pytest.raises(JobNotRunningError, match="refused /v1/status: 401"):
        AgentClient(*running.address, job.id, "wrong").status()
    with pytest.raises(JobNotRunningError, match="does not answer"):
        AgentClient("127.0.0.1", closed_port(), job.id, "x", timeout=0.5).status()


def raw_request(agent_, head: str) -> bytes:
    """What the agent answers to ``head`` (request line and headers) sent as is; b"" if it closed the connection."""
    with socket.create_connection(agent_.address, timeout=30) as connection:
        connection.sendall(head.encode() + b"\r\n\r\n{}")
        return connection.recv(64)


@pytest.mark.parametrize("length", ["-1", "abc", "1e3"])
def test_a_content_length_that_is_not_a_size_is_refused(agent, length):
    running, registry, job = agent
    host, port = running.address
    answer = raw_request(running, f"POST /v1/stop HTTP/1.1\r\nHost: {host}:{port}\r\nX-Sparkpoint-Job: {job.id}\r\n"
                                  f"Authorization: Bearer {registry.token(job)}\r\nContent-Length: {length}")
    assert answer.startswith(b"HTTP/1.0 400 "), answer


def test_connections_beyond_the_cap_are_closed_and_idle_ones_do_not_hold_the_drivers_exit(tmp_path, monkeypatch):
    import threading

    from sparkpoint.runtime import agent as agent_module
    from sparkpoint.runtime import endpoint

    monkeypatch.setattr(endpoint, "MAX_CONNECTIONS", 4)
    monkeypatch.setattr(agent_module, "DRAIN_SECONDS", 600.0)  # were idle connections waited for, finish() would hang
    registry = Registry(str(tmp_path))
    job = registry.new_job("alarms", app="app.py", app_args=[], master="local[2]", submit_args=[])
    running = Agent(job.id, job.directory, registry.token(job), session_provider=lambda: None)
    running.start()
    idle = [socket.create_connection(running.address, timeout=30) for _ in range(4)]
    extra = [socket.create_connection(running.address, timeout=30) for _ in range(3)]
    try:
        assert [connection.recv(1) for connection in extra] == [b"", b"", b""]  # closed by the agent at once
        finishing = threading.Thread(target=running.finish, args=(0, None))
        finishing.start()
        finishing.join(timeout=30)
        assert not finishing.is_alive()
    finally:
        for connection in idle + extra:
            connection.close()


@pytest.mark.parametrize("request_bytes", [b"", b"GET /v1/status HTTP/1.1\r\nHost: x\r\nX-A: b"],
                         ids=["silent", "trickling"])
def test_a_connection_that_does_not_send_its_request_in_time_is_closed(tmp_path, monkeypatch, request_bytes):
    """A connection has REQUEST_SECONDS in all for its request: a byte every 0.1 s (4 s of it here) kept each read
    inside the socket's timeout, and held a connection slot for ever."""
    from sparkpoint.runtime import endpoint

    monkeypatch.setattr(endpoint, "REQUEST_SECONDS", 0.5)
    registry = Registry(str(tmp_path))
    job = registry.new_job("alarms", app="app.py", app_args=[], master="local[2]", submit_args=[])
    running = Agent(job.id, job.directory, registry.token(job), session_provider=lambda: None)
    running.start()
    try:
        with socket.create_connection(running.address, timeout=30) as connection:
            def trickle():
                for byte in request_bytes:
                    with contextlib.suppress(OSError):  # once closed, a write may fail
                        connection.sendall(bytes([byte]))
                    time.sleep(0.1)

            sender = threading.Thread(target=trickle)
            sender.start()
            connection.settimeout(2.5)
            try:
                closed = connection.recv(1) == b""
            except ConnectionResetError:
                closed = True
            except TimeoutError:
                closed = False
            sender.join()
            assert closed
    finally:
        running.finish(0, None)


def test_finish_records_how_the_application_ended(tmp_path):
    registry = Registry(str(tmp_path))
    job = registry.new_job("alarms", app="app.py", app_args=[], master="local[2]", submit_args=[])
    running = Agent(job.id, job.directory, registry.token(job), session_provider=lambda: None)
    running.start()
    running.failures["alarms"] = "[STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE] Provided key schema does not match"
    running.finish(1, "StreamingQueryException: ...")
    record = read_agent_file(job.directory)
    assert record["state"] == "failed" and record["exit_code"] == 1
    assert record["error"] == ("query 'alarms' failed: [STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE] "
                               "Provided key schema does not match")
    running._write_state("running")  # a late write from the watcher thread
    assert read_agent_file(job.directory)["state"] == "failed"


def test_spark_error_line_keeps_the_innermost_error_class():
    text = ("[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: "
            "[STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE] Provided key schema does not match\n at org.apache...")
    assert spark_error_line(text) == "[STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE] Provided key schema does not match"
    assert spark_error_line("") == spark_error_line(" \n ") == "unknown error"
    assert spark_error_line("Py4JError: boom\n at x") == "Py4JError: boom"  # no error class: the first line
    wrapped = ("[STREAM_FAILED] Query [id = 1c, runId = 2d] terminated with exception: assertion failed: There are [1] "
               "sources in the checkpoint offsets and now there are [2] sources requested by the query.\n\tat x")
    assert spark_error_line(wrapped) == ("assertion failed: There are [1] sources in the checkpoint offsets and now "
                                         "there are [2] sources requested by the query.")
    # The application's own error, raised in foreachBatch: the line naming it, not py4j's wrapper.
    raised = ("[STREAM_FAILED] Query [id = 1c, runId = 2d] terminated with exception: py4j.Py4JException: An "
              "exception was raised by the Python Proxy. Return Message: Traceback (most recent call last):\n"
              '  File "app.py", line 45, in write\n    raise RuntimeError("v2 cannot handle batch 9")\n'
              "RuntimeError: v2 cannot handle batch 9\n\n\tat py4j.Protocol.getReturnValue(Protocol.java:476)")
    assert spark_error_line(raised) == "RuntimeError: v2 cannot handle batch 9"
    # The same as Spark 4.3 may report it (seen in CI): the error class, and the line under the traceback.
    classed = raised.replace("py4j.Py4JException: An exception", "[FOREACH_BATCH_USER_FUNCTION_ERROR] An error "
                             "occurred in the user provided function in foreach batch sink. Reason: An exception")
    assert spark_error_line(classed) == "[FOREACH_BATCH_USER_FUNCTION_ERROR] RuntimeError: v2 cannot handle batch 9"


def started_agent(registry, job, active: list):
    """A started agent whose application runs the fake queries in ``active``, and a client of it."""
    from types import SimpleNamespace

    session = SimpleNamespace(streams=SimpleNamespace(active=active, addListener=lambda listener: None),
                              sparkContext=SimpleNamespace(applicationId="local-1"), version="4.3.0")
    running = Agent(job.id, job.directory, registry.token(job), session_provider=lambda: session)
    running.start()
    return running, AgentClient(*running.address, job.id, registry.token(job))


def test_a_stop_that_ends_the_application_still_gets_its_outcome(tmp_path):
    """Stopping the queries lets the application end, and the bootstrap then finishes the agent: it must
    keep answering until the caller has read the stop's final report (and write that report in its record)."""
    import threading
    from types import SimpleNamespace

    registry = Registry(str(tmp_path))
    job = registry.new_job("alarms", app="app.py", app_args=[], master="local[2]", submit_args=[])
    finished = threading.Event()
    answered = threading.Event()

    class EndingQuery:
        name, id = "alarms", "6a1b0c5e-0000-4000-8000-000000000001"
        status = {"isTriggerActive": False}
        lastProgress = None
        _jsq = SimpleNamespace(
            streamingQuery=lambda: SimpleNamespace(resolvedCheckpointRoot=lambda: "file:/ckpt/alarms",
                                                 sink=lambda: "FileSink[file:/out/alarms]"))

        def stop(self):
            # The application's main thread returns from awaitTermination and the bootstrap finishes.
            threading.Thread(target=lambda: (running.finish(0, None), finished.set())).start()
            answered.wait(30)  # still stopping when the request is answered: its reply cannot hold the outcome

    running, client = started_agent(registry, job, [EndingQuery()])
    assert client.request_stop(5)["done"] is False
    answered.set()
    assert poll_until(lambda: "stop" in read_agent_file(job.directory), 10, 0.02), "no final record with the stop"
    assert read_agent_file(job.directory)["stop"]["done"] is True
    # Nobody has read the final report yet: finish() waits, and the driver with it.
    assert not finished.wait(0.5)
    report = client.stop_report()
    # A session without Spark's internals: the fallback, stopping when no trigger is active.
    assert report["done"] and report["queries"] == [
        {"name": "alarms", "id": EndingQuery.id, "checkpoint": "file:/ckpt/alarms",
         "sink": "FileSink[file:/out/alarms]", "sink_log_interval": None, "delta_writes": [], "sources": [],
         "state": "stopped", "at_boundary": True, "how": "fallback", "seconds": report["queries"][0]["seconds"],
         "real_time": False}]
    assert finished.wait(5) and read_agent_file(job.directory)["state"] == "finished"


def test_a_second_stop_request_joins_the_stop_under_way(tmp_path):
    from types import SimpleNamespace

    registry = Registry(str(tmp_path))
    job = registry.new_job("alarms", app="app.py", app_args=[], master="local[2]", submit_args=[])

    class BusyQuery:  # a trigger active for its first 400 looks (~2 s): the fallback waits for its end
        name, id, lastProgress, looks, stops = "alarms", "q-1", {"batchId": 40}, 0, 0
        _jsq = SimpleNamespace(streamingQuery=lambda: SimpleNamespace(resolvedCheckpointRoot=lambda: "file:/c",
                                                                      sink=lambda: "ForeachBatchSink"))

        @property
        def status(self):
            self.looks += 1
            return {"isTriggerActive": self.looks <= 400}

        def stop(self):
            self.stops += 1

    query = BusyQuery()
    running, client = started_agent(registry, job, [query])
    try:
        first = client.request_stop(30)
        assert not first["done"] and first["queries"][0]["batch_id"] == 41  # waiting for the batch after 40
        second = client.request_stop(5)
        assert not second["done"] and second["seconds"] >= first["seconds"]
        assert poll_until(lambda: client.stop_report()["done"], 10, 0.02), "the stop never ended"
        assert query.stops == 1  # one stop, not two
    finally:
        running.finish(0, None)


def test_a_stop_waits_for_a_busy_query_on_the_clock_it_is_given():
    from types import SimpleNamespace

    now = [0.0]

    class BusyQuery:  # no stream thread to lock (no py4j gateway): the fallback waits for its trigger's end
        name, id, lastProgress, stops = "alarms", "q-1", {"batchId": 40}, 0
        _jsq = SimpleNamespace(streamingQuery=lambda: SimpleNamespace(resolvedCheckpointRoot=lambda: "file:/c",
                                                                      sink=lambda: "ForeachBatchSink"))

        @property
        def status(self):
            return {"isTriggerActive": now[0] < 20.0}

        def stop(self):
            self.stops += 1

    query = BusyQuery()
    stop = Stop([query], 30.0, None, "4.3.0", clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))
    stop.join(30)
    (outcome,) = stop.report()["queries"]
    assert (outcome["at_boundary"], outcome["how"], query.stops) == (True, "fallback", 1)
    assert 20.0 <= outcome["seconds"] < 20.1


def test_a_stop_before_the_queries_start_does_not_stick_and_a_failing_stop_still_stops(tmp_path):
    from types import SimpleNamespace

    registry = Registry(str(tmp_path))
    job = registry.new_job("alarms", app="app.py", app_args=[], master="local[2]", submit_args=[])
    active: list = []
    running, client = started_agent(registry, job, active)
    try:
        first = client.request_stop(5)
        assert first["done"] is True and first["queries"] == []

        class BrokenQuery:  # py4j fails half-way, as when the JVM goes away
            name, id, lastProgress, stopped = "alarms", "q-1", None, False
            _jsq = SimpleNamespace(streamingQuery=lambda: SimpleNamespace(resolvedCheckpointRoot=lambda: "file:/c",
                                                                          sink=lambda: "ForeachBatchSink"))

            @property
            def status(self):
                raise RuntimeError("Py4JNetworkError")

            def stop(self):
                self.stopped = True

        active.append(BrokenQuery())  # the application starts its query after the first stop
        client.request_stop(5)
        report = poll_until(lambda: (answer := client.stop_report())["done"] and answer, 10, 0.02)
        assert report, "the stop never ended"
        (query,) = report["queries"]
        assert (query["name"], query["state"], query["at_boundary"], query["how"]) == (
            "alarms", "stopped", False, "error: RuntimeError")
        assert active[0].stopped
    finally:
        running.finish(0, None)


def test_an_agent_of_an_earlier_sparkpoint_answers_a_stop_at_once_and_is_understood():
    """Jobs outlive CLI upgrades: an earlier agent replied to POST /v1/stop only once stopped, with "stopped"."""
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    earlier = [{"name": "alarms", "id": "q-1", "checkpoint": "file:/c/alarms", "at_boundary": True}]

    class EarlierAgent(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            body = json.dumps({"stopped": earlier}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = HTTPServer(("127.0.0.1", 0), EarlierAgent)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        report = AgentClient(*server.server_address[:2], "job", "token").request_stop(5)
    finally:
        server.shutdown()
    assert report == {"done": True, "seconds": None, "queries": earlier}


def real_time_query(batch_ms: int, began_ms_ago: int):
    """A query as py4j shows a real-time one (Spark 4.1+: its trigger, the trigger clock, the batch in flight's
    start), its batch in flight begun ``began_ms_ago``; it counts its stops."""
    from types import SimpleNamespace

    now_ms = 1_800_000_000_000
    trigger = SimpleNamespace(getClass=lambda: SimpleNamespace(
        getName=lambda: "org.apache.spark.sql.execution.streaming.RealTimeTrigger"), batchDurationMs=lambda: batch_ms)
    execution = SimpleNamespace(
        trigger=lambda: trigger, resolvedCheckpointRoot=lambda: "file:/c", sink=lambda: "KafkaTable",
        triggerClock=lambda: SimpleNamespace(getTimeMillis=lambda: now_ms),
        getLatestExecutionContext=lambda: SimpleNamespace(currentTriggerStartTimestamp=lambda: now_ms - began_ms_ago))

    class RealTimeQuery:
        name, id, runId, lastProgress, stops = "relay", "q-1", "r-1", {"batchId": 4}, 0
        status = {"isTriggerActive": False}  # for the fallback stop, the only one without Spark behind the fake
        _jsq = SimpleNamespace(streamingQuery=lambda: execution)

        def stop(self):
            self.stops += 1

    return RealTimeQuery()


@pytest.mark.parametrize(("began_ms_ago", "ends_within"), [(100_000, 203.0), (301_000, 303.0)],
                         ids=["in flight", "ended, the next not begun"])
def test_a_stop_that_would_cut_a_real_time_batch_short_is_refused_and_stops_nothing(tmp_path, began_ms_ago,
                                                                                      ends_within):
    registry = Registry(str(tmp_path))
    job = registry.new_job("relay", app="app.py", app_args=[], master="local[2]", submit_args=[])
    query = real_time_query(300_000, began_ms_ago)
    running, client = started_agent(registry, job, [query])
    try:
        assert client.status()["queries"][0]["real_time_batch_seconds"] == 300.0
        refused = client.request_stop(60)
        # Any batch ends within its length and the margin: the timeout the refusal asks for always does.
        assert refused == {"done": True, "seconds": 0.0, "queries": [], "refused": {
            "queries": [{"name": "relay", "batch_seconds": 300.0, "ends_within": ends_within}],
            "needed_seconds": 303}}
        assert query.stops == 0
        with pytest.raises(JobNotRunningError, match="no stop was requested"):
            client.stop_report()  # nothing under way
        # Long enough: the stop goes ahead.
        client.request_stop(400)
        assert poll_until(lambda: client.stop_report()["done"], 10, 0.02) and query.stops == 1
    finally:
        running.finish(0, None)


def test_a_milestone_is_when_spark_says_it_happened_not_when_a_listener_heard_of_it():
    # A restore's first batch: its trigger began at 10:00:01.250 and took 4,330 ms, its commit within.
    assert spark_moment("2026-11-29T10:00:01.250Z", 4330) == "2026-11-29T10:00:05.580Z"
    assert spark_moment("2026-11-29T10:00:01.250Z") == "2026-11-29T10:00:01.250Z"  # a query's start
    assert spark_moment("2026-11-29T10:00:01.250Z", 0.5) == "2026-11-29T10:00:01.250Z"
    for odd in (None, -5, True, "4330", float("nan"), float("inf"), 1e300, 10**400):
        assert spark_moment("2026-11-29T10:00:01.250Z", odd) == "2026-11-29T10:00:01.250Z"
    # Spark's time missing or malformed: now, as before
    before = time.time()
    for odd in (None, "", "yesterday", 12, "2026-13-45T99:00:00Z"):
        assert before - 1 <= parse_iso(spark_moment(odd, 10)) <= time.time() + 1


def test_the_listener_notes_spark_s_times_never_before_what_came_before_them(tmp_path):
    from types import SimpleNamespace

    registry = Registry(str(tmp_path))
    job = registry.new_job("alarms", app="app.py", app_args=[], master="local[2]", submit_args=[])
    listeners = []
    session = SimpleNamespace(streams=SimpleNamespace(active=[], addListener=listeners.append),
                              sparkContext=SimpleNamespace(applicationId="local-1"), version="4.3.0")
    running = Agent(job.id, job.directory, registry.token(job), session_provider=lambda: session)
    running.start()
    try:
        assert poll_until(lambda: listeners, 30, 0.02)
        tracker = listeners[0]

        def progress(name, batch, timestamp, took_ms):
            return SimpleNamespace(progress=SimpleNamespace(
                name=name, id=f"id-{name}", batchId=batch, timestamp=timestamp, numInputRows=10,
                inputRowsPerSecond=1.0, processedRowsPerSecond=2.0, durationMs={"triggerExecution": took_ms}))

        # Heard of late (a restore's first batch, the JVM busy): noted when Spark says it happened
        later = float(int(time.time()) + 60)  # after the session's milestone, whatever this machine's speed
        tracker.onQueryStarted(SimpleNamespace(name="counts", id="id-counts", runId="run-1", timestamp=iso(later)))
        tracker.onQueryProgress(progress("counts", 5, iso(later + 0.25), 4330))
        # A first batch whose Spark time is before its query was noted started (found running when the listener
        # came): not noted before that start
        running.note_milestone("totals", "started", {"at": iso(later + 10)})
        tracker.onQueryProgress(progress("totals", 2, iso(later - 30), 100))

        def startup():
            record = read_agent_file(job.directory).get("startup") or {}
            return record if "first_batch" in record.get("queries", {}).get("totals", {}) else None

        noted = poll_until(startup, 30, 0.05)
        assert noted["queries"]["counts"]["started"] == {"at": iso(later)}
        assert abs(parse_iso(noted["queries"]["counts"]["first_batch"]["at"]) - (later + 0.25 + 4.33)) < 0.002
        assert noted["queries"]["counts"]["first_batch"]["duration_ms"] == {"triggerExecution": 4330}
        assert noted["queries"]["totals"]["first_batch"]["at"] == iso(later + 10)
    finally:
        running.finish(0, None)

"""The one HTTP layer: which requests are retried, and how failures read, alike through requests (session) and
through http.client (plain_session, a job's agent's)."""

from __future__ import annotations

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
import urllib3.util.connection

from sparkpoint.adapters import http
from sparkpoint.errors import JobNotRunningError, SparkFailureError
from test_http_proxy import serve


@pytest.fixture
def refusing(monkeypatch):
    """Every new connection is refused the first ``refusals`` times (a driver whose agent slots are full)."""
    attempts = {"count": 0, "refusals": 99}

    def refused_first(real):
        def create_connection(*args, **kwargs):
            attempts["count"] += 1
            if attempts["count"] <= attempts["refusals"]:
                raise ConnectionRefusedError("refused")
            return real(*args, **kwargs)
        return create_connection

    for module in (urllib3.util.connection, socket):  # requests' connections, then http.client's
        monkeypatch.setattr(module, "create_connection", refused_first(module.create_connection))
    return attempts


CLIENTS = pytest.mark.parametrize("client", [http.session, http.plain_session], ids=["requests", "http.client"])


def unreachable(reason):
    return JobNotRunningError(f"no answer: {reason}")


@CLIENTS
def test_a_read_outlives_two_refused_connections(refusing, client):
    server = serve({"ok": True})
    refusing["refusals"] = 2
    url = f"http://127.0.0.1:{server.server_address[1]}/v1/status"
    assert http.call(client(), "GET", url, unreachable=unreachable, what="x", timeout=2) == (200, {"ok": True})
    assert refusing["count"] == 3
    server.shutdown()


@CLIENTS
def test_a_request_never_sent_is_tried_three_times_then_reported(refusing, client):
    for method in ("GET", "POST"):  # a POST refused at connect was never sent: trying it again cannot repeat it
        refusing["count"] = 0
        with pytest.raises(JobNotRunningError, match="^no answer: ConnectionError$"):
            http.call(client(), method, "http://127.0.0.1:1/v1/stop", unreachable=unreachable, what="x",
                      timeout=2)
        assert refusing["count"] == 3, method


class Hangup(BaseHTTPRequestHandler):
    """Reads a request, then closes the connection without an answer (a driver dying mid-request)."""

    def log_message(self, *args):
        pass

    def do_POST(self):
        self.server.received += 1
        self.close_connection = True
        self.connection.shutdown(2)


@CLIENTS
def test_a_request_that_was_sent_is_never_repeated(client):
    server = HTTPServer(("127.0.0.1", 0), Hangup)
    server.received = 0
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1/stop"
    try:
        with pytest.raises(JobNotRunningError, match="^no answer: ConnectionError$"):
            http.call(client(), "POST", url, json={}, unreachable=unreachable, what="x", timeout=2)
        assert server.received == 1
    finally:
        server.shutdown()


class Plain(BaseHTTPRequestHandler):
    """Answers every GET with ``self.server.status`` and an HTML body, as a login page or a proxy would."""

    def log_message(self, *args):
        pass

    def do_GET(self):
        data = b"<html>please log in</html>"
        self.send_response(self.server.status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@CLIENTS
@pytest.mark.parametrize("status", [200, 401])
def test_an_answer_that_is_not_json(status, client):
    server = HTTPServer(("127.0.0.1", 0), Plain)
    server.status = status
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/api/v1/applications"
    try:
        if status == 200:  # a success must be JSON: whoever answered is no Spark endpoint
            with pytest.raises(SparkFailureError, match=f"^the Spark UI answered {url} with status 200, not JSON"):
                http.call(client(), "GET", url, unreachable=unreachable, what="the Spark UI", timeout=2)
        else:  # an error status is the caller's to word (a refused token, say): it gets the status and the text
            assert http.call(client(), "GET", url, unreachable=unreachable, what="x", timeout=2) == (
                401, "<html>please log in</html>")
    finally:
        server.shutdown()


@pytest.mark.parametrize("status", [503, 200])
def test_a_master_answering_an_error_page_is_a_spark_failure(status):
    """A master still starting answers its JSON page with an HTML error: cluster start polls through it
    (status() suppresses sparkpoint's errors) instead of dying on a string where a JSON object belongs."""
    from sparkpoint.adapters.cluster_managers.standalone import StandaloneMaster

    server = HTTPServer(("127.0.0.1", 0), Plain)
    server.status = status
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        master = StandaloneMaster("spark://127.0.0.1:7077", {"spark.master.ui.port": str(port)}, timeout=2)
        with pytest.raises(SparkFailureError, match=f"answered http://127.0.0.1:{port}/json/ with status {status}"):
            master.overview()
    finally:
        server.shutdown()


@CLIENTS
def test_an_answer_that_trickles_ends_at_the_timeout(client):
    from test_hostile_metrics import TricklingServer

    trickler = TricklingServer(every=0.1, seconds=30)
    began = time.monotonic()
    try:
        with pytest.raises(JobNotRunningError, match="^no answer: its answer did not arrive whole within 1 s$"):
            http.call(client(), "GET", f"http://127.0.0.1:{trickler.port}/v1/status", unreachable=unreachable,
                      what="x", timeout=1)
        assert time.monotonic() - began < 5  # each byte came within the socket's timeout: the deadline ended it
    finally:
        trickler.close()

"""No secret goes through an HTTP proxy: with ``http_proxy`` set, a real local proxy must see nothing."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sparkpoint.adapters.agent_client import AgentClient
from sparkpoint.adapters.spark_ui import applications
from sparkpoint.adapters.cluster_managers.standalone import JWS_KEY, StandaloneMaster


class Recorder(BaseHTTPRequestHandler):
    """Answers every request with ``self.server.answer`` and records what it saw."""

    def log_message(self, *args):
        pass

    def _answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        self.server.seen.append({"line": self.requestline, "authorization": self.headers.get("Authorization"),
                                 "body": self.rfile.read(length).decode()})
        data = json.dumps(self.server.answer).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _answer


def serve(answer):
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    server.seen, server.answer = [], answer
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def proxy(monkeypatch):
    server = serve({"proxied": True})
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{server.server_address[1]}")
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    yield server
    server.shutdown()


def test_the_agents_token_does_not_go_through_a_proxy(proxy):
    agent = serve({"job_id": "job-1", "queries": []})
    try:
        assert AgentClient(*agent.server_address[:2], "job-1", "the-token").status()["job_id"] == "job-1"
    finally:
        agent.shutdown()
    assert proxy.seen == []
    assert agent.seen[0]["authorization"] == "Bearer the-token"


def test_the_masters_token_and_the_cluster_secret_do_not_go_through_a_proxy(proxy):
    master = serve({"success": True, "submissionId": "driver-1"})
    properties = {"spark.master.rest.port": str(master.server_address[1]), "spark.authenticate": "true",
                  "spark.authenticate.secret": "rpc-secret", JWS_KEY: "a" * 64}
    try:
        created = StandaloneMaster("spark://127.0.0.1:7077", properties).create("app.py", [], {}, {})
    finally:
        master.shutdown()
    assert created == "driver-1" and proxy.seen == []
    assert "rpc-secret" in master.seen[0]["body"] and master.seen[0]["authorization"].startswith("Bearer ")


def test_a_driver_ui_is_asked_directly(proxy):
    ui = serve([])
    try:
        assert applications(f"http://127.0.0.1:{ui.server_address[1]}") == []
    finally:
        ui.shutdown()
    assert proxy.seen == [] and ui.seen[0]["line"].startswith("GET /api/v1/applications")

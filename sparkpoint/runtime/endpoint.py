"""The agent's control endpoint: HTTP on loopback by default, for the CLI's status, stop and cancel requests.

Every request must carry the job's id and its secret token; bodies are capped, connections are capped and must
send their request within REQUEST_SECONDS, and a Host header that is not the agent's own is refused (no DNS
rebinding from a browser; a client that reaches a non-loopback agent directly sends any Host it likes, so there
the token is the only guard).
"""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any, Protocol

from sparkpoint import json_input
from sparkpoint.adapters.http_server import BoundedServer, QuietHandler

MAX_BODY = 64 * 1024
MAX_CONNECTIONS = 32  # each holds a thread: beyond this, the oldest still to send its request is closed
REQUEST_SECONDS = 10.0  # for a connection to send its request (an idle one holds its thread until then)


class Controlled(Protocol):
    """What the endpoint asks of the agent it serves (runtime.agent.Agent), each request answered by one call."""

    @property
    def address(self) -> tuple[str, int]: ...

    def authorized(self, headers) -> bool: ...

    def status(self) -> dict[str, Any]: ...

    def stop_report(self) -> dict[str, Any] | None: ...

    def begin_stop(self, timeout: float) -> dict[str, Any]: ...

    def cancel_on_request(self) -> list[str]: ...


class ControlServer(BoundedServer):
    def __init__(self, address: tuple[str, int], agent: Controlled):
        super().__init__(address, ControlHandler, MAX_CONNECTIONS)
        self.agent = agent


class ControlHandler(QuietHandler):
    server: ControlServer
    server_version = "sparkpoint-agent"

    def setup(self) -> None:
        self.request_seconds = REQUEST_SECONDS  # read per connection: tests shorten it
        super().setup()

    def _reply(self, status: HTTPStatus, body: dict[str, Any]) -> None:
        self.reply(status, json.dumps(body).encode(), "application/json")

    def _admit(self) -> dict[str, Any] | None:
        agent = self.server.agent
        host, port = agent.address
        if self.headers.get("Host") not in (f"{host}:{port}", f"localhost:{port}", f"127.0.0.1:{port}"):
            self._reply(HTTPStatus.FORBIDDEN, {"error": "unexpected Host header"})
            return None
        if not agent.authorized(self.headers):
            self._reply(HTTPStatus.UNAUTHORIZED, {"error": "missing or wrong token for this job"})
            return None
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0:
            self._reply(HTTPStatus.BAD_REQUEST, {"error": "Content-Length must be a number of bytes"})
            return None
        if length > MAX_BODY:
            self._reply(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, {"error": "body too large"})
            return None
        try:
            body = json_input.loads(self.rfile.read(length) or b"{}") if length else {}
        except json.JSONDecodeError:
            self._reply(HTTPStatus.BAD_REQUEST, {"error": "body is not JSON"})
            return None
        return body if isinstance(body, dict) else {}

    def do_GET(self) -> None:
        if self._admit() is None:
            return
        agent = self.server.agent
        if self.path == "/v1/status":
            self._reply(HTTPStatus.OK, agent.status())
        elif self.path == "/v1/stop":
            report = agent.stop_report()
            if report is None:
                self._reply(HTTPStatus.NOT_FOUND, {"error": "no stop was requested"})
            else:
                self._reply(HTTPStatus.OK, {"stop": report})
        else:
            self._reply(HTTPStatus.NOT_FOUND, {"error": "no such endpoint"})

    def do_POST(self) -> None:
        body = self._admit()
        if body is None:
            return
        agent = self.server.agent
        if self.path == "/v1/stop":
            try:
                timeout = float(body.get("timeout", 60))
            except (TypeError, ValueError):
                self._reply(HTTPStatus.BAD_REQUEST, {"error": "timeout must be a number of seconds"})
                return
            # A day at most: a real-time query's batch may last hours, and its stop must outlast it.
            self._reply(HTTPStatus.OK, {"stop": agent.begin_stop(max(0.0, min(timeout, 86400.0)))})
        elif self.path == "/v1/cancel":
            self._reply(HTTPStatus.OK, {"cancelled": agent.cancel_on_request()})
        else:
            self._reply(HTTPStatus.NOT_FOUND, {"error": "no such endpoint"})

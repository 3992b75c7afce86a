"""`sparkpoint metrics --serve`: one HTTP endpoint, ``GET /metrics``, for Prometheus to scrape.

Every request needs ``Authorization: Bearer <token>`` (Prometheus' ``authorization.credentials_file``; the
scheme in any case, as RFC 7235 has it); the token is compared in constant time. The response is computed per
request by ``render``, which shares one scrape among the scrapers that ask while it runs (see
sparkpoint.jobs.metrics): two clients at once do not double the load on the agents a scrape asks.
"""

from __future__ import annotations

import hmac
import sys
from collections.abc import Callable
from http import HTTPStatus

from sparkpoint.adapters.http_server import BoundedServer, QuietHandler

# Connections at once: eight scrapers, and as many more for connections that have not sent a request yet (an
# idle one is closed to make room for a new one when all are taken).
MAX_CONNECTIONS = 16
# What a scrape renders for an Accept header: (body, Content-Type).
Render = Callable[[str], tuple[bytes, str]]


class ScrapeServer(BoundedServer):
    def __init__(self, address: tuple[str, int], token: str, render: Render):
        super().__init__(address, ScrapeHandler, MAX_CONNECTIONS)
        self.token = token
        self.render = render


class ScrapeHandler(QuietHandler):
    server: ScrapeServer
    server_version = "sparkpoint-metrics"

    def _text(self, status: HTTPStatus, line: str, **headers: str) -> None:
        self.reply(status, (line + "\n").encode(), "text/plain; charset=utf-8", **headers)

    def _authorized(self) -> bool:
        scheme, _, credentials = self.headers.get("Authorization", "").strip().partition(" ")
        matches = hmac.compare_digest(credentials.strip().encode(), self.server.token.encode())
        return matches and scheme.lower() == "bearer"

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0] != "/metrics":
            self._text(HTTPStatus.NOT_FOUND, "sparkpoint serves /metrics only")
            return
        if not self._authorized():
            self._text(HTTPStatus.UNAUTHORIZED, "missing or wrong bearer token", **{"WWW-Authenticate": "Bearer"})
            return
        try:
            data, content_type = self.server.render(self.headers.get("Accept", ""))
        except Exception as exc:  # noqa: BLE001 - a bug's: Prometheus shows the 500, stderr the cause
            sys.stderr.write(f"sparkpoint: error: the scrape failed: {type(exc).__name__}: {exc}\n")
            self._text(HTTPStatus.INTERNAL_SERVER_ERROR, "the scrape failed: see sparkpoint's output")
            return
        self.reply(HTTPStatus.OK, data, content_type)

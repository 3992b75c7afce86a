"""`sparkpoint metrics --serve`: one HTTP endpoint, ``GET /metrics``, for Prometheus to scrape.

Every request needs ``Authorization: Bearer <token>`` (Prometheus' ``authorization.credentials_file``); the
token is compared in constant time. Scrapes run one at a time: Prometheus scrapes a target serially, and two
clients at once must not double the load on the agents a scrape asks. The response is computed per request.
"""

from __future__ import annotations

import hmac
import sys
import threading
from collections.abc import Callable
from http import HTTPStatus

from sparkpoint.adapters.http_server import BoundedServer, QuietHandler

MAX_CONNECTIONS = 8
# What a scrape renders for an Accept header: (body, Content-Type).
Render = Callable[[str], tuple[bytes, str]]


class ScrapeServer(BoundedServer):
    def __init__(self, address: tuple[str, int], token: str, render: Render):
        super().__init__(address, ScrapeHandler, MAX_CONNECTIONS)
        self.token = token
        self.render = render
        self.scraping = threading.Lock()


class ScrapeHandler(QuietHandler):
    server: ScrapeServer
    server_version = "sparkpoint-metrics"

    def _text(self, status: HTTPStatus, line: str, **headers: str) -> None:
        self.reply(status, (line + "\n").encode(), "text/plain; charset=utf-8", **headers)

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0] != "/metrics":
            self._text(HTTPStatus.NOT_FOUND, "sparkpoint serves /metrics only")
            return
        given = self.headers.get("Authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {self.server.token}".encode()):
            self._text(HTTPStatus.UNAUTHORIZED, "missing or wrong bearer token", **{"WWW-Authenticate": "Bearer"})
            return
        try:
            with self.server.scraping:
                data, content_type = self.server.render(self.headers.get("Accept", ""))
        except Exception as exc:  # noqa: BLE001 - a bug's: Prometheus shows the 500, stderr the cause
            sys.stderr.write(f"sparkpoint: error: the scrape failed: {type(exc).__name__}: {exc}\n")
            self._text(HTTPStatus.INTERNAL_SERVER_ERROR, "the scrape failed: see sparkpoint's output")
            return
        self.reply(HTTPStatus.OK, data, content_type)

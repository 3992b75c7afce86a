"""The one HTTP server of sparkpoint's endpoints (the agent's control endpoint in a driver, `metrics --serve`):
a thread per connection, at most ``max_connections`` of them, quiet (the user's terminal and the driver's log
are not its to fill), and counting the requests in flight so that a shutdown can let their replies out.
Only the standard library: it runs in the user's driver too."""

from __future__ import annotations

import contextlib
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from sparkpoint.times import poll_until


class BoundedServer(ThreadingHTTPServer):
    """Connections beyond ``max_connections`` are closed at once: connections that never send a request cannot
    pile up threads."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], max_connections: int):
        super().__init__(address, handler)
        self._slots = threading.BoundedSemaphore(max_connections)
        self._lock = threading.Lock()
        self._in_flight = 0

    def process_request(self, request, client_address) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def handle_error(self, request, client_address) -> None:
        pass  # a client gone mid-reply: nothing to tell

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def count_request(self, delta: int) -> None:
        with self._lock:
            self._in_flight += delta

    def drain(self, seconds: float) -> None:
        """Until no request is in flight, for at most ``seconds``."""
        poll_until(lambda: not self._in_flight, seconds, 0.01)


class QuietHandler(BaseHTTPRequestHandler):
    """Logs nothing, replies with a length, and counts its request in flight (see BoundedServer.drain) from its
    headers on, not while a connection merely waits to send one. A connection has ``request_seconds`` in all to
    send its request line and headers: a socket timeout alone bounds each read, and a byte every few seconds
    would hold a connection slot for ever."""

    server: BoundedServer
    request_seconds = 10.0

    def setup(self) -> None:
        self.timeout = self.request_seconds
        super().setup()
        self._parsed = False
        self._deadline = threading.Timer(self.request_seconds, self._too_slow)
        self._deadline.daemon = True
        self._deadline.start()

    def _too_slow(self) -> None:
        if not self._parsed:
            with contextlib.suppress(OSError):  # the client is gone already
                self.connection.shutdown(socket.SHUT_RDWR)

    def finish(self) -> None:
        self._deadline.cancel()
        super().finish()

    def log_message(self, *args) -> None:
        pass

    def reply(self, status: int, data: bytes, content_type: str, **headers: str) -> None:
        self.send_response(status)
        for name, value in {"Content-Type": content_type, **headers, "Content-Length": str(len(data))}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def parse_request(self) -> bool:
        parsed = super().parse_request()
        self._parsed = True
        self._deadline.cancel()
        if parsed:
            self.server.count_request(+1)
            self._counted = True
        return parsed

    def handle_one_request(self) -> None:
        self._counted = False
        try:
            super().handle_one_request()
        finally:
            if self._counted:
                self.server.count_request(-1)

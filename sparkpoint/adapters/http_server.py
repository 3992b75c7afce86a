"""The one HTTP server of sparkpoint's endpoints (the agent's control endpoint in a driver, `metrics --serve`):
a thread per connection, at most ``max_connections`` of them, quiet (the user's terminal and the driver's log
are not its to fill), and counting the requests in flight so that a shutdown can let their replies out.
Connections that have not sent their request cannot keep a client that does out: when every slot is taken,
the oldest such connection is closed to make room. Only the standard library: it runs in the user's driver too."""

from __future__ import annotations

import contextlib
import signal
import socket
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from sparkpoint.times import poll_until


# How long a new connection may wait for a slot: one being freed by a reply just sent (its client may connect
# again before the thread that answered it has ended), or by the connection closed to make room.
SLOT_SECONDS = 1.0
_ENDING_SIGNALS = {signal.SIGINT, signal.SIGTERM}


class BoundedServer(ThreadingHTTPServer):
    """At most ``max_connections`` connections, each on a thread. A connection beyond them closes the oldest one
    still waiting to send its request, and takes its slot once freed; when every slot is answering a request,
    it waits SLOT_SECONDS for one, and is closed if none is freed. ``address``'s host may be IPv6."""

    daemon_threads = True
    # The listen backlog (socketserver's is 5): while the accept loop waits for a slot, connections queue here;
    # past it the kernel drops them and the client's retry comes a second later.
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], max_connections: int):
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        super().__init__(address, handler)
        self._slots = threading.BoundedSemaphore(max_connections)
        self._lock = threading.Lock()
        self._in_flight = 0
        self._waiting: dict[socket.socket, None] = {}  # connections yet to send a request, oldest first

    def process_request(self, request, client_address) -> None:
        if not self._slots.acquire(blocking=False):
            self._close_oldest_waiting()
            if not self._slots.acquire(timeout=SLOT_SECONDS):
                self.shutdown_request(request)
                return
        try:
            with _ending_signals_blocked():
                super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def serve_in_background(self, name: str, poll_interval: float) -> threading.Thread:
        """serve_forever on a daemon thread of its own (as the agent serves in a driver whose main thread runs
        the application), which leaves SIGINT and SIGTERM to the main thread as the connections' threads do."""
        thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": poll_interval}, name=name,
                                  daemon=True)
        with _ending_signals_blocked():
            thread.start()
        return thread

    def handle_error(self, request, client_address) -> None:
        pass  # a client gone mid-reply: nothing to tell

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def waiting(self, connection: socket.socket, waits: bool) -> None:
        """Whether ``connection`` is still to send its request (so may be closed to make room)."""
        with self._lock:
            if waits:
                self._waiting[connection] = None
            else:
                self._waiting.pop(connection, None)

    def _close_oldest_waiting(self) -> None:
        with self._lock:
            oldest = next(iter(self._waiting), None)
            if oldest is None:
                return
            del self._waiting[oldest]
        with contextlib.suppress(OSError):  # gone already
            oldest.shutdown(socket.SHUT_RDWR)

    def count_request(self, delta: int) -> None:
        with self._lock:
            self._in_flight += delta

    def drain(self, seconds: float) -> None:
        """Until no request is in flight, for at most ``seconds``."""
        poll_until(lambda: not self._in_flight, seconds, 0.01)


@contextlib.contextmanager
def _ending_signals_blocked():
    """Threads started inside it have SIGINT and SIGTERM blocked (a thread inherits its creator's mask), so that
    the kernel delivers them to the main thread. One taken by another thread could be left pending, unhandled,
    while the main thread polled on: 1 SIGTERM in 10 sent just after a reply was ignored by `metrics --serve`
    here (CPython 3.11), which went on serving."""
    unblocked = signal.pthread_sigmask(signal.SIG_BLOCK, _ENDING_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, unblocked)


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
        self.server.waiting(self.connection, True)
        self._deadline = threading.Timer(self.request_seconds, self._too_slow)
        self._deadline.daemon = True
        self._deadline.start()

    def _too_slow(self) -> None:
        if not self._parsed:
            with contextlib.suppress(OSError):  # the client is gone already
                self.connection.shutdown(socket.SHUT_RDWR)

    def finish(self) -> None:
        self._deadline.cancel()
        self.server.waiting(self.connection, False)
        super().finish()

    def __getattr__(self, name: str):
        # A method the handler does not serve: 405 with the ones it does, not http.server's 501 HTML page.
        if name.startswith("do_"):
            return self._not_allowed
        raise AttributeError(name)

    def _not_allowed(self) -> None:
        allowed = ", ".join(sorted(name[3:] for name in dir(type(self)) if name.startswith("do_")))
        self.close_connection = True
        body = b"" if self.command == "HEAD" else f"allowed: {allowed}\n".encode()  # a HEAD reply has no body
        self.reply(HTTPStatus.METHOD_NOT_ALLOWED, body, "text/plain; charset=utf-8", Allow=allowed)

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
        self.server.waiting(self.connection, False)
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

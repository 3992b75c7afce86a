"""The one HTTP layer of sparkpoint's clients (the agent, a standalone master, a driver UI): one session
factory and one call that translates failures.

Their requests carry secrets (the agent's token, the master's signed token, the cluster's RPC secret in
a submission): none may go to an HTTP proxy named by ``http_proxy``/``https_proxy``, which would read
them in clear text, so the environment's proxy settings (and .netrc) are not used at all.

A request whose connection fails to open is tried twice more: it was never sent, so even a stop, a cancel
or a submission cannot arrive twice (and a busy driver's agent refuses new connections for a moment
while its handler slots are full). A request that was sent is never repeated: no read or status retries.
A reply's body must arrive whole within the timeout, not only each read of it: a peer that trickles a byte a
second would otherwise hold its caller for as long as it likes.

A job's agent speaks plain HTTP: its client (plain_session) is the standard library's http.client under the same
rules, because importing requests alone takes 0.12-0.17 s of every command that asks an agent (a cancel, a list,
a savepoint), a quarter of a cancel.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import Any

from sparkpoint import json_input
from sparkpoint.errors import SparkFailureError, SparkpointError

CONNECT_RETRIES = 2
RETRY_BACKOFF = 0.05  # seconds, doubled per retry: a retried read costs at most ~0.15 s more
MAX_BODY = 16 << 20  # no answer sparkpoint asks for is near this: a larger one is not an answer


def session(headers: dict[str, str] | None = None):
    import requests  # here, not at the top: `sparkpoint list` must start fast when nothing is asked
    from requests.adapters import HTTPAdapter
    from urllib3.util.retry import Retry

    made = requests.Session()
    made.trust_env = False
    # trust_env also drops the CA bundle named in the environment, which an HTTPS driver UI may need.
    made.verify = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE") or True
    made.headers.update({"User-Agent": "sparkpoint", **(headers or {})})
    retry = Retry(total=CONNECT_RETRIES, connect=CONNECT_RETRIES, read=0, status=0, other=0, redirect=0,
                  backoff_factor=RETRY_BACKOFF, raise_on_status=False)
    for scheme in ("http://", "https://"):
        made.mount(scheme, HTTPAdapter(max_retries=retry))
    return made


class PlainSession:
    """A client of plain-HTTP endpoints (a job's agent) without requests: headers sent with every request; a
    connection that fails to open tried CONNECT_RETRIES more times; no proxy (http.client knows none)."""

    def __init__(self, headers: dict[str, str] | None = None):
        self.headers = {"User-Agent": "sparkpoint", **(headers or {})}

    def exchange(self, method: str, url: str, body: Any, timeout: float,
                 too_late: Callable[[bytearray], bool]) -> tuple[int, bytearray, str | None]:
        """(status, body, its charset) of one request with the JSON ``body`` (None: none); its reason, a
        requests exception's name for the same failure, in ConnectionError when it gets no answer."""
        import http.client
        from urllib.parse import urlsplit

        parts = urlsplit(url)
        data = None if body is None else json.dumps(body).encode()
        headers = dict(self.headers, **({"Content-Type": "application/json"} if data is not None else {}))
        connection = self._connected(http.client.HTTPConnection, parts.hostname, parts.port, timeout)
        try:
            connection.request(method, parts.path + (f"?{parts.query}" if parts.query else ""), body=data,
                               headers=headers)
            response = connection.getresponse()
            received = bytearray()
            while chunk := response.read1(64 << 10):
                received += chunk
                if too_late(received):
                    break
            return response.status, received, response.headers.get_content_charset()
        except TimeoutError:
            raise ConnectionError("ReadTimeout") from None
        except (OSError, http.client.HTTPException):
            raise ConnectionError("ConnectionError") from None
        finally:
            connection.close()

    @staticmethod
    def _connected(connection_class, host: str | None, port: int | None, timeout: float):
        for backoff in [RETRY_BACKOFF * 2 ** attempt for attempt in range(CONNECT_RETRIES)] + [None]:
            connection = connection_class(host, port, timeout=timeout)
            try:
                connection.connect()
                return connection
            except OSError as exc:
                connection.close()
                if backoff is None:
                    raise ConnectionError("ConnectTimeout" if isinstance(exc, TimeoutError)
                                          else "ConnectionError") from None
                time.sleep(backoff)

    def close(self) -> None:
        """Nothing is kept open between requests (as requests' Session.close, which callers may call)."""

    def __enter__(self) -> PlainSession:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


def plain_session(headers: dict[str, str] | None = None) -> PlainSession:
    return PlainSession(headers)


def call(client, method: str, url: str, *, unreachable: Callable[[str], SparkpointError], what: str,
         timeout: float, **kwargs: Any) -> tuple[int, Any]:
    """(status, body) of one request with ``client`` (a session() or a plain_session()): the JSON it answered, or
    for an error status without JSON its text. A request that gets no answer raises ``unreachable`` with the
    reason; a success that is not JSON raises SparkFailureError naming ``what`` answered."""
    deadline = time.monotonic() + timeout

    def too_late(body: bytearray) -> bool:
        return time.monotonic() > deadline or len(body) > MAX_BODY

    if isinstance(client, PlainSession):
        try:
            status, body, charset = client.exchange(method, url, kwargs.get("json"), timeout, too_late)
        except ConnectionError as exc:
            raise unreachable(str(exc)) from None
    else:
        status, body, charset = _exchange(client, method, url, timeout, too_late, unreachable, kwargs)
    if too_late(body):
        raise unreachable(f"its answer did not arrive whole within {timeout:g} s")
    try:
        return status, json_input.loads(body)  # JSON's own encoding, as requests' .json() reads it
    except ValueError:
        text = body.decode(charset or "utf-8", errors="replace")
        if status >= 400:
            return status, text[:200]
        raise SparkFailureError(f"{what} answered {url} with status {status}, not JSON: {text[:200]!r}") from None


def _exchange(client, method: str, url: str, timeout: float, too_late: Callable[[bytearray], bool],
              unreachable: Callable[[str], SparkpointError],
              kwargs: dict[str, Any]) -> tuple[int, bytearray, str | None]:
    """PlainSession.exchange through a requests session."""
    import requests
    import urllib3.exceptions

    try:
        with client.request(method, url, timeout=timeout, stream=True, **kwargs) as response:
            body = bytearray()
            # read1, not iter_content: iter_content fills each chunk whole, so a peer that trickles its body a byte
            # at a time, each within the socket's timeout, held the caller long past the deadline.
            while chunk := response.raw.read1(64 << 10, decode_content=True):
                body += chunk
                if too_late(body):
                    break
    except (requests.RequestException, urllib3.exceptions.HTTPError) as exc:
        raise unreachable(type(exc).__name__) from None
    return response.status_code, body, response.encoding

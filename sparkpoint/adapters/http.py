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
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import Any

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


def call(client, method: str, url: str, *, unreachable: Callable[[str], SparkpointError], what: str,
         timeout: float, **kwargs: Any) -> tuple[int, Any]:
    """(status, body) of one request: the JSON it answered, or for an error status without JSON its text.
    A request that gets no answer raises ``unreachable`` with the reason; a success that is not JSON raises
    SparkFailureError naming ``what`` answered."""
    import requests

    deadline = time.monotonic() + timeout
    try:
        with client.request(method, url, timeout=timeout, stream=True, **kwargs) as response:
            body = bytearray()
            for chunk in response.iter_content(64 << 10):
                body += chunk
                if time.monotonic() > deadline or len(body) > MAX_BODY:
                    raise unreachable(f"its answer did not arrive whole within {timeout:g} s")
    except requests.RequestException as exc:
        raise unreachable(type(exc).__name__) from None
    try:
        return response.status_code, json.loads(bytes(body))  # JSON's own encoding, as requests' .json() reads it
    except ValueError:
        text = body.decode(response.encoding or "utf-8", errors="replace")
        if not response.ok:
            return response.status_code, text[:200]
        raise SparkFailureError(f"{what} answered {url} with status {response.status_code}, not JSON: "
                                f"{text[:200]!r}") from None

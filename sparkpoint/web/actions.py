"""What the page may do, when `sparkpoint ui --allow-actions` lets it: a savepoint of a running job, its stop with a
savepoint, the disposal of a savepoint; each the library call the CLI makes, reported in the CLI's words.

A request that does something is a POST of a form this page made, after a confirmation page: the form carries a
seal (an HMAC of the action and its target under a key of this server's run), and the browser's Origin (or
Sec-Fetch-Site) must be this page's own. The cookie is SameSite=Strict, which keeps other sites out, but not another
port of the same host: 127.0.0.1:8080 and 127.0.0.1:9465 are one site, and only the Origin tells them apart."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
from collections.abc import Mapping
from urllib.parse import parse_qsl, urlsplit

from sparkpoint.config import Settings

ACTIONS = {"savepoint": "take a savepoint of job {target} now, without pausing it",
           "stop": "stop job {target} at its next batch boundary, with a savepoint",
           "dispose": "delete savepoint {target} (what it holds cannot be restored afterwards)"}
NOT_ALLOWED = "actions are off: start the page with `sparkpoint ui --allow-actions` to savepoint, stop or dispose"
FORM_LIMIT = 4096  # bytes: a form of this page is a target and a seal


class Forms:
    """Seals the forms this page makes, and opens each once: a confirmation submitted again (the browser's back,
    then the button again) does nothing the second time."""

    def __init__(self, key: bytes, remembered: int = 1000):
        self._key = key
        self._open: dict[str, None] = {}  # the nonces of sealed forms not yet used, oldest first
        self._remembered = remembered
        self._lock = threading.Lock()

    def seal(self, action: str, target: str) -> str:
        nonce = secrets.token_hex(8)
        with self._lock:
            self._open[nonce] = None
            while len(self._open) > self._remembered:
                del self._open[next(iter(self._open))]
        return f"{nonce}.{self._mac(nonce, action, target)}"

    def opens(self, seal: str, action: str, target: str) -> bool:
        nonce, _, mac = seal.partition(".")
        if not target or not hmac.compare_digest(mac.encode(), self._mac(nonce, action, target).encode()):
            return False
        with self._lock:
            return self._open.pop(nonce, False) is None

    def _mac(self, nonce: str, action: str, target: str) -> str:
        return hmac.new(self._key, f"{nonce}\n{action}\n{target}".encode(), hashlib.sha256).hexdigest()


def refused(headers: Mapping[str, str], base_url: str) -> str | None:
    """Why a POST is not this page's own, or None: its Origin must be this page's; a browser that sends none
    says Sec-Fetch-Site; a request with neither is not a browser's form, and is refused too."""
    ours = urlsplit(base_url)
    origin = headers.get("origin")
    if origin is not None:
        theirs = urlsplit(origin)
        if (theirs.scheme, theirs.netloc) != (ours.scheme, ours.netloc):
            return f"a request from {origin} is not this page's: nothing was done"
        return None
    if headers.get("sec-fetch-site") == "same-origin":
        return None
    return "a request without an Origin is not this page's form: nothing was done"


def form(body: bytes) -> dict[str, str] | None:
    """The fields of a url-encoded form, or None for one too large or not text."""
    if len(body) > FORM_LIMIT:
        return None
    try:
        return dict(parse_qsl(body.decode("ascii"), keep_blank_values=True, max_num_fields=8))
    except (UnicodeDecodeError, ValueError):
        return None


def perform(settings: Settings, action: str, target: str):
    """The action's result (Created, Stopped or Disposed: each says itself as the CLI does)."""
    if action == "savepoint":
        from sparkpoint.jobs.savepoint import savepoint_job

        return savepoint_job(settings, target)
    if action == "stop":
        from sparkpoint.jobs.stop import stop_job

        return stop_job(settings, target)
    from sparkpoint.savepoints import catalog
    from sparkpoint.savepoints.savepoint import dispose

    return dispose(catalog.resolve(target, settings.savepoints_dir(), settings.storage_options),
                   settings.storage_options)

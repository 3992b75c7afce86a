"""The page's door: every request, static files included, carries the token `sparkpoint ui` printed, as a bearer
header, as the cookie its first visit set, or once in the URL (``?token=``), which is then swapped for that cookie
and taken out of the address bar. Without it: 401 and a fixed body, nothing of the home."""

from __future__ import annotations

import hmac
from http.cookies import SimpleCookie
from urllib.parse import parse_qsl, urlencode

DENIED = b"401: this page needs the token `sparkpoint ui` printed: open the URL it printed\n"
# The headers of every answer: no framing, no script or style from elsewhere, nothing cached or told to others.
SECURITY_HEADERS = [
    (b"content-security-policy", b"default-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"),
    (b"x-content-type-options", b"nosniff"),
    # same-origin, not no-referrer: under no-referrer a browser sends its own forms with "Origin: null".
    (b"referrer-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
]


class TokenGate:
    """ASGI middleware in front of the whole app. ``cookie``: the cookie's name, one per port (two servers on one
    host share its cookies)."""

    def __init__(self, app, token: str, cookie: str):
        self.app = app
        self._token = token.encode()
        self.cookie = cookie

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        given = dict(query).get("token")
        if given is not None and self._matches(given.encode()):
            rest = urlencode([(k, v) for k, v in query if k != "token"])
            location = scope.get("root_path", "") + scope["path"] + (f"?{rest}" if rest else "")
            cookie = f"{self.cookie}={given}; HttpOnly; SameSite=Strict; Path=/"
            return await _answer(send, 303, b"", [(b"location", location.encode()),
                                                  (b"set-cookie", cookie.encode())])
        if not (self._bearer(headers) or self._from_cookie(headers)):
            return await _answer(send, 401, DENIED, [(b"content-type", b"text/plain; charset=utf-8"),
                                                     (b"www-authenticate", b'Bearer realm="sparkpoint"')])

        async def secured(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *SECURITY_HEADERS]}
            await send(message)

        return await self.app(scope, receive, secured)

    def _matches(self, given: bytes) -> bool:
        return hmac.compare_digest(given, self._token)

    def _bearer(self, headers: dict[bytes, bytes]) -> bool:
        scheme, _, value = headers.get(b"authorization", b"").partition(b" ")
        return scheme.lower() == b"bearer" and self._matches(value.strip())

    def _from_cookie(self, headers: dict[bytes, bytes]) -> bool:
        jar = SimpleCookie()
        try:
            jar.load(headers.get(b"cookie", b"").decode("latin-1"))
        except Exception:  # noqa: BLE001 - a malformed Cookie header carries no token
            return False
        morsel = jar.get(self.cookie)
        return morsel is not None and self._matches(morsel.value.encode())


async def _answer(send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [*headers, *SECURITY_HEADERS, (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})

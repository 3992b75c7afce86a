"""The page's door: every request, static files included, carries the token `sparkpoint ui` printed, as a bearer
header, as the cookie its first visit set, or once in the URL (``?token=``), which is then swapped for that cookie
and taken out of the address bar. Without it: 401 and a fixed body, nothing of the home."""

from __future__ import annotations

import hmac
from urllib.parse import parse_qsl, urlencode

from starlette.requests import cookie_parser

DENIED = b"401: this page needs the token `sparkpoint ui` printed: open the URL it printed\n"
CROSS_SITE = b"403: a request from another page of this host or another site: nothing was done\n"
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
            # The path as sent, one leading slash: "//host/x" or "/\\host" would send the browser elsewhere.
            path = "/" + scope.get("raw_path", scope["path"].encode()).decode("latin-1").lstrip("/\\")
            location = path + (f"?{rest}" if rest else "")
            cookie = f"{self.cookie}={given}; HttpOnly; SameSite=Strict; Path=/"
            return await _answer(send, 303, b"", [(b"location", location.encode()),
                                                  (b"set-cookie", cookie.encode())])
        if not (self._bearer(headers) or self._from_cookie(headers)):
            return await _answer(send, 401, DENIED, [(b"content-type", b"text/plain; charset=utf-8"),
                                                     (b"www-authenticate", b'Bearer realm="sparkpoint"')])
        # Every port of a host is one site: the cookie goes along with a request another local page makes. What
        # a browser says came from elsewhere (another port, another site) is refused, a GET too (a state page
        # starts Spark, a verify reads every file); one typed or opened from a link says none.
        if headers.get(b"sec-fetch-site", b"same-origin") not in (b"same-origin", b"none"):
            return await _answer(send, 403, CROSS_SITE, [(b"content-type", b"text/plain; charset=utf-8")])

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
        # Starlette's parser, as browsers parse: another local app's odd cookie in the same header does not hide
        # ours (http.cookies drops every cookie after one it cannot read).
        value = cookie_parser(headers.get(b"cookie", b"").decode("latin-1")).get(self.cookie)
        return value is not None and self._matches(value.encode())


async def _answer(send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [*headers, *SECURITY_HEADERS, (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})

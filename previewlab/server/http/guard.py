"""Who may talk to the server: a Host allowlist (DNS rebinding), a same-origin check on the WebSocket
(cross-site WebSocket hijacking), and a token when bound beyond loopback. One ASGI middleware, before routing.

The token travels only in the URL (`?token=`). The page's load exchanges it for a session cookie (sessions.py):
cookies go to every port of the host, so the cookie holds a value that expires and that a restart forgets,
never the token.

Refusals: HTTP 400 for a bad Host, 403 for a bad Origin or token; a WebSocket is refused before accept (uvicorn
answers the handshake with 403). Refusals are logged with a short, truncated quote of what was sent, at most
one line per status every 5 s (a flood of refusals must not become a flood of log lines).
"""
from __future__ import annotations

import hmac
import ipaddress
import logging
import time
from dataclasses import dataclass
from collections.abc import Mapping
from typing import Any, Iterable
from urllib.parse import parse_qs, urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from previewlab.server.http.forwarded import NOBODY, TrustedProxies
from previewlab.server.http.sessions import SESSION_S, Sessions
from previewlab.server.core.limits import WS_BURST, WS_PER_S, RateLimit, short

log = logging.getLogger("previewlab.server")
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
COOKIE = "previewlab_session"


def split_host(value: str) -> tuple[str, int | None] | None:
    """'example:8000' -> ('example', 8000); '[::1]:8000' -> ('::1', 8000); None if it cannot be parsed."""
    value = value.strip().lower()
    if not value or any(c in value for c in " /\\@?#"):
        return None
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        host, rest = value[1:end], value[end + 1:]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return None
        if rest == "":
            return host, None
        if not rest.startswith(":") or not rest[1:].isdigit():
            return None
        return host, int(rest[1:])
    if value.count(":") > 1:
        return None  # a bare IPv6 address must be bracketed in a Host header
    host, _, port = value.partition(":")
    if port and not port.isdigit():
        return None
    return host, int(port) if port else None


def is_loopback(addr: str | None) -> bool:
    if not addr:
        return False
    try:
        return ipaddress.ip_address(addr).is_loopback
    except ValueError:
        return addr == "localhost"


@dataclass(frozen=True)
class Access:
    """Who may drive the server: the Host names it answers (loopback names always), the page's token when it
    listens beyond loopback, the WebSocket handshakes one address may open at once and per second, and the
    reverse proxies believed when they name their client (forwarded.py; nobody by default)."""
    hosts: tuple[str, ...] = ()
    token: str | None = None
    ws_burst: int = WS_BURST
    ws_per_s: float = WS_PER_S
    proxies: TrustedProxies = NOBODY


def cookie_name(scope: Scope) -> str:
    """The session's cookie, named for the server's port: cookies are per host, not per port, so a second
    server's session would overwrite the first's under one name."""
    server = scope.get("server") or (None, None)
    return f"{COOKIE}_{server[1]}" if isinstance(server[1], int) else COOKIE


def cookie_value(header: str, name: str) -> str:
    """The value of cookie `name` in a Cookie header ("" if absent), read pair by pair: another app on the same
    host can set cookies that SimpleCookie cannot parse (a space, a quote, JSON), and it stops at the first."""
    for pair in header.split(";"):
        key, sep, value = pair.strip().partition("=")
        if sep and key == name:
            return value.strip()
    return ""


def _data(path: str) -> bool:
    """The routes that read runs: the list, the exports, a run's image, the metrics."""
    return path == "/runs" or path.startswith("/runs.") or path.startswith("/runs/") or path == "/metrics"


def _cross_site(headers: Mapping[str, str], host: tuple[str, int | None]) -> bool:
    """A browser request another origin's page made: Sec-Fetch-Site says so (same-site is another port of this
    host, or a sibling domain), or an Origin that is not this server's. Tools (curl) send neither."""
    if headers.get("sec-fetch-site", "").lower() in ("cross-site", "same-site"):
        return True
    origin = headers.get("origin")
    if origin is None:
        return False
    o = urlsplit(origin)
    return not (o.scheme in ("http", "https") and split_host(o.netloc) == host)


class Guard:
    def __init__(self, app: ASGIApp, *, hosts: Iterable[str], token: str | None = None,
                 ws_burst: int = WS_BURST, ws_per_s: float = WS_PER_S, clock: Any = time.monotonic) -> None:
        """ws_burst, ws_per_s: WebSocket handshakes one address may open at once and per second after that; a
        page reloading in a loop is refused before accept instead of costing the model's process a full
        handshake each time."""
        self.app = app
        self.hosts = {h.lower().strip("[]") for h in hosts} | set(LOOPBACK_NAMES)
        self.token = token
        self.sessions = Sessions(clock)  # in memory: a restarted server knows none of its predecessor's
        self.ws_burst, self.ws_per_s, self.clock = ws_burst, ws_per_s, clock
        self._buckets: dict[str, RateLimit] = {}  # address -> its handshake bucket
        self._logged: dict[int, float] = {}  # status -> when a refusal with it was last logged

    def _handshake_allowed(self, addr: str) -> bool:
        bucket = self._buckets.get(addr)
        if bucket is None:
            bucket = self._buckets[addr] = RateLimit(self.ws_burst, self.ws_per_s, self.clock)
        ok = bucket.allow()
        if len(self._buckets) > 10_000:  # many addresses: forget the ones whose bucket has refilled
            self._buckets = {a: b for a, b in self._buckets.items() if not b.full()}
        return ok

    def _headers(self, scope: Scope) -> Mapping[str, str]:
        return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}

    def _query_token(self, scope: Scope) -> str:
        return parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token", [""])[0]

    def _token_ok(self, scope: Scope, headers: Mapping[str, str]) -> bool:
        """The token in the URL, or a session this server issued in the cookie (never the token itself)."""
        if self.token is None:
            return True
        given = self._query_token(scope)
        if not given:
            return self.sessions.valid(cookie_value(headers.get("cookie", ""), cookie_name(scope)))
        # compare_digest takes str only when both are ASCII (a TypeError otherwise): compare UTF-8 bytes
        return hmac.compare_digest(given.encode("utf-8", "replace"), self.token.encode("utf-8", "replace"))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        headers = self._headers(scope)
        client = (scope.get("client") or (None, None))[0]
        parsed = split_host(headers.get("host", ""))
        if parsed is None or parsed[0] not in self.hosts:
            return await self._refuse(scope, receive, send, 400, f"host {short(headers.get('host'), 60)} not allowed")
        if scope["type"] == "websocket":
            # Origin first: a handshake another site's page makes is refused without touching the address's
            # handshake budget, which the user's own page shares (same browser, same address).
            origin = headers.get("origin")
            if origin is None:
                if not is_loopback(client):
                    return await self._refuse(scope, receive, send, 403, "WebSocket without Origin from non-loopback")
            else:
                o = urlsplit(origin)
                same = o.scheme in ("http", "https") and split_host(o.netloc) == parsed
                if not same:
                    return await self._refuse(scope, receive, send, 403, f"cross-origin WebSocket from {short(origin, 60)}")
            if not self._handshake_allowed(str(client)):
                return await self._refuse(scope, receive, send, 429, "too many WebSocket handshakes")
        elif _data(scope.get("path", "")) and _cross_site(headers, parsed):
            # another site's page (or another port's) cannot make the browser fetch the runs: a CORS-blocked
            # read still costs the server the export
            return await self._refuse(scope, receive, send, 403, f"cross-site request for {short(scope.get('path'), 40)}")
        if not self._token_ok(scope, headers):
            return await self._refuse(scope, receive, send, 403, "missing or wrong token")
        if (self.token is not None and scope["type"] == "http" and scope.get("path") == "/"
                and self._query_token(scope)):
            # the page loaded with the token: a session for its static files, runs and socket
            name = cookie_name(scope)
            old = cookie_value(headers.get("cookie", ""), name)
            session = self.sessions.issue(replacing=old)
            return await self.app(scope, receive, self._set_cookie(send, name, session, scope.get("scheme") == "https"))
        await self.app(scope, receive, send)

    def _set_cookie(self, send: Send, name: str, session: str, secure: bool) -> Send:
        """secure: the page came over TLS (a trusted proxy's X-Forwarded-Proto says so), so the browser must
        never send the session over plain HTTP."""
        cookie = (f"{name}={session}; Path=/; Max-Age={SESSION_S}; HttpOnly; SameSite=Strict"
                  + ("; Secure" if secure else ""))

        async def wrapped(message: Any) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), (b"set-cookie", cookie.encode())]}
            await send(message)
        return wrapped

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, status: int, why: str) -> None:
        client = scope.get("client")
        now = self.clock()
        if now - self._logged.get(status, -1e9) > 5:  # a flood is logged every 5 s, not per request
            self._logged[status] = now
            log.warning("refused %s %s from %s: %s", scope["type"], short(scope.get("path"), 40), client, why)
        if scope["type"] == "websocket":
            await receive()  # websocket.connect
            await send({"type": "websocket.close", "code": 1008})  # before accept: the handshake gets 403
            return
        body = f"{why}\n".encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

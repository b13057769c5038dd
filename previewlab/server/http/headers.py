"""Headers every HTTP answer carries, refusals and 404s included: the page cannot be framed by another site
(clickjacking), the browser never guesses a content type, and the page URL's token never leaks in a Referer.

The policy fits the page as it is: scripts and styles come only from /static (no inline code, and uPlot sets
styles through the CSSOM, which style-src does not govern), previews are drawn from Blobs with
createImageBitmap (no <img> loads), and the only connection is the page's own WebSocket ('self' covers ws:
and wss: to the same host and port in CSP Level 3 browsers).
"""
from __future__ import annotations

from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; connect-src 'self'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),  # frame-ancestors for browsers that predate it
    (b"referrer-policy", b"no-referrer"),  # with --allow-remote the page URL holds the token
]


class SecurityHeaders:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                have = {k.lower() for k, _ in message.get("headers", [])}
                extra = [(k, v) for k, v in HEADERS if k not in have]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, with_headers)

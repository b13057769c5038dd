"""What the page's cookie holds instead of the token: a session value the token was exchanged for.

Cookies ignore ports, so every app on the same host (any port) receives the page's cookie. The cookie therefore
never holds the long-lived token: it holds a random value this process issued, which expires, and which a
restarted server does not know (it is kept in memory only). Values are kept as their SHA-256, so the lookup
reveals nothing of a valid one through timing.
"""
from __future__ import annotations

import hashlib
import secrets
import time
from typing import Any

SESSION_S = 12 * 3600   # a session's life: a working day; the URL with the token opens a new one
MAX_SESSIONS = 1024     # sessions held at once (a page load with the token issues one); the oldest go first


def _key(value: str) -> bytes:
    return hashlib.sha256(value.encode("utf-8", "replace")).digest()


class Sessions:
    """The session values this server issued, each valid for life_s seconds of the injected clock."""

    def __init__(self, clock: Any = time.monotonic, life_s: float = SESSION_S, most: int = MAX_SESSIONS) -> None:
        self.clock, self.life_s, self.most = clock, life_s, most
        self._ends: dict[bytes, float] = {}  # sha256(value) -> when it expires; insertion order is age order

    def issue(self, replacing: str = "") -> str:
        """A new session value (43 URL-safe characters, 256 random bits); `replacing`, the one it supersedes
        in the same browser, is forgotten."""
        self._ends.pop(_key(replacing), None)
        now = self.clock()
        self._ends = {k: end for k, end in self._ends.items() if end > now}
        while len(self._ends) >= self.most:
            del self._ends[next(iter(self._ends))]
        value = secrets.token_urlsafe(32)
        self._ends[_key(value)] = now + self.life_s
        return value

    def valid(self, value: str) -> bool:
        end = self._ends.get(_key(value)) if value else None
        return end is not None and self.clock() < end

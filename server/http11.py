"""uvicorn's h11 protocol with a deadline on every request head: half-sent requests are closed.

uvicorn closes an idle keep-alive connection after timeout_keep_alive, but its timer is disarmed by the first
byte that arrives and is never armed for a connection's first request. A peer that sends a request line and
then one header byte every few seconds (or nothing at all) holds a connection, a file descriptor and up to
h11_max_incomplete_event_size bytes forever. Here a request head must be complete within `head_timeout_s` of
the connection opening, or of the previous response ending; otherwise the connection is closed. Requests
being answered and connections upgraded to a WebSocket are never touched by it.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("previewlab.server")
HEAD_TIMEOUT_S = 10.0  # a browser sends its whole head in one packet; 10 s is generous for a slow link


class HeadDeadlineH11(H11Protocol):
    head_timeout_s = HEAD_TIMEOUT_S
    _deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._answering() or self.transport.get_protocol() is not self:
            self._disarm()  # a head is complete and being answered, or the connection is now a WebSocket

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and not self._answering():
            self._arm()  # the next request on this connection gets a deadline of its own

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _answering(self) -> bool:
        return self.cycle is not None and not self.cycle.response_complete

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(self.head_timeout_s, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if self.transport.is_closing() or self._answering() or self.transport.get_protocol() is not self:
            return
        log.info("closed a connection from %s: no complete request within %.0f s", self.client,
                 self.head_timeout_s)
        self.transport.close()


def with_head_timeout(seconds: float) -> type[HeadDeadlineH11]:
    """The protocol class for uvicorn.Config(http=...), with its own deadline (tests use a short one)."""
    return type("HeadDeadlineH11", (HeadDeadlineH11,), {"head_timeout_s": seconds})


def connection_limits(max_clients: int, head_timeout_s: float = HEAD_TIMEOUT_S) -> dict[str, Any]:
    """uvicorn.Config keywords that bound what one connection, or many, can hold (README: who may drive it)."""
    return dict(
        http=with_head_timeout(head_timeout_s),
        timeout_keep_alive=5,                    # seconds an idle keep-alive connection stays open
        h11_max_incomplete_event_size=16 * 1024,  # bytes of an unfinished request head (the page sends < 2 KB)
        limit_concurrency=max_clients + 64,      # HTTP connections and tasks at once; beyond, 503 (WebSockets
                                                 # are capped by --max-clients before accept instead)
        timeout_graceful_shutdown=3,             # on shutdown, tasks still running after 3 s are cancelled
        ws_ping_interval=20.0, ws_ping_timeout=20.0,  # a WebSocket peer that stops answering is closed in 40 s
    )

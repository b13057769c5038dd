"""uvicorn's WebSocket protocol with bounds on what one peer can make the server hold, or do.

uvicorn (websockets-sansio, what ws="auto" picks with websockets installed) reads a peer as fast as it sends,
and answers every ping into the write buffer at once: a peer that sends pings and never reads its pongs grew
the server by 700 MiB in 40 s. And the ASGI app never sees control frames or fragments, so none of its
budgets counts them: empty continuation frames, pings and unsolicited pongs cost the sender nothing and the
server a full core. Here:

- reading stops while the write buffer is over its high-water mark and resumes when it drains, so TCP
  backpressure reaches the peer. Beyond the kernel's socket buffers, one connection then holds at most the
  high-water mark (64 KiB), the pongs of the rest of one read (256 KiB: a pong is no larger than its ping),
  one message waiting for the app and one being parsed or assembled (ws_max_size each, 64 KiB): 448 KiB;
- every frame the parser yields, of every kind, spends a token of the connection's budget (FRAME_BURST at
  once, then FRAME_PER_S a second), and a message may come in at most MAX_FRAGMENTS fragments (its bytes are
  bounded by ws_max_size in websockets); beyond either, the connection is closed with 1008.
"""
from __future__ import annotations

import logging
from typing import Any

from uvicorn._types import ASGIReceiveEvent, ASGISendEvent
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.frames import Frame, Opcode

from previewlab.server.core.limits import FRAME_BURST, FRAME_PER_S, MAX_FRAGMENTS, RateLimit
from previewlab.server.http.transports import reset

log = logging.getLogger("previewlab.server")
ABORT_AFTER_S = 2.0  # a refused peer that has not taken its close frame by then is dropped: it may never read


class BoundedWebSocket(WebSocketsSansIOProtocol):
    # what this reads and overrides of uvicorn's own: http11.UVICORN_INTERNALS, checked by tests/test_uvicorn_pin.py
    frame_burst = FRAME_BURST
    frame_per_s = FRAME_PER_S

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.budget = RateLimit(self.frame_burst, self.frame_per_s)
        self.fragments = 0  # frames so far of the message being received

    # Reading follows writing: nothing more is read from a peer while what it was sent is not taken.
    def pause_writing(self) -> None:
        super().pause_writing()
        self.transport.pause_reading()

    def resume_writing(self) -> None:
        super().resume_writing()
        if not self.read_paused:  # uvicorn's own pause: until the app takes the message it has queued
            self.transport.resume_reading()

    async def receive(self) -> ASGIReceiveEvent:
        message = await super().receive()
        self._hold_reading()
        return message

    async def send(self, message: ASGISendEvent) -> None:
        await super().send(message)
        self._hold_reading()

    def _hold_reading(self) -> None:
        if not self.writable.is_set():
            self.transport.pause_reading()  # uvicorn resumed reading for the app's sake; the writes still wait

    def handle_events(self) -> None:
        # Frames are counted before any is handled: the ones up to the first over budget are handled as usual,
        # the rest of what this read brought are dropped with the connection.
        events = self.conn.events
        for i, event in enumerate(events):
            if isinstance(event, Frame) and (why := self._over_budget(event)):
                del events[i:]
                super().handle_events()
                self._refuse(why)
                return
        super().handle_events()

    def _over_budget(self, frame: Frame) -> str | None:
        if frame.opcode in (Opcode.TEXT, Opcode.BINARY):
            self.fragments = 1
        elif frame.opcode is Opcode.CONT:
            self.fragments += 1
        if self.fragments > MAX_FRAGMENTS:
            return f"a message in more than {MAX_FRAGMENTS} fragments"
        if not self.budget.allow():
            return f"over {self.frame_burst} frames at once, then {self.frame_per_s:g} a second"
        return None

    def _refuse(self, why: str) -> None:
        if self.close_sent or self.transport.is_closing():
            # the close frame is out (the app closed it, or this did) and the peer still floods: drop it now,
            # or it would have the whole close timeout (10 s) of frames at full speed
            log.info("dropped a WebSocket from %s after its close: %s", self.client, why)
            reset(self.transport)
            return
        log.info("closed a WebSocket from %s with 1008: %s", self.client, why)
        self.queue.put_nowait({"type": "websocket.disconnect", "code": 1008, "reason": why})
        self.conn.fail(1008, why)
        self.transport.write(b"".join(self.conn.data_to_send()))
        self.close_sent = True
        self.transport.close()
        self.loop.call_later(ABORT_AFTER_S, reset, self.transport)  # a no-op once the close is done


def with_frame_budget(burst: int, per_s: float) -> type[BoundedWebSocket]:
    """The protocol class for uvicorn.Config(ws=...), with its own frame budget (tests use other ones)."""
    return type("BoundedWebSocket", (BoundedWebSocket,), {"frame_burst": burst, "frame_per_s": per_s})

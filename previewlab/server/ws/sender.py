"""Watchers: each client has a one-frame slot and a bounded text queue, drained by its own sender task.

A frame is packed once and shared. A newer frame replaces an unsent one, and the replaced frame counts as
dropped for that client. The generation never waits on a client: everything here runs on the event loop and
a slow socket only ever holds its own slot. A client whose link drops frames is sent them re-encoded cheaper
(adapt.py), on the hub's own thread, only the frames it is sent.
"""
from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable

from starlette.websockets import WebSocket

from previewlab.server.ws.adapt import LEVELS, Link, Reencoder

log = logging.getLogger("previewlab.server")
MAX_TEXT_QUEUE = 256  # step rows a client may fall behind by before the oldest are dropped
RELEASE_TIMEOUT_S = 2.0  # the longest a client's release waits for its sender task to end
# a client that acks (the page does) is sent its next preview once it acked the last one, or this long after that
# one's send began: the socket's buffers never hold a queue of stale previews on a slow link (the newest waits in
# the slot, and a newer one replaces it). A client that never acked is sent each preview as its socket takes it.
ACK_GATE_S = 2.0


@dataclass
class Packed:
    run_id: str
    step: int
    seq: int
    blob: bytes
    made: float = 0.0   # the hub's clock when it was handed the frame, seconds
    width: int = 0      # the preview as made, px
    height: int = 0


@dataclass
class Sent:
    run_id: str
    step: int
    t0: float       # loop clock when the send began, seconds
    send_ms: float
    nbytes: int = 0     # as sent (re-encoded for its link, or as made)
    level: int = 0      # adapt.LEVELS index it was sent at
    made: float = 0.0   # when the frame was made (Packed.made)
    adapted: str = ""   # what the page says of its level ("320 px, q60"; "" as made)


@dataclass
class Client:
    ws: WebSocket
    cid: int
    slot: Packed | None = None
    sending: Packed | None = None            # the frame whose send is under way: out of the slot, not yet in sent
    texts: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=MAX_TEXT_QUEUE))
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    sent: dict[int, Sent] = field(default_factory=dict)  # seq -> send record, waiting for the browser's ack
    task: asyncio.Task[None] | None = None
    owner: asyncio.Task[Any] | None = None  # the endpoint's task, cancelled to drop a stuck client
    killed: str = ""                         # why the server closed this client
    closed: bool = False                     # released: its sender ends at its next wake-up
    frames_sent: int = 0
    frames_dropped: int = 0
    link: Link = field(default_factory=Link)  # its link as its acks measure it, and the level it is sent at
    adapt: bool = True                       # the client lets its previews be re-encoded for its link
    acks: bool = False                       # it has acked a preview: its next ones wait for its acks
    run: str = ""                            # the run whose frames `made` and `delivered` count
    made: int = 0                            # that run's frames offered to it
    delivered: int = 0                       # and acked by it


OnFrame = Callable[[Client, Packed], None]
OnClient = Callable[[Client], None]


def _ignore(*_: object) -> None:
    pass


class Hub:
    """The watchers. What happens to the frames it is given is told to whoever built it: on_sent (a frame went
    out), on_drop (a newer one replaced it unsent), on_gone (a client was released, its unacked frames with it)."""

    def __init__(self, send_timeout_s: float = 10.0, clock: Callable[[], float] = time.perf_counter, *,
                 on_sent: OnFrame = _ignore, on_drop: OnFrame = _ignore, on_gone: OnClient = _ignore,
                 adapt: bool = True) -> None:
        """adapt: re-encode a client's frames cheaper when its link drops them (adapt.py); False sends every
        client the frames as made."""
        self.clients: dict[int, Client] = {}
        self.send_timeout_s = send_timeout_s
        self.clock = clock
        self.adapt = adapt
        self._reencoder = Reencoder() if adapt else None
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None  # the re-encodes', made at the first
        self._on_sent, self._on_drop, self._on_gone = on_sent, on_drop, on_gone
        self._next = 0

    def add(self, ws: WebSocket, owner: asyncio.Task[Any] | None = None) -> Client:
        """owner: the task serving the client's socket, cancelled by kill() to end it."""
        self._next += 1
        c = Client(ws, self._next, owner=owner)
        self.clients[c.cid] = c
        c.task = asyncio.get_running_loop().create_task(self._sender(c))
        return c

    async def remove(self, c: Client) -> None:
        """The one place a client's resources are released. It never waits for the client without a limit:
        a peer that resets right after the handshake must not leave a task that shutdown then waits for."""
        self.clients.pop(c.cid, None)
        c.closed = True
        c.slot = None
        c.texts.clear()
        c.sent.clear()
        c.sending = None
        self._on_gone(c)
        c.wake.set()  # a sender whose cancellation was lost still sees `closed` and ends
        if c.task and c.task is not asyncio.current_task():
            # Python 3.10/3.11's wait_for drops a cancellation that lands as its inner send finishes (a send
            # to a reset socket finishes at once); the task then waits on `wake` forever. Hence the flag
            # above and a bounded wait here.
            c.task.cancel()
            done, _ = await asyncio.wait({c.task}, timeout=RELEASE_TIMEOUT_S)
            if not done:
                log.warning("client %d: its sender did not end within %.0f s; left behind", c.cid,
                            RELEASE_TIMEOUT_S)

    def text(self, msg: Mapping[str, object], only: Client | None = None) -> None:
        data = json.dumps(msg, separators=(",", ":"))
        for c in [only] if only else list(self.clients.values()):
            c.texts.append(data)
            c.wake.set()

    def frame(self, f: Packed) -> None:
        for c in list(self.clients.values()):
            old, c.slot = c.slot, f
            if c.run != f.run_id:  # a new run starts from the preview as made
                c.run, c.made, c.delivered = f.run_id, 0, 0
                c.link.new_run()
            c.made += 1
            c.link.made(f.made, len(f.blob), max(f.width, f.height))
            if old is not None:
                c.frames_dropped += 1
                if self.adapt and c.adapt:
                    c.link.dropped(self.clock())
                self._on_drop(c, old)
            c.wake.set()

    async def _blob(self, c: Client, f: Packed) -> tuple[bytes, int]:
        """The frame as this client is sent it, and its level: as made (0), or re-encoded at its link's level off
        the loop. A re-encode that saves too few bytes against the level it stepped from is not sent: the link
        goes back to that level (adapt.Link.seen) and the frame is sent at it. A frame the re-encoder cannot read,
        or leaves as it is (not JPEG), goes as made."""
        level, reencoder = c.link.level, self._reencoder
        while level > 0 and reencoder is not None:
            blob = await self._reencode(reencoder, c, f, level)
            if blob is f.blob:
                break
            back = c.link.seen(level, len(blob), len(f.blob))
            if back == level:
                return blob, level
            level = back
        return f.blob, 0

    async def _reencode(self, reencoder: Reencoder, c: Client, f: Packed, level: int) -> bytes:
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="previewlab-adapt")
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, reencoder.frame, f.blob,
                                                                    LEVELS[level])
        except Exception as e:  # a damaged or unexpected image: this client gets it as made
            log.info("client %d: could not re-encode a preview for its link (%s); sent as made", c.cid,
                     type(e).__name__)
            return f.blob

    async def _sender(self, c: Client) -> None:
        try:
            while not c.closed:
                await c.wake.wait()
                c.wake.clear()
                while c.texts and not c.closed:
                    await asyncio.wait_for(c.ws.send_text(c.texts.popleft()), self.send_timeout_s)
                wait = self._unacked_for(c)
                if c.slot is not None and wait > 0:
                    asyncio.get_running_loop().call_later(wait, c.wake.set)  # or its ack wakes it sooner
                    continue
                f, c.slot = c.slot, None
                if f is not None and not c.closed:
                    c.sending = f
                    blob, level = await self._blob(c, f)
                    t0 = self.clock()
                    c.link.sent(t0, len(blob))
                    await asyncio.wait_for(c.ws.send_bytes(blob), self.send_timeout_s)
                    c.sending = None
                    c.sent[f.seq] = Sent(f.run_id, f.step, t0, (self.clock() - t0) * 1e3, len(blob), level, f.made,
                                         LEVELS[level].words(f.width, f.height))
                    c.frames_sent += 1
                    self._on_sent(c, f)
                    if len(c.sent) > 64:  # acks that never came: forget the oldest
                        c.sent.pop(next(iter(c.sent)))
        except asyncio.CancelledError:
            raise
        except asyncio.TimeoutError:
            log.warning("client %d: send timed out after %.0f s; closing it", c.cid, self.send_timeout_s)
            await self.kill(c, 1008, "send timeout")
        except Exception as e:  # the transport went away: the receiver's finally cleans up
            log.info("client %d: send failed (%s)", c.cid, type(e).__name__)

    def _unacked_for(self, c: Client) -> float:
        """Seconds the client's next preview still waits for the ack of its last one (0: send it now)."""
        if not c.sent or not c.acks:
            return 0.0
        last = max(s.t0 for s in c.sent.values())
        return max(0.0, ACK_GATE_S - (self.clock() - last))

    def unacked(self, run_id: str) -> bool:
        """Some client still holds a frame of this run that it has not acknowledged: waiting in its slot, being
        sent, or sent and waiting for its ack."""
        for c in self.clients.values():
            if any(f is not None and f.run_id == run_id for f in (c.slot, c.sending)):
                return True
            if any(s.run_id == run_id for s in c.sent.values()):
                return True
        return False

    async def kill(self, c: Client, code: int, why: str) -> None:
        """Close a client from the server's side with `code` and `why` as its reason (a few words: a close
        frame holds 123 bytes of it), and end its endpoint; its finally releases it."""
        c.killed = why
        self.clients.pop(c.cid, None)  # no more frames for it, whatever the close does
        try:
            # a close frame's reason holds 123 bytes: a longer one would fail the close itself
            await asyncio.wait_for(c.ws.close(code, why.encode()[:123].decode(errors="ignore")), 1.0)
        except Exception:
            pass  # a client that does not read cannot take a close frame either
        if c.owner is not None and c.owner is not asyncio.current_task():
            c.owner.cancel()

    async def close_all(self, code: int, why: str) -> None:
        await asyncio.gather(*(self.kill(c, code, why) for c in list(self.clients.values())))
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None

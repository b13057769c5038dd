"""The hub over Starlette's real WebSocket, driven through an in-memory ASGI transport (as Starlette's own
tests do): one-frame slots that keep only the newest frame, drops counted, text in order."""
from __future__ import annotations

import asyncio
from typing import Any, Callable, MutableMapping

from starlette.websockets import WebSocket

from previewlab.server.ws.sender import Hub, Packed


class Transport:
    """The ASGI side of one socket: what the server sent, and a gate that holds every send while closed.
    `held` is set once a send waits at the closed gate; `grew` whenever a message was sent."""

    def __init__(self) -> None:
        self.sent: list[MutableMapping[str, Any]] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.held = asyncio.Event()
        self.grew = asyncio.Event()

    async def receive(self) -> MutableMapping[str, Any]:
        return {"type": "websocket.connect"}

    async def send(self, message: MutableMapping[str, Any]) -> None:
        if message["type"] == "websocket.send":
            if not self.gate.is_set():
                self.held.set()
            await self.gate.wait()
        self.sent.append(message)
        self.grew.set()

    async def until(self, ready: Callable[[list[MutableMapping[str, Any]]], bool], timeout_s: float = 10) -> None:
        """Wait until what was sent satisfies `ready`: woken by each send, never by a guessed sleep."""
        async def wait() -> None:
            while not ready(self.sent):
                self.grew.clear()
                await self.grew.wait()
        await asyncio.wait_for(wait(), timeout_s)


async def connected(t: Transport) -> WebSocket:
    ws = WebSocket({"type": "websocket", "path": "/ws", "headers": []}, t.receive, t.send)
    await ws.accept()
    return ws


def test_a_blocked_client_keeps_only_the_newest_frame_and_counts_the_rest():
    async def scenario() -> tuple[list[MutableMapping[str, Any]], int, list[int]]:
        t = Transport()
        dropped: list[int] = []
        hub = Hub(send_timeout_s=5, on_drop=lambda c, p: dropped.append(p.seq))
        c = hub.add(await connected(t))
        t.gate.clear()                       # the peer stops reading
        hub.text({"type": "step", "step": 1})
        await asyncio.wait_for(t.held.wait(), 10)  # the sender is now blocked inside that send
        for seq in range(1, 6):
            hub.frame(Packed("r", seq, seq, bytes([seq]) * 10))
        hub.text({"type": "step", "step": 2})
        t.gate.set()
        # the accept, both texts and one frame
        await t.until(lambda sent: sum(m.get("bytes") is not None for m in sent) >= 1 and len(sent) >= 4)
        await hub.remove(c)
        return t.sent, c.frames_dropped, dropped

    sent, n_dropped, dropped = asyncio.run(scenario())
    texts = [m["text"] for m in sent if m.get("text")]
    frames = [m["bytes"] for m in sent if m.get("bytes") is not None]
    assert texts == ['{"type":"step","step":1}', '{"type":"step","step":2}']  # in order, none lost
    assert frames == [bytes([5]) * 10]        # only the newest frame went out
    assert n_dropped == 4 and dropped == [1, 2, 3, 4]


def test_a_frame_waits_for_its_runs_announcement_and_no_other_run_loses_its_own(make_app):
    """Frames go straight out, but never before their run's `run` message; one held per run, the newest."""
    from previewlab.preview.frames import Frame
    from previewlab.preview.record.run import RunMeta
    from previewlab.preview.settings import RunSettings

    srv, _ = make_app()
    sent: list[tuple[str, int]] = []
    srv.relay.hub.frame = lambda p: sent.append((p.run_id, p.step))  # type: ignore[method-assign]

    def frame(rid: str, step: int) -> Frame:
        return Frame(rid, step, "taesd", "jpeg", 8, 8, b"\xff\xd8")

    srv.relay.frame(frame("A", 1))
    srv.relay.frame(frame("A", 2))   # replaces A's step 1: previews are latest-wins
    srv.relay.frame(frame("B", 1))   # B started before A was announced (a slow disk)
    assert sent == []
    srv.relay.announce(RunMeta.of(srv.model, "A", RunSettings()))
    assert sent == [("A", 2)]
    srv.relay.announce(RunMeta.of(srv.model, "B", RunSettings()))  # A's announcement left B's frame held
    assert sent == [("A", 2), ("B", 1)]
    srv.relay.frame(frame("B", 2))
    assert sent[-1] == ("B", 2)

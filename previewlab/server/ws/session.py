"""One watcher's WebSocket, from accept to release: read, size-check, validate, rate-limit, hand to the server.

Every message that gets an `error` back is a bad message: it is answered while the client's bad-message
bucket has tokens (20 at once, then 2 a second), and the next one closes the socket with 1008. `set` has a
bucket of its own (20 at once, then 10 a second); a `set` over it is a bad message and changes nothing. So
any flood ends in a close, and what it costs the server is bounded by the buckets, not by the sender.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from starlette.websockets import WebSocket, WebSocketDisconnect

from previewlab.server.ws import outbound, protocol
from previewlab.server.ws.sender import Client
from previewlab.server.core.limits import MAX_MESSAGE_BYTES, RateLimit, SessionLimits, clip
from previewlab.server.ws.relay import Relay
from previewlab.server.ws.options import Offer


log = logging.getLogger("previewlab.server")


class Served(Protocol):
    """What a session asks of the server (server.py's Server): its relay, which holds the watchers (hub), what
    each is held to, the `hello`, the offer each message is checked against, and the handler of a valid one (it
    raises ProtocolError)."""

    @property
    def relay(self) -> Relay: ...
    @property
    def limits(self) -> SessionLimits: ...
    @property
    def offer(self) -> Offer: ...
    def hello(self) -> outbound.Outbound: ...
    async def handle(self, c: Client, msg: protocol.Message) -> None: ...


async def serve_client(server: Served, ws: WebSocket) -> None:
    hub, limits = server.relay.hub, server.limits
    if len(hub.clients) >= limits.max_clients:
        log.warning("refused a watcher: %d connected, the cap is %d", len(hub.clients), limits.max_clients)
        await ws.close(1013)  # before accept: the handshake is refused with 403
        return
    await ws.accept()
    c = hub.add(ws, owner=asyncio.current_task())
    bad = RateLimit(limits.bad_burst, limits.bad_per_s)
    sets = RateLimit(limits.set_burst, limits.set_per_s)
    try:
        hub.text(server.hello(), only=c)
        while True:
            message = await ws.receive()
            if message["type"] == "websocket.disconnect":
                break
            text = message.get("text")
            size = len(text.encode("utf-8", "replace")) if text is not None else len(message.get("bytes") or b"")
            if size > MAX_MESSAGE_BYTES:
                log.info("client %d: message of %d bytes, over %d; closing", c.cid, size, MAX_MESSAGE_BYTES)
                await hub.kill(c, 1009, "message too big")
                break
            try:
                if text is None:
                    raise protocol.ProtocolError("binary frames are not accepted; send JSON text")
                msg = server.offer.parse(text)
                if isinstance(msg, protocol.Set) and not sets.allow():
                    raise protocol.ProtocolError(
                        f"set: more than {limits.set_burst} at once or {limits.set_per_s:g} a second; "
                        "this change was not applied")
                await server.handle(c, msg)
            except (protocol.ProtocolError, RecursionError) as e:
                why = protocol.NESTED if isinstance(e, RecursionError) else clip(str(e))
                log.info("client %d: bad message: %s", c.cid, why[:120])
                if not bad.allow():
                    log.warning("client %d: too many bad messages; closing", c.cid)
                    await hub.kill(c, 1008, "too many bad messages")
                    break
                hub.text(outbound.error(why), only=c)
    except WebSocketDisconnect:
        pass
    except asyncio.CancelledError:
        if not c.killed:  # a real cancellation (shutdown), not the hub dropping this client
            raise
    finally:
        try:
            await hub.remove(c)
        except asyncio.CancelledError:
            # shutdown cancels this task again while the release waits for the sender (up to 2 s); the client
            # is already out of the hub by then (remove's first lines), so the endpoint just ends: one
            # traceback per open watcher at every SIGTERM otherwise
            if not c.killed:
                raise

"""The Starlette app: the page, the /ws stream, and the runs' CSVs. It only wires ASGI and sockets."""
from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, AsyncIterator

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp
from starlette.websockets import WebSocket, WebSocketDisconnect

from preview.engine import Frame
from preview.models import Model
from preview.records import StepRow
from preview.settings import PreviewSettings, RunSettings, SettingsError

from . import protocol
from .guard import Guard
from .hub import Client, Hub, Packed
from .metrics import Metrics
from .store import Store, step_message
from .worker import Busy, Listener, Worker

log = logging.getLogger("previewlab.server")
WEB = Path(__file__).resolve().parents[1] / "web"


class RateLimit:
    """A token bucket: `burst` bad messages at once, refilled at `per_s`; the clock is injected for tests."""

    def __init__(self, burst: int, per_s: float, clock: Any = time.monotonic) -> None:
        self.burst, self.per_s, self.clock = burst, per_s, clock
        self.tokens, self.t = float(burst), clock()

    def allow(self) -> bool:
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.t) * self.per_s)
        self.t = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False


class Server(Listener):
    """Holds the model's worker, the watchers and the data folder; the Listener side runs on the loop."""

    def __init__(self, model: Model, data_dir: Path, *, max_side: int = 1024, send_timeout_s: float = 10.0,
                 inflight: int = 2, compile_decoder: bool = False, max_clients: int = 32,
                 hosts: tuple[str, ...] = (), token: str | None = None, bad_burst: int = 20,
                 bad_per_s: float = 2.0, source: Any = None, ws_burst: int = 64, ws_per_s: float = 20.0) -> None:
        self.model = model
        self.max_clients, self.hosts, self.token = max_clients, hosts, token
        self.bad_burst, self.bad_per_s = bad_burst, bad_per_s
        self.ws_burst, self.ws_per_s = ws_burst, ws_per_s
        self.inflight, self.compile_decoder = inflight, compile_decoder
        self.store = Store(data_dir)
        self.hub = Hub(send_timeout_s)
        self.hub.on_drop = self._dropped
        self.hub.on_sent = self._sent
        side = min(model.default_size, max_side)
        self.defaults = RunSettings(steps=20, width=side, height=side, max_side=max_side,
                                    preview=PreviewSettings(decoder="latent2rgb" if model.taesd is None else "taesd"))
        self.metrics = Metrics(data_dir, model.device)
        self.worker: Any = None  # a Worker, or the source of a user's own runs (preview.watch with serve=True)
        self.source = source
        self.seq = 0
        self.current: dict[str, Any] | None = None

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        if self.source is not None:
            self.worker = self.source
            return
        self.worker = Worker(self.model, self.store, loop, self, inflight=self.inflight,
                             compile_decoder=self.compile_decoder)

    # -- Listener: called on the loop by the worker --------------------------------------------------------
    def run_started(self, meta: dict[str, Any]) -> None:
        self.current = meta
        self.metrics.run_started()
        self.hub.text({"type": "run", **meta})

    def row(self, row: StepRow) -> None:
        self.store.step(row)
        self.metrics.step(row)
        self.hub.text(step_message(row))

    def frame(self, f: Frame) -> None:
        self.seq += 1
        header = dict(run_id=f.run_id, step=f.step, seq=self.seq, decoder=f.decoder, format=f.format,
                      width=f.width, height=f.height, sent_at_ms=round(time.time() * 1e3, 3))
        self.hub.frame(Packed(f.run_id, f.step, self.seq, protocol.pack_frame(header, f.data)))

    def error(self, run_id: str, message: str) -> None:
        self.hub.text({"type": "error", "run_id": run_id, "message": message})

    def run_ended(self, meta: dict[str, Any]) -> None:
        self.store.finish(meta)
        self.store.close_run(meta["run_id"])
        self.metrics.run_ended(meta)
        self.current = None
        self.hub.text({"type": "done", **meta})

    def _sent(self, c: Client, p: Packed) -> None:
        self.metrics.sent(len(p.blob))

    def _dropped(self, c: Client, p: Packed) -> None:
        self.metrics.frames_dropped.inc()
        self.store.delivery(p.run_id, step=p.step, seq=p.seq, client=c.cid, kind="drop")

    # -- messages from one client ----------------------------------------------------------------------------
    def handle(self, c: Client, msg: protocol.Message) -> None:
        assert self.worker is not None
        if isinstance(msg, protocol.Start):
            try:
                self.worker.start(msg.settings)
            except Busy as e:
                self.hub.text({"type": "error", "message": str(e)}, only=c)
        elif isinstance(msg, protocol.Set):
            try:
                self.worker.set(msg.changes)
            except (Busy, SettingsError) as e:
                self.hub.text({"type": "error", "message": str(e)}, only=c)
        elif isinstance(msg, protocol.Stop):
            if not self.worker.stop():
                self.hub.text({"type": "error", "message": "no generation is running"}, only=c)
        elif isinstance(msg, protocol.Ack):
            sent = c.sent.pop(msg.seq, None)
            if sent is None:
                self.hub.text({"type": "error", "message": f"ack: seq {msg.seq} was never sent to this client "
                               "(or was acknowledged already)"}, only=c)
                return
            rtt = (self.hub.clock() - sent.t0) * 1e3
            fields = dict(send_ms=round(sent.send_ms, 3), ack_rtt_ms=round(rtt, 3),
                          client_decode_ms=msg.client_decode_ms, client_paint_ms=msg.client_paint_ms)
            self.store.delivery(sent.run_id, step=sent.step, seq=msg.seq, client=c.cid, kind="ack", **fields)
            self.hub.text({"type": "delivery", "run_id": sent.run_id, "step": sent.step, "seq": msg.seq, **fields},
                          only=c)

    async def graceful(self) -> None:
        """SIGTERM / Ctrl-C: stop the run, let the worker write its last rows, close clients with 1001."""
        if self.worker is not None and self.worker.stop():
            for _ in range(600):  # the stopped run still makes its final image; wait up to 60 s
                if self.worker.state == "idle":
                    break
                await asyncio.sleep(0.1)
        await self.hub.close_all(1001, "server shutting down")

    def hello(self) -> dict[str, Any]:
        m = self.model
        return {"type": "hello", "model": m.name, "synthetic": m.synthetic, "family": m.family,
                "device": m.device.type, "dtype": str(m.dtype).removeprefix("torch."),
                "defaults": {**{k: getattr(self.defaults, k) for k in ("prompt", "steps", "width", "height", "seed")},
                             **asdict(self.defaults.preview)},
                "max_side": self.defaults.max_side, "taesd": m.taesd is not None, "running": self.current}


def build_app(server: Server) -> ASGIApp:
    async def index(request: Request) -> Response:
        return FileResponse(WEB / "index.html")

    async def runs(request: Request) -> Response:
        return JSONResponse(server.store.runs())

    async def run_csv(request: Request) -> Response:
        rid = request.path_params["rid"]
        if not server.store.known(rid):
            return PlainTextResponse(f"unknown run id {protocol.short(rid)}", status_code=404)
        return PlainTextResponse(server.store.csv([rid]), media_type="text/csv",
                                 headers={"Content-Disposition": f'attachment; filename="previewlab-{rid}.csv"'})

    async def metrics(request: Request) -> Response:
        server.metrics.clients.set(len(server.hub.clients))
        return Response(server.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    async def all_csv(request: Request) -> Response:
        ids = [m["run_id"] for m in server.store.runs()]
        return PlainTextResponse(server.store.csv(ids), media_type="text/csv",
                                 headers={"Content-Disposition": 'attachment; filename="previewlab-runs.csv"'})

    async def ws_endpoint(ws: WebSocket) -> None:
        if len(server.hub.clients) >= server.max_clients:
            log.warning("refused a watcher: %d connected, the cap is %d", len(server.hub.clients), server.max_clients)
            await ws.close(1013)  # before accept: the handshake is refused with 403
            return
        await ws.accept()
        c = server.hub.add(ws)
        c.owner = asyncio.current_task()
        bad = RateLimit(server.bad_burst, server.bad_per_s)
        try:
            server.hub.text(server.hello(), only=c)
            while True:
                message = await ws.receive()
                if message["type"] == "websocket.disconnect":
                    break
                text = message.get("text")
                size = len(text.encode("utf-8", "replace")) if text is not None else len(message.get("bytes") or b"")
                if size > protocol.MAX_MESSAGE_BYTES:
                    log.info("client %d: message of %d bytes, over %d; closing", c.cid, size, protocol.MAX_MESSAGE_BYTES)
                    await server.hub.kill(c, 1009, "message too big")
                    break
                try:
                    if text is None:
                        raise protocol.ProtocolError("binary frames are not accepted; send JSON text")
                    msg = protocol.parse(text, defaults=server.defaults)
                except protocol.ProtocolError as e:
                    log.info("client %d: bad message: %s", c.cid, str(e)[:120])
                    if not bad.allow():
                        log.warning("client %d: too many bad messages; closing", c.cid)
                        await server.hub.kill(c, 1008, "too many bad messages")
                        break
                    server.hub.text({"type": "error", "message": str(e)}, only=c)
                    continue
                server.handle(c, msg)
        except WebSocketDisconnect:
            pass
        except asyncio.CancelledError:
            if not c.killed:  # a real cancellation (shutdown), not the hub dropping this client
                raise
        finally:
            await server.hub.remove(c)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        server.attach(asyncio.get_running_loop())
        yield
        if server.worker:
            server.worker.stop()
            await asyncio.get_running_loop().run_in_executor(None, server.worker.shutdown)

    app = Starlette(routes=[
        Route("/", index),
        Route("/runs", runs),
        Route("/runs.csv", all_csv),
        Route("/metrics", metrics),
        Route("/runs/{rid}.csv", run_csv),
        WebSocketRoute("/ws", ws_endpoint),
        Mount("/static", StaticFiles(directory=WEB), name="static"),
    ], lifespan=lifespan)
    return Guard(app, hosts=server.hosts, token=server.token, ws_burst=server.ws_burst, ws_per_s=server.ws_per_s)

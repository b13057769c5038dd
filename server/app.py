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
from starlette.websockets import WebSocket, WebSocketDisconnect

from preview.engine import Frame
from preview.models import Model
from preview.records import StepRow
from preview.settings import PreviewSettings, RunSettings, SettingsError

from . import protocol
from .hub import Client, Hub, Packed
from .store import Store, step_message
from .worker import Busy, Listener, Worker

log = logging.getLogger("previewlab.server")
WEB = Path(__file__).resolve().parents[1] / "web"


class Server(Listener):
    """Holds the model's worker, the watchers and the data folder; the Listener side runs on the loop."""

    def __init__(self, model: Model, data_dir: Path, *, max_side: int = 1024, send_timeout_s: float = 10.0,
                 inflight: int = 2, compile_decoder: bool = False) -> None:
        self.model = model
        self.inflight, self.compile_decoder = inflight, compile_decoder
        self.store = Store(data_dir)
        self.hub = Hub(send_timeout_s)
        self.hub.on_drop = self._dropped
        side = min(model.default_size, max_side)
        self.defaults = RunSettings(steps=20, width=side, height=side, max_side=max_side,
                                    preview=PreviewSettings(decoder="latent2rgb" if model.taesd is None else "taesd"))
        self.worker: Worker | None = None
        self.seq = 0
        self.current: dict[str, Any] | None = None

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self.worker = Worker(self.model, self.store, loop, self, inflight=self.inflight,
                             compile_decoder=self.compile_decoder)

    # -- Listener: called on the loop by the worker --------------------------------------------------------
    def run_started(self, meta: dict[str, Any]) -> None:
        self.current = meta
        self.hub.text({"type": "run", **meta})

    def row(self, row: StepRow) -> None:
        self.store.step(row)
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
        self.current = None
        self.hub.text({"type": "done", **meta})

    def _dropped(self, c: Client, p: Packed) -> None:
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

    def hello(self) -> dict[str, Any]:
        m = self.model
        return {"type": "hello", "model": m.name, "synthetic": m.synthetic, "family": m.family,
                "device": m.device.type, "dtype": str(m.dtype).removeprefix("torch."),
                "defaults": {**{k: getattr(self.defaults, k) for k in ("prompt", "steps", "width", "height", "seed")},
                             **asdict(self.defaults.preview)},
                "max_side": self.defaults.max_side, "taesd": m.taesd is not None, "running": self.current}


def build_app(server: Server) -> Starlette:
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

    async def all_csv(request: Request) -> Response:
        ids = [m["run_id"] for m in server.store.runs()]
        return PlainTextResponse(server.store.csv(ids), media_type="text/csv",
                                 headers={"Content-Disposition": 'attachment; filename="previewlab-runs.csv"'})

    async def ws_endpoint(ws: WebSocket) -> None:
        await ws.accept()
        c = server.hub.add(ws)
        try:
            server.hub.text(server.hello(), only=c)
            while True:
                message = await ws.receive()
                if message["type"] == "websocket.disconnect":
                    break
                text = message.get("text")
                if text is None:
                    server.hub.text({"type": "error", "message": "binary frames are not accepted; send JSON text"},
                                    only=c)
                    continue
                try:
                    msg = protocol.parse(text, defaults=server.defaults)
                except protocol.ProtocolError as e:
                    log.info("client %d: bad message: %s", c.cid, str(e)[:120])
                    server.hub.text({"type": "error", "message": str(e)}, only=c)
                    continue
                server.handle(c, msg)
        except WebSocketDisconnect:
            pass
        finally:
            await server.hub.remove(c)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        server.attach(asyncio.get_running_loop())
        yield
        if server.worker:
            server.worker.stop()
            await asyncio.get_running_loop().run_in_executor(None, server.worker.shutdown)

    return Starlette(routes=[
        Route("/", index),
        Route("/runs", runs),
        Route("/runs.csv", all_csv),
        Route("/runs/{rid}.csv", run_csv),
        WebSocketRoute("/ws", ws_endpoint),
        Mount("/static", StaticFiles(directory=WEB), name="static"),
    ], lifespan=lifespan)

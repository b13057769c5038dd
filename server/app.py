"""The Starlette app: the page, the /ws stream, and the runs' CSVs. It only wires ASGI and sockets."""
from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib.resources
import json
import logging
import re
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Iterator, TypeVar

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp
from starlette.websockets import WebSocket

from previewlab.preview.decoders import default_for, taesd_refusal
from previewlab.preview.encoders import ENCODERS
from previewlab.preview.engine import Frame
from previewlab.preview.models import Model
from previewlab.preview.records import StepRow
from previewlab.preview.run import RunEnd, RunMeta
from previewlab.preview.settings import MAX_NUM_FRAMES, PreviewSettings, RunSettings, SettingsError

from . import protocol
from .guard import Access, Guard
from .headers import SecurityHeaders
from .hub import Client, Hub, Packed
from .limits import DEFAULT_KEEP_RUNS, DEFAULT_MAX_PIXEL_STEPS, MAX_EVENT_CHARS, clip
from .metrics import Metrics
from .session import SessionLimits, serve_client
from .exports import Slots, stream
from .store import EXPORT_CHUNK, RUN_ID, Damaged, Store, export_header
from .worker import Busy, RunOwner, TaskError, Worker
from .writes import OrderedWrites

log = logging.getLogger("previewlab.server")
def _web() -> Path:
    """The page's folder, previewlab/web: in a wheel, its files; in a checkout, the link to the repository's web/."""
    return Path(str(importlib.resources.files("previewlab") / "web"))


WEB = _web()
T = TypeVar("T")
RUNS_PAGE, RUNS_PAGE_MAX = 50, 500  # runs per /runs answer: by default, and at most (?limit=)
LIMIT = re.compile(r"^[0-9]{1,4}$")


class DiskReads:
    """Reading runs from disk never runs on the event loop. One thread: 16 listings at once queue behind each
    other instead of taking turns with the loop for the interpreter lock."""

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None

    def submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="previewlab-disk")
        return self._pool.submit(fn, *args)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.wrap_future(self.submit(fn, *args))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None


@dataclass(frozen=True)
class RunOptions:
    """What a start may ask (the largest side, pixels times steps), and how the worker runs it (previews in
    flight, a compiled decoder)."""
    max_side: int = 1024
    max_pixel_steps: int = DEFAULT_MAX_PIXEL_STEPS
    inflight: int = 2
    compile_decoder: bool = False
    shutdown_grace_s: float = 10.0  # SIGTERM waits this long for the run's step and final image (graceful)


def fitting_frames(frames: int, step: int, pixel_steps: int, limit: int) -> int:
    """A video model's default clip length for the page: its own (Wan 81, HunyuanVideo 129), shortened to the
    longest 1 + k x step frames whose run of pixel_steps per frame fits the server's work limit, so the page's
    first Start is not refused; at least two latent frames (1 + step)."""
    if limit <= 0 or frames * pixel_steps <= limit:
        return frames
    k = max(1, (limit // max(1, pixel_steps) - 1) // step)
    return min(frames, 1 + k * step)


@dataclass
class Closing:
    """A run that has ended, its rows not closed yet: waiting (up to SessionLimits.ack_wait_s) for the acks of
    the previews its watchers still hold, so that the last frame's ack lands in its rows before `done`."""
    end: RunEnd
    side_logs: Callable[[], None] | None
    timer: asyncio.TimerHandle | None = None


class Server:
    """The RunEvents (preview/run.py) of the runs it shows, called on the event loop, and the handler of each
    watcher's messages. Its parts: the run's owner (worker: a RunOwner), the watchers (hub), what each
    session is held to (limits), the data folder (store; writes, in order, off the loop; disk, its reads)."""

    def __init__(self, model: Model, data_dir: Path, *, access: Access = Access(),
                 limits: SessionLimits = SessionLimits(), runs: RunOptions = RunOptions(),
                 keep_runs: int = DEFAULT_KEEP_RUNS, source: RunOwner | None = None) -> None:
        """access: who may drive it (the guard's); limits: what each watcher is held to; runs: what a start may
        ask and how the worker runs it; keep_runs: the data folder's retention; source: a script's watch, which
        owns the runs instead of a worker."""
        self.model = model
        self.access, self.limits, self.runs = access, limits, runs
        self.store = Store(data_dir, keep_runs=keep_runs)  # never raises for a damaged run: it names it
        self.disk = DiskReads()
        self.exports = Slots()  # CSV exports streaming at once (exports.py)
        self.writes = OrderedWrites()  # rows, deliveries and a run's end: written off the loop, then announced
        self.announced: str | None = None  # the run whose `run` message has gone out; its frames may follow
        self._held: dict[str, Frame] = {}  # per run: its newest frame from before its `run` message went out
        self.hub = Hub(limits.send_timeout_s)
        self.hub.on_drop = self._dropped
        self.hub.on_sent = self._sent
        side = min(model.default_size, runs.max_side)
        video = model.space.video  # a clip: its default length and rate, and up to MAX_NUM_FRAMES frames
        step = model.space.temporal if video else 1
        frames = fitting_frames(model.num_frames, step, 20 * side * side, runs.max_pixel_steps) if video else 1
        decoder, self.decoder_note = default_for(model)  # the note: why, when it is not the model's TAESD
        self.defaults = RunSettings(steps=20, width=side, height=side, max_side=runs.max_side,
                                    preview=PreviewSettings(decoder=decoder),
                                    num_frames=frames, fps=model.fps if video else 0.0,
                                    max_frames=MAX_NUM_FRAMES if video else 1, frame_step=step)
        if model.prompt:  # a prompt the model knows (the demo model's): the page starts with it
            self.defaults = replace(self.defaults, prompt=model.prompt)
        if model.guidance is not None:
            self.defaults = replace(self.defaults, guidance=model.guidance)
        self.vocabulary: dict[str, list[str]] | None = None  # the words the page hints at: the demo model's only
        if model.name == "demo":
            from previewlab.bench.demo.scenes import vocabulary

            self.vocabulary = vocabulary()
        # what this server can run: `hello` offers these, and a start or set naming another is refused
        self.encoders = tuple(e for e in ENCODERS if e != "nvjpeg" or model.device.type == "cuda")
        self.metrics = Metrics(data_dir, model.device, keep=keep_runs)
        self.worker: RunOwner | None = None  # a Worker, or a script's watch (embedded.WatchSource, via previewlab.serve)
        self.source = source
        self.seq = 0
        self.current: RunMeta | None = None
        self.closing: Closing | None = None  # at most one: a run's start closes the one before it first
        self.last_row: tuple[str, int] = ("", 0)  # (run id, step) of the newest row: where a shutdown stopped it
        self._loop: asyncio.AbstractEventLoop | None = None
        self.hub.on_gone = lambda c: self._settle()

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.writes.attach(loop)
        if self.source is not None:
            self.worker = self.source
            return
        self.worker = Worker(self.model, self.store, loop, self, inflight=self.runs.inflight,
                             compile_decoder=self.runs.compile_decoder)

    # -- RunEvents: called on the loop by the worker (or by the embedded server's hop from a watch) ----------
    # A run's messages (run, step, error, done) go through self.writes, so clients hear of them in order, each
    # after what it describes is on disk. Frames and ack replies go straight out: a frame may reach the page
    # before its step's row (the page keys both by step), never before its run's `run` message (see announce).
    def started(self, meta: RunMeta) -> None:
        self.close_ended()  # the run before this one stops waiting for acks: its `done` goes out before this `run`
        self.current = meta
        self.metrics.run_started()
        self.writes.submit(None, then=lambda: self.announce(meta))

    def announce(self, meta: RunMeta) -> None:
        self.announced = meta.run_id
        self.hub.text(protocol.run(meta))
        held = self._held.pop(meta.run_id, None)
        if held is not None:
            self.frame(held)

    def row(self, row: StepRow) -> None:
        if len(row.event) > MAX_EVENT_CHARS:  # one cell must never outgrow what the CSV reader takes back
            row = replace(row, event=clip(row.event, MAX_EVENT_CHARS))
        self.metrics.step(row)
        self.last_row = (row.run_id, row.step)
        message = protocol.step(row)
        self.writes.submit(functools.partial(self.store.step, row), then=lambda: self.hub.text(message))

    def frame(self, f: Frame) -> None:
        if f.run_id != self.announced:
            self._held[f.run_id] = f  # only the newest: previews are latest-wins everywhere
            return
        self.seq += 1
        blob = protocol.frame(f, self.seq, sent_at_ms=round(time.time() * 1e3, 3))
        self.hub.frame(Packed(f.run_id, f.step, self.seq, blob))

    def error(self, run_id: str, message: str) -> None:
        text = protocol.error(message, run_id)
        self.writes.submit(None, then=lambda: self.hub.text(text))

    def ended(self, end: RunEnd) -> None:
        """The run's end reaches every client whatever the disk does: each write is best effort. Its rows are
        closed once every watcher has acked the previews it holds of the run, or after ack_wait_s: the page acks
        the last frame after the last step's row, often after the run has ended, and that ack belongs in the
        run's rows. The wait is on the loop, after the run: the denoising never waits, and a watcher that never
        acks delays `done` by ack_wait_s at most (a new run's start ends the wait at once)."""
        self.current = None
        rid = end.meta.run_id

        try:  # on the loop, before the next run's start can reset the device's memory figures
            side_logs: Callable[[], None] | None = self.metrics.run_ended(end)
        except Exception:
            side_logs = None
            log.exception("run %s: metrics failed; the run's end is delivered anyway", rid)
        self.close_ended()
        self.closing = Closing(end, side_logs)
        if self._loop is not None and self.hub.unacked(rid):
            self.closing.timer = self._loop.call_later(self.limits.ack_wait_s, self.close_ended)
        else:
            self.close_ended()

    def _settle(self) -> None:
        """An ack came, a frame was dropped or a watcher left: close the ended run once nothing is waiting."""
        if self.closing is not None and not self.hub.unacked(self.closing.end.meta.run_id):
            self.close_ended()

    def close_ended(self) -> None:
        """Close the ended run's rows and tell every client its end, now (if a run is waiting to be closed)."""
        closing, self.closing = self.closing, None
        if closing is None:
            return
        if closing.timer is not None:
            closing.timer.cancel()
        end, side_logs, rid = closing.end, closing.side_logs, closing.end.meta.run_id
        recorded = end

        def write() -> None:
            nonlocal recorded
            recorded = self.store.finish(end)  # `failed` if the disk lost some of its rows
            self.store.close_run(rid)
            if side_logs is not None:
                side_logs()

        def then() -> None:
            self.hub.text(protocol.done(recorded))
            self.disk.submit(self.store.prune, self.store.open_runs())  # retention, off the loop

        self.writes.submit(write, then)

    @property
    def max_clients(self) -> int:
        return self.limits.max_clients

    def _sent(self, c: Client, p: Packed) -> None:
        self.metrics.sent(len(p.blob))

    def _dropped(self, c: Client, p: Packed) -> None:
        self.metrics.frames_dropped.inc()
        self.writes.submit(functools.partial(self.store.delivery, p.run_id, step=p.step, seq=p.seq, client=c.cid,
                                             kind="drop"))
        self._settle()

    # -- messages from one client ----------------------------------------------------------------------------
    def _runnable(self, decoder: str | None) -> None:
        """A decoder this model can run, asked the same way by start and set: taesd needs TAE weights (before,
        a start failed its run with a traceback and a set made every preview fail)."""
        if decoder == "taesd" and self.model.taesd is None:
            raise protocol.ProtocolError(taesd_refusal(self.model))

    def handle(self, c: Client, msg: protocol.Message) -> None:
        """Act on one valid message. A message that cannot be acted on raises ProtocolError: the session
        answers it with an `error` and counts it as a bad message, so no error reply can be flooded."""
        assert self.worker is not None
        if isinstance(msg, protocol.Start):
            self._runnable(msg.settings.preview.decoder)
            try:
                self.worker.start(msg.settings)
            except (Busy, TaskError) as e:
                raise protocol.ProtocolError(str(e)) from None
            except OSError as e:  # the run's folder could not be written: the run did not start
                log.warning("could not start a run: %s", e)
                raise protocol.ProtocolError(f"could not write the run's folder: {e}") from None
        elif isinstance(msg, protocol.Set):
            self._runnable(msg.changes.get("decoder"))
            try:
                self.worker.set(msg.changes)
            except (Busy, SettingsError) as e:
                raise protocol.ProtocolError(str(e)) from None
        elif isinstance(msg, protocol.Stop):
            if not self.worker.stop():
                raise protocol.ProtocolError("no generation is running")
        elif isinstance(msg, protocol.Ack):
            sent = c.sent.pop(msg.seq, None)
            if sent is None:
                raise protocol.ProtocolError(f"ack: seq {msg.seq} was never sent to this client "
                                             "(or was acknowledged already)")
            rtt = (self.hub.clock() - sent.t0) * 1e3
            d = protocol.Delivery(sent.run_id, sent.step, msg.seq, send_ms=round(sent.send_ms, 3),
                                  ack_rtt_ms=round(rtt, 3), client_decode_ms=msg.client_decode_ms,
                                  client_paint_ms=msg.client_paint_ms)
            self.writes.submit(functools.partial(self.store.delivery, d.run_id, step=d.step, seq=d.seq,
                                                 client=c.cid, kind="ack", **d.timings()))
            self.hub.text(protocol.delivery(d), only=c)
            self._settle()

    async def graceful(self) -> str:
        """SIGTERM / Ctrl-C: stop the run at its next step, let it write its last rows and its final image for up
        to runs.shutdown_grace_s, close clients with 1001. A run still inside a step (or its final decode) after
        that is recorded `interrupted` with the rows it has, and the worker is abandoned: the process exits
        without waiting for the step. Returns the line that says where the stopped run is kept ("": none ran)."""
        grace = self.runs.shutdown_grace_s
        going = self.current
        if self.worker is not None and self.worker.stop() and not await self.worker.ended(grace):
            self.worker.abandon()
            await asyncio.sleep(0)  # rows the run handed over before it was abandoned land first
            meta = self.current
            if meta is not None:
                why = (f"the server shut down while the run was still in a step or its final decode after "
                       f"{grace:g} s (--shutdown-grace): its rows so far are kept, its final image is not")
                log.warning("shutdown: run %s recorded interrupted after %g s (--shutdown-grace)", meta.run_id, grace)
                self.ended(RunEnd(meta, "interrupted", error=why))
        self.close_ended()  # no waiting for acks at shutdown
        await self.writes.drain()  # the last rows and the run's end are written and queued to every client
        for _ in range(30):  # and sent, for up to 3 s, before the close frame
            if not any(c.texts for c in self.hub.clients.values()):
                break
            await asyncio.sleep(0.1)
        await self.hub.close_all(1001, "server shutting down")
        return self.stopped_line(going.run_id) if going is not None else ""

    def stopped_line(self, rid: str) -> str:
        """"stopped run X at step 34; its rows and image are in runs/X", from what was written."""
        step = self.last_row[1] if self.last_row[0] == rid else 0
        at = f"at step {step}" if step else "before its first step"
        kept = "its rows and image are" if self.store.final_image(rid) is not None else "its rows are"
        return f"stopped run {rid} {at}; {kept} in {self.store.root / rid}"

    def hello(self) -> protocol.Outbound:
        """The defaults it offers carry the preview settings now: a running run's live ones, or a script's."""
        live = self.worker.live() if self.worker is not None else None
        defaults = self.defaults if live is None else replace(self.defaults, preview=live)
        return protocol.hello(self.model, defaults, max_pixel_steps=self.runs.max_pixel_steps,
                              encoders=self.encoders, running=self.current, starts=self.source is None,
                              decoder_note=self.decoder_note, vocabulary=self.vocabulary)


class AsciiJSON(JSONResponse):
    """JSON escaped to ASCII: any string that reached the disk (a meta.json written before prompts were checked,
    or placed by hand, may hold a lone surrogate that UTF-8 cannot encode) still makes a valid answer."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")


def _attachment(name: str) -> dict[str, str]:
    return {"Content-Disposition": f'attachment; filename="{name}"'}


def page_args(query: Any) -> tuple[int, str | None, str | None]:
    """?limit=N (1..RUNS_PAGE_MAX), ?before=ID, ?after=ID of /runs; ValueError with the line to answer."""
    raw = query.get("limit", str(RUNS_PAGE))
    if not LIMIT.match(raw) or not 1 <= int(raw) <= RUNS_PAGE_MAX:  # ASCII digits, and few: int() never sees more
        raise ValueError(f"limit: a whole number from 1 to {RUNS_PAGE_MAX}, got {protocol.short(raw)}")
    bounds = []
    for name in ("before", "after"):
        v = query.get(name)
        if v is not None and not RUN_ID.match(v):
            raise ValueError(f"{name}: a run id like 20261130-120000-001, got {protocol.short(v)}")
        bounds.append(v)
    return int(raw), bounds[0], bounds[1]


def build_app(server: Server) -> ASGIApp:
    async def index(request: Request) -> Response:
        return FileResponse(WEB / "index.html")

    async def runs(request: Request) -> Response:
        """Newest first, a page at a time: ?limit=, ?before= (older than that id), ?after= (newer)."""
        try:
            limit, before, after = page_args(request.query_params)
        except ValueError as e:
            return PlainTextResponse(str(e), status_code=400)
        return AsciiJSON(await server.disk.run(server.store.runs, limit, before, after))

    def export(request: Request, name: str, pieces: Iterator[str]) -> Response:
        """A CSV streamed a piece at a time, if the client may start one now (exports.Slots)."""
        client = request.client.host if request.client else "?"
        why = server.exports.take(client)
        if why:
            return PlainTextResponse(why, status_code=429, headers={"Retry-After": "5"})
        return StreamingResponse(stream(server.disk, pieces, lambda: server.exports.give(client)),
                                 media_type="text/csv", headers=_attachment(name))

    async def run_csv(request: Request) -> Response:
        rid = request.path_params["rid"]
        if not await server.disk.run(server.store.known, rid):
            return PlainTextResponse(f"unknown run id {protocol.short(rid)}", status_code=404)
        if request.method == "HEAD":  # what a GET would send, without the work
            return Response(media_type="text/csv", headers=_attachment(f"previewlab-{rid}.csv"))
        try:  # one run is bounded (store.MAX_STEP_ROWS): read it first, so damage is a 500, not a torn stream
            text = await server.disk.run(server.store.run_rows_csv, rid)
        except Damaged as e:
            return PlainTextResponse(f"run {rid} is damaged: {e}; the other runs export normally\n",
                                     status_code=500)
        return export(request, f"previewlab-{rid}.csv",
                      iter([export_header()] + [text[i:i + EXPORT_CHUNK] for i in range(0, len(text), EXPORT_CHUNK)]))

    async def run_image(request: Request) -> Response:
        """A run's final image (a batch's grid, a clip's first frame), by id: the CSV route's checks."""
        rid = request.path_params["rid"]

        def find() -> tuple[bool, Path | None]:  # (a run of that id, its image if it has one)
            return server.store.known(rid), server.store.final_image(rid)
        known, image = await server.disk.run(find)
        if not known:
            return PlainTextResponse(f"unknown run id {protocol.short(rid)}", status_code=404)
        if image is None:
            return PlainTextResponse(f"run {rid} has no final image: it failed, is still running, or a script "
                                     "ran it (the script saves its own)", status_code=404)
        return FileResponse(image, media_type="image/png", headers={"Cache-Control": "no-cache"})

    async def favicon(request: Request) -> Response:
        return FileResponse(WEB / "favicon.svg", media_type="image/svg+xml")

    async def metrics(request: Request) -> Response:
        server.metrics.clients.set(len(server.hub.clients))
        return Response(server.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    async def all_csv(request: Request) -> Response:
        """Every run the data folder holds, a row per run, oldest first (a damaged run says so in its row)."""
        if request.method == "HEAD":
            return Response(media_type="text/csv", headers=_attachment("previewlab-runs.csv"))
        ids = await server.disk.run(server.store.ids)
        return export(request, "previewlab-runs.csv", server.store.list_chunks(ids))

    async def all_steps_csv(request: Request) -> Response:
        """The step rows of every run, oldest first; a damaged run is left out (and logged once)."""
        if request.method == "HEAD":
            return Response(media_type="text/csv", headers=_attachment("previewlab-steps.csv"))
        ids = await server.disk.run(server.store.ids)
        return export(request, "previewlab-steps.csv", server.store.csv_chunks(ids))

    async def ws_endpoint(ws: WebSocket) -> None:
        await serve_client(server, ws)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        server.attach(asyncio.get_running_loop())
        yield
        if server.worker:
            server.worker.stop()
            await asyncio.get_running_loop().run_in_executor(None, server.worker.shutdown)
        server.close_ended()
        await server.writes.drain()
        server.writes.close()
        server.disk.close()
        server.store.close()  # the folder is free for another server

    app = Starlette(routes=[
        Route("/", index),
        Route("/favicon.ico", favicon),  # browsers ask for it whatever the page links
        Route("/runs", runs),
        Route("/runs.csv", all_csv),
        Route("/metrics", metrics),
        Route("/runs/steps.csv", all_steps_csv),  # before the run route: "steps" is never a run id
        Route("/runs/{rid}.csv", run_csv),
        Route("/runs/{rid}/final.png", run_image),
        WebSocketRoute("/ws", ws_endpoint),
        Mount("/static", StaticFiles(directory=WEB), name="static"),
    ], lifespan=lifespan)
    a = server.access
    guarded = Guard(app, hosts=a.hosts, token=a.token, ws_burst=a.ws_burst, ws_per_s=a.ws_per_s)
    return SecurityHeaders(guarded)

"""The Starlette app: the page, the /ws stream, and the runs' CSVs. It only wires ASGI and sockets to the Server."""
from __future__ import annotations

import asyncio
import contextlib
import importlib.resources
import json
import math
import re
from pathlib import Path
from typing import Any, AsyncIterator, Iterator

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp
from starlette.websockets import WebSocket

from previewlab.preview.judging.advice import DEFAULT_BUDGET_PCT

from previewlab.server.ws import protocol
from previewlab.server.http.exports import answered, stream
from previewlab.server.http.forwarded import RealClient
from previewlab.server.http.guard import Guard
from previewlab.server.http.headers import SecurityHeaders
from previewlab.server.server import Server
from previewlab.server.ws.session import serve_client
from previewlab.server.data.store import EXPORT_CHUNK, RUN_ID, Damaged, export_header


WEB = Path(str(importlib.resources.files("previewlab") / "web"))  # the page's folder, in a checkout or a wheel
RUNS_PAGE, RUNS_PAGE_MAX = 50, 500  # runs per /runs answer: by default, and at most (?limit=)
LIMIT = re.compile(r"^[0-9]{1,4}$")


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


def analysis_args(query: Any) -> tuple[str, float]:
    """?run=ID (a run id) and ?budget=B (percent, above 0 and at most 1000; default the advice's); ValueError
    with the line to answer."""
    rid = query.get("run", "")
    if not RUN_ID.match(rid):
        raise ValueError(f"run: a run id like 20261130-120000-001, got {protocol.short(rid)}")
    raw = query.get("budget", "")
    if raw == "":
        return rid, DEFAULT_BUDGET_PCT
    try:
        budget = float(raw) if len(raw) <= 16 else math.nan
    except ValueError:
        budget = math.nan
    if not 0 < budget <= 1000:  # NaN and inf fail here too
        raise ValueError(f"budget: a number of percent above 0 and at most 1000, got {protocol.short(raw)}")
    return rid, budget


def build_app(server: Server) -> ASGIApp:
    async def index(request: Request) -> Response:
        return FileResponse(WEB / "index.html")

    async def runs(request: Request) -> Response:
        """Newest first, a page at a time: ?limit=, ?before= (older than that id), ?after= (newer)."""
        try:
            limit, before, after = page_args(request.query_params)
        except ValueError as e:
            return PlainTextResponse(str(e), status_code=400)
        return AsciiJSON(await server.disk.run(lambda: server.figures.of_runs(server.store.runs(limit, before, after))))

    async def analysis(request: Request) -> Response:
        """?run=ID&budget=B: the analysis of the runs of that run's settings within budget percent (the page's
        advice, NOISY line and configurations: server/figures.py), that run's configuration the one in use."""
        try:
            rid, budget = analysis_args(request.query_params)
        except ValueError as e:
            return PlainTextResponse(str(e), status_code=400)
        found = await server.disk.run(server.figures.analysis, rid, budget)
        if found is None:
            return PlainTextResponse(f"run {rid}: no ended run of that id (a running or failed run has no figures)",
                                     status_code=404)
        return AsciiJSON(found)

    def slot(request: Request) -> tuple[str, Response | None]:
        """The client's address, and the answer that refuses it when it may not start an export now
        (exports.Slots); None: its slot is taken, and the export's end gives it back."""
        client = request.client.host if request.client else "?"
        why = server.exports.take(client)
        return client, PlainTextResponse(why, status_code=429, headers={"Retry-After": "5"}) if why else None

    def export(request: Request, name: str, pieces: Iterator[str]) -> Response:
        """A CSV streamed a piece at a time, if the client may start one now."""
        client, refused = slot(request)
        return refused or streamed(client, name, pieces)

    def streamed(client: str, name: str, pieces: Iterator[str]) -> Response:
        return StreamingResponse(stream(server.disk, pieces, lambda: server.exports.give(client),
                                        live=lambda: bool(server.store.open_runs())),
                                 media_type="text/csv", headers=_attachment(name))

    async def run_csv(request: Request) -> Response:
        rid = request.path_params["rid"]
        if not await server.disk.run(server.store.known, rid):
            return PlainTextResponse(f"unknown run id {protocol.short(rid)}", status_code=404)
        if request.method == "HEAD":  # what a GET would send, without the work
            return Response(media_type="text/csv", headers=_attachment(f"previewlab-{rid}.csv"))
        client, refused = slot(request)  # before the run is read: a client at its limit costs no parse
        if refused:
            return refused
        text = None
        try:  # one run is bounded (store.MAX_STEP_ROWS): read it first, so damage is a 500, not a torn stream
            text = await server.disk.run(server.store.run_rows_csv, rid)
        except Damaged as e:
            return PlainTextResponse(f"run {rid} is damaged: {e}; the other runs export normally\n",
                                     status_code=500)
        finally:
            if text is None:  # damaged, or the client left while it was read: its slot is free again
                server.exports.give(client)
        return streamed(client, f"previewlab-{rid}.csv",
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
                                     "ran it and did not call watch.save()", status_code=404)
        return FileResponse(image, media_type="image/png", headers={"Cache-Control": "no-cache"})

    icon = WEB / "favicon.svg"
    has_icon = icon.is_file()  # once: an install without it answers 404, never a 500 and a traceback per page load

    async def favicon(request: Request) -> Response:
        if not has_icon:
            return PlainTextResponse("no favicon.svg: the page's files are incomplete\n", status_code=404)
        return FileResponse(icon, media_type="image/svg+xml")

    async def metrics(request: Request) -> Response:
        server.metrics.clients.set(len(server.hub.clients))
        return Response(server.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    async def all_csv(request: Request) -> Response:
        """Every run the data folder holds, a row per run, oldest first (a damaged run says so in its row)."""
        if request.method == "HEAD":
            return Response(media_type="text/csv", headers=_attachment("previewlab-runs.csv"))
        ids = await server.disk.run(server.store.ids)
        # the answer's columns after the run's own, as the bench's runs.csv has them (exports.answered)
        return export(request, "previewlab-runs.csv", answered(server.store.list_chunks(ids), server.figures.answers))

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
        await server.close()  # the folder is free for another server

    app = Starlette(routes=[
        Route("/", index),
        Route("/favicon.ico", favicon),  # browsers ask for it whatever the page links
        Route("/runs", runs),
        Route("/analysis", analysis),
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
    # outermost: every per-address limit inside (the Guard's handshakes, the exports) sees the real client
    return RealClient(SecurityHeaders(guarded), a.proxies)

"""The Starlette app: the page, the /ws stream, the runs' answers (run_routes.py) and CSVs (csv_routes.py), and the
metrics. It only wires ASGI and sockets to the Server."""
from __future__ import annotations

import asyncio
import contextlib
import importlib.resources
from pathlib import Path
from typing import AsyncIterator

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp
from starlette.websockets import WebSocket

from previewlab.server.csv_routes import CsvExports
from previewlab.server.http.forwarded import RealClient
from previewlab.server.http.guard import Guard
from previewlab.server.http.headers import SecurityHeaders
from previewlab.server.run_routes import RunAnswers
from previewlab.server.server import Server
from previewlab.server.ws.session import serve_client

WEB = Path(str(importlib.resources.files("previewlab") / "web"))  # the page's folder, in a checkout or a wheel


def page_routes(server: Server) -> list[BaseRoute]:
    """The page and its files, its WebSocket, and the metrics."""
    async def index(request: Request) -> Response:
        return FileResponse(WEB / "index.html")

    icon = WEB / "favicon.svg"
    has_icon = icon.is_file()  # once: an install without it answers 404, never a 500 and a traceback per page load

    async def favicon(request: Request) -> Response:
        if not has_icon:
            return PlainTextResponse("no favicon.svg: the page's files are incomplete\n", status_code=404)
        return FileResponse(icon, media_type="image/svg+xml")

    async def metrics(request: Request) -> Response:
        server.metrics.clients.set(len(server.relay.hub.clients))
        return Response(server.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    async def ws_endpoint(ws: WebSocket) -> None:
        await serve_client(server, ws)

    return [Route("/", index),
            Route("/favicon.ico", favicon),  # browsers ask for it whatever the page links
            Route("/metrics", metrics),
            WebSocketRoute("/ws", ws_endpoint),
            Mount("/static", StaticFiles(directory=WEB), name="static")]


def build_app(server: Server) -> ASGIApp:
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        server.attach(asyncio.get_running_loop())
        yield
        await server.close()  # the folder is free for another server

    routes = [*page_routes(server), *RunAnswers(server).routes(), *CsvExports(server).routes()]
    app = Starlette(routes=routes, lifespan=lifespan)
    a = server.access
    guarded = Guard(app, hosts=a.hosts, token=a.token, ws_burst=a.ws_burst, ws_per_s=a.ws_per_s)
    # outermost: every per-address limit inside (the Guard's handshakes, the exports) sees the real client
    return RealClient(SecurityHeaders(guarded), a.proxies)

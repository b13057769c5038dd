"""The HTTP answers about runs: /runs (the run list, a page at a time), /analysis (a run's settings' figures) and
a run's final image, each read off the loop (data/disk.py) and checked before any of it is."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from previewlab.preview.judging.advice import DEFAULT_BUDGET_PCT
from previewlab.preview.record.run_ids import RUN_ID

from previewlab.server.core.limits import short
from previewlab.server.server import Server

RUNS_PAGE, RUNS_PAGE_MAX = 50, 500  # runs per /runs answer: by default, and at most (?limit=)
LIMIT = re.compile(r"^[0-9]{1,4}$")


class AsciiJSON(JSONResponse):
    """JSON escaped to ASCII: any string that reached the disk (a meta.json written before prompts were checked,
    or placed by hand, may hold a lone surrogate that UTF-8 cannot encode) still makes a valid answer."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")


def page_args(query: QueryParams) -> tuple[int, str | None, str | None]:
    """?limit=N (1..RUNS_PAGE_MAX), ?before=ID, ?after=ID of /runs; ValueError with the line to answer."""
    raw = query.get("limit", str(RUNS_PAGE))
    if not LIMIT.match(raw) or not 1 <= int(raw) <= RUNS_PAGE_MAX:  # ASCII digits, and few: int() never sees more
        raise ValueError(f"limit: a whole number from 1 to {RUNS_PAGE_MAX}, got {short(raw)}")
    bounds = []
    for name in ("before", "after"):
        v = query.get(name)
        if v is not None and not RUN_ID.match(v):
            raise ValueError(f"{name}: a run id like 20261130-120000-001, got {short(v)}")
        bounds.append(v)
    return int(raw), bounds[0], bounds[1]


def analysis_args(query: QueryParams) -> tuple[str, float]:
    """?run=ID (a run id) and ?budget=B (percent, above 0 and at most 1000; default the advice's); ValueError
    with the line to answer."""
    rid = query.get("run", "")
    if not RUN_ID.match(rid):
        raise ValueError(f"run: a run id like 20261130-120000-001, got {short(rid)}")
    raw = query.get("budget", "")
    if raw == "":
        return rid, DEFAULT_BUDGET_PCT
    try:
        budget = float(raw) if len(raw) <= 16 else math.nan
    except ValueError:
        budget = math.nan
    if not 0 < budget <= 1000:  # NaN and inf fail here too
        raise ValueError(f"budget: a number of percent above 0 and at most 1000, got {short(raw)}")
    return rid, budget


class RunAnswers:
    """The routes, over the server's data folder (store), its reads off the loop (disk) and its figures."""

    def __init__(self, server: Server) -> None:
        self.server = server

    def routes(self) -> list[BaseRoute]:
        return [Route("/runs", self.runs), Route("/analysis", self.analysis),
                Route("/runs/{rid}/final.png", self.image)]

    async def runs(self, request: Request) -> Response:
        """Newest first, a page at a time: ?limit=, ?before= (older than that id), ?after= (newer)."""
        try:
            limit, before, after = page_args(request.query_params)
        except ValueError as e:
            return PlainTextResponse(str(e), status_code=400)
        s = self.server
        return AsciiJSON(await s.disk.run(lambda: s.figures.of_runs(s.store.runs(limit, before, after))))

    async def analysis(self, request: Request) -> Response:
        """?run=ID&budget=B: the analysis of the runs of that run's settings within budget percent (the page's
        advice, NOISY line and configurations: server/figures.py), that run's configuration the one in use."""
        try:
            rid, budget = analysis_args(request.query_params)
        except ValueError as e:
            return PlainTextResponse(str(e), status_code=400)
        found = await self.server.disk.run(self.server.figures.analysis, rid, budget)
        if found is None:
            return PlainTextResponse(f"run {rid}: no ended run of that id (a running or failed run has no figures)",
                                     status_code=404)
        return AsciiJSON(found)

    async def image(self, request: Request) -> Response:
        """A run's final image (a batch's grid, a clip's first frame), by id: the CSV route's checks."""
        rid, store = request.path_params["rid"], self.server.store

        def find() -> tuple[bool, Path | None]:  # (a run of that id, its image if it has one)
            return store.known(rid), store.final_image(rid)
        known, image = await self.server.disk.run(find)
        if not known:
            return PlainTextResponse(f"unknown run id {short(rid)}", status_code=404)
        if image is None:
            return PlainTextResponse(f"run {rid} has no final image: it failed, is still running, or a script "
                                     "ran it and did not call watch.save()", status_code=404)
        return FileResponse(image, media_type="image/png", headers={"Cache-Control": "no-cache"})

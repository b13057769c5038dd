"""The HTTP routes of the runs' CSVs: every run's row (/runs.csv), every step (/runs/steps.csv) and one run's steps
(/runs/ID.csv), each streamed a piece at a time (http/exports.py) while its client holds one of the export slots
(exports.Slots); a HEAD answers what a GET would send, without the work."""
from __future__ import annotations

from typing import Iterator

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from previewlab.server.core.limits import short
from previewlab.server.data.columns import export_header
from previewlab.server.data.run_files import Damaged
from previewlab.server.data.store_reader import EXPORT_CHUNK
from previewlab.server.http.exports import answered, stream
from previewlab.server.server import Server


def _attachment(name: str) -> dict[str, str]:
    return {"Content-Disposition": f'attachment; filename="{name}"'}


class CsvExports:
    """The routes, over the server's data folder (store), its reads off the loop (disk), its export slots
    (exports) and its figures (the answers' columns of runs.csv)."""

    def __init__(self, server: Server) -> None:
        self.server = server

    def routes(self) -> list[BaseRoute]:
        return [Route("/runs.csv", self.all_runs),
                Route("/runs/steps.csv", self.all_steps),  # before the run route: "steps" is never a run id
                Route("/runs/{rid}.csv", self.run)]

    def _slot(self, request: Request) -> tuple[str, Response | None]:
        """The client's address, and the answer that refuses it when it may not start an export now
        (exports.Slots); None: its slot is taken, and the export's end gives it back."""
        client = request.client.host if request.client else "?"
        why = self.server.exports.take(client)
        return client, PlainTextResponse(why, status_code=429, headers={"Retry-After": "5"}) if why else None

    def _export(self, request: Request, name: str, pieces: Iterator[str]) -> Response:
        """A CSV streamed a piece at a time, if the client may start one now."""
        client, refused = self._slot(request)
        return refused or self._streamed(client, name, pieces)

    def _streamed(self, client: str, name: str, pieces: Iterator[str]) -> Response:
        s = self.server
        return StreamingResponse(stream(s.disk, pieces, lambda: s.exports.give(client),
                                        live=lambda: bool(s.store.open_runs())),
                                 media_type="text/csv", headers=_attachment(name))

    async def run(self, request: Request) -> Response:
        rid, s = request.path_params["rid"], self.server
        if not await s.disk.run(s.store.known, rid):
            return PlainTextResponse(f"unknown run id {short(rid)}", status_code=404)
        if request.method == "HEAD":  # what a GET would send, without the work
            return Response(media_type="text/csv", headers=_attachment(f"previewlab-{rid}.csv"))
        client, refused = self._slot(request)  # before the run is read: a client at its limit costs no parse
        if refused:
            return refused
        text = None
        try:  # one run is bounded (store.MAX_STEP_ROWS): read it first, so damage is a 500, not a torn stream
            text = await s.disk.run(s.store.run_rows_csv, rid)
        except Damaged as e:
            return PlainTextResponse(f"run {rid} is damaged: {e}; the other runs export normally\n",
                                     status_code=500)
        finally:
            if text is None:  # damaged, or the client left while it was read: its slot is free again
                s.exports.give(client)
        return self._streamed(client, f"previewlab-{rid}.csv",
                              iter([export_header()] + [text[i:i + EXPORT_CHUNK]
                                                        for i in range(0, len(text), EXPORT_CHUNK)]))

    async def all_runs(self, request: Request) -> Response:
        """Every run the data folder holds, a row per run, oldest first (a damaged run says so in its row)."""
        if request.method == "HEAD":
            return Response(media_type="text/csv", headers=_attachment("previewlab-runs.csv"))
        s = self.server
        ids = await s.disk.run(s.store.ids)
        # the answer's columns after the run's own, as the bench's runs.csv has them (exports.answered)
        return self._export(request, "previewlab-runs.csv", answered(s.store.list_chunks(ids), s.figures.answers))

    async def all_steps(self, request: Request) -> Response:
        """The step rows of every run, oldest first; a damaged run is left out (and logged once)."""
        if request.method == "HEAD":
            return Response(media_type="text/csv", headers=_attachment("previewlab-steps.csv"))
        s = self.server
        ids = await s.disk.run(s.store.ids)
        return self._export(request, "previewlab-steps.csv", s.store.csv_chunks(ids))

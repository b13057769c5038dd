"""The CSV exports (/runs.csv a row per run, /runs/steps.csv every run's steps, /runs/<id>.csv one run's):
streamed a piece at a time, and bounded.

An export of every run was built whole in memory (500 runs of 1000 steps: 102 MB) and kept by every reader
that did not read it: 30 such readers took the server from 551 MB to 3.6 GB. Now the pieces come from the
disk thread one at a time, each only when the client has taken the one before (uvicorn's flow control), so a
reader holds a piece, not the export; other requests' reads queue between pieces, not behind a whole export.
Exports at once are bounded per client address and in all, a HEAD costs a stat, never an export.

While a run is being written an export yields to it: each piece waits LIVE_PIECE_REST_S after the one before
(640 KB/s), so four exports take about 1 % of the machine, not the run's figures (four exports at full
speed took a running model's denoise from 47-103 ms to 553 ms a step). With no run going, it streams at once.
"""
from __future__ import annotations

import asyncio
import csv
import io
from typing import Any, AsyncIterator, Awaitable, Callable, Iterator, Mapping

from previewlab.preview.judging.answers import ANSWER_COLUMNS, as_text

MAX_EXPORTS = 4             # exports streaming at once, in all
MAX_EXPORTS_PER_CLIENT = 1  # and per client address
LIVE_PIECE_REST_S = 0.1     # between an export's 64 K pieces while a run is written (640 KB/s each)


class Slots:
    """Exports in progress, per client address and in all (used on the event loop only)."""

    def __init__(self, total: int = MAX_EXPORTS, per_client: int = MAX_EXPORTS_PER_CLIENT) -> None:
        self.total, self.per_client = total, per_client
        self._held: dict[str, int] = {}

    def take(self, client: str) -> str:
        """"" when the client may start an export now (the slot is then held), else the line to refuse with."""
        if self._held.get(client, 0) >= self.per_client:
            return (f"an export is already streaming to you ({self.per_client} at a time per client): try again "
                    "when it has finished")
        if sum(self._held.values()) >= self.total:
            return f"{self.total} exports are streaming already: try again in a moment"
        self._held[client] = self._held.get(client, 0) + 1
        return ""

    def give(self, client: str) -> None:
        left = self._held.get(client, 0) - 1
        if left > 0:
            self._held[client] = left
        else:
            self._held.pop(client, None)

    @property
    def busy(self) -> int:
        return sum(self._held.values())


async def stream(disk: Any, pieces: Iterator[str], done: Any, live: Callable[[], bool] = lambda: False,
                 rest: Callable[[float], Awaitable[None]] = asyncio.sleep) -> AsyncIterator[bytes]:
    """The export's pieces, each read on the disk thread; done() runs however the stream ends (a client that
    leaves mid-export included). live(): a run is being written, so each piece after the first waits
    LIVE_PIECE_REST_S first (rest: injected, tests count the waits)."""
    try:
        first = True
        while True:
            if not first and live():
                await rest(LIVE_PIECE_REST_S)
            first = False
            piece = await disk.run(next, pieces, None)
            if piece is None:
                return
            yield piece.encode("utf-8")
    finally:
        done()


def answered(pieces: Iterator[str], cells: Callable[[], Mapping[str, Mapping[str, Any]]]) -> Iterator[str]:
    """The list's CSV (a row per run, whole rows in each piece, its header in the first) with the answer's
    columns after its own (ANSWER_COLUMNS, the bench's runs.csv's: each run's role, its pair and its
    configuration's overhead and verdict); cells: the analysis's cells by run id (Figures.answers), asked when
    the first piece is (on the disk thread). A run the analysis does not know (damaged, running) has them
    empty."""
    known: Mapping[str, Mapping[str, Any]] | None = None
    for piece in pieces:
        if known is None:
            known = cells()
        buf = io.StringIO()
        w = csv.writer(buf)
        for row in csv.reader(io.StringIO(piece, newline="")):
            if row[:1] == ["run_id"]:  # the header
                w.writerow(row + list(ANSWER_COLUMNS))
                continue
            w.writerow(row + as_text(known.get(row[0], {}) if row else {}))
        yield buf.getvalue()

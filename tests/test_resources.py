"""Issue 33, items 7 and 8: exports stream a piece at a time within bounds, and previews are never deflated."""
from __future__ import annotations

import asyncio
import csv
import io
import socket
import time
import urllib.request
from dataclasses import fields
from pathlib import Path
from typing import Any, Iterator

import pytest
import websockets

from previewlab import serve, watch
from previewlab.preview.models import synthetic_pipeline
from previewlab.preview.record.records import STEP_COLUMNS, StepRow
from previewlab.server.data.store_reader import EXPORT_CHUNK
from tests.conftest import live_server, make_run


def _big_runs(root: Path, runs: int, steps: int) -> None:
    kinds = {f.name: str(f.type) for f in fields(StepRow)}  # each cell one its column reads: a number, or text
    cell = {c: "12.345" if "float" in k else "12" if "int" in k else "text" for c, k in kinds.items()}
    cell["mode"] = "sync"  # a Literal column reads only its names (cells.from_cells)
    for k in range(runs):
        rid = f"20261130-120000-{k:03d}"
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(STEP_COLUMNS)
        for step in range(1, steps + 1):
            w.writerow([rid if c == "run_id" else step if c == "step" else cell[c] for c in STEP_COLUMNS])
        make_run(root, rid, steps=buf.getvalue())


def _stuck(addr: str, path: str) -> socket.socket:
    """A reader that sends its request and never reads the answer (a small receive buffer)."""
    host, port = addr.rsplit(":", 1)
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect((host, int(port)))
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n".encode())
    return s


def _status(url: str, method: str = "GET") -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=20) as r:
            r.read()
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


@pytest.mark.slow
def test_an_export_streams_in_pieces_and_a_stuck_reader_holds_one(make_app, tmp_path):
    """Item 7: the step export (/runs.csv then, /runs/steps.csv since issue 35) was built whole (500 runs of
    1000 steps: 102 MB) and kept by every reader that did not read it: 30 of them took the server to 3.6 GB. Now a reader that never reads makes the server read a few
    pieces of the export, not all of it; a second export from the same address is refused while the first
    streams; a HEAD costs no export; another client's listing still answers; a reader that reads gets it whole."""
    data = tmp_path / "runs"
    _big_runs(data, runs=40, steps=1000)
    srv, app = make_app(data_dir=data)
    pulled: list[int] = []
    whole = srv.store.csv_chunks

    def counted(rids: Any, skip_damaged: bool = True) -> Iterator[str]:
        for piece in whole(rids, skip_damaged):
            pulled.append(len(piece))
            yield piece
    srv.store.csv_chunks = counted  # type: ignore[method-assign]
    with live_server(app, sndbuf=4096) as addr:
        base = f"http://{addr}"
        assert _status(base + "/runs/steps.csv", "HEAD") == 200 and pulled == []  # a HEAD: no export
        stuck = _stuck(addr, "/runs/steps.csv")
        time.sleep(2.0)  # long enough to have built the whole export, as before
        held = sum(pulled)
        assert _status(base + "/runs/steps.csv") == 429  # the same address: one export at a time
        assert _status(base + "/runs?limit=1") == 200
        stuck.close()
        deadline = time.monotonic() + 10
        while srv.exports.busy and time.monotonic() < deadline:
            time.sleep(0.05)
        assert srv.exports.busy == 0  # a reader that left gives its slot back
        pulled.clear()
        with urllib.request.urlopen(base + "/runs/steps.csv", timeout=60) as r:
            body = r.read().decode()
    total = sum(pulled)
    assert total > 20 * EXPORT_CHUNK and body.count("\n") == 1 + 40 * 1000
    assert 0 < held < total / 4, (held, total)


def test_previews_are_never_deflated(tmp_path):
    """Item 8: a watcher offering permessage-deflate had every preview frame compressed on the event loop (31
    such watchers of 600 KB PNGs: 2 s per send). The server now declines the extension."""
    w = watch(synthetic_pipeline("synthetic:tiny"), decoder="none")
    page = serve(w, port=0, data_dir=tmp_path)
    try:
        async def offered() -> Any:
            async with websockets.connect(page.url.replace("http", "ws") + "ws", compression="deflate") as ws:
                await ws.recv()  # hello
                assert ws.response is not None
                return ws.response.headers.get("Sec-WebSocket-Extensions")
        assert asyncio.run(offered()) is None
    finally:
        w.remove()


@pytest.mark.slow
def test_an_export_that_keeps_flowing_outlives_the_response_deadline(make_app, tmp_path):
    """Item 7: a cold export of every run took about 12 s, so the 10 s response deadline aborted it. A response
    now has to make progress within each deadline, not be whole: with a 0.5 s deadline, an export that takes
    longer but keeps flowing arrives whole, and one whose reader stops is still aborted."""
    from previewlab.server.http.http11 import connection_limits

    data = tmp_path / "runs"
    _big_runs(data, runs=12, steps=1000)
    srv, app = make_app(data_dir=data)
    whole = srv.store.csv_chunks

    def slow(rids: Any, skip_damaged: bool = True) -> Iterator[str]:
        for piece in whole(rids, skip_damaged):
            time.sleep(0.1)  # the export takes well over the deadline: 12 runs of 4 pieces or more
            yield piece
    srv.store.csv_chunks = slow  # type: ignore[method-assign]
    with live_server(app, sndbuf=4096, **connection_limits(srv.limits.max_clients, response_timeout_s=0.5)) as addr:
        t0 = time.monotonic()
        with urllib.request.urlopen(f"http://{addr}/runs/steps.csv", timeout=60) as r:
            body = r.read().decode()
        took = time.monotonic() - t0
        stuck = _stuck(addr, "/runs/steps.csv")
        deadline = time.monotonic() + 20
        while srv.exports.busy and time.monotonic() < deadline:
            time.sleep(0.05)
        released = srv.exports.busy == 0  # the stuck reader was aborted, its slot given back
        stuck.close()
    assert took > 0.5 and body.count("\n") == 1 + 12 * 1000
    assert released

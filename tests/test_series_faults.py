"""A measure series' faults (issue 56, items 4 and 5), on the real server and its WebSocket: a Stop that lands
while the series counts its pairs or while a run is starting; retention that removed a running series' pairs;
a series' run gone from the folder. Each window is held open by the real server's own parts waiting on an event
(the analysis' read, the run folder's making), never by a guessed sleep. Runs: synthetic:tiny, 2 steps, 64 px."""
from __future__ import annotations

import json
import shutil
import threading
from typing import Any

import pytest
from starlette.testclient import TestClient

from previewlab.preview.record.run import RunMeta
from tests.conftest import SAME_ORIGIN, acks_not_awaited, recv_until, wait_until

RUN = {"steps": 2, "width": 64, "height": 64, "decoder": "latent2rgb", "every": 1}
MEASURE = json.dumps({"type": "measure", **RUN})
CONFIG = "latent2rgb/every1/sync"


def _start(**changes: Any) -> str:
    return json.dumps({"type": "start", **RUN, **changes})


def _next(ws: Any, kinds: tuple[str, ...]) -> dict[str, Any]:
    """The next text message of one of these types."""
    while True:
        m = ws.receive()
        if m.get("text") is not None and (msg := json.loads(m["text"]))["type"] in kinds:
            return msg


def _series_end(ws: Any) -> dict[str, Any]:
    """The series' last `measure` message: the first one that is not running."""
    msg = recv_until(ws, "measure")
    while msg["state"] == "running":
        msg = recv_until(ws, "measure")
    return msg


def test_a_stop_while_a_series_counts_its_pairs_ends_it_before_its_first_run(make_app):
    """Item 4: a Stop that landed while a series read the pairs its configuration has (on the disk thread, seconds
    on a big folder) found no series and no run: "no generation is running", and then the series ran whole.
    The series is the server's from its Measure on: the Stop ends it, and no run starts."""
    srv, app = make_app(limits=acks_not_awaited())
    entries = srv.figures.entries
    reading, gate = threading.Event(), threading.Event()

    def read_held(*args: Any, **kw: Any) -> Any:  # the analysis' own read, held until the Stop has landed
        reading.set()
        gate.wait(30)
        return entries(*args, **kw)
    srv.figures.entries = read_held  # type: ignore[method-assign]
    with TestClient(app) as client, client.websocket_connect("/ws", headers=SAME_ORIGIN) as ws, \
            client.websocket_connect("/ws", headers=SAME_ORIGIN) as other:
        recv_until(ws, "hello")
        recv_until(other, "hello")
        ws.send_text(MEASURE)
        assert reading.wait(30), "the series never read its pairs"
        other.send_text(json.dumps({"type": "stop"}))
        said = _next(other, ("measure", "error"))
        gate.set()
        assert said["type"] == "measure", said  # before: "no generation is running"
        assert said["state"] == "stopped" and said["line"] == \
            f"measuring {CONFIG} stopped before its first run: stopped by a watcher", said
        ws.send_text(json.dumps({"type": "stop"}))  # answered after the Measure: nothing runs
        assert recv_until(ws, "error")["message"] == "no generation is running"
        assert srv.store.ids() == [] and srv.worker is not None and srv.worker.state == "idle"


def test_a_stop_while_a_run_is_starting_stops_it_at_its_first_step(make_app):
    """Item 4: the worker, still making a run's folder, answered a Stop with False ("no generation is running")
    and the run then ran whole. A run that is starting starts stopped: it ends at its first step."""
    srv, app = make_app(limits=acks_not_awaited())
    gate = threading.Event()
    with TestClient(app) as client, client.websocket_connect("/ws", headers=SAME_ORIGIN) as ws, \
            client.websocket_connect("/ws", headers=SAME_ORIGIN) as other:
        recv_until(ws, "hello")
        recv_until(other, "hello")
        worker: Any = srv.worker
        begin = worker.begin

        async def held(meta: RunMeta) -> None:  # the run's folder is made once the Stop has landed
            await worker.loop.run_in_executor(None, gate.wait, 30)
            await begin(meta)
        worker.begin = held
        ws.send_text(_start())
        wait_until(lambda: worker.state == "starting", 30, "the run to be starting")
        other.send_text(json.dumps({"type": "stop"}))
        other.send_text(json.dumps({"type": "hush"}))  # its error comes once the Stop has been handled
        answer = recv_until(other, "error")["message"]
        gate.set()
        assert "hush" in answer, answer  # before: "no generation is running"
        done = recv_until(other, "done")
        assert done["status"] == "stopped" and done["totals"]["steps_run"] == 1, done  # before: a whole run


def test_a_series_whose_figure_the_folder_cannot_keep_is_refused_at_its_start(make_app):
    """Item 5: with --keep-runs 4 a series ran 48 runs and stopped "not steady": retention had removed its pairs
    as it made them. Its figure stands on 12 runs here: the start is refused in one line that says how many to
    keep, and nothing runs."""
    srv, app = make_app(keep_runs=4, limits=acks_not_awaited())
    with TestClient(app) as client, client.websocket_connect("/ws", headers=SAME_ORIGIN) as ws:
        recv_until(ws, "hello")
        ws.send_text(MEASURE)
        said = _next(ws, ("measure", "error"))
        assert said["type"] == "error", said  # before: the series started
        assert said["message"] == (
            f"measure: {CONFIG}'s figure at 6 pairs stands on 12 runs (a baseline and a run with previews each), "
            "and --keep-runs 4 keeps 4: retention would remove its pairs once the series ends; serve with "
            "--keep-runs 12 or more (0 keeps every run)"), said
        assert srv.series is None and srv.store.ids() == []


@pytest.mark.slow
def test_retention_keeps_a_running_series_pairs_and_applies_again_once_it_ends(make_app):
    """Item 5: retention removed a running series' runs, and those its figure stood on, oldest first. They are
    held while it runs (the folder's other runs go first), so it ends at the pairs it named; after it, retention
    applies to them again. --keep-runs 12; the folder: a warm-up, 2 pairs of the configuration (run by hand),
    2 other runs; the series adds 4 pairs (8 runs)."""
    srv, app = make_app(keep_runs=12, limits=acks_not_awaited())
    with TestClient(app) as client, client.websocket_connect("/ws", headers=SAME_ORIGIN) as ws:
        recv_until(ws, "hello")

        def run(**changes: Any) -> str:
            ws.send_text(_start(**changes))
            done = recv_until(ws, "done")
            assert done["status"] == "done", done
            return str(done["run_id"])
        run(steps=3)  # the warm-up (the first run after the model loaded): no pair
        pairs = [run(decoder=d) for d in ("none", "latent2rgb", "none", "latent2rgb")]
        others = [run(steps=3), run(steps=3)]
        ws.send_text(MEASURE)
        first = recv_until(ws, "measure")
        assert first["line"].startswith(f"measuring {CONFIG}: 2 of 6 pairs (adds 4 to its 2"), first
        end = _series_end(ws)
        series = [rid for rid in srv.store.ids() if rid > others[-1]]
        assert end["state"] == "done" and end["line"].startswith(f"measured {CONFIG}: 6 of 6 pairs"), end
        # before: the pair by hand went first (runs 6 and 7 of the series pushed two of its runs out)
        assert srv.store.ids() == pairs + series and len(series) == 8
        later = run(steps=3)  # the series is over: its runs are retention's again, the oldest goes
        wait_until(lambda: srv.store.ids() == pairs[1:] + series + [later], 10, "retention to apply again")


def test_a_series_run_gone_from_the_folder_stops_it_saying_so(make_app):
    """Item 5: a series whose runs were removed from under it went on to its bound and said "the others' runs
    were not steady". Its first run removed by hand while its second starts, it stops after that run, saying
    which run is gone."""
    srv, app = make_app(limits=acks_not_awaited())
    gate = threading.Event()
    with TestClient(app) as client, client.websocket_connect("/ws", headers=SAME_ORIGIN) as ws:
        recv_until(ws, "hello")
        worker: Any = srv.worker
        begin = worker.begin

        async def held(meta: RunMeta) -> None:  # the series' second run waits here until its first is gone
            if meta.purpose == "measured":
                await worker.loop.run_in_executor(None, gate.wait, 30)
            await begin(meta)
        worker.begin = held
        ws.send_text(MEASURE)
        first = recv_until(ws, "done")
        wait_until(lambda: worker.state == "starting", 30, "the series' second run to be starting")
        shutil.rmtree(srv.store.root / first["run_id"])
        gate.set()
        end = _series_end(ws)
        assert end["state"] == "stopped", end  # before: it went on
        assert end["line"] == (
            f"measuring {CONFIG} stopped at 0 of 6 pairs: 1 of its runs ({first['run_id']}) is gone from the data "
            "folder, removed while it ran (not by retention, which keeps a running series' runs): the pairs it made "
            "no longer count"), end
        assert len(srv.store.ids()) == 1

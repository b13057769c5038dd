"""The page's measure series (server/measure.py; issue 54, item 4): its counterbalanced order, what Measure again
adds, its bound, the refusal of every auto, and a Stop between two of its runs. No wall time is compared: the
series' decisions are driven with made-up ends and analyses, or read off the server's state."""
from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import dataclass, fields, replace
from typing import Any

import pytest
from starlette.testclient import TestClient

from previewlab.preview.judging.advice import analyze
from previewlab.preview.judging.analysis import Entry, Finding, Role, paired
from previewlab.preview.judging.estimates import Estimate, estimate
from previewlab.preview.record.records import Totals
from previewlab.preview.record.run import RunEnd, RunMeta, RunRecord
from previewlab.preview.settings import PreviewSettings, RunSettings
from previewlab.server.core.run_figures import RunFigures
from previewlab.server.measure import MAX_PAIRS, Refused, Series, more_pairs, order_of
from tests.conftest import SAME_ORIGIN, recv_until, wait_until

SETTINGS = RunSettings(steps=2, width=64, height=64,
                       preview=PreviewSettings(decoder="latent2rgb", every=1, mode="sync"))
CONFIG = "latent2rgb/every1/sync"


def _meta(rid: str, settings: RunSettings) -> RunMeta:
    return RunMeta(run_id=rid, started_at="", model="synthetic:tiny", synthetic=True, model_note="", family="sd15",
                   space="", device="cpu", dtype="float32", prompt="", steps=settings.steps, width=settings.width,
                   height=settings.height, seed=0, guidance=7.5, preview=settings.preview, purpose=settings.purpose)


def _judged(pairs: int) -> RunFigures:
    """A run's figures as its `done` carries them, its analysis with `pairs` pairs of the series' configuration (0:
    no finding)."""
    zeros: dict[str, Any] = {f.name: 0 for f in fields(Totals)}
    run = Entry(CONFIG, "config", True, RunRecord(_meta("r", SETTINGS), Totals(**{**zeros, "status": "done",
                                                                                 "scheduler": "", "wall_s": 1.0})))
    found = (Finding(CONFIG, SETTINGS.preview, "cpu", pairs, estimate([float(i) for i in range(pairs)]), {}),
             ) if pairs else ()
    return RunFigures(run, replace(analyze([]), findings=found))


def _drive(series: Series, pairs_after: list[int], runs: int) -> list[RunSettings]:
    """Start the series and end each of its runs done, the analysis after run i counting pairs_after[i] pairs
    (the last value from then on); the settings of each run it started, in order, up to `runs` runs."""
    started = [series.next_run()]
    while len(started) < runs:
        i = len(started) - 1
        end = RunEnd(_meta(f"r{i}", started[-1]), "done")
        nxt = series.after(end, _judged(pairs_after[min(i, len(pairs_after) - 1)]))
        if nxt is None:
            break
        started.append(nxt)
    return started


def test_a_series_alternates_the_order_of_its_pairs_and_the_analysis_pairs_each_run_with_its_own_baseline():
    """Issue 54, item 4: pairs alternate baseline first, then previews first, as a benchmarker counterbalances
    (before, every pair ran its baseline first); each run with previews is paired with its own pair's baseline
    whichever came first."""
    series = Series(SETTINGS)
    started = _drive(series, [0], 8)
    assert [s.purpose for s in started] == ["baseline", "measured", "measured", "baseline",
                                            "baseline", "measured", "measured", "baseline"]
    assert [order_of(k) for k in range(3)] == [("baseline", "measured"), ("measured", "baseline"),
                                               ("baseline", "measured")]
    assert {s.preview.decoder for s in started if s.purpose == "baseline"} == {"none"}
    assert {s.preview for s in started if s.purpose == "measured"} == {SETTINGS.preview}

    @dataclass(frozen=True)
    class Ran:  # a steady run of the series as the analysis reads it (analysis.Measured)
        name: str
        role: Role
        steady: bool
        record: RunRecord

    zeros: dict[str, Any] = {f.name: 0 for f in fields(Totals)}
    totals = Totals(**{**zeros, "status": "done", "scheduler": "", "wall_s": 1.0})
    ran = [Ran("none" if s.purpose == "baseline" else CONFIG, "baseline" if s.purpose == "baseline" else "config",
               True, RunRecord(_meta(f"r{i}", s), totals)) for i, s in enumerate(started)]
    pairs = [(r.record.run_id, b.record.run_id) for r, b in paired(ran)[CONFIG]]
    assert pairs == [("r1", "r0"), ("r2", "r3"), ("r5", "r4"), ("r6", "r7")]


def test_measure_again_adds_the_pairs_the_figure_needs_counted_from_those_it_has():
    """Issue 54, item 4: after a 6-pair series a second Measure said "0 of 6", then "7 of 7" after one pair. A
    series counts from the pairs the configuration has: short of the 95 % level, the pairs it still needs; at
    that level, the pairs after which its interval leaves out one more pair at each end (6 -> 9 -> 12)."""
    assert more_pairs(None) == 6
    assert more_pairs(estimate([1.0, 2.0])) == 4
    assert more_pairs(estimate([float(i) for i in range(6)])) == 3
    assert more_pairs(estimate([float(i) for i in range(9)])) == 3
    assert more_pairs(Estimate(5.0, 1)) == 5

    again = Series(SETTINGS, estimate([float(i) for i in range(6)]))
    line = again.message("a baseline")["line"]
    assert line.startswith(f"measuring {CONFIG}: 6 of 9 pairs (adds 3 to its 6 at the 95 % level") and \
        "at most 24 pairs" in line, line
    # one more pair (7) is not the end: it ends at the 9 it named
    started = _drive(again, [6, 7, 7, 8, 8, 9], 20)
    assert again.state == "done" and again.pairs == 9 and len(started) == 6
    assert again.message()["line"] == f"measured {CONFIG}: 9 of 9 pairs, its interval at the 95 % level"

    # the order goes on from the pairs it had: after 9, previews first, so that the two orders stay as many
    assert [s.purpose for s in _drive(Series(SETTINGS, estimate([float(i) for i in range(9)])), [9], 4)] == \
        ["measured", "baseline", "baseline", "measured"]

    short = Series(SETTINGS, estimate([1.0, 2.0]))
    assert short.message()["line"].startswith(f"measuring {CONFIG}: 2 of 6 pairs (adds 4 to its 2 for the 95 % level)")


def test_a_series_stops_at_the_bound_it_names_at_its_start():
    """Issue 54, item 4: runs that never pair (auto's, a fallback's) made a series go on; it starts at most the
    pairs its first line names, and its last line says why it stopped."""
    series = Series(SETTINGS, most=2)
    assert "at most 2 pairs" in series.message("a baseline")["line"]
    started = _drive(series, [0], 50)
    assert len(started) == 4 and series.state == "stopped"
    assert series.message()["line"].startswith(f"measuring {CONFIG} stopped at 0 of 6 pairs: its bound, 2 pairs "
                                               "started, reached")
    assert Series(SETTINGS).most == MAX_PAIRS


def test_every_auto_is_refused_in_one_line_and_starts_nothing(make_app):
    """Issue 54, item 4: with interval auto a series never finished ("0 of 6 pairs" after 62 s): every autopilot
    run changes its interval as it goes, so none is steady and none pairs. It is refused, and no run starts."""
    auto = replace(SETTINGS, preview=replace(SETTINGS.preview, budget=5.0))
    with pytest.raises(Refused, match="^measure: interval auto changes"):
        Series(auto)
    srv, app = make_app()
    with TestClient(app) as client, client.websocket_connect("/ws", headers=SAME_ORIGIN) as ws:
        recv_until(ws, "hello")
        ws.send_text(json.dumps({"type": "measure", "steps": 2, "decoder": "latent2rgb", "every": "auto",
                                 "budget": 5}))
        why = recv_until(ws, "error")["message"]
        assert why.startswith("measure: interval auto changes its interval and decoder during the run") and \
            "measure a fixed interval" in why and "\n" not in why
        assert srv.series is None and srv.worker is not None and srv.worker.state == "idle"
        assert srv.store.ids() == []


@pytest.mark.slow
def test_a_stop_between_two_runs_of_a_series_ends_the_series_and_the_run_it_was_starting(make_app):
    """Issue 54, item 4: a Stop while the worker was still starting the series' next run (making its folder)
    found nothing to stop (worker.stop() False); that run then ran whole, the series said "stopped". Now the run
    being started is stopped as soon as it starts, and no run follows it."""
    srv, app = make_app()
    gate = threading.Event()
    with TestClient(app) as client, client.websocket_connect("/ws", headers=SAME_ORIGIN) as ws:
        recv_until(ws, "hello")
        assert srv.worker is not None
        worker: Any = srv.worker
        begin = worker.begin

        async def held(meta: RunMeta) -> None:  # the series' second run waits here, its worker "starting"
            if meta.purpose == "measured":
                await asyncio.get_running_loop().run_in_executor(None, gate.wait, 30)
            await begin(meta)
        worker.begin = held
        ws.send_text(json.dumps({"type": "measure", "steps": 2, "decoder": "latent2rgb", "every": 1}))
        wait_until(lambda: worker.state == "starting" and worker.run_id is not None and
                   len(srv.series.runs if srv.series else ()) == 1, 60, "the series' second run to be starting")
        ws.send_text(json.dumps({"type": "stop"}))
        stopped = recv_until(ws, "measure")
        while stopped["state"] == "running":
            stopped = recv_until(ws, "measure")
        assert stopped["state"] == "stopped" and "stopped by a watcher" in stopped["line"]
        gate.set()
        second = recv_until(ws, "done")
        while second.get("purpose") != "measured":
            second = recv_until(ws, "done")
        assert second["status"] == "stopped", second["status"]  # before: "done", a whole run after the Stop
        wait_until(lambda: worker.state == "idle", 30, "the worker to be idle")
        assert len(srv.store.ids()) == 2 and srv.series is not None and srv.series.state == "stopped"

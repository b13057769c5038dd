"""The page's measure control in real Chromium (issue 54, item 4): every auto refused, Measure again adding the
pairs it names, a series that stops when its last tab closes, the Budget field the advice's budget, and a
script's page that names no button it lacks. synthetic:tiny at 64x64 and 2 steps: a run takes about 0.1 s."""
from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page

from tests.browser_fixtures import script_page, wait_js
from tests.conftest import live_server, make_run, wait_until

pytestmark = pytest.mark.slow  # real uvicorn and Chromium: make test runs them, the quick loop leaves them out

LINE = "document.getElementById('measure-line').textContent"


def _settings(page: Page, steps: int = 2, every: str = "1") -> None:
    page.fill("#steps", str(steps))
    page.fill("#width", "64")
    page.fill("#height", "64")
    page.select_option("#decoder", "latent2rgb")
    page.select_option("#mode", "sync")
    page.fill("#every", every)


def _line(page: Page) -> str:
    return page.text_content("#measure-line") or ""


def test_every_auto_is_refused_on_the_page_in_one_line_and_no_run_starts(make_app, tabs):
    """Before, Measure with every auto said "0 of 6 pairs" after 62 s and went on: no autopilot run pairs."""
    srv, app = make_app()
    with live_server(app) as addr:
        page, errors = tabs.open(addr)
        _settings(page, every="auto")
        page.click("#measure")
        page.wait_for_selector("#error:not([hidden])")
        said = page.text_content("#error") or ""
        assert said.startswith("measure: interval auto changes its interval and decoder during the run") and \
            "measure a fixed interval" in said, said
        time.sleep(0.5)  # a series would have started its first run by now
        assert srv.series is None and srv.store.ids() == [] and page.is_hidden("#measure-line")
        assert not page.is_disabled("#measure") and errors == []


def test_measure_again_adds_the_pairs_it_names_counted_from_those_the_figure_has(make_app, tabs):
    """Before, a second Measure after a 6-pair series said "0 of 6", then "7 of 7" after one pair. Now it says
    at its start what it adds to the 6 pairs the figure has (3: at 9 its 95 % interval leaves out one more pair at
    each end), and its bound; it ends at the 9 it named."""
    srv, app = make_app()
    with live_server(app) as addr:
        page, errors = tabs.open(addr)
        _settings(page)
        page.click("#measure")
        wait_js(page, f"{LINE}.startsWith('measuring')", 30)
        assert _line(page).startswith("measuring latent2rgb/every1/sync: 0 of 6 pairs for the 95 % level, at most "
                                      "24 pairs"), _line(page)
        wait_js(page, f"{LINE}.startsWith('measured')", 120)
        assert _line(page) == "measured latent2rgb/every1/sync: 6 of 6 pairs, its interval at the 95 % level"
        before = len(srv.store.ids())
        wait_js(page, "!document.getElementById('measure').disabled")
        page.click("#measure")
        wait_js(page, f"{LINE}.startsWith('measuring')", 30)
        first = _line(page)
        assert first.startswith("measuring latent2rgb/every1/sync: 6 of 9 pairs (adds 3 to its 6 at the 95 % "
                                "level") and "at most 24 pairs" in first, first
        wait_js(page, f"{LINE}.startsWith('measured')", 120)
        assert _line(page) == "measured latent2rgb/every1/sync: 9 of 9 pairs, its interval at the 95 % level"
        assert len(srv.store.ids()) - before == 6  # three pairs, no more: none of them lost to a warm-up
        listed = page.evaluate("fetch('/runs?limit=100').then((r) => r.json())")
        added = sorted(listed, key=lambda m: m["run_id"])[before:]
        assert [m["purpose"] for m in added] == ["baseline", "measured", "measured", "baseline", "baseline",
                                                 "measured"]
        assert errors == []


def test_a_series_stops_with_its_run_once_the_last_tab_watching_it_has_closed(make_app, tabs):
    """Before, a series went on making runs after its tab was closed (40 to 50 runs in 40 s), until a Stop from a
    new tab. A second tab keeps it going; once the last one has gone, the series and its run stop, no run
    follows, and a tab that opens later reads how it ended."""
    srv, app = make_app()
    with live_server(app) as addr:
        page, errors = tabs.open(addr)
        other, _ = tabs.open(addr)
        _settings(page, steps=400)  # a run of several seconds: the tabs close during one
        page.click("#measure")
        wait_js(page, f"{LINE}.startsWith('measuring')", 30)
        wait_until(lambda: srv.relay.current is not None, 30, "the series' first run to start")
        page.close()
        time.sleep(0.5)
        assert srv.series is not None and srv.series.state == "running"  # the other tab still watches it
        other.close()
        wait_until(lambda: srv.series is not None and srv.series.state == "stopped", 10, "the series to stop")
        assert srv.worker is not None
        wait_until(lambda: srv.worker is not None and srv.worker.state == "idle", 30, "its run to stop")
        ran = srv.store.ids()
        assert len(ran) == 1
        time.sleep(1.0)
        assert srv.store.ids() == ran and srv.worker.state == "idle"  # no run after it
        meta = json.loads((srv.store.root / ran[0] / "meta.json").read_text())
        assert meta["status"] == "stopped" and meta["totals"]["steps_run"] < 400
        later, _ = tabs.new()
        later.goto(f"http://{addr}/")
        wait_js(later, f"{LINE}.includes('stopped')", 10)
        assert "its page closed and no other tab watched it" in _line(later)
        assert errors == []


def _run(rid: str, *, decoder: str, wall_s: float, previews: int = 0, first_run: int = 0) -> dict[str, Any]:
    """A finished synthetic:tiny run's meta.json (64x64, 2 steps), as the store writes it."""
    settings = dict(model="synthetic:tiny", device="cpu", dtype="float32", steps=2, width=64, height=64, batch=1,
                    num_frames=1, guidance=7.5, task="txt2img", decoder=decoder, every=1, mode="sync", budget=0.0)
    totals = dict(settings, wall_s=wall_s, steps_run=2, denoise_ms=100.0 * wall_s, on_path_ms=previews * 1.0,
                  previews=previews, first_run=first_run, bytes=1024 * previews, decode_ms=previews * 1.0)
    return dict(settings, run_id=rid, status="done", totals=totals)


def test_the_budget_field_shows_the_budget_the_advice_is_judged_at(make_app, tmp_path, tabs):
    """Before, the Budget field showed 10 while the advice was judged at 5 % until the field was edited. The field
    shows the server's budget from the start, and the advice follows what it shows."""
    data = tmp_path / "runs"
    ids = [f"20261207-120000-00{i}" for i in range(1, 6)]
    for m in [_run(ids[0], decoder="none", wall_s=1.0, first_run=1), _run(ids[1], decoder="none", wall_s=1.0),
              _run(ids[2], decoder="latent2rgb", wall_s=1.1, previews=2), _run(ids[3], decoder="none", wall_s=1.0),
              _run(ids[4], decoder="latent2rgb", wall_s=1.2, previews=2)]:
        make_run(data, m["run_id"], meta=m)
    srv, app = make_app(data)
    with live_server(app) as addr:
        page, errors = tabs.open(addr)
        wait_js(page, "document.getElementById('advice').textContent.startsWith('advice')", 30)

        def budgets() -> tuple[float, float, list[str]]:
            shown = float(page.input_value("#budget"))
            judged = page.evaluate("window.previewlab.state.analysis.data.advice.budget")
            said = re.findall(r"budget ([\d.]+) %", page.text_content("#advice") or "")
            return shown, judged, said

        shown, judged, said = budgets()
        assert shown == judged == 5.0 and set(said) == {"5"}, (shown, judged, said)
        page.fill("#budget", "7.5")
        wait_js(page, "window.previewlab.state.analysis.data.advice.budget === 7.5", 30)
        shown, judged, said = budgets()
        assert shown == judged == 7.5 and set(said) == {"7.5"}, (shown, judged, said)
        assert errors == []


def test_a_scripts_page_names_what_a_script_can_do_never_the_measure_button_it_lacks(tmp_path: Path, tabs):
    """Before, serve(watch)'s page said "Measure runs the pairs" and had no Measure button. It says how a script
    gets pairs: its calls with previews off and on, which watch.summary() measures."""
    from previewlab import watch as preview_watch
    from previewlab.preview.models import synthetic_pipeline

    pipe = synthetic_pipeline("synthetic:tiny")
    w = preview_watch(pipe, decoder="latent2rgb", every=1)
    with script_page(tabs, w, tmp_path / "runs") as (page, errors):
        for _ in range(2):  # a warm-up, then a call with previews and no baseline beside it
            pipe("a cat", num_inference_steps=2, height=64, width=64, callback_on_step_end=w,
                 callback_on_step_end_tensor_inputs=w.tensor_inputs)
            w.finish()
        wait_js(page, "document.querySelectorAll('#runs tbody tr').length === 2", 60)
        wait_js(page, "document.getElementById('f-overhead').textContent.includes('watch.summary()')", 30)
        how = ("alternate your script's calls with previews off and on (watch.controls.set(decoder=\"none\"), "
               "then back), and watch.summary() measures them")
        heads = page.locator("#runs th").all_text_contents()
        cells = page.locator("#runs tbody tr").first.locator("td").all_text_contents()
        assert cells[heads.index("overhead [interval]: verdict")] == f"no baseline beside a run of it: {how}"
        assert (page.text_content("#f-overhead") or "").endswith(how)
        for box in ("#script-note", "#runs-box", "#f-overhead", "#baselines"):
            shown = page.inner_text(box)
            assert "Measure" not in shown, (box, shown)
        # a pair (a call without previews, then one with): the advice the server words for a script's page
        for decoder in ("none", "latent2rgb"):
            w.controls.set(decoder=decoder)
            pipe("a cat", num_inference_steps=2, height=64, width=64, callback_on_step_end=w,
                 callback_on_step_end_tensor_inputs=w.tensor_inputs)
            w.finish()
        wait_js(page, "document.getElementById('advice').textContent.includes('more pairs of calls')", 30)
        advice = page.inner_text("#advice")
        assert "Measure" not in advice and "measure button" not in advice, advice
        assert errors == []

"""The page's fidelity pass and its picture (issue 55, parts 1 and 5): Measure fidelity runs the pass on the server
between runs, never as a timed run, and the analysis then carries each decoder's fidelity; the page draws the
measured configurations as overhead against fidelity, the one in use and the one advised marked."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page
from starlette.testclient import TestClient

from previewlab.preview.judging.fidelity import Sample
from previewlab.preview.record.run import RunMeta
from previewlab.server.data import fidelity_files
from tests.browser_fixtures import wait_js
from tests.conftest import SAME_ORIGIN, acks_not_awaited, live_server, make_run, recv_until

SETTINGS = {"steps": 2, "width": 64, "height": 64, "decoder": "latent2rgb", "every": 1, "mode": "sync"}


@pytest.mark.slow  # the pass's calls and decodes: seconds on a busy CPU
def test_the_pass_runs_no_timed_run_and_the_analysis_then_carries_each_decoders_fidelity(make_app):
    srv, app = make_app(limits=acks_not_awaited())  # a run's end waits for no ack the test client never sends
    with TestClient(app) as client, client.websocket_connect("/ws", headers=SAME_ORIGIN) as ws:
        recv_until(ws, "hello")
        for _ in range(2):  # the first is the warm-up; the second is its configuration's
            ws.send_text(json.dumps({"type": "start", **SETTINGS}))
            rid = recv_until(ws, "done")["run_id"]
        before = client.get(f"/analysis?run={rid}").json()
        assert before["fidelity"] is None and all(f["fidelity"] is None for f in before["findings"])
        ids, listed = srv.store.ids(), client.get("/runs").json()
        ws.send_text(json.dumps({"type": "fidelity", **SETTINGS, "seeds": 1}))
        running = recv_until(ws, "fidelity")
        assert running["state"] == "running" and running["line"].startswith(
            "measuring fidelity of latent2rgb, taesd, vae at preview, 64x64, 2 steps, 1 seed: untimed")
        done = recv_until(ws, "fidelity")
        assert done["state"] == "done" and "latent2rgb SSIM" in done["line"], done
        # no run folder, no run in the list, no row: the pass is no timed run
        assert srv.store.ids() == ids and client.get("/runs").json() == listed
        a = client.get(f"/analysis?run={rid}").json()
        fid = a["fidelity"]
        assert {f["name"] for f in fid["figures"]} == {"latent2rgb", "taesd", "vae"}
        assert fid["synthetic"] is True and all(f["seeds"] == 1 for f in fid["figures"])
        mine = next(f for f in a["findings"] if f["name"] == "latent2rgb/every1/sync")
        assert mine["fidelity"]["decoder"] == "latent2rgb" and 0 < mine["fidelity"]["ssim"]["value"] <= 1
        # its samples are kept in the data folder, where a restarted server reads them again
        assert list((srv.store.root / "fidelity").glob("*/fidelity.csv"))
        # a tab that joins now hears how the pass ended
        with client.websocket_connect("/ws", headers=SAME_ORIGIN) as late:
            assert recv_until(late, "hello")["fidelity"]["state"] == "done"


@pytest.mark.slow
def test_the_pass_is_refused_in_one_line_while_a_run_goes(make_app):
    srv, app = make_app()
    with TestClient(app) as client, client.websocket_connect("/ws", headers=SAME_ORIGIN) as ws:
        recv_until(ws, "hello")
        ws.send_text(json.dumps({"type": "start", **SETTINGS, "steps": 500}))
        rid = recv_until(ws, "run")["run_id"]
        ws.send_text(json.dumps({"type": "fidelity", **SETTINGS}))
        err = recv_until(ws, "error")["message"]
        assert err == (f"fidelity: run {rid} is running; the pass runs between runs, never beside a timed one: wait "
                       f"for it to end or stop it")
        ws.send_text(json.dumps({"type": "stop"}))
        recv_until(ws, "done")
        ws.send_text(json.dumps({"type": "fidelity", **SETTINGS, "seeds": 13}))
        assert recv_until(ws, "error")["message"] == "seeds: must be an integer from 1 to 12, got 13"
        assert not (srv.store.root / "fidelity").exists()



@pytest.mark.slow  # one seed's pass before the stop is heard
def test_stop_ends_the_pass_between_its_seeds_keeping_nothing_and_a_start_runs_after_it(make_app):
    srv, app = make_app(limits=acks_not_awaited())
    with TestClient(app) as client, client.websocket_connect("/ws", headers=SAME_ORIGIN) as ws:
        recv_until(ws, "hello")
        ws.send_text(json.dumps({"type": "fidelity", **SETTINGS, "seeds": 12}))
        assert recv_until(ws, "fidelity")["state"] == "running"
        ws.send_text(json.dumps({"type": "start", **SETTINGS}))  # the pass holds the model: no run beside it
        assert recv_until(ws, "error")["message"].startswith("the fidelity pass is running (untimed, between runs)")
        ws.send_text(json.dumps({"type": "stop"}))
        ended = recv_until(ws, "fidelity")
        assert ended["state"] == "failed" and ended["line"].startswith("fidelity: stopped after ") and \
            ended["line"].endswith("of 12 seeds; nothing kept"), ended
        assert not (srv.store.root / "fidelity").exists() and srv.store.ids() == []
        ws.send_text(json.dumps({"type": "start", **SETTINGS}))
        assert recv_until(ws, "done")["status"] == "done"

def _meta(rid: str, model: str, decoder: str, wall_s: float, every: int = 1, first_run: int = 0) -> dict[str, Any]:
    """A finished run's meta.json (64x64, 2 steps), as the store writes it (test_measure_page's _run, with its
    model named: a prepared run of a real model is judged as one)."""
    settings = dict(model=model, synthetic=model.startswith("synthetic"), device="cpu", dtype="float32", steps=2,
                    width=64, height=64, batch=1, num_frames=1, guidance=7.5, task="txt2img", decoder=decoder,
                    every=every, mode="sync", budget=0.0)
    previews = 0 if decoder == "none" else 2 // every
    totals = dict(settings, wall_s=wall_s, steps_run=2, denoise_ms=100.0 * wall_s, on_path_ms=previews * 1.0,
                  previews=previews, first_run=first_run, bytes=1024 * previews, decode_ms=previews * 1.0)
    return dict(settings, run_id=rid, status="done", totals=totals)


def _prepare(data: Path, model: str, walls: dict[str, float], pairs: int) -> list[dict[str, Any]]:
    """A warm-up, then `pairs` rounds of a baseline (1 s) right before each configuration's run (its wall):
    each configuration's overhead from `pairs` pairs. The last configuration named ran last: the one in use."""
    metas = [_meta("20261207-120000-000", model, "none", 1.0, first_run=1)]
    for _ in range(pairs):
        for decoder, wall in walls.items():
            for d, w in (("none", 1.0), (decoder, wall)):
                metas.append(_meta(f"20261207-1200{len(metas) // 1000:02d}-{len(metas) % 1000:03d}", model, d, w))
    for m in metas:
        make_run(data, m["run_id"], meta=m)
    return metas


def _point(page: Page, name: str) -> str:
    """The classes of configuration `name`'s point in the picture ("" where it has none)."""
    return page.evaluate(f"(document.querySelector('#glance g[data-name=\"{name}\"]') || {{}}).className"
                         f"?.baseVal || ''")


@pytest.mark.slow  # real uvicorn and Chromium
def test_the_picture_of_configurations_marks_the_advised_one_and_measure_fidelity_fills_it(make_app, tmp_path, tabs):
    # a real model's runs (prepared: vae in use, over the budget; taesd and latent2rgb under it) and its decoders'
    # fidelity from 6 seeds: the rule leaves latent2rgb out (SSIM below 0.5) and advises taesd
    demo = tmp_path / "demo"
    metas = _prepare(demo, "demo", {"latent2rgb": 1.01, "taesd": 1.02, "vae": 1.3}, pairs=6)
    samples = [Sample(seed, 2, step, d, "preview", "x0", 64, 64, ssim + 0.01 * seed, 20.0)
               for seed in range(6) for step in (1, 2) for d, ssim in (("taesd", 0.6), ("latent2rgb", 0.35))]
    fidelity_files.write(demo, RunMeta.from_json(metas[-1]), samples, [])
    tiny_data = tmp_path / "tiny"
    _prepare(tiny_data, "synthetic:tiny", {"latent2rgb": 1.01}, pairs=2)
    srv, app = make_app(demo)
    with live_server(app) as addr:
        page, errors = tabs.open(addr)
        wait_js(page, "!!document.querySelector('#glance g.point')", 30)
        assert _point(page, "taesd/every1/sync") == "point fid advised"
        assert _point(page, "vae/every1/sync") == "point no-fid in-use"  # its decoder's fidelity not measured
        assert _point(page, "latent2rgb/every1/sync") == "point fid"
        head = page.text_content("#advice-head") or ""
        assert head.startswith("taesd every 1: +2.0 %") and "SSIM 0.62 [0.60, 0.65] (6 seeds)" in head, head
        assert page.evaluate("!document.getElementById('advice-more').open")  # the rest opens on demand
        assert "advised (taesd/every1/sync)" in (page.text_content("#glance-note") or "")
        page.close()
    # a synthetic model's server, its runs' fidelity not measured: Measure fidelity fills the picture
    srv, app = make_app(tiny_data)
    with live_server(app) as addr:
        page, errors2 = tabs.open(addr)
        wait_js(page, "!!document.querySelector('#glance g.point')", 30)
        assert _point(page, "latent2rgb/every1/sync") == "point no-fid in-use"
        for k, v in (("steps", "2"), ("width", "64"), ("height", "64"), ("fidelity-seeds", "1")):
            page.fill(f"#{k}", v)
        page.select_option("#decoder", "latent2rgb")
        page.select_option("#mode", "sync")
        page.click("#fidelity")
        wait_js(page, "document.getElementById('fidelity-line').textContent.startsWith('measuring fidelity')", 10)
        assert page.is_disabled("#start") and page.is_disabled("#measure")
        wait_js(page, "document.getElementById('fidelity-line').textContent.startsWith('measured fidelity')", 60)
        wait_js(page, "!!document.querySelector('#glance g.fid')", 10)
        assert _point(page, "latent2rgb/every1/sync") == "point fid in-use"  # synthetic: never advised
        assert "short of the 95 % level" in (page.text_content("#fidelity-line") or "")
        assert "SYNTHETIC" in (page.text_content("#glance-note") or "")
        assert srv.store.ids() == [m.name for m in sorted(tiny_data.iterdir()) if m.name[0].isdigit()]
        assert not page.is_disabled("#fidelity")
    assert errors == [] and errors2 == []


def test_a_pages_pass_judges_only_the_target_and_preview_size_it_ran_at():
    """The page's pass runs at the settings in use; a configuration of the same runs that shows another target or
    size is not measured by it (a bench sweep's figures, shown None, judge every configuration of the sweep)."""
    from previewlab.preview.judging.estimates import estimate
    from previewlab.preview.judging.fidelity import Fidelities, Fidelity
    from previewlab.preview.settings import PreviewSettings

    taesd = Fidelity("taesd", "preview", estimate([0.6] * 6), estimate([20.0] * 6), 6)
    page = Fidelities((taesd,), shown=("auto", 512))
    assert page.judging(PreviewSettings(decoder="taesd", preview_max=512)) is taesd
    assert page.judging(PreviewSettings(decoder="taesd", preview_max=256)) is None
    assert page.judging(PreviewSettings(decoder="taesd", target="latents", preview_max=512)) is None
    assert Fidelities((taesd,)).judging(PreviewSettings(decoder="taesd", preview_max=256)) is taesd

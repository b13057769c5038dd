"""The newcomer's page (issue 56): what a new user met on the page, the bench and the docs, each against real
parts: a real server (uvicorn) with the tiny synthetic model, real runs, real Chromium."""
from __future__ import annotations

import json
import os
import re
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

import pytest
from websockets.sync.client import ClientConnection, connect

from tests.browser_fixtures import Tabs, wait_js
from tests.conftest import live_server, previewlab_here, wait_until

if TYPE_CHECKING:
    from playwright.sync_api import Browser

VIEWPORT = {"width": 1280, "height": 900}
SEED_SPAN = 2**32  # the page's random seeds: 0 to 2**32 - 1


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as r:
        return bytes(r.read())


def text(page: Any, selector: str) -> str:
    return page.text_content(selector) or ""


class Walls:
    """Each run's host clock (RunOptions.clock), its time scaled by the next factor: a machine whose load changes
    from run to run, the same way every time."""

    def __init__(self, factors: list[float]) -> None:
        self.factors = factors

    def __call__(self) -> Callable[[], float]:
        f = self.factors.pop(0) if self.factors else 1.0
        t0 = time.perf_counter()
        return lambda: t0 + (time.perf_counter() - t0) * f


def start(ws: ClientConnection, kind: str = "start", **fields: Any) -> dict[str, Any]:
    """A start (or a measure series) sent as the page sends it; the run's `run` message."""
    ws.send(json.dumps({"type": kind, "steps": 2, "width": 64, "height": 64, **fields}))
    return until(ws, "run")


def until(ws: ClientConnection, kind: str) -> dict[str, Any]:
    """The next message of this kind (an error fails the test). The client's queue is unbounded (max_queue=None):
    a client that stops reading would hold the server's sends, and the close handshake behind them, for 10 s."""
    while True:
        m = ws.recv(60)
        if isinstance(m, str) and json.loads(m)["type"] in (kind, "error"):
            msg: dict[str, Any] = json.loads(m)
            assert msg["type"] == kind, msg
            return msg


def run(ws: ClientConnection, **fields: Any) -> dict[str, Any]:
    """One run, whole: its `done`."""
    rid = start(ws, **fields)["run_id"]
    while True:
        done = until(ws, "done")
        if done["run_id"] == rid:
            return done


@pytest.fixture(scope="module")
def noisy(tiny: Any, tmp_path_factory: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """A server whose runs have ended on a noisy machine: the first run after the load (a warm-up), two
    no-preview baselines 1x and 3x as long as they took, then a run with full-VAE previews every 3 steps, paired
    with the baseline right before it. Yields its address and that last run's `done`."""
    from previewlab.server.app import build_app
    from previewlab.server.server import Server
    from previewlab.server.ws.options import RunOptions
    from previewlab.server.core.limits import SessionLimits

    srv = Server(tiny, tmp_path_factory.mktemp("noisy") / "runs", limits=SessionLimits(ack_wait_s=0.0),
                 runs=RunOptions(clock=Walls([1.0, 1.0, 3.0, 1.0])))
    with live_server(build_app(srv)) as addr, connect(f"ws://{addr}/ws", max_queue=None) as ws:
        until(ws, "hello")
        settings = dict(steps=6, prompt="a red circle", seed=4, guidance=7.5)
        for _ in range(3):
            run(ws, decoder="none", **settings)
        last = run(ws, decoder="vae", every=3, **settings)
        yield addr, last


@pytest.mark.slow
def test_the_noisy_machine_line_is_shown_once_on_the_page(tabs, noisy):
    """NOISY MACHINE was shown twice: beside the figures (#noisy) and again as the advice's first line. The
    advice's copy is left out where the line beside it shows."""
    addr, last = noisy
    page, errors = tabs.open(addr, viewport=VIEWPORT)
    wait_js(page, "document.getElementById('advice').textContent.startsWith('advice (budget')")
    assert page.is_visible("#noisy") and text(page, "#noisy").startswith("NOISY MACHINE")
    shown = "".join(text(page, s) for s in ("#noisy", "#baselines", "#advice-head", "#advice", "#glance-note"))
    assert shown.count("NOISY MACHINE") == 1, shown
    judged = json.loads(get(f"http://{addr}/analysis?run={last['run_id']}"))
    assert judged["noise"]["noisy"] and text(page, "#advice") == "\n".join(
        ln for ln in judged["advice"]["lines"] if ln.strip() != judged["noise_line"])
    assert errors == [], errors


@pytest.mark.slow
def test_a_reload_shows_the_newest_run_whole_as_its_advice_does(tabs, noisy):
    """A reload emptied the chart and This run but kept the old advice. A page loaded while nothing runs now shows
    the newest ended run as This run (its status, settings, steps, figures), its chart from its rows and its final
    image: the run its advice is about. Again after a reload."""
    addr, last = noisy
    rid = last["run_id"]
    page, errors = tabs.open(addr, viewport=VIEWPORT)
    for _ in range(2):
        wait_js(page, f"document.getElementById('f-status').textContent === 'done {rid}'")
        wait_js(page, "window.previewlab.rows.length === 6")  # its 6 steps, drawn
        wait_js(page, f"document.getElementById('baselines').textContent.includes('run {rid}')")
        assert re.fullmatch(r"6 / 6 · [\d.]+ it/s", text(page, "#f-step")), text(page, "#f-step")
        assert "6 steps" in text(page, "#f-settings") and "seed 4" in text(page, "#f-settings")
        assert text(page, "#f-overhead") not in ("", "–") and text(page, "#f-busy") not in ("", "–")
        wait_js(page, f"document.getElementById('final').dataset.loaded === '1'")
        assert page.is_visible("#final") and page.get_attribute("#final", "src") == f"/runs/{rid}/final.png"
        page.reload()
        page.wait_for_selector("#conn.ok")
    assert errors == [], errors


@pytest.mark.slow
def test_the_final_png_carries_its_settings_for_a1111_and_comfyui(noisy):
    """The saved PNG said nothing of how it was made. Its text chunks now hold A1111's `parameters` (its PNG Info
    reads them) and ComfyUI's API-format `prompt` graph, read back here with Pillow's PNG reader."""
    from io import BytesIO

    from PIL import Image

    addr, last = noisy
    with Image.open(BytesIO(get(f"http://{addr}/runs/{last['run_id']}/final.png"))) as im:
        chunks = dict(im.text)  # type: ignore[attr-defined]
        assert im.size == (64, 64)
    sampler = json.loads(chunks["prompt"])["3"]["inputs"]["sampler_name"]
    assert sampler.endswith("Scheduler")  # the pipeline's scheduler class
    assert chunks["parameters"] == ("a red circle\nSteps: 6, Sampler: " + sampler +
                                    ", CFG scale: 7.5, Seed: 4, Size: 64x64, Model: synthetic:tiny")
    graph = json.loads(chunks["prompt"])
    assert graph["3"]["class_type"] == "KSampler" and {k: graph["3"]["inputs"][k] for k in ("seed", "steps", "cfg")} \
        == {"seed": 4, "steps": 6, "cfg": 7.5}
    assert graph["6"]["inputs"]["text"] == "a red circle" and graph["5"]["inputs"]["width"] == 64


@pytest.mark.slow
def test_a_tab_opened_mid_series_shows_the_runs_own_settings(tabs, make_app):
    """A tab opened while a measure series of 300-step runs went showed Steps 20, the server's default. It shows
    the running run's settings now (its steps, size, prompt and seed)."""
    from previewlab.server.core.limits import SessionLimits

    srv, app = make_app(limits=SessionLimits(ack_wait_s=0.0))
    with live_server(app) as addr, connect(f"ws://{addr}/ws", max_queue=None) as ws:
        until(ws, "hello")
        began = start(ws, "measure", steps=300, decoder="latent2rgb", every=1, prompt="a blue square", seed=9)
        assert began["steps"] == 300
        page, errors = tabs.open(addr, viewport=VIEWPORT)
        wait_js(page, "document.getElementById('f-status').textContent.startsWith('running')")
        got = {k: page.input_value(f"#{k}") for k in ("steps", "width", "height", "prompt", "seed")}
        assert got == {"steps": "300", "width": "64", "height": "64", "prompt": "a blue square", "seed": "9"}, got
        assert text(page, "#f-step").endswith(" / 300") or " / 300 · " in text(page, "#f-step")
        page.click("#stop")
        wait_js(page, "document.getElementById('measure-line').textContent.includes('stopped')")
        assert errors == [], errors


@pytest.fixture(scope="module")
def page_run(chromium: Browser, tiny: Any, tmp_path_factory: Any) -> Iterator[dict[str, Any]]:
    """A fresh server's page; a run of 9 steps with full-VAE previews every 3, started by Ctrl+Enter in the prompt
    (or, where that starts nothing within 5 s, by Start: started_by_keys says which). Every text the Step figure
    showed is recorded."""
    from previewlab.server.app import build_app
    from previewlab.server.server import Server

    srv = Server(tiny, tmp_path_factory.mktemp("page") / "runs")
    tabs = Tabs(chromium)  # the module's: its tests look at the one run
    with live_server(build_app(srv)) as addr:
        page, errors = tabs.open(addr, viewport=VIEWPORT)
        page.evaluate("""() => { const el = document.getElementById('f-step'); window.stepTexts = [];
            new MutationObserver(() => window.stepTexts.push(el.textContent))
              .observe(el, { childList: true, characterData: true, subtree: true }); }""")
        page.fill("#steps", "9")
        page.select_option("#decoder", "vae")
        page.fill("#every", "3")
        page.fill("#prompt", "a red circle")
        page.focus("#prompt")
        page.keyboard.press("Control+Enter")
        try:
            wait_js(page, "document.getElementById('f-status').textContent.startsWith('running') || "
                          "document.getElementById('f-status').textContent.startsWith('done')", 5)
            keys = True
        except AssertionError:
            keys = False
            page.click("#start")
        wait_js(page, "document.getElementById('f-status').textContent.startsWith('done')", 60)
        wait_js(page, "window.previewlab.rows.length === 9")
        yield {"page": page, "addr": addr, "started_by_keys": keys}
        tabs.close()
        assert errors == [], errors


@pytest.mark.slow
def test_ctrl_enter_starts_a_run(page_run):
    """Ctrl+Enter did nothing; it starts a run from the prompt, as Start does, and types no newline."""
    assert page_run["started_by_keys"]
    assert page_run["page"].input_value("#prompt") == "a red circle"


@pytest.mark.slow
def test_the_chart_draws_a_bar_per_step_and_no_slope_across_steps_without_previews(page_run):
    """With every 3 the stacked lines joined each preview step to the steps beside it, drawing triangles of
    decode time where none was measured. A step's stages are a bar on that step now: half a step past a preview
    step, no decode is drawn; on it, it is."""
    page = page_run["page"]
    shown = [r["step"] for r in page.evaluate("window.previewlab.rows") if r.get("decode_ms", 0) > 0]
    assert shown == [3, 6, 9], shown
    decode = (231, 138, 195)  # the decode band's colour (chart.js COLORS)

    def pink_at(step: float) -> int:
        """Canvas pixels of the decode band's colour in the chart's column at `step`."""
        return int(page.evaluate(f"""() => {{
            const u = window.previewlab.chart, c = u.ctx.canvas;
            const x = Math.round(u.valToPos({step}, 'x', true));
            const px = u.ctx.getImageData(x, 0, 1, c.height).data;
            let n = 0;
            for (let i = 0; i < px.length; i += 4) {{
              if (Math.abs(px[i] - {decode[0]}) + Math.abs(px[i + 1] - {decode[1]}) +
                  Math.abs(px[i + 2] - {decode[2]}) < 24) n++;
            }}
            return n; }}"""))

    assert all(pink_at(s) > 0 for s in (3, 6)), "the decode of a preview step is drawn on it"
    assert [pink_at(s + 0.5) for s in (3, 6)] == [0, 0], "no decode drawn between a preview step and the next"


@pytest.mark.slow
def test_it_s_and_an_eta_show_while_the_run_goes(page_run):
    """This run said only "4 / 9". It says the rate and the time left, from the rows the steps brought, and the
    rate once the run has ended."""
    page = page_run["page"]
    texts = page.evaluate("window.stepTexts")
    running = [t for t in texts if re.fullmatch(r"[1-8] / 9 · [\d.]+ it/s · ETA \d+ s", t)]
    assert running, texts
    assert re.fullmatch(r"9 / 9 · [\d.]+ it/s", text(page, "#f-step")), text(page, "#f-step")
    rate = float(text(page, "#f-step").split(" · ")[1].split()[0])
    assert rate > 0


@pytest.mark.slow
def test_device_busy_says_of_how_many_cores(page_run):
    """"Device busy 34 % (cpu)" did not say of what: the CPU figure is the process's CPU time over the cores it
    may use, and now it says how many."""
    cores = len(os.sched_getaffinity(0))
    busy = text(page_run["page"], "#f-busy")
    assert re.fullmatch(rf"[\d.]+ % of {cores} cores? \(cpu\)", busy), busy


@pytest.mark.slow
def test_seed_minus_one_runs_a_random_seed_shown_and_recorded(page_run):
    """There was no random seed: -1 was refused. -1 now draws a seed for each run; the run records the seed it
    used and This run shows it; the field keeps -1 for the next run. The dice puts a drawn seed in the field."""
    page, addr = page_run["page"], page_run["addr"]
    page.fill("#seed", "-1")
    page.fill("#steps", "2")
    page.click("#start")
    wait_js(page, "document.getElementById('f-status').textContent.startsWith('done') && "
                  "document.querySelectorAll('#runs tbody tr').length === 2", 20)
    newest = json.loads(get(f"http://{addr}/runs?limit=1"))[0]
    assert 0 <= newest["seed"] < SEED_SPAN and newest["steps"] == 2
    assert f"seed {newest['seed']}" in text(page, "#f-settings") and page.input_value("#seed") == "-1"
    page.click("#dice")
    assert 0 <= int(page.input_value("#seed")) < SEED_SPAN


def test_a_scripts_first_call_is_a_warm_up(tmp_path):
    """The server's first run after the model loaded is a warm-up on the page; a watched script's first call,
    which pays the same one-off costs, was not. It is now: its record says first_run, and the run list's role
    says warm-up."""
    from previewlab import watch as preview_watch
    from previewlab.preview.models import synthetic_pipeline
    from previewlab.server.embedded import serve

    pipe = synthetic_pipeline("synthetic:tiny")
    w = preview_watch(pipe, decoder="latent2rgb", every=1)
    served = serve(w, port=0, data_dir=tmp_path / "runs")
    try:
        for _ in range(2):
            pipe("a cat", num_inference_steps=2, height=64, width=64, callback_on_step_end=w,
                 callback_on_step_end_tensor_inputs=w.tensor_inputs)
            w.finish()
        assert [r.totals.first_run for r in w.records] == [1, 0]

        def roles() -> list[str]:
            return [r["figures"]["role"] for r in json.loads(get(f"{served.url}runs")) if "figures" in r]
        wait_until(lambda: len(roles()) == 2, 30, "both calls to be listed")
        assert roles() == ["preview", "warm-up"]  # newest first
    finally:
        w.remove()


@pytest.mark.slow
def test_serve_refuses_a_bench_folder_in_one_line_naming_report(tmp_path):
    """`serve --data-dir` on a bench's --out listed 0 runs and /analysis answered 404. The bench keeps its runs in
    one runs.csv, the server a folder per run: serve refuses, before loading a model or writing a file there, and
    names `previewlab report`, which reads that folder."""
    out = tmp_path / "sweep"
    p = previewlab_here("bench", "--model", "synthetic:tiny", "--decoders", "none", "--repeats", "1", "--warmup",
                        "0", "--steps", "1", "--out", str(out))
    assert p.returncode == 0, p.stderr[-2000:]
    before = sorted(os.listdir(out))
    p = previewlab_here("serve", "--data-dir", str(out), "--port", "0")
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.count("\n") == 1 and f"previewlab report {out}" in p.stderr, p.stderr
    assert p.stderr.startswith(f"previewlab serve: --data-dir {out}: a bench folder")
    assert sorted(os.listdir(out)) == before  # no lock, no run folder written into the bench's


def test_the_readme_says_taesd_needs_its_weights_in_a_script():
    """The README's own-script example uses decoder="taesd" and never said that a model without a TAE needs
    taesd=PATH."""
    section = (Path(__file__).resolve().parents[1] / "README.md").read_text().split("## Your own script")[1]
    section = section.split("\n## ")[0]
    assert 'decoder="taesd"' in section and 'taesd="PATH"' in section

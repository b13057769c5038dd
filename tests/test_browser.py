"""End to end in real headless Chromium (Debian's /usr/bin/chromium) driven by Playwright."""
from __future__ import annotations

import csv
import io
import json
import time
import urllib.request

import pytest
from playwright.sync_api import sync_playwright

from tests.conftest import live_server

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"


def wait_js(page, expression: str, timeout_s: float = 60) -> None:
    """page.wait_for_function evaluates its predicate with eval() inside the page, which the page's
    Content-Security-Policy (script-src 'self') forbids; page.evaluate goes through the debugger instead."""
    deadline = time.monotonic() + timeout_s
    while not page.evaluate(expression):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {expression}")
        time.sleep(0.05)
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--no-first-run", "--disable-sync"]


def test_page_runs_switches_decoder_paints_and_exports_csv(make_app, tmp_path):
    srv, app = make_app()
    with live_server(app) as addr, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        page = browser.new_page(accept_downloads=True)
        console_errors: list[str] = []
        page.on("pageerror", lambda e: console_errors.append(str(e)))
        # a Content-Security-Policy violation is a console message, not a page error
        page.on("console", lambda m: console_errors.append(m.text) if "Content Security Policy" in m.text else None)
        listings: list[str] = []  # every request for the run list
        page.on("request", lambda r: listings.append(r.url) if "/runs?" in r.url or r.url.endswith("/runs") else None)
        page.goto(f"http://{addr}/")
        page.wait_for_selector("#conn.ok")
        assert page.is_visible("#banner")  # the model is synthetic
        page.fill("#steps", "60")
        page.select_option("#decoder", "latent2rgb")
        page.click("#start")
        wait_js(page, "Number(document.getElementById('preview').dataset.painted || 0) >= 3")
        page.select_option("#decoder", "taesd")  # a live change, mid-run
        wait_js(page, "document.getElementById('preview').dataset.decoder === 'taesd'", 60)
        wait_js(page, "document.getElementById('f-status').textContent.startsWith('done')", 120)
        assert "step" in (page.text_content("#caption") or "")
        page.wait_for_selector("#runs a.run-csv")
        with page.expect_download() as dl:
            page.click("#runs a.run-csv")
        path = tmp_path / "dl.csv"
        dl.value.save_as(path)
        rows = list(csv.DictReader(io.StringIO(path.read_text())))
        assert len(rows) == 60
        assert {r["decoder"] for r in rows} == {"latent2rgb", "taesd"}
        acked = [r for r in rows if r["client_paint_ms"] != ""]
        for dec in ("latent2rgb", "taesd"):
            mine = [r for r in acked if r["decoder"] == dec]
            assert mine, f"no acknowledged frame for {dec}"
            assert all(float(r["client_decode_ms"]) >= 0 and float(r["ack_rtt_ms"]) > 0 for r in mine)
        # the uPlot chart drew into its canvas
        assert page.locator("#chart canvas").count() == 1
        # a second, shorter run; then tick both in the list and compare them side by side
        page.fill("#steps", "4")
        page.click("#start")
        wait_js(page, "document.querySelectorAll('#runs tbody tr').length === 2", 120)
        boxes = page.locator("#runs input.pick")
        boxes.nth(0).check()
        boxes.nth(1).check()
        page.wait_for_selector("#compare:not([hidden])")
        table = page.text_content("#compare-table") or ""
        assert "wall_s" in table and "overhead_pct" in table and "B / A" in table
        heads = page.locator("#compare-table th").all_text_contents()
        assert heads[1].startswith("A ") and heads[2].startswith("B ") and heads[1][2:21] != heads[2][2:21]
        cells = page.locator("#compare-table tr", has_text="previews").locator("td").all_text_contents()
        a, b = float(cells[1]), float(cells[2])
        assert {a, b} <= set(map(float, range(61))) and max(a, b) > 4 >= min(a, b)  # each run's own count
        # the list shows each run's guidance; it was filled from the runs' `done`, never by listing them all
        heads = page.locator("#runs th").all_text_contents()
        first = page.locator("#runs tbody tr").first.locator("td").all_text_contents()
        assert first[heads.index("guidance")] == "7.5"
        # "use as input" on the newest run: an img2img run of a batch of 2 from its final image
        source = first[heads.index("run")]
        page.locator("#runs tbody tr").first.locator("button.use-input").click()
        assert source in (page.text_content("#init-label") or "")
        page.fill("#batch", "2")
        page.fill("#strength", "0.5")
        page.select_option("#batch_preview", "grid")
        page.click("#start")
        wait_js(page, "document.querySelectorAll('#runs tbody tr').length === 3", 120)
        newest = page.locator("#runs tbody tr").first.locator("td").all_text_contents()
        assert newest[heads.index("task")] == f"img2img 0.5 from {source} ×2"
        assert newest[heads.index("status")] == "done" and newest[heads.index("previews")] == "2"  # 4 steps at 0.5
        wait_js(page, "document.getElementById('preview').width === 128")  # two 64 px images side by side
        # the page load and its first hello at most; before, every finished run fetched the whole list again
        assert len(listings) <= 2 and all("limit=" in u for u in listings), listings
        assert console_errors == []
        browser.close()


def test_a_page_that_reconnects_to_a_restarted_server_can_start_again(make_app, tmp_path):
    """Issue 18, item 9: the server went away mid-run and came back; its hello says nothing is running. Before,
    the page stayed "running" with Start disabled until reloaded."""
    data = tmp_path / "runs"
    srv, app = make_app(data_dir=data)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        page = browser.new_page()
        with live_server(app) as addr:
            page.goto(f"http://{addr}/")
            page.wait_for_selector("#conn.ok")
            page.fill("#steps", "1000")
            page.click("#start")
            wait_js(page, "document.getElementById('f-status').textContent.startsWith('running')")
            assert page.is_disabled("#start")
        wait_js(page, "!document.getElementById('conn').classList.contains('ok')")
        srv2, app2 = make_app(data_dir=data)
        with live_server(app2, port=int(addr.rsplit(":", 1)[1])):
            page.wait_for_selector("#conn.ok", timeout=30_000)
            wait_js(page, "!document.getElementById('start').disabled", 10)
            assert page.is_disabled("#stop") and "ended while disconnected" in (page.text_content("#f-status") or "")
        browser.close()


def test_a_clip_preview_plays_its_frames_on_the_canvas(make_app, tmp_path):
    """Issue 22: a preview of several frames is one message; the page draws its first frame, acks it once, then
    plays the frames in a loop: the canvas changes between frames of the same message."""
    from previewlab.preview import models

    wan = models.load("synthetic:tiny-wan21", device="cpu")
    srv, app = make_app(model=wan)
    with live_server(app) as addr, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        page = browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"http://{addr}/")
        page.wait_for_selector("#conn.ok")
        page.wait_for_selector("#frames-label:not([hidden])")  # a video model: the clip's controls show
        assert page.input_value("#num_frames") == "5" and page.input_value("#fps") == "16"
        page.fill("#steps", "2")
        page.select_option("#decoder", "vae")
        page.select_option("#frames", "all")
        page.select_option("#mode", "sync")
        page.click("#start")
        wait_js(page, "document.getElementById('preview').dataset.clipFrames === '5'")
        wait_js(page, "document.getElementById('f-status').textContent.startsWith('done')", 120)
        # the last preview keeps playing: sample the canvas until it has shown two different pictures
        seen: dict[str, str] = {}
        deadline = time.monotonic() + 20
        while len(set(seen.values())) < 2 and time.monotonic() < deadline:
            shot = page.evaluate("""() => { const c = document.getElementById('preview');
                const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
                let h = 0; for (let i = 0; i < d.length; i += 7) h = (h * 31 + d[i]) | 0;
                return [c.dataset.clipFrame, String(h)]; }""")
            seen[shot[0]] = shot[1]
            time.sleep(0.03)
        assert len(seen) >= 2 and len(set(seen.values())) >= 2, seen
        assert "5 frames at 16.0 fps" in (page.text_content("#caption") or "")
        with urllib.request.urlopen(f"http://{addr}/runs") as r:
            rid = json.loads(r.read())[0]["run_id"]
        with urllib.request.urlopen(f"http://{addr}/runs/{rid}.csv") as r:
            rows = list(csv.DictReader(io.StringIO(r.read().decode())))
        assert [r["frames"] for r in rows] == ["5", "5"]
        assert sum(r["client_paint_ms"] != "" for r in rows) >= 1  # acked once its first frame was drawn
        # one ack per message: a second for the same seq would be a bad message, answered with an error
        assert page.is_hidden("#error"), page.text_content("#error")
        assert errors == []
        browser.close()

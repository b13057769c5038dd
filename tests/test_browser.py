"""End to end in real headless Chromium (Debian's /usr/bin/chromium) driven by Playwright."""
from __future__ import annotations

import csv
import io

from playwright.sync_api import sync_playwright

from tests.conftest import live_server

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--no-first-run", "--disable-sync"]


def test_page_runs_switches_decoder_paints_and_exports_csv(make_app, tmp_path):
    srv, app = make_app()
    with live_server(app) as addr, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        page = browser.new_page(accept_downloads=True)
        console_errors: list[str] = []
        page.on("pageerror", lambda e: console_errors.append(str(e)))
        page.goto(f"http://{addr}/")
        page.wait_for_selector("#conn.ok")
        assert page.is_visible("#banner")  # the model is synthetic
        page.fill("#steps", "60")
        page.select_option("#decoder", "latent2rgb")
        page.click("#start")
        page.wait_for_function("Number(document.getElementById('preview').dataset.painted || 0) >= 3")
        page.select_option("#decoder", "taesd")  # a live change, mid-run
        page.wait_for_function("document.getElementById('preview').dataset.decoder === 'taesd'", timeout=60_000)
        page.wait_for_function("document.getElementById('f-status').textContent.startsWith('done')", timeout=120_000)
        assert "step" in page.text_content("#caption")
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
        page.wait_for_function("document.querySelectorAll('#runs tbody tr').length === 2", timeout=120_000)
        boxes = page.locator("#runs input.pick")
        boxes.nth(0).check()
        boxes.nth(1).check()
        page.wait_for_selector("#compare:not([hidden])")
        table = page.text_content("#compare-table")
        assert "wall_s" in table and "overhead_pct" in table and "B / A" in table
        heads = page.locator("#compare-table th").all_text_contents()
        assert heads[1].startswith("A ") and heads[2].startswith("B ") and heads[1][2:21] != heads[2][2:21]
        cells = page.locator("#compare-table tr", has_text="previews").locator("td").all_text_contents()
        a, b = float(cells[1]), float(cells[2])
        assert {a, b} <= set(map(float, range(61))) and max(a, b) > 4 >= min(a, b)  # each run's own count
        assert console_errors == []
        browser.close()

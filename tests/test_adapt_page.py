"""Issue 56: a page that paints slowly on an unshaped loopback is a slow page, not a slow link (server/ws/adapt.py).

Real uvicorn on loopback, real Chromium, the tiny model's 128 px VAE previews (a side and bytes that a link's
adaptation would cut: 64 px is allowed). The page is made slow in its own decode: createImageBitmap resolves
PAGE_MS late, inside the time the page reports with each ack. (A busy-wait in its drawing, the other way, took one
of a 2-core machine's cores from the model, whose steps then came slower than the page painted.) Each preview then
waits for the last one's ack and newer ones are dropped, as on a slow link; the server must keep sending the
previews as made and say that the page is the slow part."""
from __future__ import annotations

import csv
from pathlib import Path

import pytest

from tests.browser_fixtures import wait_js
from tests.conftest import live_server

PAGE_MS = 1000
SLOW_PAGE = """
(() => {
  const decode = window.createImageBitmap;
  window.createImageBitmap = (...args) =>
    new Promise((done) => setTimeout(done, %d)).then(() => decode.apply(window, args));
})();
""" % PAGE_MS


def deliveries(runs: Path) -> list[dict[str, str]]:
    (folder,) = [p for p in runs.iterdir() if (p / "deliveries.csv").exists()]
    with open(folder / "deliveries.csv", newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_a_page_that_paints_slowly_keeps_its_previews_as_made(make_app, tmp_path, tabs):
    srv, app = make_app(tmp_path / "runs")
    with live_server(app) as addr:
        page, _ = tabs.new()
        page.add_init_script(SLOW_PAGE)
        tabs.load(page, f"http://{addr}/")
        for field, value in (("#steps", "10"), ("#width", "128"), ("#height", "128")):
            page.fill(field, value)
        page.select_option("#decoder", "vae")
        page.click("#start")
        wait_js(page, "document.getElementById('f-status').textContent.startsWith('done')", 60)
        caption, said = page.text_content("#caption") or "", page.text_content("#adapted") or ""
    rows = deliveries(tmp_path / "runs")
    acked = [r for r in rows if r["kind"] == "ack"]
    assert sum(r["kind"] == "drop" for r in rows) >= 2  # the slow page held previews back: the hub dropped some
    assert acked and all(r["adapted"] == "" for r in acked), [r["adapted"] for r in acked]  # each sent as made
    assert "128x128" in caption, caption
    assert said.startswith("this page is slow, not the link:"), said
    # the link read from the acks leaves the page's own time out: loopback, not the 0.05 Mbit/s the page's paint made
    assert float(acked[-1]["link_mbps"]) > 1.0, acked[-1]

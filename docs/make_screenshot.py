"""Takes docs/page.png: the page during a run of the demo model, after a live decoder switch, with the figures of
a measure series (Measure overhead: latent2rgb every 1 against its baselines) in the list and the advice.

    .venv/bin/python docs/make_screenshot.py
"""
import sys
import tempfile
import urllib.request
from pathlib import Path

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from previewlab.bench.load import start_server  # noqa: E402

server, port = start_server("--model", "demo", "--data-dir", tempfile.mkdtemp())
try:
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", headless=True,
                                     args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        # wait_for_function evaluates its predicate with eval() in the page, which the page's CSP forbids;
        # the screenshot is of the page, not of its policy (tests/test_browser.py runs with the policy on)
        page = browser.new_page(viewport={"width": 1280, "height": 1050}, bypass_csp=True)
        page.goto(f"http://127.0.0.1:{port}/")
        page.wait_for_selector("#conn.ok")
        # a measure series first (6 steps: a short one), so the list, the figures and the advice have runs to show
        page.fill("#steps", "6")
        page.select_option("#decoder", "latent2rgb")
        page.click("#measure")
        page.wait_for_function("document.getElementById('measure-line').textContent.startsWith('measured')",
                               timeout=600_000)
        # the demo model takes about 30 ms a step here: 150 steps leave time to switch decoder mid-run
        page.fill("#steps", "150")
        page.select_option("#decoder", "latent2rgb")
        page.click("#start")
        page.wait_for_function("Number(document.getElementById('preview').dataset.painted || 0) >= 60", timeout=120_000)
        page.select_option("#decoder", "taesd")
        page.wait_for_function("parseInt(document.getElementById('f-step').textContent) >= 135", timeout=120_000,
                               polling=50)
        page.screenshot(path=str(ROOT / "docs" / "page.png"), full_page=True)
        page.wait_for_function("document.getElementById('f-status').textContent.startsWith('done')", timeout=120_000)
        browser.close()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics") as r:
        (ROOT / "docs" / "metrics-example.txt").write_text(r.read().decode())
finally:
    server.terminate()
    server.wait(60)
print("wrote docs/page.png and docs/metrics-example.txt")

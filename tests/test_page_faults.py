"""Three faults a new user met (issue 43, item 6), each against real parts: text typed into a number field,
a script's saved image on its page, and the close code a Ctrl-C sends the page."""
from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest
import websockets
from starlette.testclient import TestClient

from previewlab.server.core.limits import SessionLimits
from tests.browser_fixtures import wait_js
from tests.conftest import ROOT, SAME_ORIGIN, live_server, recv_until, wait_until


def page_numeric_fields() -> list[str]:
    """The page's numeric fields, as web/controls.js lists them (NUMERIC): each one's text goes through value()."""
    found = re.search(r"const NUMERIC = new Set\(\[(.*?)\]\)", (ROOT / "previewlab" / "web" / "controls.js").read_text(), re.S)
    assert found, "web/controls.js no longer lists its numeric fields in NUMERIC"
    return re.findall(r'"([a-z_]+)"', found.group(1))


# -- 1. an interval typed as text -------------------------------------------------------------------------------
def test_an_interval_typed_as_text_is_named_in_the_error(make_app):
    """`abc` as the interval reached the server as null (Number("abc") is NaN, which JSON sends as null) and
    came back as `every=None: must be an integer from 1 to 10000`. Sent as typed, it is named, with both
    choices the field takes."""
    srv, app = make_app()
    with TestClient(app) as client, client.websocket_connect("/ws", headers=SAME_ORIGIN) as ws:
        ws.receive_text()
        for kind in ("set", "start"):
            ws.send_text(json.dumps({"type": kind, "every": "abc"}))
            assert recv_until(ws, "error")["message"] == \
                "every='abc': must be an integer from 1 to 10000, or auto"
        for sent, named in ((None, "None"), (2.5, "2.5"), (0, "0"), (True, "True")):
            ws.send_text(json.dumps({"type": "set", "every": sent}))
            assert recv_until(ws, "error")["message"] == \
                f"every={named}: must be an integer from 1 to 10000, or auto"
        ws.send_text(json.dumps({"type": "start", "steps": 2, "every": "auto", "budget": 50}))
        assert recv_until(ws, "done")["status"] == "done"  # what the field takes still runs


def test_every_numeric_field_of_the_page_names_the_text_it_was_sent(make_app):
    """The same rule for each of the page's numeric fields: a start carrying the text as typed (`abc`, or the ""
    a number input reads when it cannot parse its text) is refused naming that field and that text."""
    srv, app = make_app(limits=SessionLimits(bad_burst=100))
    fields = page_numeric_fields()
    assert {"every", "steps", "width", "quality", "budget", "fps"} <= set(fields)
    with TestClient(app) as client, client.websocket_connect("/ws", headers=SAME_ORIGIN) as ws:
        ws.receive_text()
        for field in fields:
            for typed in ("abc", ""):
                ws.send_text(json.dumps({"type": "start", field: typed}))
                message = recv_until(ws, "error")["message"]
                assert message.startswith(f"{field}={typed!r}: "), (field, message)


# -- 2. a script's saved image ----------------------------------------------------------------------------------
def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as r:
        return bytes(r.read())


def test_a_scripts_saved_image_is_its_runs_final_image(tmp_path):
    """serve(watch) kept no final image of a script's run: the list's image column stayed empty and the view on
    the last preview. watch.save() now hands its PNG to the server, after the call: `done` and /runs say
    has_final, and /runs/<id>/final.png is the PNG the script wrote."""
    from previewlab import watch as preview_watch
    from previewlab.preview.models import synthetic_pipeline
    from previewlab.server.embedded import serve

    pipe = synthetic_pipeline("synthetic:tiny")
    w = preview_watch(pipe, decoder="latent2rgb", every=1)
    served = serve(w, port=0, data_dir=tmp_path / "runs")
    out = tmp_path / "out.png"

    def script() -> None:
        image = pipe("a cat", num_inference_steps=2, height=64, width=64, callback_on_step_end=w,
                     callback_on_step_end_tensor_inputs=w.tensor_inputs).images[0]
        w.save(image, out)

    async def watch_it() -> dict[str, Any]:
        async with websockets.connect(served.url.replace("http", "ws") + "ws") as ws:
            assert json.loads(await ws.recv())["type"] == "hello"
            t = threading.Thread(target=script)
            t.start()
            try:
                while True:
                    m = await asyncio.wait_for(ws.recv(), 60)
                    if isinstance(m, bytes):  # acked as the page acks, so the end waits for nothing
                        seq = json.loads(m[4:4 + int.from_bytes(m[:4], "big")])["seq"]
                        await ws.send(json.dumps({"type": "ack", "seq": seq}))
                    elif json.loads(m)["type"] == "done":
                        return json.loads(m)
            finally:
                t.join()

    try:
        done = asyncio.run(watch_it())
        rid = done["run_id"]
        assert done["task"] == "script" and done["status"] == "done" and done["has_final"] is True
        assert _get(f"{served.url}runs/{rid}/final.png") == out.read_bytes()
        listed = {r["run_id"]: r for r in json.loads(_get(f"{served.url}runs"))}
        assert listed[rid]["has_final"] is True
    finally:
        w.remove()


def test_a_script_run_closed_without_save_says_it_has_no_image(tmp_path):
    """finish() instead of save(): nothing is kept, and the run says so (the page shows no image link)."""
    from previewlab import watch as preview_watch
    from previewlab.preview.models import synthetic_pipeline
    from previewlab.server.embedded import serve

    pipe = synthetic_pipeline("synthetic:tiny")
    w = preview_watch(pipe, decoder="none")
    served = serve(w, port=0, data_dir=tmp_path / "runs")
    try:
        pipe("a cat", num_inference_steps=2, height=64, width=64, callback_on_step_end=w,
             callback_on_step_end_tensor_inputs=w.tensor_inputs)
        record = w.finish()
        assert record is not None
        rid = record.run_id

        def listed() -> dict[str, Any]:
            return {r["run_id"]: r for r in json.loads(_get(f"{served.url}runs"))}.get(rid, {})
        wait_until(lambda: listed().get("status") == "done", 30, "the run's end to be recorded")
        assert listed()["has_final"] is False
        with pytest.raises(urllib.error.HTTPError) as e:
            _get(f"{served.url}runs/{rid}/final.png")
        assert e.value.code == 404
    finally:
        w.remove()


# -- 3. the close code of a Ctrl-C ------------------------------------------------------------------------------
@contextlib.contextmanager
def serving(data: Path, *flags: str) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """`previewlab serve --model synthetic:tiny` on a free port, answering; killed if a test leaves it running."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = subprocess.Popen([sys.executable, "-m", "previewlab", "serve", "--model", "synthetic:tiny", "--port",
                          str(port), "--data-dir", str(data), *flags], cwd=ROOT, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)

    def answers() -> bool:
        assert p.poll() is None, "the server exited"
        try:
            _get(f"http://127.0.0.1:{port}/runs")
            return True
        except OSError:
            return False

    try:
        wait_until(answers, 120, "the server to start")
        yield p, port
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()


async def _close_after(port: int, signal_it: Any, start: dict[str, Any] | None = None) -> tuple[int, str]:
    """A watcher (a run started first, given `start`) whose server is signalled once its first step arrives:
    the close code and reason it receives (1006, "" when no close frame came)."""
    async with websockets.connect(f"ws://127.0.0.1:{port}/ws") as ws:
        await ws.recv()  # hello
        if start is not None:
            await ws.send(json.dumps({"type": "start", **start}))
            while True:
                m = await asyncio.wait_for(ws.recv(), 120)
                if isinstance(m, str) and json.loads(m)["type"] == "step":
                    break
        await signal_it()
        try:
            while True:
                await asyncio.wait_for(ws.recv(), 60)
        except websockets.ConnectionClosed as e:
            return (e.rcvd.code, e.rcvd.reason) if e.rcvd is not None else (1006, "")
    raise AssertionError("unreachable")


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_signal_closes_each_watcher_with_1001(tmp_path, sig):
    """docs/server.md promises 1001 on SIGTERM or Ctrl-C: the close frame said 1001 with no reason. Now it
    says why, and a run going on is ended first."""
    with serving(tmp_path) as (p, port):
        async def send() -> None:
            p.send_signal(sig)
        closed = asyncio.run(_close_after(port, send, {"steps": 1000, "width": 64, "height": 64}))
        rc = p.wait(60)
    out = p.stdout.read() if p.stdout else ""
    assert closed == (1001, "server shutting down"), out
    assert rc in (0, 130, -sig) and "Traceback" not in out, out


@pytest.mark.slow
def test_a_second_ctrl_c_during_the_grace_still_closes_with_1001(tmp_path):
    """A second Ctrl-C while the run still has its grace handed the shutdown to uvicorn, which closed each
    watcher with 1012 (and aborted what was left 2.5 s later, 1006). The watchers are closed with 1001 first."""
    with serving(tmp_path, "--shutdown-grace", "60") as (p, port):
        async def twice() -> None:
            p.send_signal(signal.SIGINT)
            await asyncio.sleep(0.3)  # inside the step the run is given its grace for (seconds at 256x256)
            p.send_signal(signal.SIGINT)
        closed = asyncio.run(_close_after(port, twice, {"steps": 1000, "width": 256, "height": 256}))
        rc = p.wait(120)
    out = p.stdout.read() if p.stdout else ""
    assert closed == (1001, "server shutting down"), out
    assert rc in (0, 130, -signal.SIGINT) and "Traceback" not in out, out


# -- 1, in Chromium: last in the module, since asyncio.run() cannot start while its browser is open -----------
@pytest.mark.slow
def test_the_page_sends_the_interval_as_typed(make_app, tabs):
    """In Chromium: `abc` typed as the interval, then Start; the banner names what was typed. A number input
    holding text it cannot parse (`1e`) reads "", which goes as it is: before, Number("") sent 0."""
    srv, app = make_app()  # loopback names are always let in
    with live_server(app) as addr:
        page, _ = tabs.open(addr)
        page.fill("#every", "abc")
        page.click("#start")
        page.wait_for_selector("#error:not([hidden])")
        assert page.text_content("#error") == "every='abc': must be an integer from 1 to 10000, or auto"
        page.fill("#every", "1")
        page.fill("#quality", "")
        page.click("#quality")
        page.keyboard.type("1e")  # outside the start form: its own checks do not stop the start
        assert page.evaluate("document.getElementById('quality').validity.badInput")
        page.click("#start")
        wait_js(page, "document.getElementById('error').textContent.startsWith('quality=')")
        assert page.text_content("#error") == "quality='': must be an integer from 1 to 100"

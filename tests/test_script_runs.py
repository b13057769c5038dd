"""Issue 45: a user's own script with watch() and serve(watch): a call that raises or gets a Ctrl-C, a watch shared
by threads or passed to another pipeline, a page closed or served twice, a script that exits after save(). The
real pattern: a diffusers pipeline the test builds, called as a script calls it, the real embedded server."""
from __future__ import annotations

import json
import threading
import time
import urllib.request
from typing import Any

import pytest
import torch
from diffusers.callbacks import MultiPipelineCallbacks, PipelineCallback

from previewlab import serve, watch as preview_watch
from previewlab.preview.call.callback import WatchError
from previewlab.preview.models import synthetic_pipeline


@pytest.fixture()
def pipe():
    return synthetic_pipeline("synthetic:tiny")  # a plain StableDiffusionPipeline of tiny components


def call(pipe, w, steps=6, **kw):
    return pipe("a cat", num_inference_steps=steps, height=64, width=64, generator=torch.Generator().manual_seed(3),
                callback_on_step_end=w, **kw).images[0]


def runs(page) -> list[dict[str, Any]]:
    with urllib.request.urlopen(page.url + "runs", timeout=10) as r:
        return json.loads(r.read())


def settled(page, n: int, timeout_s: float = 20.0) -> list[dict[str, Any]]:
    """The server's runs once n of them are listed and none is running (its writes leave the loop)."""
    deadline = time.monotonic() + timeout_s
    while True:
        listed = runs(page)
        if len(listed) >= n and all(r["status"] != "running" for r in listed) or time.monotonic() > deadline:
            return listed
        time.sleep(0.05)


def fail_at_forward(pipe, n: int, exc: BaseException):
    """The denoiser raises at its n-th forward of the next call (a hook of the test's, removed after)."""
    seen = [0]

    def hook(module, args):
        seen[0] += 1
        if seen[0] == n:
            raise exc
    return pipe.unet.register_forward_pre_hook(hook)


def test_a_call_that_raises_ends_failed_at_once_and_the_next_call_starts_clean(pipe, tmp_path):
    """Item 2: a RuntimeError at step 3 of 6. The run is failed with the error at once, not running until the
    script's next call; the scheduler is unwrapped; the next call's record is its own (its text encoding
    measured, done), and the failed run stays failed."""
    w = preview_watch(pipe, decoder="latent2rgb", mode="sync")
    page = serve(w, port=0, data_dir=tmp_path)
    try:
        h = fail_at_forward(pipe, 3, RuntimeError("boom at step 3"))
        with pytest.raises(RuntimeError, match="boom at step 3"):
            call(pipe, w)
        h.remove()
        assert w.state == "idle" and "step" not in vars(pipe.scheduler)  # the user's scheduler as it was
        (failed,) = settled(page, 1)
        assert failed["status"] == "failed" and failed["error"] == "RuntimeError: boom at step 3"
        image = call(pipe, w)
        w.save(image, tmp_path / "out.png")
        listed = settled(page, 2)
        by_id = {r["run_id"]: r for r in listed}
        assert by_id[failed["run_id"]]["status"] == "failed"
        (rec,) = w.records  # the failed call has no record of totals; the next one is whole
        assert rec.totals.status == "done" and rec.totals.steps_run == 6 and rec.totals.text_encode_ms > 0
        t = rec.totals
        assert t.wall_s * 1e3 >= t.text_encode_ms + t.denoise_ms + t.final_decode_ms
    finally:
        w.remove()


def test_a_ctrl_c_mid_call_is_failed_when_the_next_call_begins_and_that_call_is_clean(pipe, tmp_path):
    """Item 2: torch hands no hook a KeyboardInterrupt. The next call's start ends the interrupted one as failed,
    saying so; the next call's text encoding is its own, not the idle gap or 0."""
    w = preview_watch(pipe, decoder="none", mode="sync")
    page = serve(w, port=0, data_dir=tmp_path)
    try:
        h = fail_at_forward(pipe, 4, KeyboardInterrupt())
        with pytest.raises(KeyboardInterrupt):
            call(pipe, w)
        h.remove()
        time.sleep(0.3)  # an idle gap, which the next call must not count
        image = call(pipe, w)
        w.save(image, tmp_path / "out.png")
        listed = settled(page, 2)
        first = min(listed, key=lambda r: r["run_id"])
        assert first["status"] == "failed" and "Ctrl-C" in first["error"]
        rec = w.records[-1]
        assert rec.totals.status == "done" and rec.totals.steps_run == 6
        assert 0 < rec.totals.text_encode_ms < 300  # its own encoding, not the 300 ms gap before it
    finally:
        w.remove()


def test_a_watch_passed_to_another_pipeline_refuses_in_one_line_and_keeps_its_settings(pipe):
    """Item 5: an SD watch passed to another pipeline's call raises there, naming both; it records nothing and
    its own later calls still preview."""
    other = synthetic_pipeline("synthetic:tiny")
    w = preview_watch(pipe, decoder="latent2rgb", mode="sync")
    try:
        with pytest.raises(WatchError, match="make a watch for each pipeline") as e:
            call(other, w, steps=2)
        assert "\n" not in str(e.value)
        assert w.records == [] and w.controls.get().decoder == "latent2rgb"
        call(pipe, w, steps=2)
        assert [r.preview for r in w.rows] == [1, 1]
    finally:
        w.remove()


def test_a_second_thread_calling_through_the_same_watch_is_refused_and_the_first_call_is_whole(pipe):
    """Item 5: two threads share one watch (and its pipeline). The second call is refused in one line while the
    first runs; the first call's record has all its steps, in one run."""
    w = preview_watch(pipe, decoder="none", mode="sync")
    in_loop, go_on = threading.Event(), threading.Event()

    def slow(p, i, t, kw):  # the first call waits inside its loop until the second one has tried
        if i == 2:
            in_loop.set()
            go_on.wait(30)
        return kw

    first = threading.Thread(target=lambda: call(pipe, MultiPipelineCallbacks([w, _Plain(slow)]), steps=8))
    errors: list[BaseException] = []
    first.start()
    try:
        assert in_loop.wait(60)
        try:
            call(pipe, w, steps=8)
        except WatchError as e:
            errors.append(e)
        go_on.set()
        first.join(60)
        rec = w.record
        assert len(errors) == 1 and "another thread" in str(errors[0])
        assert rec is not None and len(w.records) == 1 and rec.totals.steps_run == 8
    finally:
        go_on.set()
        w.remove()


class _Plain(PipelineCallback):
    """A user's own callback in the diffusers form, beside the watch."""
    tensor_inputs = ["latents"]

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def callback_fn(self, pipeline, step_index, timestep, callback_kwargs):
        return self.fn(pipeline, step_index, timestep, callback_kwargs)


def test_closing_the_page_detaches_it_and_a_call_it_interrupts_is_stopped_and_written(pipe, tmp_path):
    """Item 10: close() during a call stops the call at its next step and writes its end (stopped, with totals)
    before the server goes; the watch is detached, so its later calls queue nothing on the stopped loop."""
    w = preview_watch(pipe, decoder="latent2rgb", mode="sync")
    page = serve(w, port=0, data_dir=tmp_path)
    in_loop = threading.Event()

    def slow(p, i, t, kw):  # the script's own callback: slow steps, so the close lands mid-call
        in_loop.set()
        time.sleep(0.05)
        return kw

    t = threading.Thread(target=lambda: call(pipe, MultiPipelineCallbacks([w, _Plain(slow)]), steps=40))
    t.start()
    try:
        assert in_loop.wait(60)
        page.close()
        t.join(60)
        assert w.events is None
        (rec,) = w.records
        assert rec.totals.status == "stopped" and 0 < rec.totals.steps_run < 40
        meta = json.loads((tmp_path / rec.meta.run_id / "meta.json").read_text())
        assert meta["status"] == "stopped" and meta["totals"]["steps_run"] == rec.totals.steps_run
        call(pipe, w, steps=3)
        w.finish()
        assert len(page.loop._ready) == 0  # type: ignore[attr-defined]  # nothing handed to the stopped loop
        with pytest.raises(OSError):
            urllib.request.urlopen(page.url + "runs", timeout=5)
    finally:
        w.remove()


def test_a_second_serve_of_one_watch_is_refused_and_remove_stops_the_one_page(pipe, tmp_path):
    """Item 11: a second serve(watch) would orphan the first (listening, holding its folder, able to stop the
    watch). It is refused in one line naming the first page; watch.remove() stops that page."""
    from previewlab.server.embedded import ServeError

    w = preview_watch(pipe, decoder="none")
    page = serve(w, port=0, data_dir=tmp_path / "a")
    try:
        with pytest.raises(ServeError, match="already served at " + page.url) as e:
            serve(w, port=0, data_dir=tmp_path / "b")
        assert "\n" not in str(e.value)
        w.remove()
        with pytest.raises(OSError):
            urllib.request.urlopen(page.url + "runs", timeout=5)
        again = serve(preview_watch(pipe, decoder="none"), port=0, data_dir=tmp_path / "a")  # the folder is free
        again.close()
    finally:
        w.remove()


SCRIPT = """
import sys, torch
from previewlab import serve, watch
from previewlab.preview.models import synthetic_pipeline
pipe = synthetic_pipeline("synthetic:tiny")
w = watch(pipe, decoder="latent2rgb", mode="sync")
page = serve(w, port=0, data_dir=sys.argv[1])
if len(sys.argv) > 3:  # a page open on the run that has not acked its last frames yet (a browser's tab)
    import threading, warnings, websockets.sync.client as client
    warnings.simplefilter("ignore", DeprecationWarning)
    ws = client.connect(page.url.replace("http", "ws") + "ws")
    ws.recv()
    def read():  # never acks; the connection ends when the page closes
        try:
            while True:
                ws.recv()
        except Exception:
            pass
    threading.Thread(target=read, daemon=True).start()
if sys.argv[2] == "ctrl-c":  # the denoiser gets a Ctrl-C at step 3
    seen = [0]
    def hook(m, a):
        seen[0] += 1
        if seen[0] == 3:
            raise KeyboardInterrupt
    pipe.unet.register_forward_pre_hook(hook)
image = pipe("a cat", num_inference_steps=5, height=64, width=64, callback_on_step_end=w).images[0]
w.save(image, sys.argv[2])
"""


def _script(tmp_path, data, arg, *more):
    import subprocess
    import sys

    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    return subprocess.run([sys.executable, str(script), str(data), arg, *more], capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # a real script, its own interpreter: 8 s a try
def test_a_script_that_exits_after_save_leaves_its_run_whole_on_disk(tmp_path):
    """Item 1: the README's pattern plus serve(watch), with the page open, and the script exits without
    watch.remove(). Its run is on disk, done, every row, its image kept; no traceback. Three tries: the loss was
    a race (4 of 6)."""
    for i in range(3):
        data = tmp_path / f"runs{i}"
        out = _script(tmp_path, data, str(tmp_path / f"out{i}.png"), "page")
        assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr[-2000:]
        (run,) = [d for d in data.iterdir() if (d / "meta.json").is_file()]
        meta = json.loads((run / "meta.json").read_text())
        assert meta["status"] == "done" and meta["totals"]["steps_run"] == 5
        assert len((run / "steps.csv").read_text().strip().splitlines()) == 1 + 5
        assert (run / "final.png").is_file()


@pytest.mark.slow  # a real script, its own interpreter: 8 s a try
def test_a_script_stopped_by_ctrl_c_mid_call_leaves_its_run_failed_not_running(tmp_path):
    """Items 1 and 2: an unhandled Ctrl-C at step 3 of 5. The run is failed on disk, saying why, with the rows it
    made; never `running` (which a later server lists as interrupted, without its rows' meaning)."""
    data = tmp_path / "runs"
    out = _script(tmp_path, data, "ctrl-c")
    assert out.returncode != 0 and "KeyboardInterrupt" in out.stderr
    (run,) = [d for d in data.iterdir() if (d / "meta.json").is_file()]
    meta = json.loads((run / "meta.json").read_text())
    assert meta["status"] == "failed" and "KeyboardInterrupt" in meta["error"], meta
    assert len((run / "steps.csv").read_text().strip().splitlines()) == 1 + 2  # steps 1 and 2 finished

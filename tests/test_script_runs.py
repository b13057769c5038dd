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
from previewlab.preview.call.call_owner import WatchError
from previewlab.preview.models import synthetic_pipeline


@pytest.fixture()
def pipe():
    return synthetic_pipeline("synthetic:tiny")  # a plain StableDiffusionPipeline of tiny components


def call(pipe, w, steps=6, **kw):
    kw.setdefault("generator", torch.Generator().manual_seed(3))
    return pipe("a cat", num_inference_steps=steps, height=64, width=64, callback_on_step_end=w, **kw).images[0]


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


@pytest.mark.slow
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


@pytest.mark.slow
def test_a_ctrl_c_mid_call_is_failed_when_the_next_call_begins_and_that_call_is_clean(pipe, tmp_path):
    """Item 2: torch hands no hook a KeyboardInterrupt. The next call's start ends the interrupted one as failed,
    saying so; the next call's text encoding is its own, not the idle gap or 0."""
    from tests.golden_sweep import TickClock

    clock = TickClock()  # a call's figures count its readings; the idle gap is a jump of the test's
    w = preview_watch(pipe, decoder="none", mode="sync", clock=clock)
    page = serve(w, port=0, data_dir=tmp_path)
    try:
        h = fail_at_forward(pipe, 4, KeyboardInterrupt())
        with pytest.raises(KeyboardInterrupt):
            call(pipe, w)
        h.remove()
        clock.t += 0.3  # an idle gap of 300 ms, which the next call must not count
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


# -- found by the probe after the first fixes ------------------------------------------------------------------

def _ticked(pipe, **kw):
    """A watch on a clock that reads 1 ms later at each reading: a call's figures count the watch's readings,
    the same for the same call on any machine."""
    from previewlab.preview.record.kept_events import Gathered
    from tests.golden_sweep import TickClock

    w = preview_watch(pipe, decoder="none", mode="sync", clock=TickClock(), **kw)
    events = Gathered()
    w.attach(events)
    return w, events


def test_a_call_that_fails_after_its_text_encoding_lends_the_next_call_nothing(pipe, tmp_path):
    """Item 2, by another path: diffusers raises its own ValueError after the text encoding (two generators for
    one image), where no hook sees it. The next call's figures are a clean call's, reading for reading."""
    w, events = _ticked(pipe)
    try:
        w.save(call(pipe, w, steps=3), tmp_path / "a.png")
        clean = w.records[-1].totals
        with pytest.raises(ValueError):
            call(pipe, w, steps=3, generator=[torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)])
        w.save(call(pipe, w, steps=3), tmp_path / "b.png")
        again = w.records[-1].totals
        assert (again.wall_s, again.text_encode_ms, again.steps_run) == (clean.wall_s, clean.text_encode_ms, 3)
        assert [e.status for e in events.ends] == ["done", "done"]  # the failed call never reached a step
    finally:
        w.remove()


@pytest.mark.slow
def test_a_second_pipeline_sharing_the_components_is_not_measured_as_this_watchs_call(pipe, tmp_path):
    """Item 5, by another path: an img2img pipeline made from `pipe.components` fires the hooks on the shared
    text encoder, UNet and VAE. Its call is not this watch's: the scheduler is left unwrapped after it, and the
    watch's next call is a clean call, reading for reading."""
    from diffusers import StableDiffusionImg2ImgPipeline

    w, events = _ticked(pipe)
    other = StableDiffusionImg2ImgPipeline(**pipe.components)
    try:
        image = call(pipe, w, steps=3)
        w.save(image, tmp_path / "a.png")
        clean = w.records[-1].totals
        other("a cat", image=image, num_inference_steps=4, strength=0.75, generator=torch.Generator().manual_seed(2))
        assert "step" not in vars(pipe.scheduler) and w.state == "idle"
        image = call(pipe, w, steps=3)  # its record still open (no save yet) while the other pipeline runs
        other("a cat", image=image, num_inference_steps=4, strength=0.75, generator=torch.Generator().manual_seed(2))

        def oom(module, args):
            raise RuntimeError("the other pipeline's out of memory")
        h = pipe.unet.register_forward_pre_hook(oom)
        with pytest.raises(RuntimeError):
            other("a cat", image=image, num_inference_steps=4, strength=0.75)
        h.remove()
        w.save(image, tmp_path / "b.png")
        again = w.records[-1].totals
        assert (again.wall_s, again.text_encode_ms, again.final_decode_ms, again.status) == (
            clean.wall_s, clean.text_encode_ms, clean.final_decode_ms, "done")
        assert len(events.metas) == 2 and [e.status for e in events.ends] == ["done", "done"]
    finally:
        w.remove()


def test_a_final_decode_that_raises_ends_the_call_failed_at_once(pipe):
    """Item 2, by another path: the VAE's final decode raises (as an out-of-memory would); the call is failed
    with that error at once, not running until the next call and then done."""
    w, events = _ticked(pipe)

    def oom(module, args):
        raise RuntimeError("out of memory in the final decode")

    h = pipe.vae.decoder.register_forward_pre_hook(oom)
    try:
        with pytest.raises(RuntimeError, match="out of memory"):
            call(pipe, w, steps=3)
        assert w.state == "idle" and [e.status for e in events.ends] == ["failed"]
        assert events.ends[0].error == "RuntimeError: out of memory in the final decode"
    finally:
        h.remove()
        w.remove()


def test_two_threads_taking_turns_are_two_runs_and_one_s_save_never_closes_the_others(pipe, tmp_path):
    """Item 5, the probe's case: thread A's call has ended, A saves a moment later, while thread B's call runs.
    A's call is closed when B's begins; A's save closes nothing of B's; each is one run with its own steps."""
    w, events = _ticked(pipe)
    a_done, b_in_loop, a_saved = threading.Event(), threading.Event(), threading.Event()
    images: list[Any] = []

    def a() -> None:
        images.append(call(pipe, w, steps=3))
        a_done.set()
        b_in_loop.wait(60)
        w.save(images[0], tmp_path / "a.png")
        a_saved.set()

    def b_waits(p, i, t, kw):
        if i == 1:
            b_in_loop.set()
            a_saved.wait(60)
        return kw

    t = threading.Thread(target=a)
    t.start()
    try:
        assert a_done.wait(60)
        image = call(pipe, MultiPipelineCallbacks([w, _Plain(b_waits)]), steps=6)
        t.join(60)
        w.save(image, tmp_path / "b.png")
        assert [(e.status, e.totals.steps_run if e.totals else None) for e in events.ends] == [("done", 3), ("done", 6)]
        assert [r.totals.steps_run for r in w.records] == [3, 6]
    finally:
        a_saved.set()
        w.remove()


def test_remove_from_another_thread_mid_call_writes_the_runs_end(pipe, tmp_path):
    """Item 10/11, the probe's case: watch.remove() from another thread while a call runs stops the call at its
    next step and writes its end (stopped, with totals) before the page goes; the call then finishes."""
    w = preview_watch(pipe, decoder="none", mode="sync")
    serve(w, port=0, data_dir=tmp_path)
    in_loop = threading.Event()

    def slow(p, i, t, kw):
        in_loop.set()
        time.sleep(0.02)
        return kw

    t = threading.Thread(target=lambda: call(pipe, MultiPipelineCallbacks([w, _Plain(slow)]), steps=300))
    t.start()
    assert in_loop.wait(60)
    w.remove()
    t.join(120)
    (run,) = [d for d in tmp_path.iterdir() if (d / "meta.json").is_file()]
    meta = json.loads((run / "meta.json").read_text())
    assert meta["status"] == "stopped" and 0 < meta["totals"]["steps_run"] < 300


def test_closing_the_page_from_inside_the_call_ends_the_run_stopped(pipe, tmp_path):
    """Items 10, the probe's case: the script's own callback closes the page at step 3 of 8. The call is ended
    there, stopped with the rows it has, and written before the page goes; the pipeline stops early."""
    w = preview_watch(pipe, decoder="none", mode="sync")
    page = serve(w, port=0, data_dir=tmp_path)

    def close_at_3(p, i, t, kw):
        if i == 2:
            page.close()
        return kw

    try:
        call(pipe, MultiPipelineCallbacks([w, _Plain(close_at_3)]), steps=8)
        (run,) = [d for d in tmp_path.iterdir() if (d / "meta.json").is_file()]
        meta = json.loads((run / "meta.json").read_text())
        assert meta["status"] == "stopped" and meta["totals"]["steps_run"] == 3
        assert w.events is None and w.state == "idle"
    finally:
        w.remove()


def test_a_scripts_page_refuses_taesd_naming_the_watchs_keyword(pipe, tmp_path):
    """A script's page refuses a `set` to taesd its watch has no weights for, naming what the script passes
    (taesd=PATH), not the CLI's flag."""
    import asyncio

    import websockets

    w = preview_watch(pipe, decoder="none")
    page = serve(w, port=0, data_dir=tmp_path)

    async def set_taesd() -> str:
        async with websockets.connect(page.url.replace("http", "ws") + "ws") as ws:
            await ws.recv()
            await ws.send(json.dumps({"type": "set", "decoder": "taesd"}))
            while True:
                msg = json.loads(await asyncio.wait_for(ws.recv(), 30))
                if msg["type"] == "error":
                    return msg["message"]

    try:
        message = asyncio.run(set_taesd())
        assert "taesd=PATH" in message and "--taesd" not in message
    finally:
        w.remove()


def test_a_stop_ends_the_denoising_where_no_final_decode_follows(pipe):
    """A stop with output_type="latent" (no final decode, no hook after the loop): the call leaves its
    denoising at the stop, so a page's close() never waits for it, and its record says stopped."""
    w = preview_watch(pipe, decoder="none", mode="sync")

    def stop_at_2(p, i, t, kw):
        if i == 1:
            w.request_stop()
        return kw

    try:
        call(pipe, MultiPipelineCallbacks([_Plain(stop_at_2), w]), steps=6, output_type="latent")
        assert w.state == "denoised"
        rec = w.record
        assert rec is not None and rec.totals.status == "stopped" and rec.totals.steps_run == 2  # stopped at step 2
    finally:
        w.remove()

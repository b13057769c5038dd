"""CUDA accounting on the CPU: a fake device runs the model's work behind the host with a known lag.

Wall time is the host clock; stages are device time (fake events) or host time. The checks are against what
the fake device was given, not against other_ms's own definition: every millisecond of queued device work
is counted, the lag is counted once (other_ms >= 0, sync_ms ~ 0), other_ms is no more than the host's real
time, and the phases mean the same thing with and without previews, in both modes.

The core checks run twice: with the fake device as a whole backend, and as the Api under
stopwatch.Accelerator, the one generic path CUDA, MPS and XPU take (`path`).
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Any, Iterator

import pytest
import torch

from fake_device import FakeApi, FakeClock, FakeDevice, FakeJpeg
from previewlab.preview.call.callback import Watch
from previewlab.preview.source.modular import step_loops
from previewlab.preview.call.engine import RunContext, generate
from previewlab.preview.record.kept_events import Gathered
from previewlab.preview.names import DecoderName, Mode
from previewlab.preview.settings import PreviewSettings, RunSettings
from previewlab.preview.timing.stopwatch import Accelerator, Device, Stopwatch

UNET_MS, TAESD_MS, VAE_MS, TEXT_MS, COPY_MS = 500.0, 150.0, 100.0, 30.0, 2.0
STEPS = 5
PATHS = ["fake", "generic"]  # the fake device as a whole backend, or as the Api under the generic one


def backend(dev: FakeDevice, path: str = "fake") -> Device:
    return dev if path == "fake" else Accelerator(FakeApi(dev))


@contextmanager
def fake_gpu(model: Any, unet_ms: float = UNET_MS, taesd_ms: float = TAESD_MS, taesd_host_ms: float = 0.0,
             host_stands: bool = False) -> Iterator[tuple[FakeClock, FakeDevice]]:
    clock = FakeClock(host_stands)
    dev = FakeDevice(clock, copy_ms=COPY_MS)
    pipe = model.pipe
    hooks = [dev.on(pipe.unet, unet_ms), dev.on(pipe.vae.decoder, VAE_MS), dev.on(pipe.text_encoder, TEXT_MS),
             dev.on(model.taesd.decoder, taesd_ms, host_ms=taesd_host_ms)]
    try:
        yield clock, dev
    finally:
        for h in hooks:
            h.remove()


def measured(model: Any, mode: Mode, decoder: DecoderName, path: str = "fake",
             host_stands: bool = False) -> tuple[Any, FakeDevice, float]:
    with fake_gpu(model, host_stands=host_stands) as (clock, dev):
        s = RunSettings(steps=STEPS, width=64, height=64, preview=PreviewSettings(decoder=decoder, mode=mode))
        sw = Stopwatch(clock=clock, backend=backend(dev, path))
        t0 = time.perf_counter()
        run = generate(RunContext(model, s, "fake", clock=clock, stopwatch=sw))
        real_ms = (time.perf_counter() - t0) * 1e3
    return run, dev, real_ms


@pytest.mark.slow
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("mode", ["sync", "overlap"])
@pytest.mark.parametrize("decoder", ["none", "taesd"])
def test_every_device_millisecond_is_counted_once(tiny, mode, decoder, path):
    run, dev, real_ms = measured(tiny, mode, decoder, path)
    r = run.record
    wall_ms = r.totals.wall_s * 1e3
    # the host waited for all the device work: wall covers the queued work on the main stream
    main_work = TEXT_MS + STEPS * UNET_MS + VAE_MS + (STEPS * TAESD_MS if decoder != "none" and mode == "sync" else 0)
    assert wall_ms >= main_work
    # no stage counts the lag twice: what is left over is only the host's own glue, which took real time
    assert 0 <= r.totals.other_ms <= real_ms, (r.totals.other_ms, real_ms)
    assert r.totals.denoise_ms >= STEPS * UNET_MS
    # the sync waits only on work already done: on a clock where the host's own work takes no time, exactly 0 on
    # any machine (on the real clock a loaded host's stall inside the wait would show up here)
    still, _, _ = measured(tiny, mode, decoder, path, host_stands=True)
    assert all(x.sync_ms == pytest.approx(0.0, abs=1e-6) for x in still.rows), [x.sync_ms for x in still.rows]
    # the final decode is the VAE's own device time plus the host's real work, never the queued steps
    assert VAE_MS - 0.01 <= r.totals.final_decode_ms <= VAE_MS + real_ms
    assert r.totals.text_encode_ms >= TEXT_MS
    # the preview's stages are the fake device's own figures: read where the host stands, so that a loaded host's
    # stall between a stage's events cannot show up in them
    if decoder == "taesd":
        made = [x for x in still.rows if x.preview]
        assert len(made) == STEPS
        assert all(abs(x.decode_ms - TAESD_MS) < 0.5 for x in made), [x.decode_ms for x in made]
    if mode == "overlap" and decoder == "taesd":
        # the last preview (TAESD + copy, on the side stream) holds the main stream after the last step
        assert abs(still.record.totals.drain_ms - (TAESD_MS + COPY_MS)) < 1.0, still.record.totals.drain_ms
        assert all(abs(x.transfer_ms - COPY_MS) < 0.5 for x in still.rows if x.preview)


@pytest.mark.slow
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("mode, decoder", [("sync", "none"), ("sync", "taesd"), ("overlap", "none")])
def test_nothing_in_flight_after_the_last_step_drains_nothing(tiny, mode, decoder, path):
    """No preview holds the main stream after the last step: the drain holds no device work. On a clock where
    the host's own work takes no time, that is exactly 0 on any machine (it read 1.97 ms on a loaded one)."""
    run, _, _ = measured(tiny, mode, decoder, path, host_stands=True)
    assert run.record.totals.drain_ms == pytest.approx(0.0, abs=1e-6)


@pytest.mark.slow
def test_overlap_costs_the_drain_and_sync_costs_the_decodes(tiny):
    measured(tiny, "sync", "taesd")  # warm-up: a first run's host work is slow, and the device waits for it
    base, _, real_base = measured(tiny, "sync", "none")
    sync, _, real_sync = measured(tiny, "sync", "taesd")
    over, _, real_over = measured(tiny, "overlap", "taesd")
    extra_sync = (sync.record.totals.wall_s - base.record.totals.wall_s) * 1e3
    extra_over = (over.record.totals.wall_s - base.record.totals.wall_s) * 1e3
    # sync: every decode lands on the main stream; overlap: only the last one's tail shows up. The host's real
    # work (which the device may wait for) bounds what the fake device's figures can be off by
    assert extra_sync >= STEPS * TAESD_MS - real_base
    assert extra_over < TAESD_MS + COPY_MS + real_over


@pytest.fixture(scope="module")
def modular_xl(tiny_xl: Any) -> Any:
    """A Modular SDXL pipeline (StableDiffusionXLAutoBlocks) sharing tiny-xl's modules: the fake device's hooks
    on them see its work."""
    from diffusers.modular_pipelines import StableDiffusionXLAutoBlocks

    blocks: Any = StableDiffusionXLAutoBlocks()
    pipe = blocks.init_pipeline()
    pipe.update_components(**{k: v for k, v in tiny_xl.pipe.components.items() if v is not None})
    for loop in step_loops(pipe):
        loop.set_progress_bar_config(disable=True)
    return pipe


@pytest.mark.slow
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("source", ["callback", "scheduler", "modular"])
@pytest.mark.parametrize("mode", ["sync", "overlap"])
def test_every_step_source_ends_at_the_device_boundary(tiny, tiny_xl, modular_xl, mode, source, path):
    """Whichever source hands the meter its steps (steps.py), each step's denoise is its own UNet forward, the
    call's wall time covers the device's work, and nothing is counted twice."""
    model, pipe = (tiny_xl, modular_xl) if source == "modular" else (tiny, tiny.pipe)
    forwards: list[int] = []
    counter = model.pipe.unet.register_forward_hook(lambda *a: forwards.append(1))
    with fake_gpu(model, host_stands=True) as (clock, dev):  # only the device's time counts: exact on any machine
        w = Watch(pipe, decoder="latent2rgb", mode=mode, clock=clock, device=backend(dev, path), source=source)
        try:
            t0 = time.perf_counter()
            kw: dict[str, Any] = dict(prompt="a cat", num_inference_steps=STEPS, width=64, height=64)
            if source == "callback":
                kw.update(callback_on_step_end=w, callback_on_step_end_tensor_inputs=w.tensor_inputs)
            if source == "modular":
                pipe(**kw, output="images")
            else:
                pipe(**kw, output_type="np")
            rec = w.record
            real_ms = (time.perf_counter() - t0) * 1e3
        finally:
            w.remove()
            counter.remove()
    assert rec is not None and rec.totals.status == "done" and w.source == source
    # the pipeline's own final copy is not seen by the fake device, so only a device boundary covers its work
    assert rec.totals.wall_s * 1e3 >= TEXT_MS + STEPS * UNET_MS + VAE_MS
    assert 0 <= rec.totals.other_ms <= real_ms
    assert VAE_MS - 0.01 <= rec.totals.final_decode_ms <= VAE_MS + real_ms
    assert [x.step for x in w.rows] == list(range(1, STEPS + 1))
    assert all(x.sync_ms == 0 for x in w.rows), [x.sync_ms for x in w.rows]
    # each step's denoise is its UNet forwards on the device (one with CFG batched, two with Modular's guider
    # running each half alone), wherever the step ends
    step_ms = len(forwards) // STEPS * UNET_MS
    assert all(step_ms - 0.01 <= x.denoise_ms <= step_ms + real_ms for x in w.rows[1:]), [x.denoise_ms for x in w.rows]


@pytest.mark.parametrize("path", PATHS)
def test_waits_report_only_what_events_do_not_time(path):
    clock = FakeClock()
    dev = FakeDevice(clock)
    sw = Stopwatch(clock=clock, backend=backend(dev, path))
    sw.anchor(sw.mark(), clock())
    # the fake clock runs on the real one: a loaded machine may pause this thread anywhere, so each bound below
    # allows the real time that passed (about 0.05 ms on a quiet machine), never more
    t0 = time.perf_counter()
    dev.work(200.0)               # queued, not done: the host is 200 ms ahead
    ev = sw.mark()
    t1 = time.perf_counter()
    waited = sw.wait(ev)
    spent = (time.perf_counter() - t1) * 1e3  # real ms inside wait: the fake device's 200 ms take none
    assert 200.0 - (t1 - t0) * 1e3 - 0.5 <= waited.wait_ms <= 200.0 + spent + 0.5
    assert waited.uncounted_ms <= spent + 0.5  # all of the rest was device work the events already time
    assert sw.host_time(ev) == pytest.approx(clock(), abs=1e-3 + (time.perf_counter() - t1))  # the clocks met at ev
    t2 = time.perf_counter()
    again = sw.wait(ev)
    assert again.wait_ms <= (time.perf_counter() - t2) * 1e3 + 0.5 and again.uncounted_ms == again.wait_ms


def test_nvjpeg_is_refused_off_cuda_with_a_clear_error():
    from previewlab.preview.decoding.encoders import EncoderError, get

    with pytest.raises(EncoderError, match="nvjpeg runs on a CUDA device .* use turbojpeg"):
        get("nvjpeg", torch.device("cpu"))


@pytest.mark.parametrize("mode", ["sync", "overlap"])
def test_on_device_encoder_sends_only_the_bytes(tiny, mode):
    """The frame path of an encoder that runs on the device (nvjpeg on a GPU): the pixels stay on the device,
    the encoded bytes are copied. nvjpeg needs CUDA, so a device-side stand-in encodes with turbojpeg here
    and returns its bytes as a tensor, as torchvision.io.encode_jpeg does."""
    from previewlab.preview.decoding.encoders import Encoder, get
    from previewlab.preview.decoding.previewer import Previewer

    jpeg = get("turbojpeg")
    seen: list[torch.Tensor] = []

    def on_device(chw: torch.Tensor, quality: int) -> torch.Tensor:
        seen.append(chw)
        return torch.frombuffer(bytearray(jpeg.encode(chw.permute(1, 2, 0).numpy(), quality)), dtype=torch.uint8)

    prev = Previewer(tiny)
    prev._enc["turbojpeg"] = Encoder("on-device", "jpeg", on_device, on_device=True)
    told = Gathered()
    with fake_gpu(tiny) as (clock, dev):
        s = RunSettings(steps=3, width=64, height=64, preview=PreviewSettings(decoder="taesd", mode=mode))
        run = generate(RunContext(tiny, s, "t", clock=clock, stopwatch=Stopwatch(clock=clock, backend=dev),
                                  previewer=prev), told)
    frames = told.frames
    assert len(frames) == 3 and all(f.data[:2] == b"\xff\xd8" for f in frames)
    # never a host array; (3, H, W) and contiguous, as torchvision's encode_jpeg takes it
    assert all(isinstance(t, torch.Tensor) and t.shape == (3, 64, 64) and t.is_contiguous() for t in seen)
    assert [r.bytes for r in run.rows] == [len(f.data) for f in frames]
    assert all(r.encoder == "on-device" and r.transfer_ms >= 0 for r in run.rows)


# -- what CUDA does that the fake device now does too ---------------------------------------------------------

def test_elapsed_time_raises_before_the_device_has_passed_both_events():
    clock = FakeClock()
    dev = FakeDevice(clock)
    a = dev.event()
    dev.work(100.0)
    b = dev.event()
    with pytest.raises(RuntimeError, match="not ready"):
        a.elapsed_time(b)
    b.synchronize()
    assert a.elapsed_time(b) == pytest.approx(100.0, abs=1.0)


def nvjpeg_frames(tiny: Any, dev: FakeDevice, clock: FakeClock, jpeg: FakeJpeg, mode: Mode,
                  monkeypatch: Any) -> tuple[Any, list[Any]]:
    """One run whose previews go through preview.encoders' own nvjpeg encoder, with FakeJpeg as torchvision's
    encode_jpeg (built, as torchvision builds it, on its first call)."""
    import sys
    import types

    from previewlab.preview.decoding import encoders
    from previewlab.preview.decoding.previewer import Previewer

    tv, io = types.ModuleType("torchvision"), types.ModuleType("torchvision.io")
    io.encode_jpeg = jpeg  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torchvision", tv)
    monkeypatch.setitem(sys.modules, "torchvision.io", io)
    prev = Previewer(tiny)
    prev._enc["nvjpeg"] = encoders.get("nvjpeg", torch.device("cuda"))
    told = Gathered()
    s = RunSettings(steps=STEPS, width=64, height=64, preview=PreviewSettings(decoder="taesd", mode=mode,
                                                                               encoder="nvjpeg"))
    run = generate(RunContext(tiny, s, mode, clock=clock, stopwatch=Stopwatch(clock=clock, backend=dev),
                              previewer=prev), told)
    return run, list(told.frames)


@pytest.mark.slow
def test_nvjpeg_is_ordered_and_waits_for_nothing_else_in_every_run(tiny, monkeypatch):
    """torchvision's encoder syncs only the stream it was built under. Built under the main stream (a sync run
    first), each encode would wait for the queued steps; under one run's side stream, for the next decode, and
    in later runs the frame conversion and the copy of the bytes would race it."""
    ENCODE_MS = 5.0
    with fake_gpu(tiny, host_stands=True) as (clock, dev):  # only the device's time counts: exact on any machine
        jpeg = FakeJpeg(dev, ENCODE_MS)
        with dev.ops(contiguous=20.0, clone=1.0, cpu=1.0):
            runs = [nvjpeg_frames(tiny, dev, clock, jpeg, mode, monkeypatch)
                    for mode in ("sync", "overlap", "overlap")]
    assert dev.races == []
    for run, frames in runs:
        assert len(frames) == STEPS and all(f.data[:2] == b"\xff\xd8" for f in frames)
        # the host waits for nvJPEG's own work (and its input, already waited for), never for a UNet step
        assert all(r.encode_ms < UNET_MS / 2 for r in run.rows), [r.encode_ms for r in run.rows]
        assert all((r.preview_width, r.preview_height) == (64, 64) for r in run.rows)


@pytest.mark.slow
@pytest.mark.parametrize("path", PATHS)
def test_overlap_runs_share_one_side_stream(tiny, path):
    """A new stream starts with an empty allocator pool: every run would pay cudaMalloc for the decode's
    working set again, and reserve another pool."""
    MALLOC_MS = 40.0
    with fake_gpu(tiny, host_stands=True) as (clock, dev):  # only the device's time counts: exact on any machine
        dev.malloc_ms = MALLOC_MS
        s = RunSettings(steps=2, width=64, height=64, preview=PreviewSettings(decoder="taesd", mode="overlap"))
        back = backend(dev, path)  # one per process and device, as Accelerator.of keeps it
        runs = [generate(RunContext(tiny, s, f"r{i}", clock=clock, stopwatch=Stopwatch(clock=clock, backend=back)))
                for i in range(3)]
    assert dev.pools == 2  # the main stream's and the side stream's, however many runs
    assert [abs(r.rows[0].decode_ms - TAESD_MS) < 0.5 for r in runs[1:]] == [True, True], \
        [r.rows[0].decode_ms for r in runs]


def test_a_host_bound_callback_is_on_the_path(tiny):
    """On CUDA in overlap mode, the callback's clone and its launch of the decode lie between the rows'
    stages. When the host is the bottleneck the device idles for them: that is time on the denoising path."""
    LAUNCH_MS = 60.0  # the host's time to launch one TAESD decode; the device's share is tiny
    DEVICE_MS = 0.5  # a UNet step's and a TAESD decode's device time
    # the host stands but for its launches (host_ms moves its clock): exact on any machine, however loaded
    with fake_gpu(tiny, unet_ms=DEVICE_MS, taesd_ms=DEVICE_MS, taesd_host_ms=LAUNCH_MS,
                  host_stands=True) as (clock, dev):
        s = RunSettings(steps=STEPS, width=64, height=64, preview=PreviewSettings(decoder="taesd", mode="overlap"))
        run = generate(RunContext(tiny, s, "host", clock=clock, stopwatch=Stopwatch(clock=clock, backend=dev)))
    made = [r for r in run.rows if r.preview]
    assert len(made) == STEPS
    # the first preview also starts the encode thread, which starts on its own fake clock: run first in a process
    # (the test alone) its row showed 42-54 ms at 7bd2388 too, so it is left out; every later launch is on the path,
    # less the device's own work that overlapped it (at most a step's and a decode's)
    assert all(r.on_path_ms >= LAUNCH_MS - 2 * DEVICE_MS - 1e-6 for r in made[1:]), [r.on_path_ms for r in made]
    assert run.record.totals.other_ms < LAUNCH_MS  # never left over as unexplained time


@pytest.mark.slow
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("mode", ["sync", "overlap"])
def test_callback_clocks_ignore_the_users_queued_work(tiny, mode, path):
    """The user's own GPU work may still be queued when the pipeline call starts: the device reaches the
    call's first mark later than the host. The first wait must not count that work as a sync."""
    USER_MS = 300.0
    with fake_gpu(tiny, host_stands=True) as (clock, dev):  # the host's own time stands: only the device's counts
        w = Watch(tiny.pipe, decoder="latent2rgb", mode=mode, clock=clock, device=backend(dev, path))
        try:
            dev.work(USER_MS)  # queued before the call, outside it
            tiny.pipe(prompt="a cat", num_inference_steps=STEPS, width=64, height=64, callback_on_step_end=w,
                      callback_on_step_end_tensor_inputs=w.tensor_inputs, output_type="latent")
            rec, rows = w.record, w.rows
        finally:
            w.remove()
    assert rec is not None and rec.totals.status == "done"
    assert all(x.sync_ms == 0 for x in rows), [x.sync_ms for x in rows]  # none of the user's 300 ms

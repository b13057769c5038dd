"""CUDA accounting on the CPU: a fake device runs the model's work behind the host with a known lag.

Wall time is the host clock; stages are device time (fake events) or host time. The checks are against what
the fake device was given, not against other_ms's own definition: every millisecond of queued device work
is counted, the lag is counted once (other_ms >= 0, sync_ms ~ 0), other_ms is no more than the host's real
time, and the phases mean the same thing with and without previews, in both modes.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Any, Iterator

import pytest
import torch

from fake_device import FakeClock, FakeDevice
from preview.callback import Watch
from preview.engine import generate
from preview.decoders import DecoderName
from preview.settings import Mode, PreviewSettings, RunSettings
from preview.stopwatch import Stopwatch

UNET_MS, TAESD_MS, VAE_MS, TEXT_MS, COPY_MS = 500.0, 150.0, 100.0, 30.0, 2.0
STEPS = 5


@contextmanager
def fake_gpu(model: Any) -> Iterator[tuple[FakeClock, FakeDevice]]:
    clock = FakeClock()
    dev = FakeDevice(clock, copy_ms=COPY_MS)
    pipe = model.pipe
    hooks = [dev.on(pipe.unet, UNET_MS), dev.on(pipe.vae.decoder, VAE_MS), dev.on(pipe.text_encoder, TEXT_MS),
             dev.on(model.taesd.decoder, TAESD_MS)]
    try:
        yield clock, dev
    finally:
        for h in hooks:
            h.remove()


def measured(model: Any, mode: Mode, decoder: DecoderName) -> tuple[Any, FakeDevice, float]:
    with fake_gpu(model) as (clock, dev):
        s = RunSettings(steps=STEPS, width=64, height=64, preview=PreviewSettings(decoder=decoder, mode=mode))
        t0 = time.perf_counter()
        run = generate(model, s, run_id="fake", clock=clock, stopwatch=Stopwatch(clock=clock, backend=dev))
        real_ms = (time.perf_counter() - t0) * 1e3
    return run, dev, real_ms


@pytest.mark.parametrize("mode", ["sync", "overlap"])
@pytest.mark.parametrize("decoder", ["none", "taesd"])
def test_every_device_millisecond_is_counted_once(tiny, mode, decoder):
    run, dev, real_ms = measured(tiny, mode, decoder)
    r = run.record
    wall_ms = r.wall_s * 1e3
    # the host waited for all the device work: wall covers the queued work on the main stream
    main_work = TEXT_MS + STEPS * UNET_MS + VAE_MS + (STEPS * TAESD_MS if decoder != "none" and mode == "sync" else 0)
    assert wall_ms >= main_work
    # no stage counts the lag twice: what is left over is only the host's own glue, which took real time
    assert 0 <= r.other_ms <= real_ms, (r.other_ms, real_ms)
    assert r.denoise_ms >= STEPS * UNET_MS
    assert all(x.sync_ms < 0.5 for x in run.rows), [x.sync_ms for x in run.rows]
    # the final decode is the VAE's own device time plus the host's real work, never the queued steps
    assert VAE_MS - 0.01 <= r.final_decode_ms <= VAE_MS + real_ms
    assert r.text_encode_ms >= TEXT_MS
    if decoder == "taesd":
        made = [x for x in run.rows if x.preview]
        assert len(made) == STEPS
        assert all(abs(x.decode_ms - TAESD_MS) < 0.5 for x in made), [x.decode_ms for x in made]
    if mode == "overlap" and decoder == "taesd":
        # the last preview (TAESD + copy, on the side stream) holds the main stream after the last step
        assert abs(r.drain_ms - (TAESD_MS + COPY_MS)) < 1.0, r.drain_ms
        assert all(abs(x.transfer_ms - COPY_MS) < 0.5 for x in run.rows if x.preview)
    else:
        assert r.drain_ms < 1.0, r.drain_ms


def test_overlap_costs_the_drain_and_sync_costs_the_decodes(tiny):
    measured(tiny, "sync", "taesd")  # warm-up: a first run's host work is slow, and the device waits for it
    base, _, real_base = measured(tiny, "sync", "none")
    sync, _, real_sync = measured(tiny, "sync", "taesd")
    over, _, real_over = measured(tiny, "overlap", "taesd")
    extra_sync = (sync.record.wall_s - base.record.wall_s) * 1e3
    extra_over = (over.record.wall_s - base.record.wall_s) * 1e3
    # sync: every decode lands on the main stream; overlap: only the last one's tail shows up. The host's real
    # work (which the device may wait for) bounds what the fake device's figures can be off by
    assert extra_sync >= STEPS * TAESD_MS - real_base
    assert extra_over < TAESD_MS + COPY_MS + real_over


@pytest.mark.parametrize("mode", ["sync", "overlap"])
def test_callback_ends_at_the_device_boundary(tiny, mode):
    with fake_gpu(tiny) as (clock, dev):
        w = Watch(tiny.pipe, decoder="latent2rgb", mode=mode, clock=clock, device=dev)
        try:
            t0 = time.perf_counter()
            tiny.pipe(prompt="a cat", num_inference_steps=STEPS, width=64, height=64, callback_on_step_end=w,
                      callback_on_step_end_tensor_inputs=w.tensor_inputs, output_type="np")
            rec = w.record
            real_ms = (time.perf_counter() - t0) * 1e3
        finally:
            w.remove()
    assert rec is not None and rec.status == "done"
    # the pipeline's own final copy is not seen by the fake device, so only a device boundary covers its work
    assert rec.wall_s * 1e3 >= TEXT_MS + STEPS * UNET_MS + VAE_MS
    assert 0 <= rec.other_ms <= real_ms
    assert VAE_MS - 0.01 <= rec.final_decode_ms <= VAE_MS + real_ms
    assert all(x.sync_ms < 0.5 for x in w.rows)


def test_waits_report_only_what_events_do_not_time():
    clock = FakeClock()
    dev = FakeDevice(clock)
    sw = Stopwatch(clock=clock, backend=dev)
    sw.anchor(sw.mark(), clock())
    dev.work(200.0)               # queued, not done: the host is 200 ms ahead
    ev = sw.mark()
    waited = sw.wait(ev)
    assert waited.wait_ms == pytest.approx(200.0, abs=1.0)
    assert waited.uncounted_ms < 0.5  # all of it was device work the events already time
    assert sw.host_time(ev) == pytest.approx(clock(), abs=1e-3)  # the clocks met again at ev
    again = sw.wait(ev)
    assert again.wait_ms < 0.5 and again.uncounted_ms == again.wait_ms


def test_nvjpeg_is_refused_off_cuda_with_a_clear_error():
    from preview.encoders import EncoderError, get

    with pytest.raises(EncoderError, match="nvjpeg runs on a CUDA device .* use turbojpeg"):
        get("nvjpeg", torch.device("cpu"))


@pytest.mark.parametrize("mode", ["sync", "overlap"])
def test_on_device_encoder_sends_only_the_bytes(tiny, mode):
    """The frame path of an encoder that runs on the device (nvjpeg on a GPU): the pixels stay on the device,
    the encoded bytes are copied. nvjpeg needs CUDA, so a device-side stand-in encodes with turbojpeg here
    and returns its bytes as a tensor, as torchvision.io.encode_jpeg does."""
    from preview.encoders import Encoder, get
    from preview.engine import Frame, Previewer

    jpeg = get("turbojpeg")
    seen: list[torch.Tensor] = []

    def on_device(rgb: torch.Tensor, quality: int) -> torch.Tensor:
        seen.append(rgb)
        return torch.frombuffer(bytearray(jpeg.encode(rgb.numpy(), quality)), dtype=torch.uint8)

    prev = Previewer(tiny)
    prev._enc["turbojpeg"] = Encoder("on-device", "jpeg", on_device, on_device=True)
    frames: list[Frame] = []
    with fake_gpu(tiny) as (clock, dev):
        s = RunSettings(steps=3, width=64, height=64, preview=PreviewSettings(decoder="taesd", mode=mode))
        run = generate(tiny, s, run_id="t", clock=clock, stopwatch=Stopwatch(clock=clock, backend=dev),
                       previewer=prev, on_frame=frames.append)
    assert len(frames) == 3 and all(f.data[:2] == b"\xff\xd8" for f in frames)
    assert all(isinstance(t, torch.Tensor) and t.shape == (64, 64, 3) for t in seen)  # never a host array
    assert [r.bytes for r in run.rows] == [len(f.data) for f in frames]
    assert all(r.encoder == "on-device" and r.transfer_ms >= 0 for r in run.rows)

"""The one device-generic path (stopwatch.Accelerator) that CUDA, MPS and XPU take, driven by the fake device's
Api: stages in device time with no wait added, the fallback to waits where events cannot time, and --device.

No MPS or XPU device is here: these run the generic path over the fake device, as tests/test_accounting.py
runs its core checks through it.
"""
from __future__ import annotations

import time
from typing import Any

import pytest
import torch

from fake_device import FakeApi, FakeClock, FakeDevice
from previewlab.preview.names import DecoderName, Mode
from previewlab.preview.call.engine import RunContext, generate
from previewlab.preview.settings import PreviewSettings, RunSettings
from previewlab.preview.timing.stopwatch import Accelerator, Device, Stopwatch
from test_accounting import STEPS, TAESD_MS, UNET_MS, VAE_MS, fake_gpu


def run_on(model: Any, back: Any, dev: FakeDevice, clock: FakeClock, mode: Mode,
           decoder: DecoderName = "taesd") -> tuple[Any, int, float]:
    """One measured run through `back`; the fake device's waits during it, and the host's real ms."""
    s = RunSettings(steps=STEPS, width=64, height=64, preview=PreviewSettings(decoder=decoder, mode=mode))
    sw = Stopwatch(clock=clock, backend=back)
    before = dev.waits
    t0 = time.perf_counter()
    run = generate(RunContext(model, s, mode, clock=clock, stopwatch=sw))
    return run, dev.waits - before, (time.perf_counter() - t0) * 1e3


def test_the_backend_finds_out_whether_events_can_time():
    clock = FakeClock()
    assert Accelerator(FakeApi(FakeDevice(clock))).timing == "events"
    assert Accelerator(FakeApi(FakeDevice(clock), timing=False)).timing == "waits"


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["sync", "overlap"])
def test_generic_stages_are_device_times_with_no_wait_added(tiny, mode):
    """The generic backend's rows hold the fake device's own times, and it waits exactly where the fake device
    as a whole backend waits (the host copies need those waits anyway): not once more."""
    with fake_gpu(tiny) as (clock, dev):
        run_on(tiny, dev, dev, clock, mode)  # warm-up: a first run's host work is slow
        own, own_waits, _ = run_on(tiny, dev, dev, clock, mode)
        generic = Accelerator(FakeApi(dev))  # made once per device; finding out whether events time waits once
        run, waits, real_ms = run_on(tiny, generic, dev, clock, mode)
    assert run.record.totals.timing == own.record.totals.timing == "events"
    assert waits == own_waits, (waits, own_waits)
    made = [r for r in run.rows if r.preview]
    assert len(made) == STEPS
    # device time, never the host's launch of it; a loaded machine can stall the host past the fake device's lag
    # (then the device idles for it, on the fake path alike), so the host's real time bounds the excess
    assert all(TAESD_MS - 0.5 <= r.decode_ms <= TAESD_MS + real_ms for r in made), [r.decode_ms for r in made]
    assert all(UNET_MS - 0.5 <= r.denoise_ms <= UNET_MS + real_ms for r in run.rows), [r.denoise_ms for r in run.rows]
    # the wait after the device passed the event: ~0, plus what a host stalled by a loaded machine adds (the
    # waits themselves are counted exactly above)
    assert all(r.sync_ms < 0.5 + real_ms for r in run.rows), [r.sync_ms for r in run.rows]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["sync", "overlap"])
def test_without_timing_events_the_edges_wait_and_say_so(tiny, mode):
    """A device whose events cannot time: every mark waits for the device, so the host clock between marks is
    the device's work (never the host's launch of work still queued), and the run says `waits`."""
    with fake_gpu(tiny) as (clock, dev):
        run_on(tiny, dev, dev, clock, mode)  # warm-up
        _, own_waits, _ = run_on(tiny, dev, dev, clock, mode)
        run, waits, real_ms = run_on(tiny, Accelerator(FakeApi(dev, timing=False)), dev, clock, mode)
    r = run.record
    assert r.totals.timing == "waits"
    assert waits > own_waits  # the waits are added, and labelled
    made = [x for x in run.rows if x.preview]
    assert len(made) == STEPS
    assert all(TAESD_MS - 0.5 <= x.decode_ms <= TAESD_MS + real_ms for x in made), [x.decode_ms for x in made]
    assert all(UNET_MS - 0.5 <= x.denoise_ms <= UNET_MS + real_ms for x in run.rows), [x.denoise_ms for x in run.rows]
    assert VAE_MS - 0.5 <= r.totals.final_decode_ms <= VAE_MS + real_ms
    assert 0 <= r.totals.other_ms <= real_ms, (r.totals.other_ms, real_ms)


def test_a_cpu_run_is_timed_by_the_host_clock(tiny):
    s = RunSettings(steps=2, width=64, height=64, preview=PreviewSettings(decoder="latent2rgb"))
    assert generate(RunContext(tiny, s, "cpu")).record.totals.timing == "host"
    back: Device | None = None
    assert Stopwatch(torch.device("cpu"), backend=back).timing == "host"


@pytest.mark.parametrize("name", ["mps", "xpu"])
@pytest.mark.parametrize("command", ["bench", "serve"])
def test_device_a_machine_lacks_is_one_line_naming_what_it_has(command, name, capsys, tmp_path):
    from previewlab.bench.cli import main as bench_main
    from previewlab.preview.models import allowed_devices
    from previewlab.server.cli import parser as serve_parser

    if name in allowed_devices():
        pytest.skip(f"torch sees {name} here")
    with pytest.raises(SystemExit) as e:  # the bench judges it once it knows the sweep runs here (not --ray)
        bench_main(["--device", name, "--out", str(tmp_path)]) if command == "bench" else \
            serve_parser().parse_args(["--device", name])
    err = capsys.readouterr().err
    assert e.value.code == 2
    assert err == (f"previewlab {command}: argument --device: {name!r}: torch sees no {name.upper()} device here; "
                   f"allowed on this machine: {', '.join(allowed_devices())}\n")

"""What previews cost in memory and how busy a run keeps the device (preview/timing/memory.py, preview/timing/busy.py).

On this CPU a run reads the process's resident memory, for real. With the fake device, an allocator that the
taesd decoder's forward raises by a known amount stands in for a device's counters: each preview's row must
hold exactly that rise, the run's peak must keep it, and reading it must add no wait for the device."""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time

import pytest
import torch

from previewlab.preview.timing import usage as usage_module
from previewlab.preview.timing.busy import CpuTime, Nvml
from previewlab.preview.call.engine import RunContext, generate
from previewlab.preview.timing.memory import MIB, Memory, Rss
from previewlab.preview.names import Mode
from previewlab.preview.settings import PreviewSettings, RunSettings
from previewlab.preview.timing.stopwatch import Stopwatch
from tests.test_accounting import backend, fake_gpu

RISE = 8 * MIB


class TaesdAllocator:
    """A device allocator's counters whose only allocation is the taesd decoder's, RISE bytes while it runs."""
    source = "fake"

    def __init__(self, model, dev) -> None:
        self.level, self.high, self.dev = 100 * MIB, 100 * MIB, dev
        self.waits_seen: list[int] = []
        dec = model.taesd.decoder
        self.hooks = [dec.register_forward_pre_hook(lambda *_: self._alloc(RISE)),
                      dec.register_forward_hook(lambda *_: self._alloc(-RISE))]

    def _alloc(self, n: int) -> None:
        self.level += n
        self.high = max(self.high, self.level)

    def read(self) -> tuple[int, int]:
        self.waits_seen.append(self.dev.waits)
        return self.level, self.high

    def reset(self) -> None:
        self.high = self.level

    def release(self) -> None:
        pass


def fake_run(model, monkeypatch, mode: Mode, reading_of):
    with fake_gpu(model) as (clock, dev):
        monkeypatch.setattr(usage_module, "reading_for", lambda device: reading_of(dev))
        s = RunSettings(steps=6, width=64, height=64, preview=PreviewSettings(decoder="taesd", every=2, mode=mode))
        run = generate(RunContext(model, s, "m", clock=clock, stopwatch=Stopwatch(clock=clock, backend=backend(dev))))
    return run, dev


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["sync", "overlap"])
def test_each_preview_row_holds_its_own_memory_and_reading_it_adds_no_device_wait(tiny, monkeypatch, mode: Mode):
    from previewlab.preview.timing.memory import Nothing

    fake_run(tiny, monkeypatch, mode, lambda dev: Nothing())  # warm-up: first allocations, first compiles
    plain, plain_dev = fake_run(tiny, monkeypatch, mode, lambda dev: Nothing())
    readings: list[TaesdAllocator] = []

    def allocator(dev):
        readings.append(TaesdAllocator(tiny, dev))
        return readings[-1]

    try:
        run, dev = fake_run(tiny, monkeypatch, mode, allocator)
    finally:
        for h in readings[0].hooks:
            h.remove()
    made = [r for r in run.rows if r.preview]
    assert [r.step for r in made] == [2, 4, 6]
    assert all(r.mem_mb == RISE / MIB for r in made)           # the preview's rise, on its own row
    assert all(r.mem_mb == 0 for r in run.rows if not r.preview)
    assert run.record.totals.peak_mem_mb == (100 * MIB + RISE) / MIB  # the per-preview resets never lose the run's peak
    assert run.record.totals.mem_source == "fake"
    assert dev.waits == plain_dev.waits                         # reading memory waited for nothing


def test_rss_reading_sees_an_allocation_and_its_reset():
    m = Memory(Rss())
    m.start()
    first = m.before()
    x = torch.ones(64 * MIB, dtype=torch.uint8) + 1  # two 64 MiB tensors, touched
    del x
    assert m.after(first) >= 120
    level = m.before()
    assert m.after(level) < 120  # the reset: the next preview starts from its own level
    # the run's peak keeps the first preview's rise, whatever the heap kept back between the two previews
    assert m.peak_mb() * MIB >= first + 120 * MIB


pytestmark_slow = pytest.mark.slow

# Full-VAE previews at two sizes and a run without previews, read in a fresh process: the resident set's rise is
# what the process takes from the system, so a heap that earlier tests left holding freed pages (a long pytest
# worker) hides part of it; a server or a script starts as this process does. One step a run: a preview, then the
# final decode (at 320 px each VAE decode takes about 3 s on a quiet CPU; a second step's preview told nothing new).
_CPU_RUNS = """
import json
from previewlab.preview.call.engine import RunContext, generate
from previewlab.preview.models import load
from previewlab.preview.settings import PreviewSettings, RunSettings
tiny = load("synthetic:tiny", device="cpu")
out = {}
for name, side, decoder in (("warm", 128, "vae"), ("small", 128, "vae"), ("large", 320, "vae"), ("none", 128, "none")):
    s = RunSettings(steps=1, width=side, height=side, preview=PreviewSettings(decoder=decoder, preview_max=side))
    run = generate(RunContext(tiny, s, name))
    t = run.record.totals
    out[name] = dict(previews=[r.mem_mb for r in run.rows if r.preview], all=[r.mem_mb for r in run.rows],
                     peak=t.peak_mem_mb, mem_source=t.mem_source, busy_source=t.busy_source, busy_pct=t.busy_pct)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def cpu_runs():
    done = subprocess.run([sys.executable, "-c", _CPU_RUNS], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytestmark_slow
def test_a_larger_preview_shows_a_larger_peak_on_this_cpu(cpu_runs):
    small = statistics.median(cpu_runs["small"]["previews"])
    large = statistics.median(cpu_runs["large"]["previews"])
    # a 320 px decode holds 6 times the pixels of a 128 px one: its rise must be far larger, not noise
    assert large > 3 * small and large > 20, (small, large)


@pytestmark_slow
def test_every_run_records_its_peak_and_how_busy_it_kept_the_cpu(cpu_runs):
    for run in cpu_runs.values():
        assert run["mem_source"] == "rss" and run["peak"] > 50  # the process holds the model at least
        assert run["busy_source"] == "cpu" and 0 < run["busy_pct"] <= 100.5
    assert all(mb == 0 for mb in cpu_runs["none"]["all"])


def test_cpu_time_tells_work_from_waiting():
    """Work raises the share and waiting does not, whatever else the machine runs: the work is 0.2 s of this
    process's own CPU time (a loaded machine stretches its wall time, and so lowers its share, never to 0), the
    waiting a sleep that uses none."""
    busy = CpuTime(cores=1)
    busy.start()
    stop = time.process_time() + 0.2
    while time.process_time() < stop:  # work on this thread
        pass
    working = busy.stop()
    busy.start()
    time.sleep(0.2)  # nothing to do
    waiting = busy.stop()
    assert working is not None and waiting is not None
    assert 0 <= waiting < working, (working, waiting)  # (other threads may add to either)


class FakeNvml:
    """nvidia-ml-py's calls the sampler makes, with a device that reports 20 % then 80 %."""

    def __init__(self) -> None:
        self.calls = 0

    def nvmlDeviceGetUtilizationRates(self, handle):
        self.calls += 1
        return type("Rates", (), {"gpu": 20 if self.calls <= 2 else 80})()


def test_nvml_is_sampled_from_a_thread_while_the_run_denoises():
    nvml = FakeNvml()
    busy = Nvml(nvml, handle=object(), period_s=0.01)
    busy.start()
    time.sleep(0.2)
    pct = busy.stop()
    assert pct is not None
    calls = nvml.calls
    time.sleep(0.05)
    assert nvml.calls == calls  # stopped: the thread is gone
    assert calls >= 4 and 20 < pct < 80
    assert pct == pytest.approx((2 * 20 + (calls - 2) * 80) / calls)


@pytest.mark.slow
def test_the_preview_memory_bench_reads_each_decoder_whole_and_stopped_at_the_preview(capsys):
    """bench/preview_memory.py's image table (docs/tables.md), at 128 px with 64 px previews instead of 1024/512:
    a row per decoder and where it stops, each with the MiB it raised memory (first and second time) and its ms."""
    from previewlab.bench.preview_memory import image_rows

    rows = image_rows(128, 64)
    assert [(r[1], r[2].split(" ")[0]) for r in rows] == [
        ("taesd", "full"), ("taesd", "preview"), ("vae", "full"), ("vae", "preview"), ("vae", "half_latents")]
    assert all(r[0] == "SDXL 128x128" and float(r[3]) >= 0 and float(r[4]) >= 0 and float(r[5]) > 0 for r in rows)
    # where each stopped: TAESD one upsampling short of 128 px for a 64 px preview, the VAE whole or on half latents
    assert [r[2].split(" ", 1)[1] for r in rows] == ["(whole)", "(1/2)", "(whole)", "(whole)", "(half latents)"]
    assert capsys.readouterr().out.count("\n") == 5  # each row printed as it is measured

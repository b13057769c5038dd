"""A reference for the CSV's stage times: one run under torch.profiler, each stage's CSV total set against what
the profiler puts inside the matching previewlab.<stage> range.

On CUDA, stages the engine times with device events (denoise, decode, resize) are set against the range's span
on the GPU (its device-side annotation), the same interval the events bound: a sum of kernel durations would
leave out the launch gaps between them (it is shown beside, for information). Stages it times on the host
(transfer, encode) are set against the range's CPU time. sync has no row: the CSV's sync_ms is only the part of
a wait that no event times (about 0), while the range holds the whole wait, the rest of the step and the decode
included. On the CPU every stage is host time, set against the range's CPU time.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from previewlab.preview.decoding.previewer import Previewer
from previewlab.preview.call.engine import Run, RunContext, generate
from previewlab.preview.models import Model
from previewlab.preview.record.records import StepRow
from previewlab.preview.settings import RunSettings

ROW_STAGES = ("denoise", "decode", "resize", "transfer", "encode")  # not sync: see the module docstring
DEVICE_TIMED = frozenset({"denoise", "decode", "resize"})  # event-timed on CUDA (see preview/record/records.py)
PREFIX = "previewlab."


@dataclass(frozen=True)
class Span:
    """One previewlab.<stage> range as the profiler saw it; times in microseconds."""
    stage: str
    start_us: float
    cpu_us: float              # the range on the host, launch to close
    kernel_us: float = 0.0     # kernels launched inside it (CUDA), children included
    gpu: bool = False          # a device-side annotation: the range's span on the GPU timeline


@dataclass(frozen=True)
class StageCheck:
    stage: str
    ranges: int                # ranges counted (as many as the CSV rows that hold the stage)
    csv_ms: float
    basis: str                 # "gpu span", "kernels" (no span reported) or "cpu": what the profiler figure is
    profiler_ms: float
    kernel_ms: float | None    # CUDA, event-timed stages: the kernels' own durations, for information

    @property
    def diff_pct(self) -> float | None:
        """Profiler against CSV; None below 0.5 ms, where a percentage only shows timer granularity."""
        return None if self.csv_ms < 0.5 else 100 * (self.profiler_ms / self.csv_ms - 1)


def spans(events: Iterable[Any]) -> list[Span]:
    """previewlab.* ranges out of torch.profiler's FunctionEvents (prof.events())."""
    out = []
    for e in events:
        name = str(e.name)
        if not name.startswith(PREFIX):
            continue
        stage = name[len(PREFIX):]
        on_cpu = str(e.device_type).endswith("CPU")
        dur = float(e.time_range.end - e.time_range.start)
        if on_cpu:
            kernels = float(getattr(e, "device_time_total", 0.0) or 0.0)
            out.append(Span(stage, float(e.time_range.start), dur, kernels))
        else:
            out.append(Span(stage, float(e.time_range.start), dur, gpu=True))
    return out


def compare(rows: Sequence[StepRow], found: Sequence[Span], cuda: bool) -> list[StageCheck]:
    """Per stage, the CSV total over the rows against the profiler's. A stage runs once per row (denoise) or
    once per preview (the others); the denoise range also reopens after the last step until the pipeline
    returns, which no row holds, so only the first ranges in time order are counted, as many as rows hold it."""
    checks = []
    for stage in ROW_STAGES:
        col = f"{stage}_ms"
        holders = rows if stage == "denoise" else [r for r in rows if r.preview]
        csv_ms = sum(float(getattr(r, col)) for r in holders)
        n = len(holders)
        host = sorted((s for s in found if s.stage == stage and not s.gpu), key=lambda s: s.start_us)[:n]
        dev = sorted((s for s in found if s.stage == stage and s.gpu), key=lambda s: s.start_us)[:n]
        kernel_ms = sum(s.kernel_us for s in host) / 1e3
        if cuda and stage in DEVICE_TIMED and dev:  # the span on the GPU: what the events bound
            basis, prof_ms, ranges = "gpu span", sum(s.cpu_us for s in dev) / 1e3, len(dev)
        elif cuda and stage in DEVICE_TIMED:
            basis, prof_ms, ranges = "kernels", kernel_ms, len(host)
        else:
            basis, prof_ms, ranges = "cpu", sum(s.cpu_us for s in host) / 1e3, len(host)
        checks.append(StageCheck(stage, ranges, csv_ms, basis, prof_ms,
                                 kernel_ms if cuda and stage in DEVICE_TIMED else None))
    return checks


def traced(model: Model, settings: RunSettings, previewer: Previewer | None = None,
           inflight: int = 2) -> tuple[Run, list[Span]]:
    """One generation under torch.profiler with the engine's previewlab.<stage> ranges on."""
    from torch.profiler import ProfilerActivity, profile

    cuda = model.device.type == "cuda"
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=acts) as prof:
        run = generate(RunContext(model, settings, "reference", ranges=True, inflight=inflight, previewer=previewer))
    return run, spans(prof.events())


def render(checks: Sequence[StageCheck], cuda: bool, what: str) -> str:
    goal = "goal: within 5 %" if cuda else "CPU: host time both sides, for information"
    lines = [f"reference: {what} under torch.profiler, CSV stage totals against previewlab.<stage> ranges ({goal})",
             f"  {'stage':<9}{'ranges':>7}{'csv ms':>10}{'profiler ms':>13}  {'basis':<9}{'diff %':>8}"
             + (f"{'kernels ms':>13}" if cuda else "")]
    for c in checks:
        diff = "-" if c.diff_pct is None else f"{c.diff_pct:+.1f}"
        span = "" if not cuda else f"{c.kernel_ms:>13.2f}" if c.kernel_ms is not None else f"{'-':>13}"
        lines.append(f"  {c.stage:<9}{c.ranges:>7}{c.csv_ms:>10.2f}{c.profiler_ms:>13.2f}  {c.basis:<9}{diff:>8}{span}")
    return "\n".join(lines)

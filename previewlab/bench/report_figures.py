"""The numbers behind a report's plots and table (report.py draws them, report_plots.py plots them): one
analysis of the sweep's runs (bench/advice.py's), its overheads per line of the interval plot, where a preview's
time goes, per-step medians, bytes per preview, and each decoder's fidelity. Pure: rows in, a Figures out.
"""
from __future__ import annotations

from dataclasses import dataclass

from previewlab.bench.advice import of_sweep
from previewlab.bench.rows import Sweep, SweepRow
from previewlab.bench.summary import steady, summarize
from previewlab.bench.summary_rows import ConfigSummary
from previewlab.preview.judging.advice import Analysis
from previewlab.preview.judging.estimates import Estimate, Noise
from previewlab.preview.judging.fidelity import Fidelity
from previewlab.preview.judging.settle import Settle, settle_of
from previewlab.preview.judging.stages import spread

# where a preview's time goes: the analysis's parts (Finding.parts, mean ms a preview), as the advice names them
PREVIEW_PARTS = ("decode", "resize", "transfer", "encode", "slower denoising")


@dataclass(frozen=True)
class Point:
    """One configuration on the overhead-against-fidelity plot: its overhead and its decoder's fidelity, each
    with its interval; advised: the advice's pick."""
    name: str
    overhead: Estimate
    fidelity: Fidelity
    advised: bool


@dataclass(frozen=True)
class Figures:
    """A sweep's figures, as the report's plots and table draw them."""
    summary: list[ConfigSummary]                    # summary.csv's rows, a configuration each
    overhead: dict[str, list[tuple[int, Estimate]]]  # a line per decoder and mode (and axes): (interval, overhead %)
    intervals: dict[str, Estimate]                  # each configuration's overhead %, its interval beside it
    noise: Noise | None                             # the baselines' spread (None: fewer than two)
    stacked: dict[str, dict[str, float]]            # configuration -> PREVIEW_PARTS -> mean ms a preview
    per_step: dict[str, dict[int, float]]           # configuration -> step -> median ms on the denoising path
    preview_bytes: dict[str, float]                 # "decoder encoder" (a clip's: its frames) -> median bytes
    analysis: Analysis                              # the one analysis, its advice and fidelity
    worth: list[Point]                              # overhead against fidelity, where both were measured
    by_decoder: list[tuple[Fidelity, Settle | None]]  # each decoder's fidelity and where its picture settles


def figures(sweep: Sweep, budget: float | None = None) -> Figures:
    """The numbers behind every plot, from the one analysis of the CSVs' runs (judged at the sweep's own budget
    and noise limit, sweep.json's; budget: another budget for the advice) and stages.py's spreads (tests check
    them against the files)."""
    j = sweep.judging
    analysis = of_sweep(sweep.runs, j.budget if budget is None else budget, j.noise_limit, sweep.fidelity)
    summary = summarize(sweep.runs, sweep.steps, analysis.findings, sweep.fidelity)
    steady_ids = {r.run_id for r in steady(sweep.runs)}
    config_of = {r.run_id: r.config for r in sweep.runs}
    configs = {r.config.name: r.config for r in sweep.runs}
    overhead: dict[str, list[tuple[int, Estimate]]] = {}
    intervals: dict[str, Estimate] = {}
    for f in analysis.findings:
        e = f.overhead
        if e is None:
            continue
        intervals[f.name] = e
        c = configs[f.name]
        if c.interval is not None:  # a fixed interval: a point on its decoder and mode's line
            # one line per decoder and mode, and per target, frames, decode_at and run axes where named
            overhead.setdefault(" ".join([c.decoder, c.mode, *c.axes]).strip(), []).append((c.interval, e))
    for line in overhead.values():
        line.sort(key=lambda p: p[0])
    per_step: dict[str, dict[int, list[float]]] = {}
    frame_bytes: dict[str, list[float]] = {}
    for s in (st.row for st in sweep.steps):
        if s.run_id not in steady_ids:
            continue
        cfg = config_of[s.run_id].name if s.run_id in config_of else "?"
        per_step.setdefault(cfg, {}).setdefault(s.step, []).append(s.denoise_ms + s.on_path_ms)  # the core's own figure
        if not s.preview:
            continue
        frames = s.frames or 1  # a clip's preview: all its frames in one message
        label = f"{s.decoder} {s.encoder}" + (f" ×{frames} frames" if frames > 1 else "")
        frame_bytes.setdefault(label, []).append(s.bytes)
    # where a preview's time goes: the analysis's parts, the mean ms a preview the advice quotes
    stacked = {f.name: {k: f.parts.get(k, 0.0) for k in PREVIEW_PARTS} for f in analysis.findings if f.previews}
    medians = {cfg: {step: spread(v)[0] for step, v in sorted(d.items())} for cfg, d in per_step.items()}
    sizes = {k: spread(v)[0] for k, v in sorted(frame_bytes.items())}
    return Figures(summary, overhead=overhead, intervals=intervals, noise=analysis.noise, stacked=stacked,
                   per_step=medians, preview_bytes=sizes, analysis=analysis, worth=worth(analysis),
                   by_decoder=by_decoder(sweep, analysis))


def worth(a: Analysis) -> list[Point]:
    """Each configuration with both an overhead and its decoder's fidelity (the analysis's, the advice's pick
    marked)."""
    out = []
    for f in a.findings:
        x = a.fidelity.of(f.preview.decoder, f.preview.decode_at)
        if f.overhead is not None and x is not None:
            out.append(Point(f.name, f.overhead, x, f.name == a.advice.pick))
    return out


def by_decoder(sweep: Sweep, a: Analysis) -> list[tuple[Fidelity, Settle | None]]:
    """Each decoder's fidelity (per decode_at) beside where its own runs' picture settles (settle.settle_of
    over the runs of that decoder)."""
    def runs_of(d: str) -> list[SweepRow]:
        return [r for r in sweep.runs if r.record.meta.preview is not None and r.record.meta.preview.decoder == d]
    return [(x, settle_of(runs_of(x.decoder))) for x in a.fidelity.figures]

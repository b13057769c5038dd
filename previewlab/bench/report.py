"""previewlab report DIR: a sweep's CSVs -> PNG plots and one self-contained report.html.

Reading (CSV -> rows) and the figures (rows -> numbers) are pure; plotting and writing are the I/O at the end.
"""
from __future__ import annotations

import argparse
import base64
import html
import textwrap
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from previewlab.bench.advice import of_sweep
from previewlab.bench.rows import NotASweep, Sweep, SweepRow, read
from previewlab.bench.summary import steady, summarize
from previewlab.bench.summary_rows import ConfigSummary
from previewlab.preview.judging.advice import Analysis, bench_more, said
from previewlab.preview.judging.estimates import Estimate
from previewlab.preview.judging.fidelity import Fidelity, Settle, settle_of
from previewlab.preview.judging.stages import spread

# where a preview's time goes: the analysis's parts (Finding.parts, mean ms a preview), as the advice names them
PREVIEW_PARTS = ("decode", "resize", "transfer", "encode", "slower denoising")


def caption(runs: Sequence[SweepRow]) -> str:
    """Model (synthetic where it is), device, dtype, resolution and steps: carried by every plot."""
    r = next((x for x in runs if x.role != "warmup"), runs[0]).record
    synth = "SYNTHETIC " if r.meta.synthetic else ""
    note = f" ({r.meta.model_note})" if r.meta.model_note else ""
    return (f"{synth}{r.meta.model}{note} | {r.totals.device_name} {r.meta.dtype} | {r.meta.width}x{r.meta.height} | "
            f"{r.meta.steps} steps | torch {r.totals.torch} diffusers {r.totals.diffusers}")


def figures(sweep: Sweep, budget: float | None = None) -> dict[str, Any]:
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
    return {"summary": summary, "overhead": overhead, "intervals": intervals, "noise": analysis.noise,
            "stacked": stacked, "per_step": medians, "bytes": sizes, "analysis": analysis,
            "worth": worth(analysis), "by_decoder": by_decoder(sweep, analysis)}


@dataclass(frozen=True)
class Point:
    """One configuration on the overhead-against-fidelity plot: its overhead and its decoder's fidelity, each
    with its interval; advised: the advice's pick."""
    name: str
    overhead: Estimate
    fidelity: Fidelity
    advised: bool


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
    """Each decoder's fidelity (per decode_at) beside where its own runs' picture settles (fidelity.settle_of
    over the runs of that decoder)."""
    def runs_of(d: str) -> list[SweepRow]:
        return [r for r in sweep.runs if r.record.meta.preview is not None and r.record.meta.preview.decoder == d]
    return [(x, settle_of(runs_of(x.decoder))) for x in a.fidelity.figures]


def titled(f: Any, title: str) -> Any:
    """The caption on top of a figure, wrapped: a long one is cut off at both edges otherwise. Returns its text."""
    text = f.suptitle(textwrap.fill(title, 110), fontsize=7)
    f.tight_layout()
    return text


def draw_overhead(ax: Any, fig: dict[str, Any]) -> None:
    """Overhead against interval on a categorical axis: one tick at each interval that ran, evenly spaced and
    labelled with its integer; each median with its interval as an error bar."""
    every = sorted({n for pts in fig["overhead"].values() for n, _ in pts})
    at = {n: i for i, n in enumerate(every)}
    lines = sorted(fig["overhead"].items())
    for j, (label, pts) in enumerate(lines):
        x = [at[n] + 0.06 * (j - (len(lines) - 1) / 2) for n, _ in pts]  # side by side, so the bars do not hide
        y = [e.value for _, e in pts]
        lo = [e.value - e.lo if e.lo is not None else 0.0 for _, e in pts]
        hi = [e.hi - e.value if e.hi is not None else 0.0 for _, e in pts]
        ax.errorbar(x, y, yerr=[lo, hi], marker="o", capsize=3, label=label)
    ax.set_xticks(range(len(every)), [str(n) for n in every])
    ax.set_xlabel("preview every N steps")
    ax.set_ylabel("overhead vs no previews (%)")
    ax.axhline(0, color="#888", lw=0.8)
    if lines:
        ax.legend(fontsize=8)
    ax.set_title("Preview overhead against interval (bars: each median's interval)", fontsize=9)


def draw_noise(ax: Any, fig: dict[str, Any]) -> None:
    """The noise itself: every overhead with its interval, grey where the interval holds 0 (or there is
    none), over the band that the baselines' own spread (IQR over median) spans around 0."""
    cfgs = sorted(fig["intervals"])
    noise = fig["noise"]
    if noise is not None:
        ax.axvspan(-noise.spread_pct / 2, noise.spread_pct / 2, color="#f4c27a" if noise.noisy else "#dde8f3",
                   label=f"baselines' IQR ({noise.spread_pct:.1f} % of their median)")
    for i, c in enumerate(cfgs):
        e = fig["intervals"][c]
        grey = e.within_noise or not e.has_interval
        err = [[e.value - e.lo], [e.hi - e.value]] if e.lo is not None and e.hi is not None else None
        ax.errorbar([e.value], [i], xerr=err, fmt="o", capsize=3, color="#999" if grey else "#1f5fa8")
    ax.set_yticks(range(len(cfgs)), cfgs, fontsize=7)
    ax.axvline(0, color="#444", lw=0.8)
    ax.set_xlabel("overhead vs no previews (%): median and interval; grey: within noise or one run")
    if noise is not None:
        ax.legend(fontsize=7, loc="lower right")
    ax.set_title("How much of each overhead is noise", fontsize=9)


def draw_memory(ax: Any, fig: dict[str, Any]) -> None:
    """Memory beside time: per configuration, its runs' peak over the baseline beside each (median) and each
    preview's rise over its step (median), MiB."""
    rows: list[ConfigSummary] = [r for r in fig["summary"] if r.peak_mem_mb is not None]
    cfgs = [r.config for r in rows]
    at = range(len(cfgs))
    ax.barh([i - 0.2 for i in at], [r.mem_over_mb or 0.0 for r in rows], height=0.4,
            label="run's peak over its baseline's (median)")
    ax.barh([i + 0.2 for i in at], [r.mem_mb_p50 or 0.0 for r in rows], height=0.4,
            label="a preview's rise over its step (median)")
    ax.set_yticks(list(at), cfgs, fontsize=7)
    source = next((r.mem_source for r in rows if r.mem_source), "")
    ax.set_xlabel(f"MiB ({source}: " + ("the allocator's counters" if source not in ("rss", "") else
                                          "resident memory") + ")")
    ax.axvline(0, color="#444", lw=0.8)
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title("What previews cost in memory", fontsize=9)


def draw_breakdown(ax: Any, fig: dict[str, Any]) -> None:
    """Where a preview's time goes: per configuration, each part's mean ms a preview (the analysis's parts, as
    the advice names them), stacked."""
    cfgs = sorted(fig["stacked"])
    bottom = [0.0] * len(cfgs)
    for k in PREVIEW_PARTS:
        vals = [fig["stacked"][c][k] for c in cfgs]
        ax.barh(cfgs, vals, left=bottom, label=k)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_xlabel("ms a preview (each part's mean over the previews, as the advice quotes it)")
    ax.legend(fontsize=7, ncol=4)
    ax.set_title("Where a preview's time goes")
    ax.tick_params(axis="y", labelsize=7)


def draw_per_step(ax: Any, fig: dict[str, Any]) -> None:
    """Each configuration's median time on the denoising path per step; ticks on whole steps only."""
    from matplotlib.ticker import MaxNLocator

    for cfg, d in sorted(fig["per_step"].items()):
        ax.plot(list(d), list(d.values()), label=cfg, lw=1)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("step")
    ax.set_ylabel("ms on the denoising path (median over runs)")
    ax.legend(fontsize=6, ncol=2)
    ax.set_title("Per-step time across the run")


def _band(e: Estimate) -> list[list[float]]:
    return [[e.value - e.lo if e.lo is not None else 0.0], [e.hi - e.value if e.hi is not None else 0.0]]


def draw_worth(ax: Any, fig: dict[str, Any]) -> None:
    """Overhead with its interval against fidelity with its interval, one point per configuration; the advised
    one ringed; the budget and the fidelity threshold as lines."""
    a: Analysis = fig["analysis"]
    for p in fig["worth"]:
        ax.errorbar([p.fidelity.ssim.value], [p.overhead.value], xerr=_band(p.fidelity.ssim), yerr=_band(p.overhead),
                    fmt="o", capsize=3, color="#c0392b" if p.advised else "#1f5fa8")
        ax.annotate(p.name + (" (advised)" if p.advised else ""), (p.fidelity.ssim.value, p.overhead.value),
                    fontsize=6, xytext=(4, 4), textcoords="offset points")
        if p.advised:
            ax.plot([p.fidelity.ssim.value], [p.overhead.value], "o", ms=14, mfc="none", mec="#c0392b", mew=2)
    ax.axhline(a.advice.budget, color="#888", lw=0.8, ls="--", label=f"budget {a.advice.budget:g} %")
    ax.axvline(a.fidelity.min_ssim, color="#888", lw=0.8, ls=":", label=f"useful from SSIM {a.fidelity.min_ssim:g}")
    ax.axhline(0, color="#444", lw=0.6)
    ax.set_xlabel("fidelity: SSIM against the VAE's preview (median over seeds, interval)")
    ax.set_ylabel("overhead vs no previews (%)")
    ax.legend(fontsize=7)
    synth = " (SYNTHETIC model: noise pictures, not judged)" if a.fidelity.synthetic else ""
    ax.set_title("Overhead against fidelity, one point per configuration; ringed: the advised one" + synth, fontsize=9)


def draw_fidelity(ax: Any, fig: dict[str, Any]) -> None:
    """Each decoder's fidelity (per decode_at) with its interval, and where its runs' picture settles."""
    rows = fig["by_decoder"]
    for i, (x, settle) in enumerate(rows):
        ax.errorbar([x.ssim.value], [i], xerr=_band(x.ssim), fmt="o", capsize=3, color="#1f5fa8")
        said = settle.said().removeprefix("the picture ") if settle else "settle step not measured"
        ax.annotate(f"{x.ssim.value:.2f}; {said}", (x.ssim.value, i), fontsize=7, xytext=(6, 4),
                    textcoords="offset points")
    ax.set_yticks(range(len(rows)), [x.name for x, _ in rows], fontsize=7)
    ax.axvline(fig["analysis"].fidelity.min_ssim, color="#888", lw=0.8, ls=":")
    ax.set_xlim(min([0.0] + [x.ssim.lo or x.ssim.value for x, _ in rows]), 1.05)
    ax.set_xlabel("SSIM against the VAE's preview (median over seeds, interval)")
    ax.set_title("Fidelity and settle step by decoder", fontsize=9)


def plot(fig: dict[str, Any], title: str, out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []

    def save(f: Any, name: str) -> None:
        titled(f, title)
        p = out / name
        f.savefig(p, dpi=110)
        plt.close(f)
        paths.append(p)

    if fig["worth"]:
        f, ax = plt.subplots(figsize=(7, 4.4))
        draw_worth(ax, fig)
        save(f, "overhead_vs_fidelity.png")
    if fig["by_decoder"]:
        f, ax = plt.subplots(figsize=(7, 1.4 + 0.4 * len(fig["by_decoder"])))
        draw_fidelity(ax, fig)
        save(f, "fidelity_by_decoder.png")

    f, ax = plt.subplots(figsize=(7, 4.4))
    draw_overhead(ax, fig)
    save(f, "overhead_vs_interval.png")

    f, ax = plt.subplots(figsize=(8, 1.2 + 0.32 * max(1, len(fig["intervals"]))))
    draw_noise(ax, fig)
    save(f, "overhead_intervals.png")

    f, ax = plt.subplots(figsize=(8, 4.5))
    draw_breakdown(ax, fig)
    save(f, "preview_breakdown.png")

    if any(r.peak_mem_mb is not None for r in fig["summary"]):
        f, ax = plt.subplots(figsize=(8, 1.4 + 0.32 * max(1, len(fig["summary"]))))
        draw_memory(ax, fig)
        save(f, "memory.png")

    f, ax = plt.subplots(figsize=(7, 4))
    draw_per_step(ax, fig)
    save(f, "per_step.png")

    f, ax = plt.subplots(figsize=(7, 3.5))
    ax.bar(list(fig["bytes"]), [v / 1024 for v in fig["bytes"].values()])
    ax.set_ylabel("KiB per preview (median)")
    ax.set_title("Bytes per preview by decoder and encoder (a clip's: all its frames)")
    ax.tick_params(axis="x", labelsize=7, rotation=20)
    save(f, "bytes_per_frame.png")
    return paths


def _fig(x: float | None) -> str:
    return "" if x is None else f"{float(x):.1f}"


def render_html(fig: dict[str, Any], title: str, images: list[Path], advice: Sequence[str] = (),
                headline: str = "") -> str:
    def overhead(s: ConfigSummary) -> tuple[str, str]:
        e = s.overhead
        return (e.signed(), said(e, bench_more).removeprefix(f"{e.signed()}: ")) if e else ("", "")
    summary: list[ConfigSummary] = fig["summary"]
    rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(v if not isinstance(v, float) else round(v, 2)))}</td>"
                         for v in (s.config, s.runs, s.wall_s, s.stages.decode_ms.p50, s.stages.encode_ms.p50,
                                   _fig(s.mem_mb_p50), _fig(s.peak_mem_mb), _fig(s.mem_over_mb),
                                   _fig(s.busy_pct), *overhead(s))) + "</tr>"
        for s in summary)
    noise = fig["noise"]
    line = noise.line() if noise else "noise: fewer than two no-preview baselines, so their spread cannot be judged"
    warn = (f'<p class="{"noisy" if noise is not None and noise.noisy else "quiet"}">{html.escape(line)}</p>')
    imgs = "".join(f'<figure><img alt="{p.stem}" src="data:image/png;base64,{base64.b64encode(p.read_bytes()).decode()}">'
                   f"<figcaption>{p.stem.replace('_', ' ')}</figcaption></figure>" for p in images)
    return (f"<!doctype html><meta charset=utf-8><title>previewlab report</title>"
            f"<style>body{{font:14px system-ui;margin:24px}}td,th{{padding:2px 8px;border-bottom:1px solid #ddd}}"
            f"img{{max-width:100%}}pre.advice{{white-space:pre-wrap;overflow-wrap:anywhere}}.noisy{{background:#fde3b8;border:1px solid #d08a1e;padding:8px}}</style>"
            f"<h1>previewlab report</h1>{warn}<p>{html.escape(title)}</p>"
            + (f'<p class=headline><b>advised: {html.escape(headline)}</b></p>' if headline else
               "<p class=headline>" + ("fidelity: not measured (previewlab bench --fidelity)" if not fig["worth"]
                                       else "no configuration advised by the rule (the advice says why)") + "</p>") +
            f"<table><tr><th>config</th><th>runs</th><th>wall s (median)</th><th>decode ms p50</th><th>encode ms p50</th>"
            f"<th>MiB a preview p50</th><th>peak MiB</th><th>peak over baseline MiB</th><th>device busy %</th>"
            f"<th>overhead % [interval]</th><th>verdict</th></tr>{rows}</table>"
            f"<pre class=advice>{html.escape(chr(10).join(advice))}</pre>{imgs}")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="previewlab report", description=__doc__)
    p.add_argument("dir", type=Path, help="a folder written by previewlab bench --out")
    p.add_argument("--budget", type=float, default=None,
                   help="the preview overhead the advice keeps under, percent (default: the sweep's own, from its "
                        "sweep.json; 5 for a folder without one)")
    args = p.parse_args(argv)
    try:
        sweep = read(args.dir).by_device()  # a sweep over several devices: a table per device
    except NotASweep as e:
        print(f"previewlab report: {e}", file=sys.stderr)
        return 2
    if not sweep.runs:
        print(f"previewlab report: {args.dir}/runs.csv has no runs", file=sys.stderr)
        return 2
    title = caption(sweep.runs)
    fig = figures(sweep, args.budget)
    noise = fig["noise"]
    loud = f"NOISY MACHINE (baselines spread {noise.spread_pct:.1f} %) | " if noise is not None and noise.noisy else ""
    images = plot(fig, loud + title, args.dir)  # a plot copied out of the report still says so
    analysis: Analysis = fig["analysis"]
    (args.dir / "report.html").write_text(render_html(fig, title, images, analysis.advice.lines,
                                                      analysis.advice.headline))
    print(f"wrote {args.dir / 'report.html'} and {len(images)} plots")
    return 0

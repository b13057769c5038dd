"""A report's plots: each figure drawn on a matplotlib axis from the sweep's Figures (report_figures.py), and
every plot written as a PNG beside the CSVs, its caption on top. matplotlib is imported only to plot.
"""
from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from previewlab.bench.report_figures import PREVIEW_PARTS, Figures
from previewlab.preview.judging.estimates import Estimate


def titled(f: Any, title: str) -> Any:
    """The caption on top of a figure, wrapped: a long one is cut off at both edges otherwise. Returns its text."""
    text = f.suptitle(textwrap.fill(title, 110), fontsize=7)
    f.tight_layout()
    return text


def draw_overhead(ax: Any, fig: Figures) -> None:
    """Overhead against interval on a categorical axis: one tick at each interval that ran, evenly spaced and
    labelled with its integer; each median with its interval as an error bar."""
    every = sorted({n for pts in fig.overhead.values() for n, _ in pts})
    at = {n: i for i, n in enumerate(every)}
    lines = sorted(fig.overhead.items())
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


def draw_noise(ax: Any, fig: Figures) -> None:
    """The noise itself: every overhead with its interval, grey where the interval holds 0 (or there is
    none), over the band that the baselines' own spread (IQR over median) spans around 0."""
    cfgs = sorted(fig.intervals)
    noise = fig.noise
    if noise is not None:
        ax.axvspan(-noise.spread_pct / 2, noise.spread_pct / 2, color="#f4c27a" if noise.noisy else "#dde8f3",
                   label=f"baselines' IQR ({noise.spread_pct:.1f} % of their median)")
    for i, c in enumerate(cfgs):
        e = fig.intervals[c]
        grey = e.within_noise or not e.has_interval
        err = [[e.value - e.lo], [e.hi - e.value]] if e.lo is not None and e.hi is not None else None
        ax.errorbar([e.value], [i], xerr=err, fmt="o", capsize=3, color="#999" if grey else "#1f5fa8")
    ax.set_yticks(range(len(cfgs)), cfgs, fontsize=7)
    ax.axvline(0, color="#444", lw=0.8)
    ax.set_xlabel("overhead vs no previews (%): median and interval; grey: within noise or one run")
    if noise is not None:
        ax.legend(fontsize=7, loc="lower right")
    ax.set_title("How much of each overhead is noise", fontsize=9)


def draw_memory(ax: Any, fig: Figures) -> None:
    """Memory beside time: per configuration, its runs' peak over the baseline beside each (median) and each
    preview's rise over its step (median), MiB."""
    rows = [r for r in fig.summary if r.peak_mem_mb is not None]
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


def draw_breakdown(ax: Any, fig: Figures) -> None:
    """Where a preview's time goes: per configuration, each part's mean ms a preview (the analysis's parts, as
    the advice names them), stacked."""
    cfgs = sorted(fig.stacked)
    bottom = [0.0] * len(cfgs)
    for k in PREVIEW_PARTS:
        vals = [fig.stacked[c][k] for c in cfgs]
        ax.barh(cfgs, vals, left=bottom, label=k)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_xlabel("ms a preview (each part's mean over the previews, as the advice quotes it)")
    ax.legend(fontsize=7, ncol=4)
    ax.set_title("Where a preview's time goes")
    ax.tick_params(axis="y", labelsize=7)


def draw_per_step(ax: Any, fig: Figures) -> None:
    """Each configuration's median time on the denoising path per step; ticks on whole steps only."""
    from matplotlib.ticker import MaxNLocator

    for cfg, d in sorted(fig.per_step.items()):
        ax.plot(list(d), list(d.values()), label=cfg, lw=1)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("step")
    ax.set_ylabel("ms on the denoising path (median over runs)")
    ax.legend(fontsize=6, ncol=2)
    ax.set_title("Per-step time across the run")


def _band(e: Estimate) -> list[list[float]]:
    return [[e.value - e.lo if e.lo is not None else 0.0], [e.hi - e.value if e.hi is not None else 0.0]]


def draw_worth(ax: Any, fig: Figures) -> None:
    """Overhead with its interval against fidelity with its interval, one point per configuration; the advised
    one ringed; the budget and the fidelity threshold as lines."""
    a = fig.analysis
    for p in fig.worth:
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


def draw_fidelity(ax: Any, fig: Figures) -> None:
    """Each decoder's fidelity (per decode_at) with its interval, and where its runs' picture settles."""
    rows = fig.by_decoder
    for i, (x, settle) in enumerate(rows):
        ax.errorbar([x.ssim.value], [i], xerr=_band(x.ssim), fmt="o", capsize=3, color="#1f5fa8")
        said = settle.said().removeprefix("the picture ") if settle else "settle step not measured"
        ax.annotate(f"{x.ssim.value:.2f}; {said}", (x.ssim.value, i), fontsize=7, xytext=(6, 4),
                    textcoords="offset points")
    ax.set_yticks(range(len(rows)), [x.name for x, _ in rows], fontsize=7)
    ax.axvline(fig.analysis.fidelity.min_ssim, color="#888", lw=0.8, ls=":")
    ax.set_xlim(min([0.0] + [x.ssim.lo or x.ssim.value for x, _ in rows]), 1.05)
    ax.set_xlabel("SSIM against the VAE's preview (median over seeds, interval)")
    ax.set_title("Fidelity and settle step by decoder", fontsize=9)


def plot(fig: Figures, title: str, out: Path) -> list[Path]:
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

    if fig.worth:
        f, ax = plt.subplots(figsize=(7, 4.4))
        draw_worth(ax, fig)
        save(f, "overhead_vs_fidelity.png")
    if fig.by_decoder:
        f, ax = plt.subplots(figsize=(7, 1.4 + 0.4 * len(fig.by_decoder)))
        draw_fidelity(ax, fig)
        save(f, "fidelity_by_decoder.png")

    f, ax = plt.subplots(figsize=(7, 4.4))
    draw_overhead(ax, fig)
    save(f, "overhead_vs_interval.png")

    f, ax = plt.subplots(figsize=(8, 1.2 + 0.32 * max(1, len(fig.intervals))))
    draw_noise(ax, fig)
    save(f, "overhead_intervals.png")

    f, ax = plt.subplots(figsize=(8, 4.5))
    draw_breakdown(ax, fig)
    save(f, "preview_breakdown.png")

    if any(r.peak_mem_mb is not None for r in fig.summary):
        f, ax = plt.subplots(figsize=(8, 1.4 + 0.32 * max(1, len(fig.summary))))
        draw_memory(ax, fig)
        save(f, "memory.png")

    f, ax = plt.subplots(figsize=(7, 4))
    draw_per_step(ax, fig)
    save(f, "per_step.png")

    f, ax = plt.subplots(figsize=(7, 3.5))
    ax.bar(list(fig.preview_bytes), [v / 1024 for v in fig.preview_bytes.values()])
    ax.set_ylabel("KiB per preview (median)")
    ax.set_title("Bytes per preview by decoder and encoder (a clip's: all its frames)")
    ax.tick_params(axis="x", labelsize=7, rotation=20)
    save(f, "bytes_per_frame.png")
    return paths

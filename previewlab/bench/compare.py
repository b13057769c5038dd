"""previewlab compare A B: two sweeps side by side; exits 1 when a figure got worse past a threshold.

Like with like: two sweeps compare only when they ran the same model, steps, size, frames and device, and when
their no-preview baselines agree within their spread (otherwise "not comparable", naming the difference, exit
2). Each side's noise line comes first, as its own summary says it. Per configuration, each side's median and its interval
(the one analysis: an overhead is its configuration's finding, judged at the sweep's own noise limit from its
sweep.json; any other figure is analysis.per_run's estimate over the steady runs). An overhead is compared in
percentage points (B - A), a time or a byte count as a ratio B/A. B is better or worse only where the two 95 %
intervals do not overlap (costs.cheaper_than, the rule that names a cheapest configuration); where they
overlap it is "within noise", where either is short of the 95 % level it says how many more runs it needs.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from previewlab.bench.advice import of_sweep
from previewlab.bench.rows import Judging, NotASweep, SweepRow, read
from previewlab.bench.summary import steady
from previewlab.preview.judging.analysis import per_run
from previewlab.preview.judging.costs import cheaper_than
from previewlab.preview.judging.estimates import Estimate, estimate, spread_pct
from previewlab.preview.judging.surface import bench_more
from previewlab.preview.record.run import RunRecord


@dataclass(frozen=True)
class Figure:
    words: str   # what a reader is shown
    unit: str
    digits: int  # 0: a count, printed as an integer
    of: Callable[[RunRecord], float | None]  # the figure of one run


FIGURES = {
    "overhead_pct": Figure("overhead against the no-preview baseline beside each run", "%", 1, lambda r: None),
    "wall_s": Figure("wall time of a run", "s", 3, lambda r: r.totals.wall_s),
    "denoise_ms": Figure("denoising time of a run", "ms", 1, lambda r: r.totals.denoise_ms),
    "decode_ms": Figure("preview decode time of a run", "ms", 1, lambda r: r.totals.decode_ms),
    "encode_ms": Figure("preview encode time of a run", "ms", 1, lambda r: r.totals.encode_ms),
    "bytes": Figure("preview bytes sent in a run", "bytes", 0, lambda r: r.totals.bytes),
    "peak_mem_mb": Figure("peak memory of a run", "MiB", 0, lambda r: r.totals.peak_mem_mb or None),
}
# what must match for two sweeps to measure the same work: (what a run did, the words that name it); "" where
# an older CSV did not record it
SAME_WORK: tuple[tuple[Callable[[RunRecord], str], str], ...] = (
    (lambda r: r.meta.model, "model"), (lambda r: str(r.meta.steps), "steps"),
    (lambda r: f"{r.meta.width}x{r.meta.height}", "size"), (lambda r: str(r.meta.num_frames), "frames"),
    (lambda r: str(r.meta.batch), "batch"), (lambda r: r.totals.device_name, "device"),
    (lambda r: r.meta.dtype, "dtype"), (lambda r: r.totals.scheduler, "scheduler"))


def per_config(runs: Sequence[SweepRow], figure: str, judging: Judging = Judging()) -> dict[str, Estimate]:
    """Per configuration, the figure's estimate: an overhead its finding's (over its pairs, as the summary gives
    it), any other over its steady runs (analysis.per_run)."""
    if figure == "overhead_pct":
        a = of_sweep(runs, judging.budget, judging.noise_limit)
        return {f.name: f.overhead for f in a.findings if f.overhead is not None}
    return per_run(runs, FIGURES[figure].of)


def differences(a: Sequence[SweepRow], b: Sequence[SweepRow]) -> list[str]:
    """How the two sweeps' work differs, in words ('steps 4 vs 8'); empty when they measured the same work."""
    def seen(runs: Sequence[SweepRow], what: Callable[[RunRecord], str]) -> str:
        return ", ".join(sorted({what(r.record) for r in steady(runs)})) or "?"
    out = []
    for what, words in SAME_WORK:
        va, vb = seen(a, what), seen(b, what)
        if va != vb and "" not in (va, vb):  # "": a sweep from before the scheduler was recorded
            out.append(f"{words} {va} vs {vb}")
    return out


APART = 1.5  # baselines whose medians differ by this factor, and by more than SPREADS of their spread, ran apart
SPREADS = 3


def baselines_apart(a: Sequence[SweepRow], b: Sequence[SweepRow]) -> list[str]:
    """Two sweeps of the same work whose no-preview baselines differ far beyond their spread (0.33 s against
    3.24 s) did not run on like machines or like loads: every figure between them would mislead."""
    def walls(runs: Sequence[SweepRow]) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {}
        for r in steady(runs):
            if r.role == "baseline":
                out.setdefault(r.config.name, []).append(r.record.totals.wall_s)
        return out
    ga, gb = walls(a), walls(b)
    # each run setup's baselines against its namesake ('none/euler/4steps'); pooled when no name is shared
    shared = [k for k in ga if k in gb] or ([] if not ga or not gb else [""])
    for k in shared:
        wa = ga[k] if k else [x for xs in ga.values() for x in xs]
        wb = gb[k] if k else [x for xs in gb.values() for x in xs]
        said = _apart(wa, wb, k if len(shared) > 1 else "")
        if said:
            return [said]
    return []


def _apart(wa: list[float], wb: list[float], name: str) -> str:
    """What baselines_apart says of one group of baselines on each side (name: the group's); '' when alike."""
    ma, mb = estimate(wa).value, estimate(wb).value  # each side's median
    lo, hi = sorted((ma, mb))
    spread = max(spread_pct(wa) if len(wa) > 1 else 0.0, spread_pct(wb) if len(wb) > 1 else 0.0)
    if lo <= 0 or hi / lo < APART or 100 * (hi / lo - 1) <= SPREADS * spread:
        return ""
    return (f"the no-preview baselines{f' of {name}' if name else ''} differ x{hi / lo:.1f} (A {ma:.3g} s, B {mb:.3g} s), far beyond their spread "
            f"({spread:.1f} %): the machines or their load differ; run both on one quiet machine")


@dataclass(frozen=True)
class Row:
    config: str
    a: Estimate
    b: Estimate
    verdict: str   # within noise | better | worse | WORSE (past the threshold) | short of the 95 % level: ...

    @property
    def delta(self) -> float:
        return self.b.value - self.a.value


def judge(config: str, a: Estimate, b: Estimate, figure: str, threshold: float) -> Row:
    """Worse is higher, for every figure. Better or worse only where the 95 % intervals lie apart
    (costs.cheaper_than); WORSE: past the threshold too (points for an overhead, percent of A otherwise)."""
    if cheaper_than(b, a):
        verdict = "better"
    elif cheaper_than(a, b):
        past = (b.value - a.value) if figure == "overhead_pct" else \
            (100 * (b.value - a.value) / a.value if a.value > 0 else float("inf"))
        verdict = "WORSE" if past > threshold else "worse"
    elif a.sure and b.sure:
        verdict = "within noise"
    else:
        short = [f"{side} {bench_more(e.more_for_level).removesuffix(' for the 95 % level')}"
                 for side, e in (("A", a), ("B", b)) if not e.sure]
        verdict = f"short of the 95 % level ({', '.join(short)}): cannot be told apart"
    return Row(config, a, b, verdict)


def compare(a: dict[str, Estimate], b: dict[str, Estimate], figure: str, threshold: float) -> list[Row]:
    return [judge(cfg, a[cfg], b[cfg], figure, threshold) for cfg in a if cfg in b]


def cell(e: Estimate, fig: Figure) -> str:
    sign = "+" if fig.unit == "%" else ""  # an overhead is signed, as the summary prints it
    d = fig.digits
    text = f"{e.value:{sign}.{d}f}"
    if e.lo is not None and e.hi is not None:
        text += f" [{e.lo:{sign}.{d}f}, {e.hi:{sign}.{d}f}]" + ("" if e.sure else f" ({e.level_pct:.0f} %)")
    return f"{text} n={e.n}"


def change(r: Row, figure: str) -> str:
    """An overhead's change in points; any other figure's as a ratio B/A."""
    if figure == "overhead_pct":
        return f"{r.delta:+.1f} points"
    return f"x{r.b.value / r.a.value:.3f}" if r.a.value else "n/a (A is 0)"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="previewlab compare", description=__doc__)
    p.add_argument("a", type=Path, help="the reference sweep folder")
    p.add_argument("b", type=Path, help="the sweep to judge")
    p.add_argument("--figure", choices=tuple(FIGURES), default="overhead_pct",
                   help="the figure that decides the exit status")
    p.add_argument("--threshold", type=float, default=5.0,
                   help="how much worse counts: percentage points for overhead_pct, percent otherwise")
    args = p.parse_args(argv)
    try:
        sa, sb = read(args.a).by_device(), read(args.b).by_device()  # never across devices
    except NotASweep as e:
        print(f"previewlab compare: {e}", file=sys.stderr)
        return 2
    ra, rb = sa.runs, sb.runs
    diff = differences(ra, rb) or baselines_apart(ra, rb)
    if diff:
        print(f"previewlab compare: not comparable: {'; '.join(diff)}", file=sys.stderr)
        return 2
    for side, sw in (("A", sa), ("B", sb)):  # each side's noise, as its own summary says it (its own limit)
        noise = of_sweep(sw.runs, sw.judging.budget, sw.judging.noise_limit).noise
        print(f"{side} {noise.line() if noise is not None else 'noise: unknown (fewer than two no-preview baselines)'}")
    fig = FIGURES[args.figure]
    rows = compare(per_config(ra, args.figure, sa.judging), per_config(rb, args.figure, sb.judging), args.figure,
                   args.threshold)
    if not rows:
        print("previewlab compare: the two sweeps share no configuration", file=sys.stderr)
        return 2
    print(f"{fig.words}, {fig.unit} (median [interval] n=runs): A={args.a}  B={args.b}")
    ca = max([10] + [len(cell(r.a, fig)) + 2 for r in rows])
    cb = max([10] + [len(cell(r.b, fig)) + 2 for r in rows])
    cw = max([30] + [len(r.config) + 2 for r in rows])
    head = "B - A" if args.figure == "overhead_pct" else "B / A"
    print(f"{'config':<{cw}}{'A':<{ca}}{'B':<{cb}}{head:<14}verdict")
    bad = []
    for r in rows:
        if r.verdict == "WORSE":
            bad.append(r.config)
        print(f"{r.config:<{cw}}{cell(r.a, fig):<{ca}}{cell(r.b, fig):<{cb}}{change(r, args.figure):<14}{r.verdict}")
    if bad:
        unit = " points" if args.figure == "overhead_pct" else " %"
        print(f"{len(bad)} configuration(s) worse by more than {args.threshold:g}{unit}, beyond noise: {', '.join(bad)}")
        return 1
    return 0


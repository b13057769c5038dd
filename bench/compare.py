"""previewlab compare A B: two sweeps side by side; exits 1 when a figure got worse past a threshold.

Per configuration: both medians, B/A, and whether the difference is larger than the runs' own spread (the
two interquartile ranges do not overlap). "Worse" is higher for times and overheads.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any, Sequence

from previewlab.bench.report import read
from previewlab.bench.summary import percentile, steady

FIGURES = ("overhead_pct", "wall_s", "denoise_ms", "decode_ms", "encode_ms", "bytes")


def per_config(runs: list[dict[str, str]], figure: str) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for r in steady(runs):
        if r.get(figure, "") in ("", None):
            continue
        out.setdefault(r["config"], []).append(float(r[figure]))
    return out


def compare(a: dict[str, list[float]], b: dict[str, list[float]]) -> list[dict[str, Any]]:
    rows = []
    for cfg in [c for c in a if c in b]:
        xa, xb = a[cfg], b[cfg]
        ma, mb = statistics.median(xa), statistics.median(xb)
        qa, qb = (percentile(xa, 25), percentile(xa, 75)), (percentile(xb, 25), percentile(xb, 75))
        beyond = qb[0] > qa[1] or qa[0] > qb[1]  # the IQRs do not overlap
        rows.append(dict(config=cfg, a=ma, b=mb, delta=mb - ma, ratio=(mb / ma) if ma else None,
                         beyond_spread=beyond))
    return rows


def worse(row: dict[str, Any], figure: str, threshold: float) -> bool:
    """overhead_pct: worse by more than `threshold` percentage points; other figures: by more than
    `threshold` percent of A's median. Only a difference beyond the runs' spread counts."""
    if not row["beyond_spread"]:
        return False
    if figure == "overhead_pct":
        return bool(row["delta"] > threshold)
    return row["a"] > 0 and 100 * row["delta"] / row["a"] > threshold


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="previewlab compare", description=__doc__)
    p.add_argument("a", type=Path, help="the reference sweep folder")
    p.add_argument("b", type=Path, help="the sweep to judge")
    p.add_argument("--figure", choices=FIGURES, default="overhead_pct", help="the figure that decides the exit status")
    p.add_argument("--threshold", type=float, default=5.0,
                   help="how much worse counts: percentage points for overhead_pct, percent otherwise")
    args = p.parse_args(argv)
    (ra, _), (rb, _) = read(args.a), read(args.b)
    rows = compare(per_config(ra, args.figure), per_config(rb, args.figure))
    if not rows:
        print("previewlab compare: the two sweeps share no configuration", file=sys.stderr)
        return 2
    print(f"{args.figure}: A={args.a}  B={args.b}")
    print(f"{'config':<30}{'A median':>12}{'B median':>12}{'B/A':>8}  beyond spread  verdict")
    bad = []
    for r in rows:
        verdict = "WORSE" if worse(r, args.figure, args.threshold) else ""
        if verdict:
            bad.append(r["config"])
        ratio = f"{r['ratio']:.3f}" if r["ratio"] is not None else "n/a"
        print(f"{r['config']:<30}{r['a']:>12.3f}{r['b']:>12.3f}{ratio:>8}  {'yes' if r['beyond_spread'] else 'no':<13}  {verdict}")
    if bad:
        print(f"{len(bad)} configuration(s) worse by more than {args.threshold:g}"
              f"{' points' if args.figure == 'overhead_pct' else ' %'}: {', '.join(bad)}")
        return 1
    return 0

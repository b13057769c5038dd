"""How much of a figure is noise: intervals for a median, interleaved pairs, and the baselines' spread.

A sweep runs each configuration right after a no-preview baseline (A B A B), so a configuration's overhead is
taken pair by pair: 100 * (config wall / the baseline beside it - 1). Each pair carries its baseline's noise as
well as the configuration's, and slow drift on a loaded machine cancels inside a pair.

The interval of a median is distribution-free: the order statistics [x(k), x(n+1-k)] hold the true median with a
probability given by the binomial distribution alone, whatever the noise looks like. k is the largest that keeps
that probability at 95 % or more. Under six samples no interval reaches 95 %: the interval is then the samples'
whole range and says its own level (3 pairs: 75 %). A bootstrap would print a narrower range at a level it
does not have for so few samples. One sample has no interval, only `n=1`.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Sequence

from previewlab.bench.rows import SweepRow

NOISE_LIMIT_PCT = 10.0  # baselines whose IQR is over 10 % of their median: the machine was too busy to trust
LEVEL_PCT = 95.0         # an interval's aim: it holds the true median with at least this probability


def percentile(xs: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks; q in [0, 100]."""
    s = sorted(xs)
    if not s:
        return float("nan")
    k = (len(s) - 1) * q / 100
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


@dataclass(frozen=True)
class Estimate:
    """A median and, from two samples on, its interval [lo, hi] at level_pct."""
    value: float
    n: int
    lo: float | None = None  # None: fewer than two samples, so no interval
    hi: float | None = None
    level_pct: float = 0.0   # the probability that [lo, hi] holds the true median

    @property
    def has_interval(self) -> bool:
        return self.lo is not None and self.hi is not None

    @property
    def within_noise(self) -> bool:
        """The interval holds 0: the figure cannot be told apart from no difference at all."""
        return self.lo is not None and self.hi is not None and self.lo <= 0 <= self.hi

    def holds(self, x: float) -> bool:
        return self.lo is not None and self.hi is not None and self.lo <= x <= self.hi

    def signed(self, digits: int = 1, unit: str = " %") -> str:
        """'+12.3 % [+8.1, +16.0]', the level added when it is under 95 % ('... (75 %)'), or '+12.3 % n=1'."""
        v = f"{self.value:+.{digits}f}{unit}"
        if self.lo is None or self.hi is None:
            return f"{v} n={self.n}"
        level = "" if self.level_pct >= LEVEL_PCT else f" ({self.level_pct:.0f} %)"
        return f"{v} [{self.lo:+.{digits}f}, {self.hi:+.{digits}f}]{level}"


def coverage_pct(n: int, k: int) -> float:
    """The probability, in percent, that [x(k), x(n+1-k)] of n samples holds their distribution's median:
    1 - 2 P(Binomial(n, 1/2) < k)."""
    return 100 * (1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2**n)


def estimate(xs: Sequence[float]) -> Estimate:
    """The median of xs and its distribution-free interval (the module's docstring says how it is chosen)."""
    if not xs:
        raise ValueError("estimate: no samples")
    s, n = sorted(xs), len(xs)
    if n < 2:
        return Estimate(s[0], 1)
    k = 1
    while k + 1 <= n // 2 and coverage_pct(n, k + 1) >= LEVEL_PCT:
        k += 1
    return Estimate(statistics.median(s), n, s[k - 1], s[n - k], coverage_pct(n, k))


def spread_pct(xs: Sequence[float]) -> float:
    """The interquartile range over the median, in percent."""
    return 100 * (percentile(xs, 75) - percentile(xs, 25)) / statistics.median(xs)


def pair_overheads(runs: Sequence[SweepRow]) -> dict[str, list[float]]:
    """Per configuration, each steady run's overhead in percent against the steady baseline right before it
    (the direct call, which runs after a configuration, against the baseline right after it). Runs in the order
    they ran, as runs.csv holds them."""
    return {cfg: [100 * (r.record.totals.wall_s / b.record.totals.wall_s - 1) for r, b in ps]
            for cfg, ps in paired(runs).items()}


def paired(runs: Sequence[SweepRow]) -> dict[str, list[tuple[SweepRow, SweepRow]]]:
    """Per configuration, each steady run with the steady baseline it is paired with (pair_overheads' rule)."""
    out: dict[str, list[tuple[SweepRow, SweepRow]]] = {}
    for i, r in enumerate(runs):
        if r.role not in ("config", "direct") or not r.steady:
            continue
        j = i + 1 if r.role == "direct" else i - 1
        if 0 <= j < len(runs) and runs[j].role == "baseline" and runs[j].steady:
            out.setdefault(r.config.name, []).append((r, runs[j]))
    return out


@dataclass(frozen=True)
class Noise:
    """The no-preview baselines' spread: what a quiet machine keeps small."""
    spread_pct: float   # IQR over median, in percent, of the noisiest group of baselines
    n: int              # baselines in that group
    median_s: float
    limit_pct: float = NOISE_LIMIT_PCT
    group: str = ""     # that group's baseline, named when there are several (a variant's, a run setup's)
    groups: int = 1

    @property
    def noisy(self) -> bool:
        return self.spread_pct > self.limit_pct

    def line(self) -> str:
        """One line for the summary's top, the report's banner and the bench's last line."""
        of = f" of {self.group} (the noisiest of {self.groups} groups)" if self.groups > 1 else ""
        said = (f"the {self.n} no-preview baselines{of} spread {self.spread_pct:.1f} % (IQR over their median "
                f"{self.median_s:.2f} s)")
        if not self.noisy:
            return f"noise: {said}, within the {self.limit_pct:g} % limit"
        return (f"NOISY MACHINE: {said}, over the {self.limit_pct:g} % limit: an overhead inside its interval is "
                f"noise, and the intervals are wide. Remedies: more --repeats, a quiet machine (no other jobs), or "
                f"fewer torch threads than cores (--threads N, with taskset to pin them)")


def baseline_noise(runs: Sequence[SweepRow], limit_pct: float = NOISE_LIMIT_PCT) -> Noise | None:
    """The spread of the steady baselines, per variant and run setup (each has its own `none`, as
    '[float16 ...] none' or 'none/euler/8steps'), the noisiest group named; None with fewer than two baselines
    in any group, where no spread can be judged."""
    groups: dict[str, list[float]] = {}
    for r in runs:
        if r.role == "baseline" and r.steady:
            groups.setdefault(r.config.name, []).append(r.record.totals.wall_s)
    judged = [(spread_pct(xs), len(xs), statistics.median(xs), g) for g, xs in groups.items() if len(xs) >= 2]
    if not judged:
        return None
    s, n, m, g = max(judged)
    return Noise(s, n, m, limit_pct, g, len(judged))

"""How much of a figure is noise: a median's interval, the level it holds, and the no-preview baselines' spread.

The interval of a median is distribution-free: the order statistics [x(k), x(n+1-k)] hold the true median with a
probability given by the binomial distribution alone, whatever the noise looks like. k is the largest that keeps
that probability at 95 % or more. Under six samples no interval reaches 95 %: the interval is then the samples'
whole range and says its own level (3 samples: 75 %). A bootstrap would print a narrower range at a level it
does not have for so few samples. One sample has no interval, only `n=1`.

No torch here: the bench, the server, the page's figures and a watch's summary all judge noise with this module.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Mapping, Sequence

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


def coverage_pct(n: int, k: int) -> float:
    """The probability, in percent, that [x(k), x(n+1-k)] of n samples holds their distribution's median:
    1 - 2 P(Binomial(n, 1/2) < k)."""
    below, c = 0, 1  # sum of C(n, i) for i < k, and C(n, k): one product and one division each, not a sum each
    for i in range(k):
        below, c = below + c, c * (n - i) // (i + 1)
    return 100 - 200 * below / 2**n


def widest_k(n: int, level_pct: float = LEVEL_PCT) -> tuple[int, float]:
    """The largest k (1 <= k <= n // 2) whose [x(k), x(n+1-k)] holds the median at level_pct, else 1, and that
    interval's level (coverage_pct): in one pass over k, exact in integers (3,000 samples in about 5 ms, where a
    sum for each k took seconds: issue 56)."""
    spare = Fraction(100) - Fraction(level_pct)  # k + 1 holds the level while 200 * below(k + 1) <= spare * 2**n
    room = spare.numerator * 2**n
    below, c, k = 1, n, 1  # below: the sum of C(n, i) for i < k; c = C(n, k)
    while k + 1 <= n // 2 and 200 * (below + c) * spare.denominator <= room:
        below, c, k = below + c, c * (n - k) // (k + 1), k + 1
    return k, 100 - 200 * below / 2**n


def samples_for_level(level_pct: float = LEVEL_PCT) -> int:
    """The fewest samples whose whole range holds the median at level_pct (95 %: 6)."""
    n = 2
    while coverage_pct(n, 1) < level_pct:
        n += 1
    return n


SAMPLES_FOR_LEVEL = samples_for_level()


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

    @property
    def sure(self) -> bool:
        """Its interval holds the true median at the 95 % level: the only kind of figure advice builds on."""
        return self.has_interval and self.level_pct >= LEVEL_PCT

    @property
    def below_zero(self) -> bool:
        """Its whole interval lies under 0: previews cannot make a run faster, so the machine drifted."""
        return self.hi is not None and self.hi < 0

    @property
    def more_for_level(self) -> int:
        """Samples still needed for the 95 % level (0: it has it)."""
        return 0 if self.sure else max(1, SAMPLES_FOR_LEVEL - self.n)

    def holds(self, x: float) -> bool:
        return self.lo is not None and self.hi is not None and self.lo <= x <= self.hi

    def signed(self, digits: int = 1, unit: str = " %") -> str:
        """'+12.3 % [+8.1, +16.0]', the level added when it is under 95 % ('... (75 %)'), or '+12.3 % n=1'."""
        v = f"{self.value:+.{digits}f}{unit}"
        if self.lo is None or self.hi is None:
            return f"{v} n={self.n}"
        level = "" if self.level_pct >= LEVEL_PCT else f" ({self.level_pct:.0f} %)"
        return f"{v} [{self.lo:+.{digits}f}, {self.hi:+.{digits}f}]{level}"

    def to_json(self) -> dict[str, Any]:
        return {"value": self.value, "n": self.n, "lo": self.lo, "hi": self.hi, "level_pct": self.level_pct}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Estimate:
        return cls(float(d["value"]), int(d["n"]), d.get("lo"), d.get("hi"), float(d.get("level_pct") or 0.0))

    @staticmethod
    def to_cells(e: Estimate | None, prefix: str) -> dict[str, Any]:
        """e as five cells of a CSV line: prefix_pct (its value), prefix_lo, prefix_hi, prefix_n and
        prefix_level_pct. No figure (None) is n 0 and the others None, which csv writes as empty cells."""
        if e is None:
            return {f"{prefix}_pct": None, f"{prefix}_lo": None, f"{prefix}_hi": None, f"{prefix}_n": 0,
                    f"{prefix}_level_pct": None}
        return {f"{prefix}_pct": e.value, f"{prefix}_lo": e.lo, f"{prefix}_hi": e.hi, f"{prefix}_n": e.n,
                f"{prefix}_level_pct": e.level_pct}

    @classmethod
    def from_cells(cls, row: Mapping[str, Any], prefix: str) -> Estimate | None:
        """to_cells' five cells read back, as a CSV's text or as numbers; None where prefix_pct is empty or missing
        (no figure). Raises ValueError naming a cell that is no number."""
        def cell(name: str) -> float | None:
            x = row.get(key := f"{prefix}_{name}")
            if x in (None, ""):
                return None
            try:
                return float(x)
            except ValueError:
                raise ValueError(f"{key}={str(x)[:40]!r}: not a number") from None
        value = cell("pct")
        if value is None:
            return None
        return cls(value, int(row[f"{prefix}_n"]), cell("lo"), cell("hi"), cell("level_pct") or 0.0)


def estimate(xs: Sequence[float]) -> Estimate:
    """The median of xs and its distribution-free interval (the module's docstring says how it is chosen)."""
    if not xs:
        raise ValueError("estimate: no samples")
    s, n = sorted(xs), len(xs)
    if n < 2:
        return Estimate(s[0], 1)
    k, level = widest_k(n)
    return Estimate(statistics.median(s), n, s[k - 1], s[n - k], level)


def verdict(e: Estimate) -> str:
    """What a reader may conclude, in the same words on every surface: nothing from one sample, nothing from an
    interval that holds 0, a drifting machine from one wholly below 0, and the level when it is under 95 %."""
    if not e.has_interval:
        return "one pair: noise unknown"
    if e.within_noise:
        return "within noise"
    short = f" at {e.level_pct:.0f} % only" if e.level_pct < LEVEL_PCT else ""
    if e.below_zero:  # previews cannot make a run faster
        return f"below zero beyond noise{short}: the machine drifted" if not short else \
            f"below zero beyond noise{short}: the machine may have drifted"
    return f"beyond noise{short}"


def spread_pct(xs: Sequence[float]) -> float:
    """The interquartile range over the median, in percent."""
    return 100 * (percentile(xs, 75) - percentile(xs, 25)) / statistics.median(xs)


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

    def line(self, remedies: str = "more --repeats, a quiet machine (no other jobs), or fewer torch threads than "
                                  "cores (--threads N, with taskset to pin them)") -> str:
        """One line for the summary's top, the report's banner, the bench's last line and the page; remedies:
        what the surface offers to do about a noisy machine."""
        of = f" of {self.group} (the noisiest of {self.groups} groups)" if self.groups > 1 else ""
        said = (f"the {self.n} no-preview baselines{of} spread {self.spread_pct:.1f} % (IQR over their median "
                f"{self.median_s:.2f} s)")
        if not self.noisy:
            return f"noise: {said}, within the {self.limit_pct:g} % limit"
        return (f"NOISY MACHINE: {said}, over the {self.limit_pct:g} % limit: an overhead inside its interval is "
                f"noise, and the intervals are wide. Remedies: {remedies}")

    def to_json(self) -> dict[str, Any]:
        return {"spread_pct": self.spread_pct, "n": self.n, "median_s": self.median_s, "limit_pct": self.limit_pct,
                "group": self.group, "groups": self.groups, "noisy": self.noisy}


def noise_of(groups: Mapping[str, Sequence[float]], limit_pct: float = NOISE_LIMIT_PCT) -> Noise | None:
    """The noisiest group of baseline walls (s), by name; None where no group has two, so no spread is judged."""
    judged = [(spread_pct(xs), len(xs), statistics.median(xs), g) for g, xs in groups.items() if len(xs) >= 2]
    if not judged:
        return None
    s, n, m, g = max(judged)
    return Noise(s, n, m, limit_pct, g, len(judged))

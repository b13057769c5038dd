"""The autopilot's books: what each step of a run cost against what it would have cost without previews.

A step is clean when neither it nor the `settle` steps before it were touched (on a CPU the step after
a preview may be slower too, its caches cold; once six such steps were seen to cost no more than clean ones, they
count as clean). Row 1 carries the pipeline's own setup and is never a sample. The no-preview step time `base` is
a trimmed mean of the last `window` clean steps (before there are any: of the untouched steps; before those: the
smallest step seen). The overhead is the sum over the other steps of (step_ms - base); each step's excess is fixed
against the base known at the next clean step, so a base that moves (a busier machine) does not rewrite the steps
before it: two clean steps in a row more than `drift` off the base start a new base, split from the old where the
steps fit each best. A preview's cost is the excess of the steps this decoder's previews touched (and the settle
steps after them) over the number of those previews, the newest counted by the part of it seen so far (how a
preview's cost spreads over its first rows is learned from previews that had their rows to themselves), so a
preview that spills into the next one's step is still counted whole.

The books read step rows and say what they cost; autopilot.py holds the schedule, which reads them. One run
keeps one set of books: a live change (budget, decoder) makes a new autopilot that takes over the old one's books.
"""
from __future__ import annotations

import math
from collections import deque
from typing import Iterable

_OPEN_MAX = 256  # rows kept unfixed at most (a safety valve; clean steps fix them long before)


class _Excess:
    """The excess over the base of one kind of row (touched, or a settle row after one): its sum, count and sum
    of squares, for its mean and standard error."""
    __slots__ = ("total", "n", "squares")

    def __init__(self) -> None:
        self.total, self.n, self.squares = 0.0, 0, 0.0

    def add(self, x: float) -> None:
        self.total, self.n, self.squares = self.total + x, self.n + 1, self.squares + x * x

    def mean(self) -> float:
        return self.total / self.n if self.n else 0.0


class _Preview:
    __slots__ = ("step", "gen", "done", "own", "rows", "expect")

    def __init__(self, step: int, gen: int, expect: float, own: bool) -> None:
        self.step, self.gen, self.expect = step, gen, expect  # expect: its cost as assumed when it was made
        self.done = False  # seen to its end: a row after it that is untouched, or that the next preview started in
        self.own = own     # no preview was made in the step before, so its first row is its own
        self.rows: list[float] = []  # the excess of its rows (up to the next preview's), as they were seen, ms


class _Row:
    __slots__ = ("s", "touched", "affected", "owner")

    def __init__(self, s: float, touched: bool, affected: bool, owner: _Preview | None) -> None:
        self.s, self.touched, self.affected, self.owner = s, touched, affected, owner


def _robust_mean(xs: Iterable[float]) -> float:
    """The median of up to 4 values; above that the mean without the highest and lowest tenth (at least one)."""
    v = sorted(xs)
    n = len(v)
    if n <= 4:
        return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2
    t = max(1, n // 10)
    return sum(v[t:n - t]) / (n - 2 * t)


class Books:
    """What each step of one run cost against its no-preview base, and what each preview cost.

    Fed one row per step (observe); read by the schedule (base_ms, cost_ms, overhead_ms, unseen_ms ...). A live
    change hands the same books to the next autopilot, so the run is accounted once, however often it changes.
    """

    def __init__(self, *, settle: int, drift: float, window: int, warm: int, prior_ms: float | None) -> None:
        self.settle = settle  # untouched rows after a touched one that may still be slowed by it
        self.drift = drift    # how far off the base (relative) two clean rows in a row start a new one
        self.warm = warm      # clean rows wanted before the base is trusted (and the first preview is made)
        self.n = 0            # rows observed
        self.last_clean = 0   # the row of the newest clean step (0: none yet)
        self.last_start = 0   # the step of the newest preview (0: none yet)
        self._clean: deque[float] = deque(maxlen=window)      # the newest clean rows, ms: the base
        self._untouched: deque[float] = deque(maxlen=window)  # the newest untouched rows, ms: the base before that
        self._min = math.inf
        self._open: list[_Row] = []  # rows since the last clean step, their excess not fixed yet
        self._fixed_excess = 0.0     # fixed rows: sum of (step_ms - base), ms
        self._fixed_nop = 0.0        # fixed rows: what they would have cost without previews, ms
        self._excess = {True: _Excess(), False: _Excess()}  # by row.touched: touched rows', settle rows'
        self._settled = False        # settle rows were seen to be no slower: they are clean steps now
        self._last_touched = -10**9
        self._suspect: float | None = None       # a clean step far off the base, waiting for the next one
        self._starts: deque[_Preview] = deque()  # previews not seen to their end yet
        self._last: _Preview | None = None       # the newest preview seen to its end
        self._profile = [0.0, 0.0, 0.0]          # excess of previews on their own 1st row, 2nd, later ones
        self._spills = False                     # a preview was seen still in flight in the step after its own
        self._gen = 0               # the current decoder: previews of an earlier one count in the run, not its cost
        self.prior_ms = prior_ms    # the current decoder's cost until measured (None: unknown)
        self._done = 0              # previews of this decoder seen to their end
        self._cost_fixed = 0.0      # fixed excess of the rows of this decoder's previews, ms

    def new_decoder(self, prior_ms: float | None) -> None:
        """Previews now come from another decoder: its cost is learned anew (taken as prior_ms until measured)."""
        self._gen += 1
        self.prior_ms = prior_ms
        self._done = 0
        self._cost_fixed = 0.0

    def preview_started(self, step: int, expect_ms: float) -> None:
        """A preview was made at `step` (the schedule's step count), assumed to cost expect_ms."""
        own = step - self.last_start >= 2  # no preview in the step before: its first row is its own
        self._starts.append(_Preview(step, self._gen, expect_ms, own))
        self.last_start = step

    def observe(self, step_ms: float, touched: bool) -> None:
        """One step row, in step order: its wall cost on the denoising path and whether a preview touched it."""
        self.n += 1
        r, s = self.n, float(step_ms)
        self._min = min(self._min, s)
        st = self._starts
        # a preview ends at the first row after its own that is untouched or that the next preview started in
        while st and st[0].step < r and (not touched or (len(st) > 1 and st[1].step <= r)):
            p = st.popleft()
            p.done, self._last = True, p
            if p.gen == self._gen:
                self._done += 1
            if p.own and (not touched or len(p.rows) >= 2):  # its own rows seen, at least two of them:
                for j, x in enumerate(p.rows):               # how a preview's cost spreads over its rows
                    self._profile[min(j, 2)] += x
        if touched and st and st[0].step == r - 1:
            self._spills = True
        affected = touched or r - self._last_touched <= self.settle and not self._settle_free()
        if touched:
            self._last_touched = r
        elif r > 1:  # row 1 carries the pipeline's own setup: no measure of a step
            self._untouched.append(s)
        if not affected:
            self._clean_row(r, s)
            return
        owner = st[0] if st and st[0].step <= r else self._last
        if owner is not None and not owner.done:
            owner.rows.append(s - self.base_ms())
        self._open.append(_Row(s, touched, True, owner))
        if len(self._open) > _OPEN_MAX:
            self._fix(self._open[:1], self.base_ms())
            del self._open[:1]

    @property
    def measured(self) -> bool:
        """A preview of the current decoder was seen to its end in this run."""
        return self._done > 0

    @property
    def measured_n(self) -> int:
        """Previews of the current decoder seen to their end in this run."""
        return self._done

    @property
    def cost_ms(self) -> float | None:
        """What one preview of the current decoder costs in wall time: measured, else the prior, else None.

        The excess of every row that this decoder's previews touched, over the previews it covers: those seen to
        their end, and the part seen so far of the one that is not (a preview's spill into the next one's row is
        counted with that row, so only the newest is short of its own)."""
        if not self.measured:
            return self.prior_ms
        b = self.base_ms()
        excess = self._cost_fixed + sum(row.s - b for row in self._open
                                        if row.owner is not None and row.owner.gen == self._gen)
        seen = self._done + sum(self._share(p) for p in self._starts if p.gen == self._gen)
        return max(excess / seen, 0.0)

    def _share(self, p: _Preview) -> float:
        """The part of preview p's cost that the rows seen so far carry, as earlier previews' own rows showed."""
        rows = self.n - p.step + 1
        if rows <= 0:
            return 0.0
        total = sum(self._profile)
        if total <= 0:  # none seen yet: all on its own row, or half when previews were seen in flight
            return 0.5 if rows == 1 and self._spills else 1.0
        return 1.0 if rows >= 3 else min(1.0, max(0.0, sum(self._profile[:rows]) / total))

    def unseen_ms(self, cost_ms: float) -> float:
        """The part not seen yet of the previews made, ms: the current decoder's at cost_ms each, an earlier
        decoder's at what it was expected to cost when it was made."""
        return sum((cost_ms if p.gen == self._gen else p.expect) * (1 - self._share(p)) for p in self._starts)

    @property
    def base_ready(self) -> bool:
        """Enough clean rows were measured for the base (warm), and none far off it waits for the next."""
        return len(self._clean) >= self.warm and self._suspect is None

    def base_ms(self) -> float:
        """The no-preview step time."""
        if self._clean:
            return _robust_mean(self._clean)
        if self._untouched:
            return _robust_mean(self._untouched)
        return self._min if self._min < math.inf else 0.0

    def overhead_ms(self) -> float:
        """The run's wall overhead so far: the rows seen against what they would have cost without previews."""
        b = self.base_ms()
        return self._fixed_excess + sum(row.s - b for row in self._open if row.affected)

    def overhead_pct(self) -> float:
        """overhead_ms() in percent of the rows' no-preview time."""
        nop = self.nop_ms()
        return 100 * self.overhead_ms() / nop if nop > 0 else 0.0

    def nop_ms(self) -> float:
        """What the rows seen would have cost without previews, ms."""
        b = self.base_ms()
        return self._fixed_nop + sum(b if row.affected else row.s for row in self._open)

    def _settle_free(self) -> bool:
        """The steps after touched ones were seen to cost no more than the base (within twice their standard
        error, after at least 6): no longer kept out of the base. Decided once."""
        if not self._settled:
            settle = self._excess[False]
            n = settle.n
            if n >= 6:
                mean = settle.mean()
                se = math.sqrt(max(settle.squares / n - mean * mean, 0.0) / (n - 1))
                self._settled = abs(mean) <= 2 * se
        return self._settled

    def _fix(self, rows: list[_Row], b: float) -> None:
        for row in rows:
            if not row.affected:
                self._fixed_nop += row.s
                continue
            x = row.s - b
            self._fixed_excess += x
            self._fixed_nop += b
            self._excess[row.touched].add(x)
            if row.owner is not None and row.owner.gen == self._gen:
                self._cost_fixed += x

    def _clean_row(self, r: int, s: float) -> None:
        self.last_clean = r
        if r == 1:  # clean, but it carries the pipeline's own setup: no measure of a step
            self._fix(self._open + [_Row(s, False, False, None)], self.base_ms())
            self._open.clear()
            return
        old = _robust_mean(self._clean) if len(self._clean) >= self.warm else None
        far = old is not None and old > 0 and abs(s / old - 1) > self.drift
        if self._suspect is not None:
            first, self._suspect = self._suspect, None
            if far and old is not None and (first > old) == (s > old):  # two in a row, one side: the base moved
                self._split(old, (first + s) / 2, [first, s], _Row(s, False, False, None))
                return
            self._clean.append(first)  # a one-off: an ordinary clean step after all
            now = _robust_mean(self._clean)
            far = now > 0 and abs(s / now - 1) > self.drift
        if far:
            self._suspect = s
            self._open.append(_Row(s, False, False, None))  # kept open: the split may fall either side of it
            return
        self._clean.append(s)
        self._fix(self._open + [_Row(s, False, False, None)], _robust_mean(self._clean))
        self._open.clear()

    def _split(self, old: float, new: float, samples: list[float], last: _Row) -> None:
        """The base moved from old to new within the open rows: fix each part against its own base, cut where the
        rows (less the usual excess of touched and settle rows) fit the two bases best."""
        rows = self._open
        usual = {k: v.mean() for k, v in self._excess.items()}
        vals = [row.s - (usual[row.touched] if row.affected else 0.0) for row in rows]
        best, cut, err = math.inf, 0, sum((v - new) ** 2 for v in vals)
        for j in range(len(rows) + 1):  # rows[:j] on the old base, rows[j:] on the new one
            if err < best:
                best, cut = err, j
            if j < len(rows):
                err += (vals[j] - old) ** 2 - (vals[j] - new) ** 2
        self._fix(rows[:cut], old)
        self._clean.clear()
        self._clean.extend(samples)
        self._fix(rows[cut:] + [last], new)
        self._open = []

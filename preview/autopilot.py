"""The budget autopilot: spaces the previews so that what they cost in wall time lands at a budget.

What it holds to the budget is the run's wall overhead: the steps' wall time on the denoising path against what
the same steps would have cost without previews. It learns that no-preview step time from the steps no preview
touched, and a preview's cost from the touched steps' excess over it, so the cost is whatever the preview did to
the steps (its own time on the denoising thread, the denoising it slowed while in flight on a side stream, the
caches it left cold), not a figure reported beside them.

Driving it (the step meter does, in this order):

  decide()            once per step, before due(): the interval (the least spacing between previews). It may
                      switch `decoder` to a cheaper one and set `note`, the row's event text ("" when nothing
                      changed).
  due(since)          once per step: make a preview now? `since`: steps since the last preview (or since the run
                      began). Each call is the next step of the run.
  preview_started()   right after due() said yes and preview work ran in this step (made, or failed on the way;
                      not when it was skipped before any work).
  observe(step_ms, touched)
                      once per step row, in step order, as soon as the row's times are known (rows may come some
                      steps late). step_ms: the step's wall cost on the denoising path (its denoising plus the
                      preview time that ran on the denoising thread in that step); touched: a preview ran in that
                      step or was still in flight during it.
  keep_books(old)     on a new autopilot made for a live change (budget, decoder), to carry the run over.

The books. A step is clean when neither it nor the `settle` steps before it were touched (on a CPU the step after
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

The schedule. The allowance is budget x the run's no-preview time (the steps seen, the rest at base), less the
overhead seen and the part not seen yet of the previews made. With m = allowance / cost previews left, the pace is
(steps - the step of the last preview) / (m + 1): the previews left spread evenly over the rest of the run with as
much room after the last one as between them, a pace that a preview made on time leaves unchanged. A preview is
due once `since` reaches the pace (rounded) and the interval, and none is made with less than half a preview's
cost left, so the run ends as near its budget as a whole number of previews allows. The last step never gets one
(the final image follows it; in overlap mode its cost would fall after the last row). The interval is the whole
part of the pace; it moves only when the pace leaves [interval - h, interval + 1 + h), h = `hysteresis` or 10 %
of the interval, and only when asked two steps in a row (a row seen before its preview's next one asks once), so
it does not flap between two values; the books then space the previews interval or interval + 1 apart.

The first preview waits for `min_clean` clean steps. Until a decoder's cost is measured it is taken to be
`prior_ms` (measured in an earlier run) or else one step. When previews are dense, one is skipped now and then so
that a clean step is seen at least every `refresh` steps (not in the run's last 2 x refresh steps, nor when the
budget would pay for every step left twice over). A live budget change applies from then on: the steps before it
keep the share of the old budget. When even `min_previews` previews in the whole run would not fit the budget, it
falls back to a cheaper decoder (vae -> taesd -> latent2rgb) and says so in `note`.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from . import decoders
from .decoders import DecoderName

_OPEN_MAX = 256  # rows kept unfixed at most (a safety valve; clean steps fix them long before)


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


def _robust_mean(xs) -> float:
    """The median of up to 4 values; above that the mean without the highest and lowest tenth (at least one)."""
    v = sorted(xs)
    n = len(v)
    if n <= 4:
        return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2
    t = max(1, n // 10)
    return sum(v[t:n - t]) / (n - 2 * t)


@dataclass
class Autopilot:
    budget_pct: float
    steps: int                     # steps in the run
    decoder: DecoderName
    has_taesd: bool = True
    prior_ms: float | None = None  # a cost per preview measured earlier for this decoder; None: assume one step
    min_previews: int = 2          # a decoder that cannot fit this many previews in the run does not "fit"
    min_clean: int = 5             # clean steps measured before the first preview (fewer in runs under 25 steps)
    settle: int = 1                # untouched steps after a touched one that may still be slowed by it
    refresh: int = 8               # a clean step is measured at least this often while previews are dense
    hysteresis: float = 0.5        # h of the interval's band (or 10 % of the interval when that is more)
    drift: float = 0.15            # how far off the base (relative) two clean steps in a row start a new one
    window: int = 50               # the newest clean steps the base is made from

    def __post_init__(self) -> None:
        self.interval = 1
        self.note = ""              # what the autopilot changed, for the row's event column
        self.k = 0                  # due() calls: the step asked about last
        self.n = 0                  # rows observed
        self._told = False          # the first interval was announced
        self._last_start = 0        # the step of the newest preview (0: none yet)
        self._clean: deque[float] = deque(maxlen=self.window)
        self._untouched: deque[float] = deque(maxlen=self.window)
        self._min = math.inf
        self._open: list[_Row] = []  # rows since the last clean step, their excess not fixed yet
        self._fixed_excess = 0.0     # fixed rows: sum of (step_ms - base), ms
        self._fixed_nop = 0.0        # fixed rows: what they would have cost without previews, ms
        self._kind = {True: [0.0, 0, 0.0], False: [0.0, 0, 0.0]}  # touched / settle rows' excess: sum, n, sum sq.
        self._settled = False        # settle rows were seen to be no slower: they are clean steps now
        self._last_touched = -10**9
        self._last_clean = 0
        self._suspect: float | None = None  # a clean step far off the base, waiting for the next one
        self._starts: deque[_Preview] = deque()  # previews not seen to their end yet
        self._last: _Preview | None = None   # the newest preview seen to its end
        self._profile = [0.0, 0.0, 0.0]      # excess of previews on their own 1st row, 2nd, later ones
        self._spills = False                 # a preview was seen still in flight in the step after its own
        self._want: int | None = None        # a new interval asked for once; a second time in a row moves it
        self._credit = 0.0                   # budget earned by the steps before the last budget change, ms
        self._nop_from = 0.0                 # their no-preview time, ms
        self._gen = -1
        self._new_decoder(self.prior_ms)

    def _new_decoder(self, prior_ms: float | None) -> None:
        self._gen += 1
        self.prior_ms = prior_ms
        self._done = 0          # previews of this decoder seen to their end
        self._cost_fixed = 0.0  # fixed excess of the rows of this decoder's previews, ms

    # ---- what the meter calls -------------------------------------------------------------------------------

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

    def preview_started(self) -> None:
        """The preview that the last due() asked for was made (or failed after it began)."""
        self._starts.append(_Preview(self.k, self._gen, self._cost(), own=self.k - self._last_start >= 2))
        self._last_start = self.k

    def due(self, since: int) -> bool:
        """Make a preview now? `since`: steps since the last one (or since the run began)."""
        self.k += 1
        if since < self.interval or self.k >= self.steps or self.n == 0 or self._warming():
            return False
        c = self._cost()
        allowance = self._allowance(c)
        if allowance < c / 2:
            return False  # one more would take the run further from its budget than none
        if self._stale() and allowance < 2 * c * (self.steps - self.k):
            return False  # measure a clean step first (unless the budget would pay for every step left twice)
        return since + 0.5 >= self._pace(c, allowance)

    def decide(self) -> int:
        """The interval (the least spacing between previews); may switch self.decoder (and set self.note)."""
        self.note = ""
        if self.n == 0:
            return self.interval
        b, c = self.base_ms(), self._cost()
        cheaper = decoders.cheaper(self.decoder, self.has_taesd)
        if cheaper and self.measured and c * self.min_previews > self.budget_pct / 100 * self.steps * b:
            self.note = (f"autopilot: {self.decoder} at {c:.0f} ms per preview cannot fit a "
                         f"{self.budget_pct:g}% budget ({b:.0f} ms steps); switching to {cheaper}")
            self.switch_decoder(cheaper)
            c = self._cost()
        allowance = self._allowance(c)
        if allowance >= c or not self._told:  # with less than one preview left the pace says little: keep it
            pace = self._pace(c, allowance)
            n = self.interval
            h = max(self.hysteresis, 0.1 * n) if self.hysteresis > 0 else 0.0
            if not self._told or not n - h <= pace < n + 1 + h:
                n = max(1, int(min(pace, self.steps)))
            if n != self.interval or not self._told:
                if self._told and not self.note and self.hysteresis > 0 and n != self._want:
                    self._want = n  # asked once: it may be a row seen before its preview's next one; ask again
                    return self.interval
                if not self.note:
                    self.note = f"autopilot: every {n}"
                self.interval, self._told = n, True
            self._want = None
        return self.interval

    def switch_decoder(self, decoder: DecoderName, prior_ms: float | None = None) -> None:
        """Previews now come from another decoder: its cost is learned anew (taken as prior_ms until measured)."""
        self.decoder = decoder
        self._new_decoder(prior_ms)

    def keep_books(self, old: Autopilot) -> None:
        """A live change made this autopilot in place of `old`: carry the run's books over. A new budget applies
        from now on; a new decoder's cost is learned anew (from this autopilot's prior_ms until measured)."""
        mine = self.budget_pct, self.decoder, self.prior_ms
        self.__dict__.update({k: v for k, v in old.__dict__.items() if k not in ("budget_pct", "decoder")})
        self.budget_pct, self.decoder = mine[0], mine[1]
        if self.budget_pct != old.budget_pct:  # the steps so far keep the old budget's share, the rest the new
            now = self._nop_seen() + max(0, self.k - self.n) * self.base_ms()
            self._credit += old.budget_pct / 100 * (now - self._nop_from)
            self._nop_from = now
        if self.decoder != old.decoder:
            self._new_decoder(mine[2])

    # ---- what it knows ----------------------------------------------------------------------------------------

    @property
    def measured(self) -> bool:
        """A preview of the current decoder was seen to its end in this run."""
        return self._done > 0

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
        nop = self._nop_seen()
        return 100 * self.overhead_ms() / nop if nop > 0 else 0.0

    def _nop_seen(self) -> float:
        """What the rows seen would have cost without previews, ms."""
        b = self.base_ms()
        return self._fixed_nop + sum(b if row.affected else row.s for row in self._open)

    # ---- inside -----------------------------------------------------------------------------------------------

    def _cost(self) -> float:
        """The cost taken for the next preview: measured, else the prior, else one step."""
        b = self.base_ms()
        c = self.cost_ms
        return max(b if c is None else c, 0.002 * b, 1e-6)

    def _allowance(self, c: float) -> float:
        """Budget x the run's no-preview time (the rows seen, the rest at base), less the overhead seen and the
        part not seen yet of the previews made. After a live budget change the steps before it count at the
        budget they ran under."""
        nop = self._nop_seen() + max(0, self.steps - self.n) * self.base_ms()
        pending = sum((c if p.gen == self._gen else p.expect) * (1 - self._share(p)) for p in self._starts)
        return self._credit + self.budget_pct / 100 * (nop - self._nop_from) - self.overhead_ms() - pending

    def _pace(self, c: float, allowance: float) -> float:
        m = allowance / c
        return (self.steps - self._last_start) / (m + 1) if m > 0 else math.inf

    def _warming(self) -> bool:
        """No preview now: too few clean steps measured yet, or one far off the base waits for the next."""
        return len(self._clean) < self._warm() or self._suspect is not None

    def _stale(self) -> bool:
        """The newest clean step is over `refresh` steps old, and the run has more than 2 x refresh steps left."""
        return self.k - self._last_clean > self.refresh and self.steps - self.k > 2 * self.refresh

    def _settle_free(self) -> bool:
        """The steps after touched ones were seen to cost no more than the base (within twice their standard
        error, after at least 6): no longer kept out of the base. Decided once."""
        if not self._settled:
            total, n, sq = self._kind[False]
            if n >= 6:
                mean = total / n
                se = math.sqrt(max(sq / n - mean * mean, 0.0) / (n - 1))
                self._settled = abs(mean) <= 2 * se
        return self._settled

    def _warm(self) -> int:
        return max(1, min(self.min_clean, self.steps // 5))

    def _fix(self, rows: list[_Row], b: float) -> None:
        for row in rows:
            if not row.affected:
                self._fixed_nop += row.s
                continue
            x = row.s - b
            self._fixed_excess += x
            self._fixed_nop += b
            kind = self._kind[row.touched]
            kind[0] += x
            kind[1] += 1
            kind[2] += x * x
            if row.owner is not None and row.owner.gen == self._gen:
                self._cost_fixed += x

    def _clean_row(self, r: int, s: float) -> None:
        self._last_clean = r
        if r == 1:  # clean, but it carries the pipeline's own setup: no measure of a step
            self._fix(self._open + [_Row(s, False, False, None)], self.base_ms())
            self._open.clear()
            return
        old = _robust_mean(self._clean) if len(self._clean) >= self._warm() else None
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
        usual = {k: (v[0] / v[1] if v[1] else 0.0) for k, v in self._kind.items()}
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

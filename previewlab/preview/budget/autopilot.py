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
  books.observe(step_ms, touched)
                      once per step row, in step order, as soon as the row's times are known (rows may come some
                      steps late). step_ms: the step's wall cost on the denoising path (its denoising plus the
                      preview time that ran on the denoising thread in that step); touched: a preview ran in that
                      step or was still in flight during it.
  keep_books(old)     on a new autopilot made for a live change (budget, decoder), to carry the run over.

`books` (preview/budget/step_costs.py) says what each step cost against the no-preview base, and what a preview costs
(books.cost_ms, books.measured); the autopilot only reads them to schedule.

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
keep the share of the old budget.

What it trades, in order (each decision is its `note`, the row's event):
  1. pixels: when the budget affords previews only sparser than WANT (every step), it first decodes smaller:
     the preview's long side halved, as far as `sides` allows (Previewer.sides: each smaller side a TAE stage
     fewer, none under 128 px; a decoder with no stage to leave out, or decode_at full, has no smaller side).
     It trades a size only after TRADE_AFTER of its previews were measured (a run's first pays first-call costs),
     and while the budget still pays for one more. A smaller preview's cost is learned anew, taken as
     prior_of's (an earlier run's, at that size) or else SMALLER_COST of the larger one's until measured.
     Every step at a smaller size may cost less than the budget: previews every step, under budget.
  2. frequency: the interval follows the pace of what the budget affords at that size.
  3. the decoder: when even `min_previews` previews in the whole run would not fit the budget at its smallest
     size (its cost guessed as above until measured), it falls back to a cheaper decoder (vae -> taesd ->
     latent2rgb), whose previews start at the user's size.
It never trades back within a run: a live change (budget, decoder, preview size) makes a new autopilot, which
starts again at the user's size.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Mapping

from previewlab.preview.decoding import decoders
from previewlab.preview.budget.step_costs import Books
from previewlab.preview.names import DecoderName

# What a preview at half the side is taken to cost, of the larger one's, until measured: the decode of a TAE with
# one stage fewer took 0.40 to 0.58 of the whole one here (bench.quality), and the encode of a quarter of the
# pixels less; the higher end, so that a guess overspends the budget by no more than the measure corrects.
SMALLER_COST = 0.6
WANT = 1       # the interval the autopilot wants: a budget that affords only sparser previews trades pixels first
TRADE_AFTER = 2  # previews measured at a size before it trades it: a run's first preview pays first-call costs


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
    # per decoder: the preview's long side in px at the user's settings, then each smaller one it can decode at
    # (Previewer.sides); a decoder with one side or none is never made smaller
    sides: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    # a cost per preview measured earlier for (decoder, the long side it decodes at, 0: the user's), if any
    prior_of: Callable[[str, int], float | None] = lambda decoder, side: None

    def __post_init__(self) -> None:
        self.interval = 1
        self.note = ""               # what the autopilot changed, for the row's event column
        self.smaller = 0             # halvings of the preview's side made (an index into sides[decoder])
        self.k = 0                   # due() calls: the step asked about last
        self._told = False           # the first interval was announced
        self._want: int | None = None  # a new interval asked for once; a second time in a row moves it
        self._credit = 0.0           # budget earned by the steps before the last budget change, ms
        self._nop_from = 0.0         # their no-preview time, ms
        warm = max(1, min(self.min_clean, self.steps // 5))  # clean steps wanted before the first preview
        self.books = Books(settle=self.settle, drift=self.drift, window=self.window, warm=warm,
                           prior_ms=self.prior_ms)

    # ---- what the meter calls -------------------------------------------------------------------------------

    def preview_started(self) -> None:
        """The preview that the last due() asked for was made (or failed after it began)."""
        self.books.preview_started(self.k, self._cost())

    def due(self, since: int) -> bool:
        """Make a preview now? `since`: steps since the last one (or since the run began)."""
        self.k += 1
        books = self.books
        if since < self.interval or self.k >= self.steps or books.n == 0 or not books.base_ready:
            return False  # warming up: too few clean steps measured yet, or one far off the base waits for the next
        c = self._cost()
        allowance = self._allowance(c)
        if allowance < c / 2:
            return False  # one more would take the run further from its budget than none
        if self._stale() and allowance < 2 * c * (self.steps - self.k):
            return False  # measure a clean step first (unless the budget would pay for every step left twice)
        return since + 0.5 >= self._pace(c, allowance)

    def decide(self) -> int:
        """The interval (the least spacing between previews); may decode smaller or switch self.decoder (and set
        self.note): pixels first, then the interval, then the decoder."""
        notes: list[str] = []
        self.note = ""
        books = self.books
        if books.n == 0:
            return self.interval
        b, c = books.base_ms(), self._cost()
        cheaper = decoders.cheaper(self.decoder, self.has_taesd)
        smallest = c * SMALLER_COST ** (len(self._sides()) - 1 - self.smaller) if self._has_smaller() else c
        if cheaper and books.measured and smallest * self.min_previews > self.budget_pct / 100 * self.steps * b:
            # even its smallest preview (its cost as guessed until measured) cannot fit: a cheaper decoder
            notes.append(f"{self.decoder} at {c:.0f} ms per preview cannot fit a {self.budget_pct:g}% budget "
                         f"({b:.0f} ms steps); switching to {cheaper}")
            self.switch_decoder(cheaper, self.prior_of(cheaper, 0))
            c = self._cost()
        elif (pace := self._trade_pace(c)) is not None:
            was = self._sides()[self.smaller]
            self.smaller += 1
            side = self.preview_max
            notes.append(f"{self.decoder} at {c:.0f} ms per preview fits one every {pace:.1f} steps in a "
                         f"{self.budget_pct:g}% budget; smaller previews first: {side} px, was {was} px")
            prior = self.prior_of(self.decoder, side)
            books.new_decoder(SMALLER_COST * c if prior is None else prior)
            c = self._cost()
        allowance = self._allowance(c)
        if allowance >= c or not self._told:  # with less than one preview left the pace says little: keep it
            pace = self._pace(c, allowance)
            n = self.interval
            h = max(self.hysteresis, 0.1 * n) if self.hysteresis > 0 else 0.0
            if not self._told or not n - h <= pace < n + 1 + h:
                n = max(1, int(min(pace, self.steps)))
            if n != self.interval or not self._told:
                if self._told and not notes and self.hysteresis > 0 and n != self._want:
                    self._want = n  # asked once: it may be a row seen before its preview's next one; ask again
                    return self.interval
                notes.append(f"every {n}")
                self.interval, self._told = n, True
            self._want = None
        if notes:
            self.note = "autopilot: " + "; ".join(notes)
        return self.interval

    @property
    def preview_max(self) -> int:
        """The long side the autopilot decodes this decoder's previews at, px; 0: the user's settings. (A
        fallback on the encode thread may have just switched the decoder: its sides, clamped.)"""
        sides = self._sides()
        return sides[min(self.smaller, len(sides) - 1)] if self.smaller and sides else 0

    def switch_decoder(self, decoder: DecoderName, prior_ms: float | None = None) -> None:
        """Previews now come from another decoder, at the user's size: its cost is learned anew (taken as prior_ms
        until measured)."""
        self.decoder, self.smaller = decoder, 0
        self.books.new_decoder(prior_ms)

    def keep_books(self, old: Autopilot, new_cost: bool = False) -> None:
        """A live change made this autopilot in place of `old`: carry the run over, its books and where the
        schedule stands. A new budget applies from now on; a new decoder's cost is learned anew (from this
        autopilot's prior_ms until measured), and so is the cost after any change that makes a preview cost
        something else (new_cost: a clip's frames). Its other settings are its own (the meter makes both alike)."""
        self.books, self.k, self.interval = old.books, old.k, old.interval
        self._told, self._want = old._told, old._want
        self._credit, self._nop_from = old._credit, old._nop_from
        books = self.books
        if self.budget_pct != old.budget_pct:  # the steps so far keep the old budget's share, the rest the new
            now = books.nop_ms() + max(0, self.k - books.n) * books.base_ms()
            self._credit += old.budget_pct / 100 * (now - self._nop_from)
            self._nop_from = now
        if self.decoder != old.decoder or new_cost or old.smaller:  # this one starts at the user's size
            books.new_decoder(self.prior_ms)

    # ---- inside -----------------------------------------------------------------------------------------------

    def _cost(self) -> float:
        """The cost taken for the next preview: measured, else the prior, else one step."""
        b = self.books.base_ms()
        c = self.books.cost_ms
        return max(b if c is None else c, 0.002 * b, 1e-6)

    def _allowance(self, c: float) -> float:
        """Budget x the run's no-preview time (the rows seen, the rest at base), less the overhead seen and the
        part not seen yet of the previews made. After a live budget change the steps before it count at the
        budget they ran under."""
        books = self.books
        nop = books.nop_ms() + max(0, self.steps - books.n) * books.base_ms()
        return self._credit + self.budget_pct / 100 * (nop - self._nop_from) - books.overhead_ms() - books.unseen_ms(c)

    def _pace(self, c: float, allowance: float) -> float:
        m = allowance / c
        return (self.steps - self.books.last_start) / (m + 1) if m > 0 else math.inf

    def _sides(self) -> tuple[int, ...]:
        return self.sides.get(self.decoder, ())

    def _trade_pace(self, c: float) -> float | None:
        """The pace at this size when pixels are to be traded now, else None: a smaller size is left, this size's
        cost was measured (TRADE_AFTER previews), and the budget affords previews only sparser than WANT at it,
        yet still one more (not spent, nor the run's end). The allowance is read only past the cheap checks."""
        if not (self._has_smaller() and self.books.measured_n >= TRADE_AFTER and self.steps - self.k > self.refresh):
            return None
        allowance = self._allowance(c)
        pace = self._pace(c, allowance)
        return pace if allowance >= SMALLER_COST * c / 2 and WANT + 0.5 < pace < math.inf else None

    def _has_smaller(self) -> bool:
        """A smaller decode of this decoder is left to trade for."""
        return self.smaller + 1 < len(self._sides())

    def _stale(self) -> bool:
        """The newest clean step is over `refresh` steps old, and the run has more than 2 x refresh steps left."""
        return self.k - self.books.last_clean > self.refresh and self.steps - self.k > 2 * self.refresh

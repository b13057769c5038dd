"""Where a set of runs' picture settles: the step from which no preview changed visibly any more (each run's
totals.settle_step, judging/progress.py), read over the runs at the densest interval whose progress was read. The
advice prefers an interval that previews at least twice before it. No torch here.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Sequence

from previewlab.preview.judging.analysis import Measured


@dataclass(frozen=True)
class Settle:
    """Where the picture settles: from `step` on (of `steps`), no preview changed by more than the progress
    threshold from the one before (the runs' settle_step), read on runs previewing every `every` steps. settled
    False: their pictures still changed at their last preview (step is then the last step)."""
    step: int
    steps: int
    every: int
    settled: bool = True

    @property
    def early(self) -> bool:
        """Well before the last step: at or before three quarters of the run (a quarter of its steps change no
        preview visibly), and two steps or more before its end (one step is no shorter schedule to measure)."""
        return self.settled and self.step <= 0.75 * self.steps and self.steps - self.step >= 2

    def shows(self, every: int) -> bool:
        """An interval shows each change before the picture settles when it previews at least twice by then
        (every <= step / 2): a sparser one makes one preview, or none, while the picture still moves."""
        return every <= self.step / 2

    def said(self) -> str:
        if not self.settled:
            return f"the picture still changes at its last preview (read every {self.every} of {self.steps} steps)"
        return f"the picture settles at step {self.step} of {self.steps}"

    def to_json(self) -> dict[str, Any]:
        return {"step": self.step, "steps": self.steps, "every": self.every, "settled": self.settled}


def settle_of(runs: Sequence[Measured]) -> Settle | None:
    """Where a set of runs' picture settles, from the steady runs with previews at the densest interval whose
    progress was read (totals.compared 2 or more; a sparser interval reads it only to its own interval): the
    median of their settle steps (totals.settle_step), a run that never settled counting as past its last step.
    None: no run's progress was read (older records, no previews), or the runs are a synthetic model's (noise
    pictures settle on nothing a user would see)."""
    got: dict[int, list[tuple[int, int]]] = {}
    for r in runs:
        t, p = r.record.totals, r.record.meta.preview
        if not (r.steady and r.role == "config" and p is not None and p.budget <= 0 and t.compared >= 2
                and not r.record.meta.synthetic):
            continue
        n = t.steps_run or r.record.meta.steps
        got.setdefault(p.every, []).append((t.settle_step if t.settle_step is not None else n + 1, n))
    if not got:
        return None
    every = min(got)
    step, n = int(statistics.median_low(s for s, _ in got[every])), int(statistics.median_low(n for _, n in got[every]))
    return Settle(step, n, every) if step <= n else Settle(n, n, every, settled=False)

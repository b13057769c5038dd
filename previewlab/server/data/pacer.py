"""Parsing a run's files shares the interpreter with the model: it yields, and while a run is being written it
takes a small share of the time.

Four exports of 150 runs of 1000 steps, each re-parsing every row, took a running model's denoise from 47-103 ms
a step to 553 ms: torch lets the interpreter go inside each op and a parsing thread holding it then makes the
model wait up to the switch interval (5 ms) for it back, op after op. A parse in slices of SLICE_S that rests
between them hands the interpreter back at each rest, and rests long enough to use at most LIVE_SHARE of the
time while a run is being written; with none, each rest is a yield (sleep 0).
"""
from __future__ import annotations

import time
from typing import Callable

LIVE_SHARE = 0.05   # of the wall time a parse may take while a run is written: 2 ms of work, then 38 ms of rest
SLICE_S = 0.002     # work between rests: the longest a model waits for the interpreter on a parse's account


class Pacer:
    """Makes tick()s for one parse at a time; clock and sleep injected (tests use fake time)."""

    def __init__(self, share: float = LIVE_SHARE, slice_s: float = SLICE_S,
                 clock: Callable[[], float] = time.perf_counter, sleep: Callable[[float], None] = time.sleep) -> None:
        if not 0 < share <= 1:
            raise ValueError(f"share {share}: a fraction above 0 and at most 1 is allowed")
        self.share, self.slice_s, self.clock, self.sleep = share, slice_s, clock, sleep
        self.rests = 0  # rests taken, all parses together

    def ticks(self, live: Callable[[], bool]) -> Callable[[], None]:
        """A tick to call after each row of one parse: past a slice of work it rests, for share's complement
        of that work when live() (a run is being written), else for a yield."""
        started = [self.clock()]

        def tick() -> None:
            worked = self.clock() - started[0]
            if worked < self.slice_s:
                return
            self.sleep(worked * (1 / self.share - 1) if live() else 0.0)
            self.rests += 1
            started[0] = self.clock()
        return tick


def no_pause() -> None:
    """The tick of a read that is not paced (a run's rows for its figures: one run, bounded)."""

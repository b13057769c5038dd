"""The page's measure series: the current settings' overhead measured as the bench measures it.

A series runs pairs of a no-preview baseline of the user's run settings and a run with the user's preview
settings, until that configuration's overhead has the pairs it set out to add, or it has started MAX_PAIRS pairs,
or the user stops it, or no tab watches it any more. The pairs alternate their order, as a benchmarker
counterbalances: baseline first, then previews first, then baseline first ... (order_of, going on from the pairs
the configuration has), so whatever the order itself does to a run's wall (a warm cache, a cooler core) cancels
over the pairs; the analysis pairs a run with the baseline right before it or, where that is none, right after it.

What it adds (more_pairs) is said at its start: the pairs the configuration's figure still needs for the 95 %
level, counted from the pairs it already has; where it has that level, the pairs after which its 95 % interval
leaves out one more pair at each end (a narrower interval), never a single pair that changes nothing. The user's
settings are not touched: the series' runs are its own, marked `baseline` and `measured` (RunMeta.purpose).
States: running -> done | stopped | failed; the next run starts when the one before has ended and its figures
are written (Relay.on_done), so the decision reads the same analysis the page shows.

A series is held by the server from its Measure on, while it counts the pairs its configuration has (count), so a
Stop at any moment ends it (issue 56: a Stop then was answered "no generation is running" and the series ran
whole). Its runs, and those its configuration's figure stood on, are held from retention while it runs (key,
held): a folder that keeps fewer runs than its figure needs is refused at its start (room), and a run that is
gone from the folder all the same (removed by hand) stops it, saying so (after's `gone`).
"""
from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Literal, Sequence

from previewlab.preview.judging.analysis import Entry, cost_key, findings, name_of
from previewlab.preview.judging.estimates import LEVEL_PCT, SAMPLES_FOR_LEVEL, Estimate, coverage_pct
from previewlab.preview.record.run import RunEnd, RunMeta
from previewlab.preview.settings import Purpose, RunSettings

from previewlab.server.core.run_figures import RunFigures
from previewlab.server.ws import outbound

MAX_PAIRS = 24  # pairs a series starts at most: 6 reach 95 % whatever the noise; 24 started and still short means
# runs that do not pair (a preview's fallback, a live change), and more would only repeat that
State = Literal["running", "done", "stopped", "failed"]
_KEYS = itertools.count(1)  # each series' key, as it holds its runs from retention


class Refused(ValueError):
    """Settings a series cannot measure: its one line says why and what to do instead."""


def refusal(settings: RunSettings) -> str:
    """Why these settings cannot be measured by a series ("" when they can)."""
    p = settings.preview
    if p.decoder == "none":
        return ("measure: decoder none has no overhead to measure; choose the decoder whose cost you want, and the "
                "series runs the baselines itself")
    if p.budget > 0:  # every autopilot run moves its interval (and may switch decoder) as it goes: never steady
        return ("measure: interval auto changes its interval and decoder during the run, so its runs are never "
                "steady and cannot be paired; measure a fixed interval (Every N steps: the one auto settled on is "
                "in its run's live changes)")
    return ""


def order_of(pair: int) -> tuple[Purpose, Purpose]:
    """The runs of a series' pair number `pair` (from 0), in the order they run: baseline first in even pairs,
    previews first in odd ones."""
    return ("baseline", "measured") if pair % 2 == 0 else ("measured", "baseline")


def _inner(n: int) -> int:
    """How many samples at each end n samples' 95 % interval of the median leaves out, plus one (estimate()'s k;
    0 under SAMPLES_FOR_LEVEL, where no interval holds 95 %)."""
    k = 0
    while k + 1 <= n // 2 and coverage_pct(n, k + 1) >= LEVEL_PCT:
        k += 1
    return k


def more_pairs(found: Estimate | None) -> int:
    """The pairs a series adds to a configuration whose overhead is `found` (None: it has no pair yet): those it
    needs for the 95 % level; where it has that level, those after which its interval leaves out one more pair at
    each end (6 pairs: 3 more; 9: 3 more)."""
    if found is None:
        return SAMPLES_FOR_LEVEL
    if not found.sure:
        return found.more_for_level
    n = found.n + 1
    while _inner(n) <= _inner(found.n):
        n += 1
    return n - found.n


def standing(entries: Sequence[Entry], meta: RunMeta) -> tuple[Estimate | None, frozenset[str]]:
    """The overhead that `meta`'s configuration has now among `entries` (the data folder's ended runs, oldest
    first): the analysis' figure over the runs of the same settings (cost_key), None without a pair; and the ids
    of the runs it stands on (its pairs' runs and baselines)."""
    key, name = cost_key(meta), name_of(meta.preview, meta.num_frames)
    group = [e for e in entries if cost_key(e.record.meta) == key]
    found = next((f for f in findings(group) if f.name == name), None)
    if found is None:
        return None, frozenset()
    return found.overhead, frozenset(rid for pair in found.pairs for rid in pair)


class Series:
    """One measure series (at most one at a time: the server holds it)."""

    def __init__(self, settings: RunSettings, found: Estimate | None = None, most: int = MAX_PAIRS,
                 counted: bool = True) -> None:
        """found: the configuration's overhead before the series (standing); most: pairs it starts at most;
        counted False: its pairs are still being read, and count() sets them. Raises Refused for settings it
        cannot measure (refusal)."""
        why = refusal(settings)
        if why:
            raise Refused(why)
        p = settings.preview
        self.measured = replace(settings, purpose="measured")
        self.baseline = replace(settings, purpose="baseline",
                                preview=replace(p, decoder="none", every=1, budget=0.0))
        self.config = name_of(p, settings.num_frames)
        self.state: State = "running"
        self.key = f"measure series {next(_KEYS)}"  # what holds its runs from retention
        self.most = most
        self.ran: list[Purpose] = []  # the purpose of each run it started, in order
        self.runs: set[str] = set()   # the ids of the runs it started: another run's end is none of its business
        self.stood_on: frozenset[str] = frozenset()  # the runs its configuration's figure stood on at its start
        self.why = ""
        self.count(found)
        self.counted = counted

    def count(self, found: Estimate | None, stood_on: frozenset[str] = frozenset()) -> None:
        """The pairs the configuration has at the series' start (standing), and the runs they stand on."""
        self.had = found.n if found is not None else 0  # the configuration's pairs when the series started
        self.sure = found is not None and found.sure    # ... and whether they held the 95 % level already
        self.adds = more_pairs(found)
        self.needs = self.had + self.adds
        self.pairs = self.had   # the configuration's pairs, as the last analysis counted them
        self.stood_on, self.counted = stood_on, True

    def room(self, keep_runs: int) -> str:
        """Why a data folder that keeps keep_runs runs (serve --keep-runs; 0: all) cannot keep the figure this
        series aims at ("" when it can): its pairs would be removed once it ends."""
        runs = 2 * self.needs
        if keep_runs <= 0 or runs <= keep_runs:
            return ""
        return (f"measure: {self.config}'s figure at {self.needs} pairs stands on {runs} runs (a baseline and a run "
                f"with previews each), and --keep-runs {keep_runs} keeps {keep_runs}: retention would remove its "
                f"pairs once the series ends; serve with --keep-runs {runs} or more (0 keeps every run)")

    @property
    def held(self) -> frozenset[str]:
        """The runs it holds from retention while it runs: those it started and those its figure stood on."""
        return self.stood_on | self.runs

    @property
    def started(self) -> int:
        """The pairs it started."""
        return (len(self.ran) + 1) // 2

    def next_run(self) -> RunSettings:
        """The settings of its next run, in the counterbalanced order (order_of), noted as started. The order goes
        on from the pairs the configuration had, so that Measure again keeps the two orders as many."""
        i = len(self.ran)
        purpose = order_of(self.had + i // 2)[i % 2]
        self.ran.append(purpose)
        return self.baseline if purpose == "baseline" else self.measured

    def after(self, end: RunEnd, judged: RunFigures | None, gone: Sequence[str] = ()) -> RunSettings | None:
        """The run to start now that `end`'s run has ended and `judged` (its figures and its settings' analysis;
        None: it has none) went out (None: the series is over; state says how). gone: its held runs no longer in
        the data folder."""
        if self.state != "running":
            return None
        if end.status != "done":
            self.state = "stopped" if end.status == "stopped" else "failed"
            self.why = f"its {end.meta.purpose or 'run'} {end.meta.run_id} ended {end.status}" + \
                (f": {end.error}" if end.error else "")
            return None
        found = judged.analysis.finding(self.config) if judged is not None else None
        if found is not None and found.overhead is not None:
            self.pairs = found.overhead.n
            if self.pairs >= self.needs and not found.overhead.more_for_level:
                self.state = "done"
                return None
        if gone:  # its pairs went with them: going on would only run to its bound, short of what it counted
            many = len(gone) > 1
            named = ", ".join(sorted(gone)[:3]) + ", ..." * (len(gone) > 3)
            self.state = "stopped"
            self.why = (f"{len(gone)} of its runs ({named}) {'are' if many else 'is'} gone from the data folder, "
                        f"removed while it ran (not by retention, which keeps a running series' runs): the pairs "
                        f"{'they' if many else 'it'} made no longer count")
            return None
        if len(self.ran) % 2 == 0 and self.started >= self.most:  # a whole pair ran: the bound is checked here
            self.state = "stopped"
            self.why = (f"its bound, {self.most} pairs started, reached: the others' runs were not steady (a "
                        f"preview failure's fallback, a live change, a stop: their rows' events say which)")
            return None
        return self.next_run()

    def stop(self, why: str) -> bool:
        """End the series (False: it had ended already)."""
        if self.state != "running":
            return False
        self.state, self.why = "stopped", why
        return True

    def aim(self) -> str:
        """What it adds, as its start said it."""
        if not self.had:
            return "for the 95 % level"
        if not self.sure:
            return f"(adds {self.adds} to its {self.had} for the 95 % level)"
        return (f"(adds {self.adds} to its {self.had} at the 95 % level: at {self.needs} its interval leaves out "
                f"one more pair at each end)")

    def message(self, now: str = "") -> outbound.MeasureMessage:
        """Its progress line: the pairs it has of those it aims at, its bound, what runs now, or how it ended."""
        has = f"{self.pairs} of {self.needs} pairs"
        if not self.counted:
            line = (f"measuring {self.config}: counting the pairs it has" if self.state == "running" else
                    f"measuring {self.config} {self.state} before its first run: {self.why}")
        elif self.state == "running":
            line = (f"measuring {self.config}: {has} {self.aim()}, at most {self.most} pairs" +
                    (f"; now {now}" if now else ""))
        elif self.state == "done":
            line = f"measured {self.config}: {has}, its interval at the 95 % level"
        else:
            line = f"measuring {self.config} {self.state} at {has}: {self.why}"
        return outbound.measure(self.state, self.config, self.pairs, self.needs, line, adds=self.adds, most=self.most)

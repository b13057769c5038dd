"""The page's measure series: the current settings' overhead measured as the bench measures it.

A series runs a no-preview baseline of the user's run settings, then a run with the user's preview settings,
and again, pair after pair (the bench's A B A B: drift on a loaded machine cancels inside a pair), until that
configuration's overhead interval holds at the 95 % level, or MAX_PAIRS pairs, or the user stops it. The user's
settings are not touched: the series' runs are its own, marked `baseline` and `measured` (RunMeta.purpose).
States: running -> done | stopped | failed; the next run starts when the one before has ended and its figures
are written (Relay.on_done), so the decision reads the same analysis the page shows.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Literal

from previewlab.preview.judging.analysis import name_of
from previewlab.preview.judging.estimates import SAMPLES_FOR_LEVEL
from previewlab.preview.record.run import RunEnd
from previewlab.preview.settings import RunSettings

from previewlab.server.ws import protocol

MAX_PAIRS = 24  # 6 pairs reach 95 % whatever the noise; 24 started and still short means runs that do not pair
State = Literal["running", "done", "stopped", "failed"]


class Series:
    """One measure series (at most one at a time: the server holds it)."""

    def __init__(self, settings: RunSettings) -> None:
        p = settings.preview
        self.measured = replace(settings, purpose="measured")
        self.baseline = replace(settings, purpose="baseline",
                                preview=replace(p, decoder="none", every=1, budget=0.0))
        self.config = name_of(p, settings.num_frames)
        self.state: State = "running"
        self.pairs = 0          # pairs of this configuration with the 95 % aim, as the last analysis counted them
        self.needs = SAMPLES_FOR_LEVEL
        self.started = 0        # pairs this series started
        self.runs: set[str] = set()  # the ids of the runs it started: another run's end is none of its business
        self.why = ""

    def first(self) -> RunSettings:
        self.started = 1
        return self.baseline

    def after(self, end: RunEnd, judged: dict[str, Any]) -> RunSettings | None:
        """The run to start now that `end`'s run has ended (None: the series is over; state says how)."""
        if self.state != "running":
            return None
        if end.status != "done":
            self.state = "stopped" if end.status == "stopped" else "failed"
            self.why = f"its {end.meta.purpose or 'run'} {end.meta.run_id} ended {end.status}" + \
                (f": {end.error}" if end.error else "")
            return None
        if end.meta.purpose == "baseline":
            return self.measured
        found = next((f for f in (judged.get("analysis") or {}).get("findings", []) if f["name"] == self.config), None)
        if found is not None and found["overhead"] is not None:
            self.pairs = int(found["overhead"]["n"])
            self.needs = self.pairs + int(found["more_for_level"] or 0)
            if not found["more_for_level"]:
                self.state = "done"
                return None
        if self.started >= MAX_PAIRS:
            self.state = "stopped"
            self.why = (f"{MAX_PAIRS} pairs started, {self.pairs} made a pair: the others' runs were not steady "
                        f"(a preview failure's fallback, a live change, a stop: their rows' events say which)")
            return None
        self.started += 1
        return self.baseline

    def stop(self, why: str) -> None:
        if self.state == "running":
            self.state, self.why = "stopped", why

    def message(self, now: str = "") -> protocol.Outbound:
        """Its progress line: the pairs it has of the 95 % aim, what runs now, or how it ended."""
        has = f"{self.pairs} of {self.needs} pairs" if self.pairs else f"0 of {self.needs} pairs"
        if self.state == "running":
            line = f"measuring {self.config}: {has} for the 95 % level" + (f"; now {now}" if now else "")
        elif self.state == "done":
            line = f"measured {self.config}: {has}, its interval at the 95 % level"
        else:
            line = f"measuring {self.config} {self.state} at {has}: {self.why}"
        return protocol.measure(self.state, self.config, self.pairs, self.needs, line)

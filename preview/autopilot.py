"""The budget autopilot: picks the preview interval so that preview overhead stays at or under a budget.

Model: a preview every N steps adds cost_ms per N steps of step_ms, so overhead = cost / (N * step). The
smallest N with overhead <= budget is ceil(cost / (step * budget)); that is the interval reported, and the
least spacing between previews. Estimates are exponentially weighted, so the interval follows changes (a
decoder switch, a slower step).

The run's own books decide each preview: one is made only when the preview time spent so far plus this one's
expected cost fits in budget x the denoising time so far. So the overhead stays under budget at every step,
not just on average, and a run that ends early is within budget too. Before the first preview of a decoder
is measured its cost is assumed to be one step (`prior_ms`, or a cost measured in an earlier run), so the
first preview waits until the budget can pay for it. One preview is measured before the next is started.
When even the widest useful interval (fewer than `min_previews` previews in the run) cannot fit, it falls
back to a cheaper decoder and says so.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

CHEAPER = {"vae": "taesd", "taesd": "latent2rgb"}


@dataclass
class Autopilot:
    budget_pct: float
    steps: int                 # steps in the run, to know when previews stop being useful
    decoder: str
    alpha: float = 0.3         # weight of the newest observation in the moving averages
    min_previews: int = 2      # an interval that leaves fewer previews than this in a run does not "fit"
    has_taesd: bool = True
    prior_ms: float | None = None  # a cost measured earlier for this decoder; None: assume one step

    def __post_init__(self) -> None:
        self.step_ms: float | None = None
        self.cost_ms: float | None = self.prior_ms
        self.measured = self.prior_ms is not None
        self.awaiting = False  # a preview was started and its cost is not known yet
        self.total_step_ms = 0.0
        self.total_cost_ms = 0.0
        self.interval = 1
        self.note = ""         # what the autopilot changed, for the row's event column

    def observe_step(self, denoise_ms: float) -> None:
        self.step_ms = denoise_ms if self.step_ms is None else self.alpha * denoise_ms + (1 - self.alpha) * self.step_ms
        self.total_step_ms += denoise_ms

    def observe_preview(self, cost_ms: float) -> None:
        """cost_ms: what one preview kept the denoising thread (or device) busy for."""
        if not self.measured or self.cost_ms is None:
            self.cost_ms = cost_ms
        else:
            self.cost_ms = self.alpha * cost_ms + (1 - self.alpha) * self.cost_ms
        self.measured = True
        self.awaiting = False
        self.total_cost_ms += cost_ms

    def started(self) -> None:
        self.awaiting = True

    def due(self, since: int) -> bool:
        """Make a preview now? `since`: steps since the last one (or since the run began)."""
        if self.awaiting or self.step_ms is None or since < self.interval:
            return False
        expected = self.cost_ms if self.cost_ms is not None else self.step_ms
        return self.total_cost_ms + expected <= self.budget_pct / 100 * self.total_step_ms

    def overhead_pct(self) -> float:
        return 100 * self.total_cost_ms / self.total_step_ms if self.total_step_ms else 0.0

    def decide(self) -> int:
        """The interval for the next previews; may switch self.decoder (and set self.note)."""
        self.note = ""
        if self.step_ms is None or self.step_ms <= 0:
            return self.interval
        b = self.budget_pct / 100
        cost = self.cost_ms if self.cost_ms is not None else self.step_ms  # unmeasured: assume one step
        n = max(1, math.ceil(cost / (self.step_ms * b) - 1e-9))
        widest = max(1, self.steps // self.min_previews)
        cheaper = CHEAPER.get(self.decoder)
        if cheaper == "taesd" and not self.has_taesd:
            cheaper = "latent2rgb"
        if n > widest and cheaper and self.measured:
            self.note = (f"autopilot: {self.decoder} at {self.cost_ms:.0f} ms per preview cannot fit a "
                         f"{self.budget_pct:g}% budget ({self.step_ms:.0f} ms steps); switching to {cheaper}")
            self.decoder = cheaper
            self.cost_ms, self.measured = None, False  # measure the new decoder before trusting an interval
            n = max(1, math.ceil(1 / b - 1e-9))
        if n != self.interval and not self.note:
            self.note = f"autopilot: every {n}"
        self.interval = n
        return n

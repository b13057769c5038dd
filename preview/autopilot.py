"""The budget autopilot: picks the preview interval so that preview overhead stays at or under a budget.

Model: a preview every N steps adds cost_ms per N steps of step_ms, so overhead = cost / (N * step). The
smallest N with overhead <= budget is ceil(cost / (step * budget)). Estimates are exponentially weighted so the
interval follows changes (a decoder switch, a slower step), and the run's own cumulative overhead is checked:
while it is over budget the interval widens by one step. When even the widest useful interval (fewer than
`min_previews` previews in the run) cannot fit, it falls back to a cheaper decoder and says so.
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

    def __post_init__(self) -> None:
        self.step_ms: float | None = None
        self.cost_ms: float | None = None
        self.total_step_ms = 0.0
        self.total_cost_ms = 0.0
        self.interval = 1
        self.note = ""         # what the autopilot changed, for the row's event column

    def observe_step(self, denoise_ms: float) -> None:
        self.step_ms = denoise_ms if self.step_ms is None else self.alpha * denoise_ms + (1 - self.alpha) * self.step_ms
        self.total_step_ms += denoise_ms

    def observe_preview(self, cost_ms: float) -> None:
        """cost_ms: what one preview kept the denoising thread (or device) busy for."""
        self.cost_ms = cost_ms if self.cost_ms is None else self.alpha * cost_ms + (1 - self.alpha) * self.cost_ms
        self.total_cost_ms += cost_ms

    def overhead_pct(self) -> float:
        return 100 * self.total_cost_ms / self.total_step_ms if self.total_step_ms else 0.0

    def decide(self) -> int:
        """The interval for the next previews; may switch self.decoder (and set self.note)."""
        self.note = ""
        if self.step_ms is None or self.cost_ms is None or self.step_ms <= 0:
            return self.interval  # nothing measured yet: every step, to measure the cost
        b = self.budget_pct / 100
        n = max(1, math.ceil(self.cost_ms / (self.step_ms * b) - 1e-9))
        widest = max(1, self.steps // self.min_previews)
        cheaper = CHEAPER.get(self.decoder)
        if cheaper == "taesd" and not self.has_taesd:
            cheaper = "latent2rgb"
        if self.overhead_pct() > self.budget_pct and n <= self.interval:
            # the run is over budget so far: back off until it is not (this alone never changes the decoder)
            n = min(max(widest, n), self.interval + 1)
        if n > widest and cheaper:
            self.note = (f"autopilot: {self.decoder} at {self.cost_ms:.0f} ms per preview cannot fit a "
                         f"{self.budget_pct:g}% budget ({self.step_ms:.0f} ms steps); switching to {cheaper}")
            self.decoder = cheaper
            self.cost_ms = None  # measure the new decoder before trusting an interval
            n = 1
        if n != self.interval and not self.note:
            self.note = f"autopilot: every {n}"
        self.interval = n
        return n

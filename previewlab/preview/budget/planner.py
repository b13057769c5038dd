"""Which decoder a step previews with, at what interval, and whether it gets a preview: the user's live settings,
or the autopilot's while a budget is set. The planner also keeps the cost priors the autopilot starts later runs
from (Previewer.cost_ms). It reads settings and costs, never a tensor or a clock.
"""
from __future__ import annotations

from previewlab.preview.budget.autopilot import Autopilot
from previewlab.preview.controls import Change, Controls
from previewlab.preview.names import DECODER_NAMES, DecoderName
from previewlab.preview.models import Model
from previewlab.preview.decoding.previewer import Previewer
from previewlab.preview.settings import PreviewSettings, should_preview

# the live changes that move where a decoder stops (stops.Cut), and so what a preview costs
RESIZES = frozenset({"decode_at", "preview_max", "batch_preview"})  # (a batch's grid, or its first image)


class Planner:
    """One run's (or pipeline call's) schedule. steps and batch are the call's, set once its first step is seen."""

    def __init__(self, model: Model, controls: Controls, prev: Previewer, width: int, height: int,
                 steps: int) -> None:
        self.model, self.controls, self.prev = model, controls, prev
        self.width, self.height, self.steps = width, height, steps
        self.batch = 1
        self.pilot: Autopilot | None = None
        self.since = 0  # steps since the last preview (the autopilot's schedule)

    def plan(self, s: PreviewSettings) -> tuple[str, int, str]:
        """This step's (decoder, interval, event): the autopilot's while a budget is set, and the event text of
        what changed since the last step (a live control, the autopilot's note)."""
        change = self.controls.take()
        decoder, every, event = s.decoder, s.every, change.text
        pilot = self._pilot(s, change)
        if pilot is not None:
            every = pilot.decide()
            if pilot.decoder != s.decoder:
                self.controls.set(decoder=pilot.decoder, note=False)  # the autopilot's own note says why
                decoder = pilot.decoder
            if pilot.note:
                event = also(event, pilot.note)
        return decoder, every, event

    def due(self, step: int, decoder: str, every: int) -> bool:
        """Step `step` (1-based) gets a preview: the autopilot says so, or without one the fixed interval does."""
        self.since += 1
        due = should_preview(step, every) if self.pilot is None else self.pilot.due(self.since)
        if decoder == "none" or not due:
            return False
        self.since = 0
        return True

    def sized(self, s: PreviewSettings) -> PreviewSettings:
        """The settings a preview is made with: the user's, at the smaller size the autopilot traded for."""
        side = self.pilot.preview_max if self.pilot is not None else 0
        return s.changed(preview_max=side) if side else s

    def started(self) -> None:
        """Preview work ran in this step (made, or failed on the way)."""
        if self.pilot is not None:
            self.pilot.preview_started()

    def fell_back(self, fallback: DecoderName) -> None:
        """A preview failed and the run goes on with `fallback`, at the user's size: its prior is kept under
        their settings."""
        if self.pilot is not None:
            prior = self.prev.cost_ms.get(self.cost_key(fallback, self.controls.get()))
            self.pilot.switch_decoder(fallback, prior_ms=prior)

    def observe(self, step_ms: float, touched: bool) -> None:
        """A step's wall cost on the denoising path, previews' or not: the autopilot holds it to its budget, and
        its measured preview cost becomes a prior for later runs."""
        pilot = self.pilot
        if pilot is None:
            return
        books = pilot.books
        books.observe(step_ms, touched)
        if books.measured and books.cost_ms is not None:
            key = self.cost_key(pilot.decoder, self.sized(self.controls.get()))
            self.prev.cost_ms[key] = books.cost_ms

    def cost_key(self, decoder: str, s: PreviewSettings) -> str:
        """What a preview's cost prior is kept under: its decoder, where it stops and its size, and for a clip
        the frames it shows (all of a clip costs up to T times its first frame)."""
        key = f"{decoder} decode_at={s.decode_at} preview_max={s.preview_max}"
        return f"{key} frames={s.frames}" if self.model.space.video else key

    def _pilot(self, s: PreviewSettings, change: Change) -> Autopilot | None:
        """The autopilot for these settings: made at the first step with a budget, made anew on a live budget,
        decoder, clip frames or decode size change (it keeps the run's books; a preview of other frames, or
        decoded at another size, costs anew), dropped when the budget or the previews are off."""
        if not (s.budget > 0 and s.decoder != "none"):
            self.pilot = None
            return None
        old = self.pilot
        recost = ("frames" in change.fields and self.model.space.video) or bool(RESIZES & change.fields)
        if old is None or old.budget_pct != s.budget or "decoder" in change.fields or recost:
            shown = 1 if s.batch_preview == "first" else self.batch
            # the smaller previews it may trade for, per decoder it may fall back to
            sides: dict[str, tuple[int, ...]] = {d: self.prev.sides(d, s, self.width, self.height, shown)
                                                 for d in DECODER_NAMES if d != "none"}

            def prior_of(decoder: str, side: int) -> float | None:  # what an earlier run measured at that size
                at = s.changed(preview_max=side) if side else s
                return self.prev.cost_ms.get(self.cost_key(decoder, at))

            pilot = self.pilot = Autopilot(s.budget, self.steps, s.decoder, has_taesd=self.model.taesd is not None,
                                           prior_ms=prior_of(s.decoder, 0), sides=sides, prior_of=prior_of)
            if old is not None:  # a live change keeps the run's books
                pilot.keep_books(old, new_cost=recost)
            return pilot
        return old


def also(event: str, text: str) -> str:
    """The event column with one more note (every note of a step joined by "; ")."""
    return event + "; " + text if event else text

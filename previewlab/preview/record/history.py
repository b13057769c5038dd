"""A run's live changes in a few words ("latent2rgb → taesd @53 → every 3 @120"), read once from its step rows at
its end, so the run list says what a run really previewed, not only what it started with.

Each row carries the decoder, interval, mode and decode_at it ran with; a budget (the autopilot) and a preview
size appear only in the event text of the step a user set them at ("set every=auto budget=5.0"). A change the
run made itself (a fallback after a failed preview, the autopilot's cheaper decoder) moves the row's decoder and
is listed too; the autopilot's own intervals are not (its label, "auto 5%", says the interval is its to choose).
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from previewlab.preview.record.records import StepRow

MAX_CHANGES = 12  # listed in full up to here; then "… +N more" (the rows' event column has every one)
_SET = re.compile(r"\b(budget|preview_max)=(\S+)")


@dataclass(frozen=True)
class _State:
    decoder: str
    interval: str   # "every 3", or "auto 5%" while a budget is set
    mode: str
    decode_at: str  # "decode_at half_latents"; "" on rows that do not say
    size: str       # "max 128 px", or "native size"


def history(rows: Sequence[StepRow], budget: float = 0.0, preview_max: int = 0) -> str:
    """The live changes of a run in step order, "" when none: its first state (the decoder, and the interval
    unless every 1), then each change as "what @step". budget (percent) and preview_max (px): the run's at its
    start, as the rows do not carry them."""
    if not rows:
        return ""
    first = _state(rows[0], budget, preview_max)
    start = first.decoder + ("" if first.interval == "every 1" else f" {first.interval}")
    before, changes = first, []
    for row in rows[1:]:
        budget, preview_max = _set_at(row.event, budget, preview_max)
        now = _state(row, budget, preview_max)
        moved = [new for old, new in zip(_words(before), _words(now)) if old != new and new]
        if moved:
            changes.append(f"{', '.join(moved)} @{row.step}")
        before = now
    if not changes:
        return ""
    shown = changes[:MAX_CHANGES]
    more = f" → … +{len(changes) - MAX_CHANGES} more" if len(changes) > MAX_CHANGES else ""
    return " → ".join([start, *shown]) + more


def _state(row: StepRow, budget: float, preview_max: int) -> _State:
    interval = f"auto {budget:g}%" if budget > 0 else f"every {row.every}"
    size = f"max {preview_max} px" if preview_max > 0 else "native size"
    return _State(row.decoder, interval, row.mode, f"decode_at {row.decode_at}" if row.decode_at else "", size)


def _words(s: _State) -> tuple[str, ...]:
    return s.decoder, s.interval, s.mode, s.decode_at, s.size


def _set_at(event: str, budget: float, preview_max: int) -> tuple[float, int]:
    """The budget and preview size after a step's event: a user's change is its note that starts with "set "
    (controls.Change.text); the autopilot's and a fallback's notes never set them."""
    for note in event.split("; "):
        if not note.startswith("set "):
            continue
        for name, value in _SET.findall(note):
            try:
                if name == "budget":
                    budget = float(value)
                else:
                    preview_max = int(value)
            except ValueError:  # a row edited by hand: keep what was known
                pass
    return budget, preview_max

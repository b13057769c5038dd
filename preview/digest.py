"""One run in a few lines: what it cost, where a preview's time went, what it held, and what to set.

For a script's watch().summary(), which has no run without previews beside it: its cost is the previews' time on
the denoising path, over the rest of the run's wall time. In sync mode that is all the previews cost the run on
this thread; in overlap mode part of it runs beside the denoising and shows as slower steps, which only a run
without previews can tell (previewlab bench). Each sentence quotes the figure it comes from.
"""
from __future__ import annotations

import math
from typing import Sequence

from .decoders import DECODERS
from .records import PREVIEW_STAGES, StepRow
from .run import RunRecord
from .settings import PreviewSettings

# where a preview's time goes, and what to do when that part dominates (bench/advice.py says the same)
REMEDY = {
    "decode": "a smaller decoder or a smaller preview",
    "resize": "a smaller preview (decode at the preview's size)",
    "transfer": "fewer or smaller frames (a larger interval, a smaller preview)",
    "encode": "fewer or smaller frames (a larger interval, a smaller preview, a lower quality)",
    "slower denoising": "look at syncs and memory pressure (overlap mode, a smaller decoder)",
}


def rank(decoder: str) -> int:
    """How large a decoder is: the steps down its `cheaper` chain to the bottom (vae 3, taesd 2, latent2rgb 1)."""
    spec = DECODERS.get(decoder)  # type: ignore[call-overload]
    if spec is None or spec.build is None:
        return 0
    return 1 + (rank(spec.cheaper) if spec.cheaper else 0)


def parts(rows: Sequence[StepRow]) -> dict[str, float]:
    """A run's preview time by part, ms over all its previews (sync and transfer together: the copy's wait)."""
    made = [r for r in rows if r.preview]
    total = {k: sum(getattr(r, k) for r in made) for k in PREVIEW_STAGES}
    return {"decode": total["decode_ms"], "resize": total["resize_ms"],
            "transfer": total["sync_ms"] + total["transfer_ms"], "encode": total["encode_ms"]}


def digest(record: RunRecord, rows: Sequence[StepRow], budget: float = 5.0) -> list[str]:
    """The run's lines, its cost judged against `budget` percent."""
    t, p = record.totals, record.meta.preview or PreviewSettings(decoder="none")  # None: no step callback
    steps = max(1, t.steps_run or len(rows))
    made = sum(r.preview for r in rows)
    every = f"auto {p.budget:g} %" if p.budget > 0 else f"every {p.every}"
    lines = [f"run {record.run_id}: {steps} steps in {t.wall_s:.2f} s, {t.denoise_ms / steps:.1f} ms a "
             f"step denoising; {made} previews ({p.decoder}, {every}, {p.mode})"]
    rest = t.wall_s * 1e3 - t.on_path_ms
    share = 100 * t.on_path_ms / rest if rest > 0 else 0.0
    if made:
        by = parts(rows)
        name = max(by, key=lambda k: by[k])
        total = sum(by.values())
        where = (f"; {name} holds {by[name] / made:.1f} of its {total / made:.1f} ms a preview "
                 f"({100 * by[name] / total:.0f} %)") if total > 0 else ""
        lines.append(f"previews: {t.on_path_ms:.0f} ms on the denoising path, {share:.1f} % over the rest of "
                     f"the run{where}" + (f": {REMEDY[name]}" if where and share > budget else ""))
        most = max(r.mem_mb for r in rows)
        if t.mem_source:
            lines.append(f"memory: a preview raised it by up to {most:.1f} MiB over its step; the run peaked at "
                         f"{t.peak_mem_mb:.0f} MiB ({t.mem_source})")
    elif t.mem_source:
        lines.append(f"memory: the run peaked at {t.peak_mem_mb:.0f} MiB ({t.mem_source})")
    if t.busy_pct is not None:
        lines.append(f"device busy while denoising: {t.busy_pct:.0f} % ({t.busy_source})")
    if made:
        lines.append(_set(p, share, budget))
    return lines


def _set(p: PreviewSettings, share: float, budget: float) -> str:
    said = f"{share:.1f} % on the path"
    if p.mode == "overlap":
        said += " (overlap: what runs beside it shows only against a run without previews; previewlab bench)"
    if share <= budget:
        return f"within {budget:g} %: {said}"
    ideas = []
    if p.budget <= 0 and p.every > 0:
        ideas.append(f"about every {math.ceil(p.every * share / budget - 1e-9)}")
    down = DECODERS[p.decoder].cheaper if p.decoder in DECODERS else None
    if down:
        ideas.append(down)
    return f"to stay under {budget:g} % ({said}): " + (", or ".join(ideas) or "fewer previews")

"""Where a preview's time goes, described once: the figures every surface shows beside the overheads, each with
one definition, named as the surfaces name it.

- ms a preview by part (decode, resize, transfer, encode): the MEAN, a part's total over the previews made (a
  run's totals, or its step rows' sums), so the parts add up to what the previews cost in all. The analysis's
  Finding.parts, the advice's "decode holds X of its Y ms a preview", the report's breakdown and a watch's
  digest all take it from parts().
- a stage's spread over the previews (the bench's table, the report's table): its MEDIAN and 95th percentile
  over the steps that made a preview (denoise_ms over every step), from spread().
- the on-path share: the previews' share of the denoising path, 100 * on_path / (denoise + on_path), from
  on_path_share_pct(); the server's run figures and a watch's digest show it.

No torch here.
"""
from __future__ import annotations

from typing import Iterable, Mapping

from previewlab.preview.judging.estimates import percentile
from previewlab.preview.record.records import PREVIEW_STAGES, StepRow

PARTS = ("decode", "resize", "transfer", "encode")  # transfer: sync and transfer together (the copy's wait)


def parts(sums: Mapping[str, float], previews: float) -> dict[str, float]:
    """Mean ms a preview by part from the stage totals (decode_ms, resize_ms, sync_ms, transfer_ms, encode_ms
    summed over a run or several) and the previews they made; each 0.0 where none was made."""
    if previews <= 0:
        return dict.fromkeys(PARTS, 0.0)
    return {"decode": sums["decode_ms"] / previews, "resize": sums["resize_ms"] / previews,
            "transfer": (sums["sync_ms"] + sums["transfer_ms"]) / previews, "encode": sums["encode_ms"] / previews}


def stage_sums(rows: Iterable[object]) -> dict[str, float]:
    """Each preview stage's ms summed over records that carry them (a run's totals, or step rows)."""
    out = dict.fromkeys(PREVIEW_STAGES, 0.0)
    for r in rows:
        for k in PREVIEW_STAGES:
            out[k] += float(getattr(r, k))
    return out


def row_parts(rows: Iterable[StepRow]) -> dict[str, float]:
    """Mean ms a preview by part over the step rows that made a preview."""
    made = [r for r in rows if r.preview]
    return parts(stage_sums(made), len(made))


def shares_pct(by: Mapping[str, float]) -> dict[str, float]:
    """Each part's share of their sum, percent (0 each where the sum is 0)."""
    total = sum(by.values())
    return {k: 100 * v / total if total > 0 else 0.0 for k, v in by.items()}


def spread(xs: Iterable[float]) -> tuple[float, float]:
    """(median, 95th percentile) of a stage's ms; (0.0, 0.0) where there is none."""
    s = list(xs)
    return (percentile(s, 50), percentile(s, 95)) if s else (0.0, 0.0)


def stage_spreads(rows: Iterable[StepRow]) -> dict[str, tuple[float, float]]:
    """denoise_ms over every step and each preview stage over the steps that made a preview: (median, p95)."""
    rs = list(rows)
    out = {"denoise_ms": spread(r.denoise_ms for r in rs)}
    for k in PREVIEW_STAGES:
        out[k] = spread(float(getattr(r, k)) for r in rs if r.preview)
    return out


def on_path_share_pct(on_path_ms: float, denoise_ms: float) -> float:
    """The previews' share of the denoising path, percent: 100 * on_path / (denoise + on_path); 0.0 where the
    path took no time. (Overlap hides preview work from the path: its cost shows only against a baseline.)"""
    path = denoise_ms + on_path_ms
    return 100 * on_path_ms / path if path > 0 else 0.0

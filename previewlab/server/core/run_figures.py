"""A run's figures as the page shows them, and the record its `done` message carries (RunFigures).

The figures are made from the one analysis (preview/judging/advice.py): server/figures.py reads the runs and
judges them, and hands a run's on as a RunFigures: the run, its settings' Analysis and its pair, typed. They
become JSON only at the edge: a run's `done` message (server/ws/outbound.py), the run list (/runs) and its
settings' analysis (/analysis). A measure series reads the Analysis itself (server/measure.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from previewlab.preview.judging.advice import Analysis
from previewlab.preview.judging.analysis import Entry, cost_key, overhead_pct
from previewlab.preview.judging.progress import settle_line
from previewlab.preview.judging.stages import on_path_share_pct
from previewlab.preview.judging.surface import said


@dataclass(frozen=True)
class RunFigures:
    """A run's figures: the run (its Entry), the analysis of the runs of its settings, and its pair (the run and
    the baseline right before it; None: it has none)."""
    run: Entry
    analysis: Analysis
    pair: tuple[Entry, Entry] | None = None

    def analysis_json(self) -> dict[str, Any]:
        """Its settings' analysis as /analysis answers it."""
        return finite(self._analysis())

    def to_json(self) -> dict[str, Any]:
        """Its `figures` (run_figures) and its settings' `analysis`, as its `done` message carries them."""
        return finite({"figures": run_figures(self.run, self.analysis, self.pair), "analysis": self._analysis()})

    def _analysis(self) -> dict[str, Any]:
        """The analysis with the settings' group (group_of), which the page keys the listed runs' figures by."""
        return {**self.analysis.to_json(), "group": group_of(self.run)}


def finite(x: Any) -> Any:
    """A figure as JSON can carry it: a number that is not finite (a hand-edited meta.json's NaN) as null, in
    lists and mappings too, so one odd run never fails a listing (the app answers JSON without NaN)."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [finite(v) for v in x]
    return x


def group_of(e: Entry) -> str:
    """The settings a run is measured with, as one string (analysis.cost_key): the page updates the figures of
    the listed runs of one group from a newer analysis of it."""
    return "|".join(map(str, cost_key(e.record.meta)))


def run_figures(e: Entry, a: Analysis, pair: tuple[Entry, Entry] | None) -> dict[str, Any]:
    """One run's figures as the run list, This run and the comparison show them: its own costs, its role, its
    pair's overhead (against the baseline right before it), and its configuration's verdict over all its pairs."""
    t, steps = e.record.totals, max(1, e.record.totals.steps_run or e.record.meta.steps)
    peak = t.peak_mem_mb if t.mem_source and t.peak_mem_mb > 0 else None
    out: dict[str, Any] = {
        "group": group_of(e), "role": "warm-up" if e.role == "warmup" else "baseline" if e.role == "baseline" else "preview",
        "steady": e.steady, "why": e.why, "config": e.name,
        "wall_s": t.wall_s, "wall_per_step": t.wall_s * 1e3 / steps, "denoise_per_step": t.denoise_ms / steps,
        # the previews' share of the denoising path (stages.py), and that path's ms (denoising and previews)
        "preview_on_path": t.on_path_ms, "on_path_share_pct": on_path_share_pct(t.on_path_ms, t.denoise_ms),
        "denoising_path_ms": t.denoise_ms + t.on_path_ms,
        # a clip's preview sends several frames: KiB a frame is over the frames sent (a record from before
        # frames_sent counts one a preview)
        "previews": t.previews,
        "kb_per_frame": t.bytes / (t.frames_sent or t.previews) / 1024 if t.previews else 0.0,
        "decode_ms": t.decode_ms, "encode_ms": t.encode_ms, "peak_mem_mb": peak, "busy_pct": t.busy_pct,
        "pair": None, "mem_over_mb": None, "finding": None, "noisy": bool(a.noise and a.noise.noisy),
        # how much the picture still changed (judging/progress.py), the line under the cost chart
        "settle_step": t.settle_step, "last_final_ssim": t.last_final_ssim,
        "settle_line": settle_line(e.record.meta, t)}
    if pair is not None:
        r, b = pair
        x = overhead_pct(r.record, b.record)
        out["pair"] = {"baseline": b.record.run_id, "overhead_pct": x, "said": f"{x:+.1f} %"}
        bt = b.record.totals
        if peak is not None and bt.mem_source == t.mem_source and bt.peak_mem_mb > 0:
            out["mem_over_mb"] = peak - bt.peak_mem_mb
    f = a.finding(e.name) if e.role == "config" else None
    if f is not None:
        out["finding"] = f.to_json(said(f.overhead, a.more))
    return out

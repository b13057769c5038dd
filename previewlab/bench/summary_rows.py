"""The summary's row: one configuration's figures over its steady runs (summary.summarize makes them), and its line
in summary.csv. to_row writes the line and from_row reads it back; nothing else parses its cells.

The line's columns, in order: config, runs, wall_s, each stage's _p50 and _p95, previews, bytes_per_preview,
frames_per_preview, decode_ms_per_frame_p50, the overhead's five cells and vs_direct's (Estimate.to_cells),
verdict, then the settings and what the runs cost beside their baselines (ConfigSummary's fields from decoder on),
then its decoder's fidelity from the bench's --fidelity pass (empty where none ran, and for a baseline):
fidelity_ssim, fidelity_ssim_lo, fidelity_ssim_hi, fidelity_ssim_level_pct, fidelity_n (seeds), fidelity_psnr_db
(the seeds' median; inf: identical pixels), fidelity_synthetic (1: a synthetic model's, noise pictures).
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping

from previewlab.preview.judging.estimates import Estimate

__all__ = ["STAGES", "ConfigSummary", "Spread", "Stages"]


@dataclass(frozen=True)
class Spread:
    """A stage's median and 95th percentile, ms."""
    p50: float
    p95: float


@dataclass(frozen=True)
class Stages:
    """Each stage's spread: denoise_ms per step over every step, the preview's stages per preview over the steps
    that made one; 0.0 where no step did."""
    denoise_ms: Spread
    decode_ms: Spread
    sync_ms: Spread
    transfer_ms: Spread
    resize_ms: Spread
    encode_ms: Spread

    def to_cells(self) -> dict[str, float]:
        """stage_p50, stage_p95 for each stage in STAGES' order."""
        out: dict[str, float] = {}
        for st in STAGES:
            s: Spread = getattr(self, st)
            out[f"{st}_p50"], out[f"{st}_p95"] = s.p50, s.p95
        return out

    @classmethod
    def from_cells(cls, row: Mapping[str, str]) -> Stages:
        return cls(**{st: Spread(_number(row, f"{st}_p50"), _number(row, f"{st}_p95")) for st in STAGES})


STAGES = tuple(f.name for f in fields(Stages))  # the steps' columns summarized: denoise_ms, then PREVIEW_STAGES


@dataclass(frozen=True)
class ConfigSummary:
    """One configuration's figures over its steady runs: warm-ups and the first run after the load left out."""
    config: str
    runs: int
    wall_s: float                   # the runs' median wall
    stages: Stages
    previews: float                 # median per run: a median of counts, so an int where one run is the middle
    bytes_per_preview: float        # a clip's preview: all its frames
    frames_per_preview: float       # a clip's previews send several frames each
    decode_ms_per_frame_p50: float  # median decode ms per frame shown; an image's is its decode_ms p50
    overhead: Estimate | None       # %: wall against the no-preview baseline beside each run; None: no pair
    vs_direct: Estimate | None      # %, a baseline's: its wall against the bare call right before it; None: none ran
    verdict: str                    # the finding's verdict (estimates.verdict); "" without an overhead
    # its settings, from its first run
    decoder: str
    every: int
    budget: float
    preview_max: int
    mode: str
    steps: float                    # median steps run: an int where one run is the middle
    # what its runs cost beside their baselines; None where nothing was measured
    slower_ms_per_step: float | None  # the denoising's slowdown, only where its interval does not hold 0
    mem_mb_p50: float | None          # MiB a preview raised memory over its step's: median and most
    mem_mb_max: float | None
    peak_mem_mb: float | None         # the runs' median peak, MiB
    mem_over_mb: float | None         # median rise of a run's peak over the baseline's beside it, MiB
    busy_pct: float | None            # the device busy while denoising, median %
    mem_source: str                   # what the memory figures read: cuda | xpu | mps | rss | "" (none)
    # its decoder's fidelity (SSIM against the VAE's preview over the pass's seeds); None: not measured
    fidelity_ssim: Estimate | None = None
    fidelity_psnr_db: float | None = None
    fidelity_synthetic: bool = False

    def to_row(self) -> dict[str, Any]:
        """summary.csv's line, its columns in order (the module's docstring); None is an empty cell to csv."""
        return {"config": self.config, "runs": self.runs, "wall_s": self.wall_s, **self.stages.to_cells(),
                "previews": self.previews, "bytes_per_preview": self.bytes_per_preview,
                "frames_per_preview": self.frames_per_preview,
                "decode_ms_per_frame_p50": self.decode_ms_per_frame_p50,
                **Estimate.to_cells(self.overhead, "overhead"), **Estimate.to_cells(self.vs_direct, "vs_direct"),
                "verdict": self.verdict, "decoder": self.decoder, "every": self.every, "budget": self.budget,
                "preview_max": self.preview_max, "mode": self.mode, "steps": self.steps,
                "slower_ms_per_step": self.slower_ms_per_step, "mem_mb_p50": self.mem_mb_p50,
                "mem_mb_max": self.mem_mb_max, "peak_mem_mb": self.peak_mem_mb, "mem_over_mb": self.mem_over_mb,
                "busy_pct": self.busy_pct, "mem_source": self.mem_source, **self._fidelity_cells()}

    def _fidelity_cells(self) -> dict[str, Any]:
        e = self.fidelity_ssim
        return {"fidelity_ssim": e.value if e else None, "fidelity_ssim_lo": e.lo if e else None,
                "fidelity_ssim_hi": e.hi if e else None, "fidelity_ssim_level_pct": e.level_pct if e else None,
                "fidelity_n": e.n if e else 0, "fidelity_psnr_db": self.fidelity_psnr_db,
                "fidelity_synthetic": int(self.fidelity_synthetic) if e else None}

    @classmethod
    def from_row(cls, row: Mapping[str, str]) -> ConfigSummary:
        """A summary.csv line read back (csv's text of to_row): each number as it was written, so the line it
        writes again is the same; an empty cell, or a column the line lacks, is None where the field may be None.
        Raises ValueError naming a cell that is no number or a column that must be there."""
        def maybe(name: str) -> float | None:
            return None if row.get(name, "") == "" else _number(row, name)
        return cls(config=_text(row, "config"), runs=_whole(row, "runs"), wall_s=_number(row, "wall_s"),
                   stages=Stages.from_cells(row), previews=_number(row, "previews"),
                   bytes_per_preview=_number(row, "bytes_per_preview"),
                   frames_per_preview=_number(row, "frames_per_preview"),
                   decode_ms_per_frame_p50=_number(row, "decode_ms_per_frame_p50"),
                   overhead=Estimate.from_cells(row, "overhead"), vs_direct=Estimate.from_cells(row, "vs_direct"),
                   verdict=row.get("verdict", ""), decoder=_text(row, "decoder"), every=_whole(row, "every"),
                   budget=_number(row, "budget"), preview_max=_whole(row, "preview_max"),
                   mode=_text(row, "mode"), steps=_number(row, "steps"),
                   slower_ms_per_step=maybe("slower_ms_per_step"), mem_mb_p50=maybe("mem_mb_p50"),
                   mem_mb_max=maybe("mem_mb_max"), peak_mem_mb=maybe("peak_mem_mb"),
                   mem_over_mb=maybe("mem_over_mb"), busy_pct=maybe("busy_pct"),
                   mem_source=row.get("mem_source", ""),
                   fidelity_ssim=None if maybe("fidelity_ssim") is None else Estimate(
                       _number(row, "fidelity_ssim"), _whole(row, "fidelity_n"), maybe("fidelity_ssim_lo"),
                       maybe("fidelity_ssim_hi"), maybe("fidelity_ssim_level_pct") or 0.0),
                   fidelity_psnr_db=maybe("fidelity_psnr_db"),
                   fidelity_synthetic=row.get("fidelity_synthetic", "") == "1")


def _text(row: Mapping[str, str], name: str) -> str:
    cell = row.get(name)
    if cell is None:
        raise ValueError(f"{name}: no such column in this summary line")
    return cell


def _whole(row: Mapping[str, str], name: str) -> int:
    cell = _text(row, name)
    try:
        return int(cell)
    except ValueError:
        raise ValueError(f"{name}={cell[:40]!r}: not a whole number") from None


def _number(row: Mapping[str, str], name: str) -> float:
    """A number's cell as it was written: an int's ("3") stays an int, since a median of counts is one where a
    single run is the middle; any other is a float (Python writes every float with a point or an exponent)."""
    cell = _text(row, name)
    try:
        return int(cell)
    except ValueError:
        pass
    try:
        return float(cell)
    except ValueError:
        raise ValueError(f"{name}={cell[:40]!r}: not a number") from None

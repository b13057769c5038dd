"""A run's totals: its record (RunRecord) from its rows, what it was asked and its phases outside the steps."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch

from . import decoders
from .models import Model, device_name
from .records import PREVIEW_STAGES, RunRecord, StepRow, on_path_ms
from .run import Asked, RunMeta, dtype_name
from .settings import PreviewSettings
from .usage import Usage


def _env(model: Model) -> dict[str, Any]:
    import diffusers

    dev = model.device
    name = device_name(dev)
    return dict(model=model.name, synthetic=int(model.synthetic), model_note=model.note, family=model.space.name,
                space=model.space.describe(), device=dev.type, device_name=name,
                dtype=dtype_name(model.dtype), threads=torch.get_num_threads(),
                torch=torch.__version__, diffusers=diffusers.__version__)


@dataclass(frozen=True)
class Phases:
    """A run's time outside its steps, ms: from the request's start to its end (wall), and the phases on the
    denoising path around the steps (drain: previews in flight holding the main stream after the last step)."""
    wall_ms: float
    text_encode_ms: float = 0.0
    final_decode_ms: float = 0.0
    final_encode_ms: float = 0.0
    write_ms: float = 0.0
    drain_ms: float = 0.0


@dataclass(frozen=True)
class _Direct:
    """The preview columns of a call without the step callback (the bench's direct call)."""
    decoder: str = "direct"
    every: int = 0
    preview_max: int = 0
    encoder: str = ""
    quality: int = 0
    mode: str = "direct"
    budget: float = 0.0
    target: str = ""
    frames: str = ""
    decode_at: str = ""


def run_record(model: Model, run_id: str, rows: list[StepRow], asked: Asked | RunMeta, phases: Phases, *,
               status: str, preview: PreviewSettings | None, encoder: str | None = None, first_run: bool = False,
               inflight_peak: int = 0, compiled: bool = False, compile_ms: float = 0.0,
               cuda: bool | None = None, usage: Usage | None = None, timing: str = "host") -> RunRecord:
    """A run's record from what it was asked, its preview settings at the start (None: a direct call), its
    phases and its rows: stage totals from the rows, and other_ms = wall time minus everything measured on the
    denoising path (phases, denoise, the preview stages that ran on it, the final drain). encoder: the one
    that really ran, when it is not the one asked for. cuda: the stages ran on an asynchronous device (any
    accelerator); timing: how the stopwatch timed them (host | events | waits; a direct call's wall: host)."""
    totals: dict[str, Any] = {k: sum(getattr(r, k) for r in rows) for k in ("denoise_ms", *PREVIEW_STAGES)}
    cuda = model.device.type != "cpu" if cuda is None else cuda  # the stopwatch's device (tests: a fake one)
    on_path = sum(on_path_ms(r.mode, r, cuda) for r in rows)  # the meter's rows carry the same figure
    ph = phases
    outside = ph.text_encode_ms + ph.final_decode_ms + ph.final_encode_ms + ph.write_ms
    other = ph.wall_ms - totals["denoise_ms"] - on_path - outside - ph.drain_ms
    p = preview or _Direct()
    return RunRecord(run_id=run_id, **_env(model), load_s=model.load_s, wall_s=ph.wall_ms / 1e3, **totals,
                     text_encode_ms=ph.text_encode_ms, final_decode_ms=ph.final_decode_ms,
                     final_encode_ms=ph.final_encode_ms, write_ms=ph.write_ms, drain_ms=ph.drain_ms,
                     on_path_ms=on_path, other_ms=other, previews=sum(r.preview for r in rows),
                     skipped=sum(r.skipped for r in rows), bytes=sum(r.bytes for r in rows), offload=model.offload,
                     channels_last=int(model.channels_last), steps=asked.steps, width=asked.width,
                     height=asked.height, seed=asked.seed, guidance=asked.guidance, decoder=p.decoder,
                     every=p.every, encoder=encoder or p.encoder, quality=p.quality, preview_max=p.preview_max,
                     mode=p.mode, budget=p.budget, target=p.target, status=status, first_run=int(first_run),
                     inflight_peak=inflight_peak, compile=int(compiled), compile_ms=compile_ms,
                     vae_copy_mb=decoders.copy_mb(model.pipe), task=asked.task,
                     strength=asked.strength if asked.task == "img2img" else None,
                     batch=rows[0].batch if rows else asked.batch, steps_run=len(rows),
                     num_frames=asked.num_frames, fps=asked.fps, frames=str(p.frames),
                     frames_sent=sum(r.frames for r in rows), decode_at=p.decode_at,
                     timing=timing, vae=decoders.vae_memory(model.pipe), **asdict(usage or Usage()),
                     scheduler=type(model.pipe.scheduler).__name__ if getattr(model.pipe, "scheduler", None) is not None
                     else "")

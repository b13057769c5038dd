"""A run's record (RunRecord): its meta, and its totals from its rows and its phases outside the steps."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch

from previewlab.preview.decoding.vae_memory import copy_mb, vae_memory
from previewlab.preview.models import Model, device_name
from previewlab.preview.names import check
from previewlab.preview.record.records import ENDED, PREVIEW_STAGES, StepRow, Totals, on_path_ms
from previewlab.preview.record.run import RunMeta, RunRecord
from previewlab.preview.timing.usage import Usage


def _env(model: Model) -> dict[str, Any]:
    """What the run ran on beyond its meta: the device's name, the threads, the versions."""
    import diffusers

    return dict(device_name=device_name(model.device), threads=torch.get_num_threads(), torch=torch.__version__,
                diffusers=diffusers.__version__)


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


def run_record(model: Model, meta: RunMeta, rows: list[StepRow], phases: Phases, *, status: str,
               first_run: bool = False, inflight_peak: int = 0, compiled: bool = False, compile_ms: float = 0.0,
               cuda: bool | None = None, usage: Usage | None = None, timing: str = "host") -> RunRecord:
    """A run's record: its meta (what it was asked, its preview settings at the start; None: a direct call) and
    its totals from its phases and its rows: stage totals from the rows, and other_ms = wall time minus
    everything measured on the denoising path (phases, denoise, the preview stages that ran on it, the final
    drain). cuda: the stages ran on an asynchronous device (any accelerator); timing: how the stopwatch timed
    them (host | events | waits; a direct call's wall: host)."""
    sums: dict[str, Any] = {k: sum(getattr(r, k) for r in rows) for k in ("denoise_ms", *PREVIEW_STAGES)}
    cuda = model.device.type != "cpu" if cuda is None else cuda  # the stopwatch's device (tests: a fake one)
    on_path = sum(on_path_ms(r.mode, r, cuda) for r in rows)  # the meter's rows carry the same figure
    ph = phases
    outside = ph.text_encode_ms + ph.final_decode_ms + ph.final_encode_ms + ph.write_ms
    other = ph.wall_ms - sums["denoise_ms"] - on_path - outside - ph.drain_ms
    pipe = model.pipe
    scheduler = getattr(pipe, "scheduler", None)
    ended = check("status", status, ENDED)  # a run with totals is done or stopped (ValueError otherwise)
    totals = Totals(status=ended, first_run=int(first_run), **_env(model), load_s=model.load_s,
                    wall_s=ph.wall_ms / 1e3, **sums, text_encode_ms=ph.text_encode_ms,
                    final_decode_ms=ph.final_decode_ms, final_encode_ms=ph.final_encode_ms, write_ms=ph.write_ms,
                    drain_ms=ph.drain_ms, on_path_ms=on_path, other_ms=other, previews=sum(r.preview for r in rows),
                    skipped=sum(r.skipped for r in rows), bytes=sum(r.bytes for r in rows),
                    inflight_peak=inflight_peak, offload=model.offload, compile=int(compiled),
                    channels_last=int(model.channels_last), compile_ms=compile_ms,
                    vae_copy_mb=copy_mb(pipe), steps_run=len(rows),
                    frames_sent=sum(r.frames for r in rows), **asdict(usage or Usage()), timing=timing,
                    scheduler=type(scheduler).__name__ if scheduler is not None else "",
                    vae=vae_memory(pipe))
    return RunRecord(meta, totals)

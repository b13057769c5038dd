"""previewlab gpu-check [--dry-run]: the GPU figures, each measured within this one run.

Every arm runs through the bench's engine (bench/sweep.py), right after a no-preview baseline in each repeat
(the bare diffusers call right before one), even repeats in reverse order so drift cancels; its overhead is the
bench's (summary.txt's, with its interval). Each row shows the previews each side made and skipped: overlap may
skip previews that sync makes, and a ratio only compares equal work when those match. Writes runs.csv,
steps.csv and summary.txt to --out.
--dry-run: the same steps on the CPU with synthetic:tiny, to prove the script before GPU time is spent on it.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from previewlab.bench.flags import Parser, repeats_value, steps_value
from previewlab.bench.gpu.arms import (ARMS, DRY, GPU, NVJPEG_ARMS, VIDEO_ARMS, VIDEO_DRY, VIDEO_DRY_FRAMES,
                                      VIDEO_GPU, VIDEO_GPU_FRAMES, XL_DRY, XL_DRY_PREVIEW_MAX, XL_GPU,
                                      XL_GPU_PREVIEW_MAX, Setup, nvjpeg_missing, xl_arms)
from previewlab.bench.gpu.figures import clip_rows, image_rows, missing, table, xl_row
from previewlab.bench.gpu.measure import measure
from previewlab.bench.gpu.reference import compare, render, traced
from previewlab.bench.gpu.syncs import CLIP_SWITCHES, row as sync_row
from previewlab.preview.models import Model, load
from previewlab.preview.settings import MAX_NUM_FRAMES, PreviewSettings

Log = Callable[[str], Any]


def _built(setup: Setup, label: str, what: str, log: Log) -> Model | list[str]:
    """The model of a check's own rows, built here and logged with `what` they run, or the row that says why it
    could not be (the other rows stand without it)."""
    try:
        model = load(setup.model, device=setup.device, dtype=setup.dtype)
    except Exception as e:
        return missing(label, "not run", e)
    log(f"gpu_check: SYNTHETIC {setup.model} {setup.dtype} {setup.size}x{setup.size}{what}, {setup.steps} steps, "
        f"{setup.repeats} repeats; built in {model.load_s:.1f} s")
    return model


def video_rows(setup: Setup, frames: int, out: Path, log: Log) -> list[list[str]]:
    """The clip rows: Wan 2.1's previews of its first latent frame and of the whole clip, each against no
    previews. A model that cannot be built here is a row that says why."""
    label = f"wan21 {frames} frames"
    model = _built(setup, label, f" x {frames} frames", log)
    if not isinstance(model, Model):
        return [model]
    base = replace(setup.settings(), num_frames=frames, fps=model.fps, max_frames=MAX_NUM_FRAMES,
                   frame_step=model.space.temporal, guidance=5.0)
    try:
        rows = clip_rows(measure(model, setup, base, VIDEO_ARMS, out, log, "wan21-"), label)
    except Exception as e:  # as for the load: the image table and the reference still get written
        return [missing(label, "failed", e)]
    return rows + [sync_row(model, base, f"{label}: hidden syncs (overlap, live frames and decoder switches)",
                            CLIP_SWITCHES)]


def xl_rows(setup: Setup, preview_max: int, out: Path, log: Log) -> list[list[str]]:
    """The decode_at row: TAESD every step (sync) with previews of preview_max px, decoding at the preview's
    size against the whole image resized. A model that cannot be built here is a row that says why."""
    label = f"sdxl {setup.size} px, preview_max {preview_max}: taesd every step, sync, decode_at preview / full"
    model = _built(setup, label, f", preview_max {preview_max}", log)
    if not isinstance(model, Model):
        return [model]
    base = setup.settings()
    try:
        return [xl_row(measure(model, setup, base, xl_arms(preview_max), out, log, "xl-"), label)]
    except Exception as e:  # as for the load: the other rows and the reference still get written
        return [missing(label, "failed", e)]


def machine(model: Model) -> str:
    import diffusers

    cuda = model.device.type == "cuda"
    dev = f"{torch.cuda.get_device_name(model.device)} (CUDA {torch.version.cuda})" if cuda else \
        f"CPU {platform.processor() or platform.machine()}, {os.cpu_count()} cores, {torch.get_num_threads()} threads"
    return (f"machine: {dev} | python {platform.python_version()} | torch {torch.__version__} | diffusers "
            f"{diffusers.__version__} | {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}")


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="previewlab gpu-check", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dry-run", action="store_true", help=f"CPU, {DRY.model}, {DRY.size} px, {DRY.steps} steps")
    p.add_argument("--steps", type=steps_value, default=None,
                   help=f"denoising steps (default {GPU.steps}; dry run {DRY.steps})")
    p.add_argument("--repeats", type=repeats_value, default=None,
                   help=f"interleaved pairs per check (default {GPU.repeats}; dry run {DRY.repeats})")
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or "runs/gpu-check"))
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    setup = DRY if args.dry_run else GPU
    setup = replace(setup, steps=args.steps or setup.steps, repeats=args.repeats or setup.repeats)
    t0 = time.perf_counter()
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    if setup.device == "cuda" and not torch.cuda.is_available():
        log(f"previewlab gpu-check: torch {torch.__version__} sees no CUDA device; --dry-run runs on the CPU")
        return 2
    if setup.threads:
        torch.set_num_threads(setup.threads)
    model = load(setup.model, device=setup.device, dtype=setup.dtype)
    info = machine(model)
    log(f"{info}\ngpu_check: {'SYNTHETIC ' if model.synthetic else ''}{setup.model} {setup.dtype} {setup.size}x"
        f"{setup.size}, {setup.steps} steps, {setup.repeats} repeats; model built in {model.load_s:.1f} s")
    base = setup.settings()
    why = nvjpeg_missing(model)
    args.out.mkdir(parents=True, exist_ok=True)
    measured = measure(model, setup, base, ARMS | ({} if why else NVJPEG_ARMS), args.out, log, direct=True)
    rows = image_rows(measured, why) + [sync_row(model, base)]
    xl = (XL_DRY, XL_DRY_PREVIEW_MAX) if args.dry_run else (XL_GPU, XL_GPU_PREVIEW_MAX)
    video = (VIDEO_DRY, VIDEO_DRY_FRAMES) if args.dry_run else (VIDEO_GPU, VIDEO_GPU_FRAMES)
    t_measured = time.perf_counter()
    rows += xl_rows(xl[0], xl[1], args.out, log)
    t_xl = time.perf_counter()
    text = table(rows + video_rows(video[0], video[1], args.out, log))
    t_video = time.perf_counter()
    # Sync mode: each stage has its own range on one thread. 10 steps bound the profiler's parse time.
    ref_settings = replace(base, steps=min(base.steps, 10), preview=PreviewSettings(decoder="taesd", mode="sync"))
    try:
        run, found = traced(model, ref_settings)
        ref = render(compare(run.rows, found, model.device.type == "cuda"), model.device.type == "cuda",
                     "taesd every step, sync")
    except Exception as e:  # the table above stands without the reference; say why it is missing
        ref = f"reference: not run ({type(e).__name__}: {e})"
    took = (f"previewlab gpu-check: {time.perf_counter() - t0:.0f} s (model {model.load_s:.0f} s, runs {t_measured - t0 - model.load_s:.0f} s, "
            f"sdxl {t_xl - t_measured:.0f} s, video {t_video - t_xl:.0f} s, reference {time.perf_counter() - t_video:.0f} s); JPEG encoders that "
            f"ran: {', '.join(measured.encoders())}")
    summary = "\n".join([info, f"{'SYNTHETIC (random weights) ' if model.synthetic else ''}{setup.model} {setup.dtype} "
                         f"{setup.size}x{setup.size} {setup.steps} steps, {measured.repeats} repeats", text, ref, took])
    (args.out / "summary.txt").write_text(summary + "\n")
    print(summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

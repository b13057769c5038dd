"""The demo model's check: held-out single-object captions through the pipeline, read back by bench/demo/checker.py's
color checker. The issue's targets for the full model: color >= 80 %, position >= 80 %, shape >= 60 %."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from . import checker
from previewlab.preview.models import demo_scenes as sc


def generate(pipe: Any, captions: Sequence[str], steps: int, guidance: float, seed: int,
             batch: int = 10) -> list[np.ndarray]:
    """One image per caption, (H, W, 3) uint8, at the pipeline's default size; caption i always gets the noise
    of seed + i, whatever the batch."""
    images: list[np.ndarray] = []
    for i in range(0, len(captions), batch):
        gens = [torch.Generator().manual_seed(seed + j) for j in range(i, min(i + batch, len(captions)))]
        out = pipe(list(captions[i:i + batch]), num_inference_steps=steps, guidance_scale=guidance,
                   generator=gens, output_type="np").images
        images.extend((np.clip(out, 0, 1) * 255).round().astype(np.uint8))
    return images


def check(folder: Path, steps: int = 20, guidance: float = 7.5, seed: int = 0,
          grid: Path | None = None) -> tuple[dict[str, float], list[checker.Verdict]]:
    """The 50 held-out captions (never drawn in training), `steps` steps each, in float32 on the CPU.
    Returns percent matches per attribute and one verdict per caption. 20 steps and guidance 7.5 are
    previewlab's run defaults (preview/settings.py), so the figures are what a user sees."""
    from diffusers import StableDiffusionPipeline

    pipe = StableDiffusionPipeline.from_pretrained(str(folder), local_files_only=True, dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    scenes = sc.held_out()
    images = generate(pipe, [s.caption for s in scenes], steps, guidance, seed)
    verdicts = checker.judge(scenes, images)
    if grid is not None:
        from PIL import Image

        rows = [np.concatenate(images[i:i + 10], 1) for i in range(0, len(images), 10)]
        Image.fromarray(np.concatenate(rows, 0)).save(grid)
    return checker.figures(verdicts), verdicts

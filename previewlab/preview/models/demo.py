"""The demo model (`--model demo`): a small SD1.5-family pipeline trained here on drawn scenes
(bench/demo/train.py) and shipped in demo_model/ with its TAESD and latent2rgb factors. Its pictures are real,
its costs a small model's, and DEMO_NOTE says so everywhere it is reported."""
from __future__ import annotations

import importlib.resources
from pathlib import Path

from previewlab.preview.models.loading import LATENT_RGB_FILE
from previewlab.preview.models.model import ModelError

DEMO_DIR = Path(str(importlib.resources.files(__package__ or __name__) / "demo_model"))  # package data, in a wheel too
DEMO_NOTE = ("demo model trained on drawn scenes: real pictures from a small model; its costs are a small model's "
             "(use synthetic:sd15 for SD1.5's)")
DEMO_SIZE = 128  # what it was trained at
DEMO_PROMPT = "a red circle on the left and a blue square on the right, on a yellow background"  # one it knows
DEMO_GUIDANCE = 3.0  # its checker's best (README: color 88, position 92, shape 66 % at 3; 80, 90, 56 % at 7.5)


def demo_folder() -> Path:
    """The demo model's folder, which loads as any local folder does (its TAESD and factors: previews_of).
    Raises ModelError naming what is missing and how to train it."""
    missing = [n for n in ("model_index.json", "taesd_decoder.safetensors", LATENT_RGB_FILE)
               if not (DEMO_DIR / n).is_file()]
    if missing:
        raise ModelError(f"--model demo: {', '.join(missing)} missing from {DEMO_DIR}; "
                         f"previewlab train-demo --out {DEMO_DIR} trains them (about 50 minutes on 2 cores)")
    return DEMO_DIR

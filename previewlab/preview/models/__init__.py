"""Models: the demo model, offline synthetic presets of real architectures, local folders, single files, TAEs.

Nothing here downloads. A synthetic model has random seeded weights: its costs are real, its pictures
are noise, and `Model.synthetic` says so everywhere it is reported. The demo model (`--model demo`) is a small
SD1.5-family pipeline trained here on drawn scenes (bench/demo/train.py) and shipped in preview/models/demo_model/: its
pictures are real, its costs a small model's, and `Model.note` says so everywhere it is reported.

One module per kind of thing: model.py (Model), devices.py, names.py (what --model may name), demo.py,
sd_presets.py (SD1.5, SDXL), presets.py (SD3, FLUX), video_presets.py and new_video_presets.py, loading.py and
single_file.py (what users have), previews.py (a model's TAE and factors), loader.py (load). The names importers
use are here.
"""
from __future__ import annotations

import os

from previewlab.preview.models.demo import DEMO_DIR, DEMO_GUIDANCE, DEMO_NOTE, DEMO_PROMPT, DEMO_SIZE
from previewlab.preview.models.devices import DEVICES, allowed_devices, choose_device, device_arg, device_name, device_refusal
from previewlab.preview.models.loader import DTYPES, OFFLOADS, load, quiet, synthetic_pipeline
from previewlab.preview.models.model import Model, ModelError, default_size, denoiser
from previewlab.preview.models.names import KNOWN, SYNTHETIC, did_you_mean, known_models, model_refusal
from previewlab.preview.models.previews import check_tae, load_taesd, previews_of, tae_channels
from previewlab.preview.models.sd_presets import BENCH_PRESETS, SD_PRESETS

# transformers warns at import that torchvision is missing; nothing here uses image processors (every module
# here imports transformers only where it builds or loads a model)
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

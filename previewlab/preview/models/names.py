"""The --model names previewlab builds itself, the nearest one to a typo, and why a name cannot be a path."""
from __future__ import annotations

import difflib
from pathlib import Path

from previewlab.preview.models import single_file
from previewlab.preview.models.presets import PRESETS
from previewlab.preview.models.sd_presets import BENCH_PRESETS, SD_PRESETS

SYNTHETIC = SD_PRESETS + tuple(PRESETS)
KNOWN = ("demo", *SYNTHETIC)  # every --model name previewlab builds itself


def known_models() -> str:
    """The names previewlab builds itself, as a line: the two the bench's SDXL measurements use named apart."""
    everyday = [n for n in KNOWN if n not in BENCH_PRESETS]
    return (f"{', '.join(everyday)}; for the bench's SDXL measurements at 1024 px also {' and '.join(BENCH_PRESETS)}, "
            "described in docs/gpu-check.md")


def did_you_mean(name: str) -> str:
    """"; did you mean demo?" for a name close to one previewlab builds (a typo), else ""."""
    close = difflib.get_close_matches(name, KNOWN, n=1)
    return f"; did you mean {close[0]}?" if close else ""


def unknown_synthetic(name: str) -> str:
    """What a synthetic: name previewlab does not build is told, in one line listing the ones it does."""
    return f"unknown synthetic model {name!r}{did_you_mean(name)} (allowed: {known_models()})"


def model_refusal(name: str) -> str | None:
    """Why --model `name` (neither demo nor a synthetic preset) cannot be a folder, a checkpoint or a cached repo
    id, asked before anything loads; None when it may be one. A name of one `owner/name` that is not here may
    still be in the local Hugging Face cache: loading asks there."""
    p = Path(name)
    if p.is_file() and not single_file.is_single_file(name):
        return f"--model: a checkpoint is a .safetensors or .ckpt file (or FLUX's .sft): {name}"
    if p.exists() or not (p.is_absolute() or name.startswith(".") or name.count("/") != 1):
        return None
    typo = did_you_mean(name) if "/" not in name and not name.startswith(".") else ""  # a name, not a path
    hint = typo or ("; give a local diffusers folder, a .safetensors or .ckpt file, a repo id already in the "
                    "local Hugging Face cache, demo, or a synthetic preset such as synthetic:small")
    return f"--model: no such file or folder: {name}{hint}"


def model_here(name: str) -> str:
    """Why --model `name`, which model_refusal lets by, is not on this machine ('' when it may be): a repo id
    that is no folder here and not in the local Hugging Face cache. A folder or a file is judged when it loads."""
    if Path(name).exists():
        return ""
    from huggingface_hub import try_to_load_from_cache

    if any(isinstance(try_to_load_from_cache(name, index), str) for index in ("model_index.json",
                                                                             "modular_model_index.json")):
        return ""
    return f"--model {name}: neither a folder here nor in the local Hugging Face cache"

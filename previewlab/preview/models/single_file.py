"""Single-file checkpoints (.safetensors, .ckpt, as A1111 and ComfyUI keep them), loaded fully offline.

diffusers' from_single_file needs the pipeline's configs and tokenizers. Asked offline without a `config`, it
turns downloads back on to fetch them. So previewlab always passes `config`: a folder assembled from the configs
shipped in preview/models/single_file_configs/<kind>/ (no weights), with CLIP tokenizer files built from OpenAI CLIP's
byte-pair merges shipped beside them. SD3.5 and FLUX.1 need a T5 tokenizer, which cannot be made offline: their
files load with `config` naming a local diffusers folder (or a repo id in the local cache) of the same family.
"""
from __future__ import annotations

import gzip
import importlib.resources
import json
import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from previewlab.preview.models.families import Family, FamilyError
from previewlab.preview.models.reading import latent_space
from previewlab.preview.models.loading import LoadError

log = logging.getLogger("previewlab.models")
CONFIGS = Path(str(importlib.resources.files(__package__ or __name__) / "single_file_configs"))  # package data
SUFFIXES = (".safetensors", ".ckpt", ".sft")
# diffusers' name for what a checkpoint holds -> (pipeline class, the configs shipped for it; None: needs config)
KINDS: dict[str, tuple[str, str | None]] = {
    "v1": ("StableDiffusionPipeline", "v1"),
    "v2": ("StableDiffusionPipeline", "v2"),
    "xl_base": ("StableDiffusionXLPipeline", "xl_base"),
    "playground-v2-5": ("StableDiffusionXLPipeline", None),
    "sd3": ("StableDiffusion3Pipeline", None),
    "sd35_medium": ("StableDiffusion3Pipeline", None),
    "sd35_large": ("StableDiffusion3Pipeline", None),
    "flux-dev": ("FluxPipeline", None),
    "flux-schnell": ("FluxPipeline", None),
}
CLIP_MERGES = 49152 - 256 - 2  # CLIP's vocabulary: 256 bytes, the same with "</w>", these merges, 2 specials


def is_single_file(name: str) -> bool:
    return Path(name).suffix.lower() in SUFFIXES


def _byte_chars() -> list[str]:
    """GPT-2's byte-to-character table, in CLIP's vocabulary order: printable bytes map to themselves, the rest
    to the characters from 256 up, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in printable] + [chars[b] for b in range(256) if b not in printable]


def write_clip_tokenizer(folder: Path) -> None:
    """vocab.json and merges.txt of CLIP's tokenizer (49408 tokens) into `folder`, from the shipped merges."""
    with gzip.open(CONFIGS / "clip_bpe_16e6.txt.gz", "rt", encoding="utf-8") as f:
        merges = f.read().split("\n")[1:CLIP_MERGES + 1]
    base = _byte_chars()
    tokens = base + [c + "</w>" for c in base] + ["".join(m.split(" ")) for m in merges]
    tokens += ["<|startoftext|>", "<|endoftext|>"]
    (folder / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(tokens)}, ensure_ascii=False),
                                       encoding="utf-8")
    (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n", encoding="utf-8")


def assemble(kind: str, dest: Path) -> Path:
    """The shipped configs of `kind` with their CLIP tokenizers, as a diffusers folder without weights."""
    shutil.copytree(CONFIGS / kind, dest)
    for tok in sorted(dest.glob("tokenizer*")):
        write_clip_tokenizer(tok)
    return dest


def _local_config(config: str) -> str:
    """A folder, or a repo id resolved in the local cache (diffusers would download a missing repo id)."""
    if Path(config).is_dir():
        return config
    from huggingface_hub import snapshot_download

    try:
        return snapshot_download(config, local_files_only=True, allow_patterns=["*.json", "*.txt", "*.model"])
    except Exception:
        raise LoadError(f"--config {config}: not a folder and not in the local Hugging Face cache; give a local "
                        "diffusers folder of the checkpoint's model family") from None


class _Lazy(dict):  # type: ignore[type-arg]
    """A safetensors file's keys, each tensor read only when asked for: what the checkpoint holds is told by a
    few keys and shapes, so the file is not read twice in full (from_single_file reads it once)."""

    def __init__(self, handle: Any) -> None:
        super().__init__({k: None for k in handle.keys()})
        self._handle = handle

    def __getitem__(self, key: str) -> torch.Tensor:
        if not dict.__contains__(self, key):
            raise KeyError(key)
        return self._handle.get_tensor(key)


def kind_of(path: Path) -> str:
    """diffusers' name for what the checkpoint holds ("v1", "xl_base", "flux-dev", ...). Raises LoadError."""
    from diffusers.loaders.single_file_utils import infer_diffusers_model_type, load_single_file_checkpoint

    try:
        if path.suffix.lower() in (".safetensors", ".sft"):
            from safetensors import safe_open

            with safe_open(str(path), framework="pt") as handle:
                return str(infer_diffusers_model_type(_Lazy(handle)))
        return str(infer_diffusers_model_type(load_single_file_checkpoint(str(path), local_files_only=True)))
    except Exception as e:
        detail = str(e).splitlines()[0][:120] if str(e) else type(e).__name__
        raise LoadError(f"--model {path}: not a readable checkpoint ({detail})") from None


def load_single_file(name: str, dtype: torch.dtype, config: str | None = None) -> tuple[Any, Family | None]:
    """A single-file checkpoint -> (pipeline on the CPU, family). Raises LoadError with one line."""
    path = Path(name)
    if not path.is_file():
        raise LoadError(f"--model {name}: no such file")
    kind = kind_of(path)
    if kind not in KINDS:
        raise LoadError(f"--model {name}: a {kind!r} checkpoint; single files of SD 1.x, SD 2.x, SDXL, SD3/3.5 and "
                        "FLUX.1 load here (for others, convert to a diffusers folder)")
    cls_name, shipped = KINDS[kind]
    if kind == "v2" and config is None:  # the weights cannot tell a 768 v-prediction file from a 512 epsilon one
        log.warning("%s: an SD 2.x checkpoint, loaded as SD 2.1 at 768 px with v-prediction; for an SD 2.x base "
                    "(512 px, epsilon) pass --config with its own configs", name)
    if config is None and shipped is None:
        raise LoadError(f"--model {name}: a {kind} checkpoint needs a T5 tokenizer, which cannot be made offline; "
                        "pass --config with a local diffusers folder (or a cached repo id) of the same family")
    import diffusers

    cls = getattr(diffusers, cls_name)
    with tempfile.TemporaryDirectory(prefix="previewlab-config-") as tmp:
        folder = _local_config(config) if config is not None else str(assemble(shipped or "", Path(tmp) / "config"))
        try:
            pipe = cls.from_single_file(str(path), config=folder, local_files_only=True, torch_dtype=dtype)
        except Exception as e:  # a file whose tensors do not fit the configs, a config folder missing a part
            detail = str(e).splitlines()[0][:160] if str(e) else type(e).__name__
            raise LoadError(f"--model {name}: cannot load it as {cls_name} ({kind}) with "
                            f"{'--config ' + config if config else 'the shipped ' + kind + ' configs'}: {detail}") from None
    try:
        return pipe, latent_space(pipe).family
    except FamilyError as e:
        raise LoadError(f"--model {name}: {e}") from None

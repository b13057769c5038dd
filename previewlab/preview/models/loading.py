"""Loading what users have, offline: diffusers folders and repo ids already in the local Hugging Face cache,
folders that hold only fp16 variant files, TAE weights, refused when they belong to another family, and what a
folder ships for its previews (its own TAE file and latent2rgb.json, as the demo model does).

Nothing here downloads: every from_pretrained gets local_files_only=True. Errors are one line that says what
was found and what is missing.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from previewlab.preview.models.families import CHANNELS, FAMILIES, Family, FamilyError
from previewlab.preview.models.latent_formats import Factors
from previewlab.preview.models.reading import latent_space
from previewlab.preview.models.taehv import load_taehv
from previewlab.preview.models.taehv_files import FAMILY_FILES, is_taehv
from previewlab.preview.models.taesd import PREFIXES, TaeError, load_tae, read_state

TaeKind = Literal["diffusers", "madebyollin", "none"]
WEIGHTS = (".safetensors", ".bin", ".ckpt", ".pth")


class LoadError(ValueError):
    """A model or weights that cannot be loaded; the message is one line a person can act on."""


def weight_files(folder: Path) -> dict[str, list[str]]:
    """Weight file names per component subfolder of a diffusers folder."""
    out: dict[str, list[str]] = {}
    for sub in sorted(p for p in folder.iterdir() if p.is_dir()):
        names = sorted(f.name for f in sub.iterdir() if f.is_file() and f.name.endswith(WEIGHTS))
        if names:
            out[sub.name] = names
    return out


def variant_of(folder: Path) -> str | None:
    """The variant to load a folder with: "fp16" (or another) when its components hold only variant files,
    None when plain weights are there. A folder with plain weights in some parts and only variants in others
    loads as the variant: diffusers falls back to plain files per component then."""
    files = weight_files(folder)
    variants: set[str] = set()
    plain = False
    for names in files.values():
        parts = [n.split(".") for n in names]
        vs = {p[-2] for p in parts if len(p) >= 3}
        if any(len(p) == 2 for p in parts):
            plain = True
        elif vs:
            variants |= vs
    if not plain and len(variants) == 1:
        return variants.pop()
    return None


NO_WEIGHTS = ("Tokenizer", "Scheduler", "Processor", "FeatureExtractor")  # components made of files, not weights


def weightless(folder: Path) -> list[str]:
    """The components model_index.json names that are made of weights (not tokenizers, schedulers, processors)
    and whose subfolder holds no weight file."""
    try:
        index = json.loads((folder / "model_index.json").read_text())
    except (OSError, ValueError):
        return []
    files = weight_files(folder)
    return [k for k, v in index.items() if not k.startswith("_") and isinstance(v, list) and len(v) == 2
            and isinstance(v[1], str) and not any(t in v[1] for t in NO_WEIGHTS) and k not in files]


def _variants(folder: Path) -> list[str]:
    """The variants whose files a folder holds (fp16 for *.fp16.safetensors)."""
    return sorted({n.split(".")[-2] for names in weight_files(folder).values() for n in names
                   if len(n.split(".")) >= 3})


def _missing(folder: Path, variant: str | None) -> str:
    """What a diffusers folder lacks, and --variant only where files of another variant are really there."""
    empty = weightless(folder)
    said = (f"no weights for {', '.join(empty)} (no {', '.join(WEIGHTS)} file in "
            f"{', '.join(f'{k}/' for k in empty)}): copy them in" if empty else f"found {_found(folder)}")
    others = [v for v in _variants(folder) if v != variant]
    return said + (f"; its {others[0]} files load with --variant {others[0]}" if others else "")


def _found(folder: Path) -> str:
    files = weight_files(folder)
    return "; ".join(f"{k}/: {', '.join(v[:3])}" for k, v in files.items()) or "no weight files at all"


def local_pipeline(name: str, dtype: torch.dtype, variant: str | None = None) -> tuple[Any, Family | None]:
    """A diffusers folder or a repo id in the local cache -> (pipeline on the CPU, its known family or None).
    The class comes from the folder's model_index.json (DiffusionPipeline). Raises LoadError."""
    from diffusers import DiffusionPipeline

    p = Path(name)
    looks_like_path = p.is_absolute() or name.startswith(".") or p.exists() or name.count("/") != 1
    if looks_like_path and (p / MODULAR_INDEX).is_file() and not (p / "model_index.json").is_file():
        return modular_pipeline(p, dtype)
    if looks_like_path and not (p / "model_index.json").is_file():
        raise LoadError(f"--model {name}: no diffusers folder there (model_index.json not found); give a local "
                        "diffusers folder, a repo id already in the local Hugging Face cache, or a synthetic preset")
    if looks_like_path and variant is None:
        variant = variant_of(p)
    try:
        pipe = DiffusionPipeline.from_pretrained(name, local_files_only=True, dtype=dtype, variant=variant)
    except Exception as e:  # diffusers raises several types for a missing file or cache entry
        detail = str(e).splitlines()[0][:160] if str(e) else type(e).__name__
        if looks_like_path:
            want = f"variant {variant}" if variant else "plain (non-variant) weights"
            raise LoadError(f"--model {name}: cannot load {want} ({detail}); {_missing(p, variant)}") from None
        raise LoadError(f"--model {name}: not in the local Hugging Face cache and downloads are off "
                        f"({type(e).__name__}); download it on a networked machine or pass a folder") from None
    try:
        family = latent_space(pipe).family
    except FamilyError as e:
        raise LoadError(f"--model {name}: {e}") from None
    return pipe, family


MODULAR_INDEX = "modular_model_index.json"  # a Modular Diffusers pipeline's folder (ModularPipeline.save_pretrained)


def modular_pipeline(folder: Path, dtype: torch.dtype) -> tuple[Any, Family | None]:
    """A Modular Diffusers pipeline folder -> (pipeline on the CPU with its components loaded, its family).
    Its blocks come from the folder's modular_model_index.json, its components from the places it names (the
    folder's own subfolders for a pipeline saved there). Raises LoadError."""
    from diffusers import ModularPipeline

    try:
        pipe = ModularPipeline.from_pretrained(str(folder), local_files_only=True)
        pipe.load_components(dtype=dtype)
    except Exception as e:  # diffusers raises several types for a missing file, class or component
        detail = str(e).splitlines()[0][:160] if str(e) else type(e).__name__
        raise LoadError(f"--model {folder}: cannot load its Modular pipeline ({detail}); "
                        f"found {_found(folder)}") from None
    # load_components() only warns about a component it could not load: name them, and where the index looks
    index = json.loads((folder / MODULAR_INDEX).read_text())
    named = {k: v[2].get("pretrained_model_name_or_path") for k, v in index.items()
             if isinstance(v, list) and len(v) == 3 and isinstance(v[2], dict) and v[2].get("pretrained_model_name_or_path")}
    missing = [k for k in named if getattr(pipe, k, None) is None]
    if missing:
        where = sorted({str(named[k]) for k in missing})
        raise LoadError(f"--model {folder}: cannot load its Modular pipeline's {', '.join(missing)} (its "
                        f"modular_model_index.json looks for them in {', '.join(where)})")
    try:
        family = latent_space(pipe).family
    except FamilyError as e:
        raise LoadError(f"--model {folder}: {e}") from None
    return pipe, family


def _tae_families(name: str, candidates: tuple[str, ...]) -> tuple[str, ...]:
    """Narrow a TAE's candidate families by madebyollin's name prefixes (taesdxl_, taef1, ...)."""
    base = Path(name.rstrip("/")).name.lower()
    for prefix in sorted(PREFIXES, key=len, reverse=True):
        stem = prefix.rstrip("_")
        if (base.startswith(prefix) or base == stem) and PREFIXES[prefix] in candidates:
            return (PREFIXES[prefix],)
    return candidates


def _taehv_families(name: str, channels: int) -> tuple[str, ...]:
    """The families a TAEHV file can decode: by its channels, narrowed by madebyollin's file names."""
    candidates = tuple(f for f in FAMILY_FILES if CHANNELS[f] == channels)
    base = name.lower()
    for family, stem in FAMILY_FILES.items():
        if stem in base and family in candidates:
            return (family,)
    return candidates


def load_taesd(path: str, family: Family | None = None) -> tuple[nn.Module, TaeKind]:
    """A TAE decoder: madebyollin's .pth / .safetensors, a diffusers AutoencoderTiny folder, or a repo id in the
    local cache (madebyollin/taesd, taesdxl, taesd3, taef1). With `family`, a TAE of another family is refused,
    naming both, before any run starts. Raises LoadError."""
    p = Path(path)
    module: nn.Module
    kind: TaeKind
    candidates: tuple[str, ...]
    if p.is_file():
        try:
            state = read_state(p)
            if is_taehv(state):  # madebyollin/taehv's video TAEs: previewlab's own decoder (taehv.py)
                video = load_taehv(state, name=p.name)
                module, candidates = video, _taehv_families(p.name, video.layout.channels)
            else:
                module, candidates = load_tae(state, name=p.name)
        except TaeError as e:
            raise LoadError(f"--taesd {path}: {e}") from None
        kind = "madebyollin"
    else:
        is_dir = p.is_dir()
        if is_dir and not (p / "config.json").is_file():
            raise LoadError(f"--taesd {path}: folder has no config.json; give a diffusers AutoencoderTiny folder "
                            "or madebyollin's taesd*_decoder.pth / .safetensors")
        if not is_dir and (p.is_absolute() or path.startswith(".") or path.count("/") != 1):
            raise LoadError(f"--taesd {path}: no such file or folder; give madebyollin's taesd_decoder.pth (taesdxl_, "
                            "taesd3_, taef1_, taef2_ for the other families), an AutoencoderTiny folder, or a repo "
                            "id already in the local cache")
        from diffusers import AutoencoderTiny

        try:
            module = AutoencoderTiny.from_pretrained(path, local_files_only=True)
        except Exception as e:
            raise LoadError(f"--taesd {path}: not in the local Hugging Face cache and downloads are off "
                            f"({type(e).__name__}); download it on a networked machine or pass a file") from None
        cfg: Any = module.config
        channels = int(cfg.latent_channels)
        candidates = {4: ("sd15", "sdxl"), 16: ("sd3", "flux1"), 32: ("flux2",)}.get(channels, ())
        kind = "diffusers"
    candidates = _tae_families(path, tuple(candidates))
    if family is not None and family not in candidates:
        raise LoadError(f"--taesd {path}: a TAE for {' or '.join(candidates) or 'an unknown family'}, but the model "
                        f"is {family}; use the {family} one ({_tae_name(family)})")
    return module, kind


def _tae_name(family: str) -> str:
    """The TAE a family takes and where it is published."""
    if family in FAMILY_FILES:
        return f"{FAMILY_FILES[family]}.pth from github.com/madebyollin/taehv"
    prefix = next((k for k, v in PREFIXES.items() if v == family), None)
    return f"{prefix}decoder.pth from github.com/madebyollin/taesd" if prefix else "none is published"


LATENT_RGB_FILE = "latent2rgb.json"  # {"factors": C rows of (R, G, B), "bias": (R, G, B)}: latent_formats' Factors


@dataclass(frozen=True)
class Shipped:
    """What a diffusers folder ships beside its components for previews; None: not there."""
    folder: Path
    taesd: Path | None          # its family's TAE decoder under madebyollin's name (taesd_decoder.safetensors, ...)
    latent_rgb: Factors | None  # its own latent2rgb factors, from latent2rgb.json


def folder_of(pipe: Any) -> Path | None:
    """The diffusers folder a pipeline was loaded from: its name_or_path when that is a folder, else the one
    above its VAE's (a repo id loads from a snapshot folder in the local cache). None for a pipeline built in
    code or loaded from a single file."""
    vae = getattr(pipe, "vae", None)
    vae_path = getattr(getattr(vae, "config", None), "_name_or_path", None)
    for where in (getattr(pipe, "name_or_path", None), Path(vae_path).parent if vae_path else None):
        if where and (Path(where) / "model_index.json").is_file():
            return Path(where)
    return None


def tae_files(family: Family) -> tuple[str, ...]:
    """The names a TAE decoder for `family` is published under, as a folder may ship it."""
    stems = [f"{p}decoder" for p, f in PREFIXES.items() if f == family]
    stems += [FAMILY_FILES[family]] if family in FAMILY_FILES else []
    return tuple(f"{stem}{ext}" for stem in stems for ext in (".safetensors", ".pth"))


def read_factors(path: Path, channels: int) -> Factors:
    """latent2rgb.json -> Factors for a latent space of `channels` channels. Raises LoadError."""
    try:
        fit = json.loads(path.read_text())
        rows = [[float(v) for v in r] for r in fit["factors"]]
        bias = [float(v) for v in fit["bias"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise LoadError(f"{path}: not latent2rgb factors ({type(e).__name__}); expected "
                        '{"factors": [[r, g, b], ...], "bias": [r, g, b]}') from None
    if len(rows) != channels or any(len(r) != 3 for r in rows) or len(bias) != 3:
        raise LoadError(f"{path}: {len(rows)} rows of factors, but the latent space has {channels} channels; it "
                        f"needs {channels} rows of (R, G, B) and one (R, G, B) bias")
    return tuple((r[0], r[1], r[2]) for r in rows), (bias[0], bias[1], bias[2])


def shipped(pipe: Any, family: Family | None, channels: int) -> Shipped | None:
    """What the pipeline's folder (folder_of) ships for previews: the TAE for its family and latent2rgb.json's
    factors for its `channels`; None when the pipeline has no folder. Raises LoadError for unreadable factors."""
    folder = folder_of(pipe)
    if folder is None:
        return None
    taesd = next((folder / n for n in (tae_files(family) if family else ()) if (folder / n).is_file()), None)
    rgb = folder / LATENT_RGB_FILE
    return Shipped(folder, taesd, read_factors(rgb, channels) if rgb.is_file() else None)


__all__ = ["FAMILIES", "LoadError", "Shipped", "folder_of", "load_taesd", "local_pipeline", "read_factors",
           "shipped", "tae_files", "variant_of", "weight_files"]

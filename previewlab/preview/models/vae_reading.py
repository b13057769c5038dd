"""What a pipeline's VAE says of its latents, checked against the pipeline's own code and its denoiser: how its
final decode unscales them (the VAE's config and buffers, applied only where the pipeline's source names the
value), which known family they are, and the image pixels per latent pixel once unpacked.
"""
from __future__ import annotations

import functools
import inspect
import sys
from typing import Any

import torch

from previewlab.preview.models.families import CHANNELS, IMAGE_VAES, SDXL_SCALE, VIDEO_VAES, Family, vae_scale_factor
from previewlab.preview.models.latent_spaces import Packing
from previewlab.preview.models.unscaling import Unscale


def denoiser_config(pipe: Any) -> Any:
    model = getattr(pipe, "unet", None) or getattr(pipe, "transformer", None)
    return getattr(model, "config", None)


@functools.lru_cache(maxsize=None)
def _source(cls: type) -> str:
    """The source of the modules that define a pipeline class and its bases ("" where none is readable)."""
    parts = []
    for base in cls.__mro__:
        module = sys.modules.get(base.__module__)
        if module is None or not base.__module__.startswith("diffusers.pipelines."):
            continue
        try:
            parts.append(inspect.getsource(module))
        except (OSError, TypeError):
            continue
    return "\n".join(parts)


def _applies(cls: type, name: str) -> bool:
    """Whether the pipeline's own code can read the VAE's config value `name`. A VAE may publish a shift or
    statistics that a pipeline never applies (Kandinsky 5 decodes FLUX.1's VAE with / scaling_factor alone): a
    pipeline whose modules never name the value cannot be applying it. Unreadable source: assume it does."""
    text = _source(cls)
    return not text or name in text


def unscale_of(pipe: Any, vae: Any, cfg: Any) -> Unscale:
    cls = type(pipe)
    if getattr(vae, "bn", None) is not None:
        return "batch_norm"
    if type(vae).__name__ == "VQModel":
        return "none"
    if type(vae).__name__ == "PaellaVQModel":
        return "vq_scale"
    if (getattr(cfg, "latents_mean", None) is not None and getattr(cfg, "latents_std", None) is not None
            and _applies(cls, "latents_mean")):
        return "mean_std" if getattr(cfg, "scaling_factor", None) is not None else "inv_std"
    # LTX-Video's VAE keeps its statistics as buffers (registered, saved with the weights), not in its config
    # (named_buffers, not getattr: a diffusers model answers getattr of a config name with a FutureWarning)
    buffers = dict(vae.named_buffers(recurse=False)) if isinstance(vae, torch.nn.Module) else {}
    if ("latents_mean" in buffers and "latents_std" in buffers
            and getattr(cfg, "scaling_factor", None) is not None and _applies(cls, "vae.latents_mean")):
        return "mean_std_buffers"
    if getattr(cfg, "shift_factor", None) is not None and _applies(cls, "shift_factor"):
        return "scale_shift"
    return "scale" if getattr(cfg, "scaling_factor", None) is not None else "none"


def factor_of(pipe: Any, vae: Any, packing: Packing) -> int:
    """Image pixels per latent pixel once unpacked. A packing pipeline may fold its 2x2 patches into its own
    vae_scale_factor (Bria's is 16 over a VAE of factor 8): an AutoencoderKL's own stages say the real one."""
    widths = getattr(vae.config, "block_out_channels", None)
    if packing == "packed" and type(vae).__name__ == "AutoencoderKL" and widths:
        return 2 ** (len(widths) - 1)
    return vae_scale_factor(pipe)


def family_of(pipe: Any, vae: Any, channels: int, packing: Packing, unscale: Unscale) -> Family | None:
    """A known family when the VAE is one of theirs: its class, channels and way of unscaling, with the
    pipeline's scaling constants or its denoiser as the tie-breaker between two families of one VAE shape."""
    cfg = vae.config
    if packing == "flux2":
        return "flux2" if channels == CHANNELS["flux2"] else None
    known = VIDEO_VAES.get((type(vae).__name__, channels)) or IMAGE_VAES.get((type(vae).__name__, channels))
    if known == "ltx2" and _ltx2_3(pipe):
        return "ltx2_3"
    if known is not None:
        return known
    if type(vae).__name__ != "AutoencoderKL":
        return None
    scale = float(getattr(cfg, "scaling_factor", 0.0) or 0.0)
    if channels == 4 and unscale == "scale" or channels == 4 and unscale == "mean_std":
        unet = getattr(pipe, "unet", None)
        text_time = getattr(getattr(unet, "config", None), "addition_embed_type", None) == "text_time"
        return "sdxl" if text_time or unscale == "mean_std" or abs(scale - SDXL_SCALE) < 1e-6 else "sd15"
    if channels == 16 and unscale == "scale_shift":
        shift = float(cfg.shift_factor)
        if packing == "packed" or abs(shift - 0.1159) < 1e-6:
            return "flux1"
        transformer = type(getattr(pipe, "transformer", None)).__name__
        return "sd3" if abs(shift - 0.0609) < 1e-6 or transformer.startswith("SD3") else "flux1"
    return None


def _ltx2_3(pipe: Any) -> bool:
    """LTX-2.3 (and 2.5) against LTX-2: one VAE class, one latent shape, another VAE's weights (madebyollin's
    taeltx2_3 against taeltx_2). The transformer says which: LTX-2.3's modulates its cross-attention by the
    prompt (cross_attn_mod, audio_cross_attn_mod in its config), LTX-2.0's does not."""
    cfg = denoiser_config(pipe)
    return bool(getattr(cfg, "cross_attn_mod", False) or getattr(cfg, "audio_cross_attn_mod", False))

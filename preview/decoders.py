"""Preview decoders: latents (B, 4, h, w) as the UNet sees them -> images (B, 3, H, W) in [0, 1] on the device.

A registry, not reflection: a user's decoder name is looked up in DECODERS, and a miss lists the valid names.
"""
from __future__ import annotations

from typing import Any, Callable, Literal

import torch

from .models import Family, Model

DecoderName = Literal["none", "latent2rgb", "taesd", "vae"]
Decode = Callable[[torch.Tensor], torch.Tensor]

# ComfyUI's comfy/latent_formats.py: rgb = latent . F + bias, channels as rows, columns R, G, B; image in [-1, 1].
LATENT_RGB: dict[Family, tuple[list[list[float]], list[float]]] = {
    "sd15": ([[0.3512, 0.2297, 0.3227], [0.3250, 0.4974, 0.2350], [-0.2829, 0.1762, 0.2721],
              [-0.2120, -0.2616, -0.7177]], [0.0, 0.0, 0.0]),
    "sdxl": ([[0.3651, 0.4232, 0.4341], [-0.2533, -0.0042, 0.1068], [0.1076, 0.1111, -0.0362],
              [-0.3165, -0.2492, -0.2188]], [0.1084, -0.0175, -0.0011]),
}


class DecoderError(ValueError):
    """An unknown decoder, or one this model cannot run; one line a person can act on."""


def latent2rgb(family: Family, device: torch.device, dtype: torch.dtype) -> Decode:
    """Latents (B, 4, h, w) -> (B, 3, h, w) in [0, 1]: one 4x3 matrix per pixel, at latent resolution."""
    f, b = LATENT_RGB[family]
    factors = torch.tensor(f, device=device, dtype=dtype)
    bias = torch.tensor(b, device=device, dtype=dtype).view(1, 3, 1, 1)

    def decode(latents: torch.Tensor) -> torch.Tensor:
        rgb = torch.einsum("bchw,cr->brhw", latents.to(dtype), factors) + bias
        return ((rgb + 1) / 2).clamp(0, 1)

    return decode


def vae_decode(pipe: object, latents: torch.Tensor) -> torch.Tensor:
    """The pipeline's own VAE, unscaled as its final decode does it -> (B, 3, 8h, 8w) in [-1, 1]."""
    vae = pipe.vae  # type: ignore[attr-defined]
    cfg = vae.config
    mean, std = getattr(cfg, "latents_mean", None), getattr(cfg, "latents_std", None)
    if mean is not None and std is not None:  # SDXL-family VAEs that publish latent statistics
        m = torch.tensor(mean, device=latents.device, dtype=latents.dtype).view(1, -1, 1, 1)
        s = torch.tensor(std, device=latents.device, dtype=latents.dtype).view(1, -1, 1, 1)
        latents = latents * s / cfg.scaling_factor + m
    else:
        latents = latents / cfg.scaling_factor
    sdxl = getattr(pipe, "text_encoder_2", None) is not None  # the SD1.5 pipeline never upcasts
    if sdxl and vae.dtype == torch.float16 and getattr(cfg, "force_upcast", False):
        # SDXL's VAE overflows in float16: decode in float32 and go back, as the SDXL pipeline itself does
        vae.to(dtype=torch.float32)
        try:
            return vae.decode(latents.float(), return_dict=False)[0]
        finally:
            vae.to(dtype=torch.float16)
    return vae.decode(latents.to(vae.dtype), return_dict=False)[0]


def _vae(model: Model) -> Decode:
    return lambda latents: ((vae_decode(model.pipe, latents) + 1) / 2).clamp(0, 1)


def _taesd(model: Model) -> Decode:
    tiny: Any = model.taesd
    if tiny is None:
        raise DecoderError("decoder taesd needs TAESD weights: pass --taesd PATH (taesd_decoder.pth, or "
                           "taesdxl_decoder.pth for SDXL, from github.com/madebyollin/taesd, or a diffusers "
                           "AutoencoderTiny folder)")
    if model.taesd_kind == "madebyollin":
        return lambda latents: tiny(latents.to(model.dtype)).clamp(0, 1)
    # diffusers' AutoencoderTiny takes the latents as they are and returns [-1, 1]
    return lambda latents: ((tiny.decode(latents.to(model.dtype), return_dict=False)[0] + 1) / 2).clamp(0, 1)


def _latent2rgb(model: Model) -> Decode:
    return latent2rgb(model.family, model.device, model.dtype)


DECODERS: dict[str, Callable[[Model], Decode] | None] = {
    "none": None,
    "latent2rgb": _latent2rgb,
    "taesd": _taesd,
    "vae": _vae,
}


def check_name(name: str) -> DecoderName:
    if name not in DECODERS:
        raise DecoderError(f"unknown decoder {name!r}; allowed are {', '.join(DECODERS)}")
    return name  # type: ignore[return-value]


def build(name: str, model: Model) -> Decode | None:
    """The decode function for a decoder name, or None for `none`. Raises DecoderError."""
    factory = DECODERS[check_name(name)]
    return None if factory is None else factory(model)

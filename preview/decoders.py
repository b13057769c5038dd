"""Preview decoders: latents (B, 4, h, w) as the UNet sees them -> images (B, 3, H, W) in [0, 1] on the device.

A registry, not reflection: a user's decoder name is looked up in DECODERS, and a miss lists the valid names.
"""
from __future__ import annotations

import copy
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Literal

import torch
from torch import nn

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


def constant(values: Any, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """A small constant on the device, built once when a decoder is built. On CUDA it goes through pinned
    memory without blocking: a plain torch.tensor(..., device=cuda) waits for the whole queue, a hidden sync."""
    t = torch.tensor(values, dtype=dtype)
    if device.type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


def latent2rgb(family: Family, device: torch.device, dtype: torch.dtype) -> Decode:
    """Latents (B, 4, h, w) -> (B, 3, h, w) in [0, 1]: one 4x3 matrix per pixel, at latent resolution."""
    f, b = LATENT_RGB[family]
    factors = constant(f, device, dtype)
    bias = constant(b, device, dtype).view(1, 3, 1, 1)

    def decode(latents: torch.Tensor) -> torch.Tensor:
        rgb = torch.einsum("bchw,cr->brhw", latents.to(dtype), factors) + bias
        return ((rgb + 1) / 2).clamp(0, 1)

    return decode


class _Fp32Decoder(nn.Module):
    """previewlab's own float32 copy of a VAE's decoder half (post_quant_conv + decoder), for VAEs that
    overflow in float16 (SDXL's, with force_upcast). The user's VAE is never cast in place: a cast frees
    the float16 weights while another stream may still read them."""

    def __init__(self, vae: Any) -> None:
        super().__init__()
        pqc = getattr(vae, "post_quant_conv", None)
        self.post_quant_conv = copy.deepcopy(pqc).float() if pqc is not None else None
        self.decoder = copy.deepcopy(vae.decoder).float()
        self.requires_grad_(False).eval()
        self.bytes = sum(p.numel() * p.element_size() for p in self.parameters())

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        if self.post_quant_conv is not None:
            z = self.post_quant_conv(z)
        return self.decoder(z)


_FP32: weakref.WeakKeyDictionary[Any, _Fp32Decoder] = weakref.WeakKeyDictionary()


def needs_fp32(pipe: Any) -> bool:
    """SDXL's float16 VAE overflows: its pipeline decodes in float32 (force_upcast); the SD1.5 one never does."""
    vae = pipe.vae
    sdxl = getattr(pipe, "text_encoder_2", None) is not None
    return sdxl and vae.dtype == torch.float16 and bool(getattr(vae.config, "force_upcast", False))


def fp32_decoder(pipe: Any) -> _Fp32Decoder:
    """The float32 decoder copy for this pipeline's VAE, made once and shared by previews and final decodes."""
    vae = pipe.vae
    if vae not in _FP32:
        _FP32[vae] = _Fp32Decoder(vae)
    return _FP32[vae]


def copy_mb(pipe: Any) -> float:
    """Memory held by previewlab's float32 decoder copy of this pipeline's VAE (0 when none was made)."""
    dec = _FP32.get(pipe.vae)
    return dec.bytes / 2**20 if dec is not None else 0.0


def vae_decoder(pipe: Any, device: torch.device) -> Callable[[torch.Tensor], torch.Tensor]:
    """The pipeline's own VAE, unscaled as its final decode does it: latents -> (B, 3, 8h, 8w) in [-1, 1].
    Constants and the float32 copy (when needed) are made here, once, never per call."""
    vae = pipe.vae
    cfg = vae.config
    mean, std = getattr(cfg, "latents_mean", None), getattr(cfg, "latents_std", None)
    fp32 = needs_fp32(pipe)
    dtype = torch.float32 if fp32 else vae.dtype
    scale = float(cfg.scaling_factor)
    m = s = None
    if mean is not None and std is not None:  # SDXL-family VAEs that publish latent statistics
        m = constant(mean, device, dtype).view(1, -1, 1, 1)
        s = constant(std, device, dtype).view(1, -1, 1, 1)
    dec = fp32_decoder(pipe) if fp32 else None

    def decode(latents: torch.Tensor) -> torch.Tensor:
        z = latents.to(dtype)
        z = z * s / scale + m if m is not None and s is not None else z / scale
        if dec is not None:
            return dec(z)
        return vae.decode(z, return_dict=False)[0]

    return decode


def vae_decode(pipe: object, latents: torch.Tensor) -> torch.Tensor:
    """One decode with the pipeline's VAE (builds the decoder; the engine keeps a built one where it can)."""
    return vae_decoder(pipe, latents.device)(latents)


def _vae(model: Model) -> Decode:
    decode = vae_decoder(model.pipe, model.device)
    return lambda latents: ((decode(latents) + 1) / 2).clamp(0, 1)


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


@dataclass(frozen=True)
class Spec:
    """One decoder: how to build it, and where to go when it costs too much or fails."""
    build: Callable[[Model], Decode] | None  # None: no previews
    cheaper: DecoderName | None  # the autopilot's next step down when even the widest interval cannot fit
    fallback: DecoderName        # after a failed preview: the safest decoder that still shows something
    needs_taesd: bool = False    # only with TAESD weights


# The one list of decoders: the settings, the bench's flags and defaults, the server's hello (and so the page's
# options), the autopilot and the failure fallback all read it. Adding a decoder is one entry here (and its name
# in DecoderName, which a test keeps equal to these keys).
DECODERS: dict[DecoderName, Spec] = {
    "none": Spec(None, None, "none"),
    "latent2rgb": Spec(_latent2rgb, None, "none"),
    "taesd": Spec(_taesd, "latent2rgb", "latent2rgb", needs_taesd=True),
    "vae": Spec(_vae, "taesd", "latent2rgb"),
}


def check_name(name: str) -> DecoderName:
    for known in DECODERS:
        if name == known:
            return known
    raise DecoderError(f"unknown decoder {name!r}; allowed are {', '.join(DECODERS)}")


def cheaper(name: str, has_taesd: bool) -> DecoderName | None:
    """The next cheaper decoder that this model can run, or None at the bottom."""
    nxt = DECODERS[check_name(name)].cheaper
    while nxt is not None and DECODERS[nxt].needs_taesd and not has_taesd:
        nxt = DECODERS[nxt].cheaper
    return nxt


def build(name: str, model: Model) -> Decode | None:
    """The decode function for a decoder name, or None for `none`. Raises DecoderError."""
    factory = DECODERS[check_name(name)].build
    return None if factory is None else factory(model)

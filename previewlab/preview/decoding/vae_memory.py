"""The memory a VAE decode holds: diffusers' tiling and slicing switches (a run's VAE memory mode), and
previewlab's float32 copy of a VAE's decoder for VAEs that overflow in float16, which decodes as the VAE's own
switches say."""
from __future__ import annotations

import copy
import weakref
from typing import Any, Literal

import torch
from torch import nn

from previewlab.preview.models import Model
from previewlab.preview.models.families import vae_of

VaeMemory = Literal["none", "tiling", "slicing", "tiling+slicing"]
VAE_MEMORY: tuple[VaeMemory, ...] = ("none", "tiling", "slicing", "tiling+slicing")


def vae_memory(pipe: Any) -> str:
    """The VAE's memory mode as a run records it: tiling, slicing, tiling+slicing, or "" (neither, or no VAE)."""
    vae = vae_of(pipe)
    return "+".join(m for m in ("tiling", "slicing") if getattr(vae, f"use_{m}", False) is True)


def set_vae_memory(pipe: Any, mode: str) -> None:
    """diffusers' own switches: tiling decodes overlapping tiles of the latents one by one, slicing a batch one
    image at a time; both lower the decode's peak memory, previews' and the final image's alike."""
    vae, on = vae_of(pipe), mode.split("+")
    (vae.enable_tiling if "tiling" in on else vae.disable_tiling)()
    (vae.enable_slicing if "slicing" in on else vae.disable_slicing)()


class Fp32Decoder(nn.Module):
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


_FP32: weakref.WeakKeyDictionary[Any, Fp32Decoder] = weakref.WeakKeyDictionary()


def needs_fp32(model: Model) -> bool:
    """SDXL's float16 VAE overflows: its pipeline decodes in float32 (force_upcast). SD1.5's never does, and
    the SD3 and FLUX VAEs run in the pipeline's dtype."""
    vae = vae_of(model.pipe)
    return model.family == "sdxl" and vae.dtype == torch.float16 and bool(getattr(vae.config, "force_upcast", False))


def fp32_decoder(pipe: Any) -> Fp32Decoder:
    """The float32 decoder copy for this pipeline's VAE, made once and shared by previews and final decodes."""
    vae = vae_of(pipe)
    if vae not in _FP32:
        _FP32[vae] = Fp32Decoder(vae)
    return _FP32[vae]


def copy_mb(pipe: Any) -> float:
    """Memory held by previewlab's float32 decoder copy of this pipeline's VAE (0 when none was made)."""
    vae = vae_of(pipe)
    dec = _FP32.get(vae) if vae is not None else None
    return dec.bytes / 2**20 if dec is not None else 0.0


def as_vae_would(vae: Any, dec: Fp32Decoder, z: torch.Tensor) -> torch.Tensor:
    """The float32 copy decodes as AutoencoderKL.decode would with the VAE's own switches: one image at a time
    with use_slicing, in overlapping tiles with use_tiling (tiled_decode's tiles, blended by the VAE's own
    blend_v and blend_h), so tiling lowers an SDXL float16 VAE's memory too."""
    if getattr(vae, "use_slicing", False) is True and z.shape[0] > 1:
        return torch.cat([as_vae_would(vae, dec, one) for one in z.split(1)])
    size = getattr(vae, "tile_latent_min_size", 0)
    if getattr(vae, "use_tiling", False) is not True or (z.shape[-1] <= size and z.shape[-2] <= size):
        return dec(z)
    step = int(size * (1 - vae.tile_overlap_factor))
    blend = int(vae.tile_sample_min_size * vae.tile_overlap_factor)
    keep = vae.tile_sample_min_size - blend
    rows = [[dec(z[:, :, i:i + size, j:j + size]) for j in range(0, z.shape[3], step)]
            for i in range(0, z.shape[2], step)]
    out = []
    for i, row in enumerate(rows):
        for j in range(len(row)):
            if i:
                row[j] = vae.blend_v(rows[i - 1][j], row[j], blend)
            if j:
                row[j] = vae.blend_h(row[j - 1], row[j], blend)
        out.append(torch.cat([t[:, :, :keep, :keep] for t in row], dim=3))
    return torch.cat(out, dim=2)

"""Where a decoder stops short of the image's size (settings.decode_at): a TAE leaves out its last upsampling
stages down to the preview's size (the same weights, the graph cut: its last blocks run on fewer pixels, so
nothing is thrown away by the resize); any decoder can take latents halved per side first (half_latents: the
full VAE's cheap choice, blurrier). latent2rgb is at latent size already and never upscales."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from previewlab.preview.models import Model, taesd
from previewlab.preview.models.taehv import TAEHV
from previewlab.preview.names import DecodeAt


@dataclass(frozen=True)
class Cut:
    """Where a decoder stops short of the image's size. stages: a TAE's last upsampling stages left out, so its
    remaining blocks run at the lower resolution and its image is `scale` times smaller per side (taesd.cut,
    TAEHV.smaller); half_latents: the latents 2x smaller per side (2x2 means) before the decoder runs whole."""
    stages: int = 0
    scale: int = 1
    half_latents: bool = False

    @property
    def label(self) -> str:
        """What a table or a compile note calls it: whole, 1/2 (a cut), half latents."""
        return "half latents" if self.half_latents else f"1/{self.scale}" if self.stages else "whole"


WHOLE = Cut()


def upsample_factors(name: str, model: Model) -> tuple[int, ...]:
    """The upsampling stages decoder `name` can leave out for this model, their factors in order: its TAE's
    (TAESD's (2, 2, 2); a diffusers AutoencoderTiny's from its config). latent2rgb has none (it is at latent
    size), nor has the full VAE (its cheaper choice is half_latents)."""
    tiny: Any = model.taesd
    if name != "taesd" or tiny is None:
        return ()
    if isinstance(tiny, TAEHV):
        return taesd.upsample_factors(tiny.decoder)
    if isinstance(tiny, nn.Sequential):  # madebyollin's layout
        return taesd.upsample_factors(tiny)
    layers = getattr(getattr(tiny, "decoder", None), "layers", None)  # diffusers' DecoderTiny
    return taesd.upsample_factors(layers) if isinstance(layers, nn.Sequential) else ()


def cut_for(decode_at: DecodeAt, factors: tuple[int, ...], long_side: int, preview_max: int) -> Cut:
    """Where a decoder with these upsampling stages stops for a preview whose full-size decode is long_side px
    on its long side. preview: as many last stages left out as keep that side at least preview_max (none for
    preview_max 0, native; never past the stages there are), so only what is left is resized; full: none;
    half_latents: the latents halved, whatever the stages."""
    if decode_at == "half_latents":
        return Cut(half_latents=True)
    stages, scale = 0, 1
    if decode_at == "preview" and preview_max > 0:
        for f in reversed(factors):
            if long_side < preview_max * scale * f:
                break
            stages, scale = stages + 1, scale * f
    return Cut(stages, scale)


def halve(x: torch.Tensor) -> torch.Tensor:
    """Latents (..., h, w) -> (..., h // 2, w // 2), each value the mean of a 2x2 patch (an odd last row or
    column is left out). Any leading dims: (B, C, h, w), a Wan-style VAE's (B, C, T, h, w), TAEHV's NTCHW."""
    h, w = int(x.shape[-2]), int(x.shape[-1])
    return F.avg_pool2d(x.reshape(-1, h, w), 2).reshape(*x.shape[:-2], h // 2, w // 2)


def shrink(cut: Cut) -> Callable[[torch.Tensor], torch.Tensor]:
    """What a cut does to the latents before the decoder: halves them (half_latents), else nothing."""
    return halve if cut.half_latents else (lambda z: z)

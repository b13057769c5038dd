"""A loaded model: its pipeline, its preview decoders and what every report must say about it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import nn

from previewlab.preview.models.families import Family
from previewlab.preview.models.latent_spaces import LatentSpace
from previewlab.preview.models.latent_formats import Factors
from previewlab.preview.models.reading import latent_space


class ModelError(ValueError):
    """A model or weights that cannot be loaded; the message is one line a person can act on."""


@dataclass
class Model:
    name: str                # the --model value as given
    pipe: Any                # any diffusers pipeline with a step callback and a VAE (reading.latent_space)
    family: Family | None    # a known family, None for an unnamed latent space
    synthetic: bool
    taesd: nn.Module | None  # None when no TAESD weights were given for a real model
    taesd_kind: Literal["diffusers", "madebyollin", "none"]
    device: torch.device
    dtype: torch.dtype
    default_size: int        # pixels, square
    load_s: float
    offload: str = "none"
    channels_last: bool = False
    note: str = ""                    # what a report must say about the model beside its name (the demo's label)
    latent_rgb: Factors | None = None  # the model's own latent2rgb factors; None: its family's
    prompt: str = ""                   # a prompt the model knows, for the page's default; "": the settings' one
    guidance: float | None = None      # the guidance scale it works best at, for the page's default
    num_frames: int = 1                # a video model's default clip length in frames; 1: an image model
    fps: float = 0.0                   # a video model's playback rate in frames per second; 0: an image model
    _space: tuple[Any, LatentSpace] | None = field(default=None, repr=False, compare=False)

    @property
    def label(self) -> str:
        """The model's name with what every report says about it: SYNTHETIC (random weights) or its note."""
        if self.synthetic:
            return f"SYNTHETIC (random weights: real costs, noise pictures) {self.name}"
        return f"{self.name} ({self.note})" if self.note else self.name

    @property
    def vae_scale_factor(self) -> int:
        return self.space.factor

    @property
    def space(self) -> LatentSpace:
        """The pipeline's latent space: how the callback's latents reach the TAE, latent2rgb and the VAE."""
        if self._space is None or self._space[0] is not self.pipe:
            self._space = (self.pipe, latent_space(self.pipe))
        return self._space[1]


def denoiser(pipe: Any) -> Any:
    """The model that runs every step: the UNet (SD1.5, SDXL, Kandinsky), the transformer (SD3, FLUX, ...), or
    Stable Cascade's `decoder` (stage B) or `prior` (stage C). Raises AttributeError for a pipeline with none."""
    for name in ("unet", "transformer", "transformer_2", "decoder", "prior"):
        part = getattr(pipe, name, None)
        if isinstance(part, torch.nn.Module):
            return part
    raise AttributeError(f"{type(pipe).__name__} has no unet, transformer, decoder or prior to denoise with")


def default_size(pipe: Any, family: Family | None) -> int:
    """The pipeline's own default image side in px: its UNet's sample size for SD 1.x/2.x and SDXL (512, 768,
    1024), its default_sample_size where it has one, else 1024 for the newer families and 512 otherwise."""
    vsf = latent_space(pipe).factor
    unet = getattr(pipe, "unet", None)
    if unet is not None and getattr(unet.config, "sample_size", None):
        return int(unet.config.sample_size) * vsf
    own = getattr(pipe, "default_sample_size", None)
    if isinstance(own, int) and own > 0:
        return own * vsf
    return 1024 if family in ("sdxl", "sd3", "flux1", "flux2") else 512

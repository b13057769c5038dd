"""Model families and their latent spaces: what the step callback's latents are, and how they become what a
TAE, latent2rgb or the pipeline's own VAE takes.

A family is read from the pipeline's class and its VAE's config, never from a folder name. Three views of
the same step's latents:

- callback: what callback_on_step_end gets. SD1.5, SDXL, SD3, Z-Image, HiDream: (B, C, h, w). FLUX.1
  (FluxPipeline): packed 2x2 patches, (B, h/2 * w/2, 4 * 16). FLUX.2: patchified and normalised by the VAE's
  batch-norm statistics, (B, h/2 * w/2, 4 * 32).
- tae: the model's own latents, unpacked to (B, C, h, w), in [-3, 3] or so. madebyollin's TAEs and ComfyUI's
  latent2rgb factors take these. ComfyUI (latent_preview.py) hands both the sampler's x0, which is in model
  space; used as a VAE, a TAE decodes decoder((x - vae_shift) * vae_scale) with the family's shift and scale
  (nodes.py, VAELoader.load_taesd: taesd3 1.5305/0.0609, taef1 0.3611/0.1159), model space again. ComfyUI's
  FLUX.2 VAE applies the batch norm itself (comfy/sd.py, batch_norm_latent), so its latents are the
  normalised ones, and its TAEF2 decoder (comfy/taesd/taesd.py, DecoderFlux2) only unpatchifies them.
  madebyollin's taef1 diffusers config has scaling_factor 1 and shift_factor 0, so FluxPipeline hands it the
  model-space latents too.
- vae: what the pipeline's final decode hands vae.decode, unscaled exactly as it does it (sources below).

h and w are the image size over 8 (the VAE's factor); all shapes assume the pipeline's own rounding of height
and width to multiples of 16 (8 for SD1.5 and SDXL).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Literal

import torch

Family = Literal["sd15", "sdxl", "sd3", "flux1", "flux2"]
FAMILIES: tuple[Family, ...] = ("sd15", "sdxl", "sd3", "flux1", "flux2")
Packing = Literal["spatial", "flux1", "flux2"]
# (callback latents, image height px, image width px) -> latents (B, C, h, w)
Convert = Callable[[torch.Tensor, int, int], torch.Tensor]

SDXL_SCALE = 0.13025  # the scale taesdxl was distilled on: SDXL's VAE config, scaling_factor


class FamilyError(ValueError):
    """A pipeline or VAE that previewlab cannot preview; one line a person can act on."""


def constant(values: Any, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """A small constant on the device, built once. On CUDA it goes through pinned memory without blocking:
    a plain torch.tensor(..., device=cuda) waits for the whole queue, a hidden sync. A tensor already on the
    device (a VAE's batch-norm buffer) is cast and copied there. Devices compare by type, then by index where
    `device` names one: a buffer on cuda:0 is on torch.device("cuda"), and the host copy would block."""
    if isinstance(values, torch.Tensor) and values.device.type == device.type:
        same = device.index is None or values.device.index == device.index
        return values.detach().to(dtype, copy=True) if same else values.detach().to(device, dtype, copy=True)
    t = torch.as_tensor(values).detach().to("cpu", dtype)
    if device.type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


def unpatchify(z: torch.Tensor) -> torch.Tensor:
    """(B, 4C, h, w) -> (B, C, 2h, 2w); the inverse of the 2x2 patchify, as Flux2Pipeline._unpatchify_latents
    (diffusers 0.42.1, pipelines/flux2/pipeline_flux2.py) and ComfyUI's latent_rgb_factors_reshape do it."""
    b, c, h, w = z.shape
    return z.reshape(b, c // 4, 2, 2, h, w).permute(0, 1, 4, 2, 5, 3).reshape(b, c // 4, h * 2, w * 2)


@dataclass(frozen=True)
class LatentSpace:
    """One family's latent space.

    channels: latent channels as the VAE and the TAE see them (4, 16 or 32); factor: image pixels per latent
    pixel in that space (8); packing: how the callback hands the latents over (see the module docstring).
    """
    family: Family
    channels: int
    factor: int
    packing: Packing

    def callback_shape(self, height: int, width: int, batch: int = 1) -> tuple[int, ...]:
        """The shape of the callback's latents for an image of height x width pixels."""
        h, w = height // self.factor, width // self.factor
        if self.packing == "flux1":
            return (batch, (h // 2) * (w // 2), 4 * self.channels)
        if self.packing == "flux2":
            return (batch, (h // 2) * (w // 2), 4 * self.channels)
        return (batch, self.channels, h, w)

    def _unpack(self, vae_scale_factor: int) -> Convert:
        """Callback latents -> (B, C', h', w') in model space, before any unscaling: FLUX.1's 16 channels at
        1/8, FLUX.2's 128 normalised channels at 1/16, the others as they come."""
        f2 = vae_scale_factor * 2
        if self.packing == "flux1":
            # FluxPipeline._unpack_latents (diffusers 0.42.1, pipelines/flux/pipeline_flux.py)
            def unpack(z: torch.Tensor, height: int, width: int) -> torch.Tensor:
                b, _, c = z.shape
                h, w = 2 * (int(height) // f2), 2 * (int(width) // f2)
                z = z.view(b, h // 2, w // 2, c // 4, 2, 2).permute(0, 3, 1, 4, 2, 5)
                return z.reshape(b, c // 4, h, w)
            return unpack
        if self.packing == "flux2":
            # Flux2Pipeline._unpack_latents_with_ids: its latent ids are (0, row, column, 0) in row-major order
            # (_prepare_latent_ids, a cartesian product), so the scatter is a reshape.
            def unpack2(z: torch.Tensor, height: int, width: int) -> torch.Tensor:
                b, _, c = z.shape
                return z.reshape(b, int(height) // f2, int(width) // f2, c).permute(0, 3, 1, 2)
            return unpack2
        return lambda z, height, width: z

    def tae_input(self, pipe: Any, device: torch.device, dtype: torch.dtype) -> Convert:
        """Callback latents -> (B, channels, h, w) in the model's space: what madebyollin's TAE decoders and the
        latent2rgb factors take. Constants are built here, once; the closure only reshapes and does arithmetic."""
        unpack = self._unpack(int(pipe.vae_scale_factor))
        if self.family == "flux2":
            return lambda z, height, width: unpatchify(unpack(z, height, width))
        if self.family == "sdxl" and _latents_stats(pipe.vae.config) is not None:
            # a VAE with published latent statistics (Playground v2.5): taesdxl knows SDXL's plain scale only
            to_vae = self.vae_input(pipe, device, dtype)
            return lambda z, height, width: to_vae(z, height, width) * SDXL_SCALE
        return unpack

    def vae_input(self, pipe: Any, device: torch.device, dtype: torch.dtype) -> Convert:
        """Callback latents -> exactly what the pipeline's final decode hands vae.decode, (B, channels, h, w).

        dtype: the latents' dtype (the transformer's or UNet's); the arithmetic runs in it, as in the pipeline.
        Sources (diffusers 0.42.1): StableDiffusionPipeline `latents / scaling_factor`; StableDiffusionXLPipeline
        `latents * latents_std / scaling_factor + latents_mean` when the VAE publishes them, else
        `/ scaling_factor`; StableDiffusion3Pipeline, FluxPipeline, ZImagePipeline, HiDreamImagePipeline
        `latents / scaling_factor + shift_factor`; Flux2Pipeline `latents * sqrt(bn.running_var + batch_norm_eps)
        + bn.running_mean`, then unpatchify. ZImagePipeline alone casts to the VAE's dtype before unscaling: for
        it, pass the VAE's dtype and cast the latents to it first.
        """
        vae = pipe.vae
        cfg = vae.config
        unpack = self._unpack(int(pipe.vae_scale_factor))
        scale = float(getattr(cfg, "scaling_factor", 1.0) or 1.0)
        if self.family == "flux2":
            bn = vae.bn
            mean = constant(bn.running_mean.view(1, -1, 1, 1), device, dtype)
            # as the pipeline: sqrt in the buffers' own dtype, then cast
            std = constant(torch.sqrt(bn.running_var.view(1, -1, 1, 1) + cfg.batch_norm_eps), device, dtype)
            return lambda z, height, width: unpatchify(unpack(z, height, width) * std + mean)
        if self.family in ("sd3", "flux1"):
            shift = float(getattr(cfg, "shift_factor", 0.0) or 0.0)
            return lambda z, height, width: unpack(z, height, width) / scale + shift
        stats = _latents_stats(cfg) if self.family == "sdxl" else None
        if stats is not None:
            m = constant(stats[0], device, dtype).view(1, -1, 1, 1)
            s = constant(stats[1], device, dtype).view(1, -1, 1, 1)
            return lambda z, height, width: z * s / scale + m
        return lambda z, height, width: z / scale


def _latents_stats(cfg: Any) -> tuple[list[float], list[float]] | None:
    mean, std = getattr(cfg, "latents_mean", None), getattr(cfg, "latents_std", None)
    return (list(mean), list(std)) if mean is not None and std is not None else None


SPACES: dict[Family, LatentSpace] = {
    "sd15": LatentSpace("sd15", 4, 8, "spatial"),
    "sdxl": LatentSpace("sdxl", 4, 8, "spatial"),
    "sd3": LatentSpace("sd3", 16, 8, "spatial"),
    "flux1": LatentSpace("flux1", 16, 8, "flux1"),
    "flux2": LatentSpace("flux2", 32, 8, "flux2"),
}


def _pipelines() -> list[tuple[type, LatentSpace]]:
    """Pipeline classes in the order they are tried (isinstance, so subclasses count)."""
    import diffusers as d

    flux1_spatial = replace(SPACES["flux1"], packing="spatial")  # FLUX.1's VAE, latents not packed
    return [(d.StableDiffusionXLPipeline, SPACES["sdxl"]), (d.StableDiffusionPipeline, SPACES["sd15"]),
            (d.StableDiffusion3Pipeline, SPACES["sd3"]), (d.FluxPipeline, SPACES["flux1"]),
            (d.ZImagePipeline, flux1_spatial), (d.HiDreamImagePipeline, flux1_spatial),
            (d.Flux2Pipeline, SPACES["flux2"]), (d.Flux2KleinPipeline, SPACES["flux2"])]


SUPPORTED = ("StableDiffusionPipeline (sd15, SD 1.x/2.x), StableDiffusionXLPipeline (sdxl), "
             "StableDiffusion3Pipeline (sd3), FluxPipeline, ZImagePipeline, HiDreamImagePipeline (flux1), "
             "Flux2Pipeline, Flux2KleinPipeline (flux2)")


def latent_space(pipe: Any) -> LatentSpace:
    """The latent space of a diffusers pipeline, from its class and its VAE. Raises FamilyError."""
    name = type(pipe).__name__
    space = next((s for cls, s in _pipelines() if isinstance(pipe, cls)), None)
    if space is None:
        raise FamilyError(f"{name} is not a pipeline previewlab can preview; supported are {SUPPORTED}")
    vae = getattr(pipe, "vae", None)
    if vae is None:
        raise FamilyError(f"{name} has no VAE; previews and the final decode need one")
    channels = int(getattr(vae.config, "latent_channels", 0) or 0)
    if channels != space.channels:
        raise FamilyError(f"{name} with a {channels}-channel {type(vae).__name__}: family {space.family} "
                          f"needs a {space.channels}-channel VAE")
    has_bn = getattr(vae, "bn", None) is not None
    if has_bn != (space.family == "flux2"):
        what = "has a batch-norm layer" if has_bn else "has no batch-norm layer (AutoencoderKLFlux2 has one)"
        raise FamilyError(f"{name}: its {type(vae).__name__} {what}, which family {space.family} does not fit")
    return space


def detect_family(pipe: Any) -> Family:
    """sd15, sdxl, sd3, flux1 or flux2, from the pipeline's class and VAE. Raises FamilyError."""
    return latent_space(pipe).family


def to_vae_space(latents: torch.Tensor, pipe: Any, height: int, width: int) -> torch.Tensor:
    """One conversion, callback latents -> vae.decode's input. Builds its constants: not for the step loop."""
    space = latent_space(pipe)
    return space.vae_input(pipe, latents.device, latents.dtype)(latents, height, width)


def to_tae_space(latents: torch.Tensor, pipe: Any, height: int, width: int) -> torch.Tensor:
    """One conversion, callback latents -> a TAE's (and latent2rgb's) input. Not for the step loop."""
    space = latent_space(pipe)
    return space.tae_input(pipe, latents.device, latents.dtype)(latents, height, width)

"""The full VAE as a preview decoder: the pipeline's own VAE, fed exactly what its final decode feeds it."""
from __future__ import annotations

import inspect
from typing import Any, Callable

import torch

from previewlab.preview.decoding.stops import WHOLE, Cut, shrink
from previewlab.preview.decoding.contract import DecoderError, Decode, Note
from previewlab.preview.models import Model
from previewlab.preview.models.families import vae_of
from previewlab.preview.decoding.vae_memory import as_vae_would, fp32_decoder, needs_fp32


def decode_args(model: Model) -> Callable[[torch.Tensor], dict[str, Any]]:
    """What the pipeline's final decode hands vae.decode besides the latents z, read once per decoder built:
    Kandinsky's MoVQ force_not_quantize=True; a timestep-conditioned VAE (LTX-Video 0.9.1 and later) `temb`, the
    pipeline's default decode_timestep 0.0 for each clip of the batch, with no noise mixed in (its
    decode_noise_scale defaults to that timestep), a fill on the device, no host copy; Stable Video Diffusion's
    temporal decoder `num_frames` (a preview decodes each frame alone). A run that passes another
    decode_timestep or decode_noise_scale decodes its final clip with those; previews keep the default."""
    if model.space.quantized:
        return lambda z: {"force_not_quantize": True}
    if model.space.timestep:
        return lambda z: {"temb": torch.zeros(int(z.shape[0]), device=z.device, dtype=z.dtype)}
    param = inspect.signature(vae_of(model.pipe).decode).parameters.get("num_frames")
    if param is not None and param.default is inspect.Parameter.empty:
        return lambda z: {"num_frames": 1}
    return lambda z: {}


def as_frames(video: torch.Tensor) -> torch.Tensor:
    """A VAE's decoded clip as (B, F, 3, H, W): most video VAEs decode (B, 3, F, H, W), Allegro's (B, F, 3, H, W)
    (its pipeline permutes it back). Read from where the 3 colour channels sit, shapes only; (B, 3, 3, H, W)
    reads as the first (no clip a known VAE makes has 3 frames)."""
    return video if video.shape[2] == 3 and video.shape[1] != 3 else video.transpose(1, 2)


def vae_decoder(model: Model, cut: Cut = WHOLE) -> Decode:
    """The pipeline's own VAE, fed exactly what its final decode feeds it: callback latents -> (B, 3, H, W) in
    [-1, 1] (half_latents: the unscaled latents halved first, (B, 3, H/2, W/2)). Constants and the float32 copy
    (when needed) are made here, once, never per call. A VAE that decodes only whole tiles of latent frames
    (space.tile_t: Allegro's) is handed the frame repeated to one tile, and the image is its first frame."""
    vae = vae_of(model.pipe)
    space = model.space
    if vae is None:  # a second stage makes the image (space.stage): nothing a preview can call
        raise DecoderError(f"decoder vae: {space.pipeline} has no VAE ({space.stage}); use latent2rgb or taesd")
    fp32 = needs_fp32(model)
    dtype = torch.float32 if fp32 else vae.dtype
    to_vae = space.vae_input(model.pipe, model.device, dtype)
    dec = fp32_decoder(model.pipe) if fp32 else None
    args = decode_args(model)
    smaller = shrink(cut)

    def decode(latents: torch.Tensor, height: int, width: int) -> torch.Tensor:
        z = smaller(to_vae(latents.to(dtype) if space.cast_first else latents, height, width))
        if dec is not None:
            image = as_vae_would(vae, dec, z)
        else:
            z = z.to(vae.dtype)
            if space.frames and space.tile_t > 1:
                z = z.expand(-1, -1, space.tile_t, -1, -1)
            image = vae.decode(z, return_dict=False, **args(z))[0]
            image = as_frames(image)[:, 0] if space.frames else image  # a Wan-style VAE: the image is frame 0
        return image * 2 - 1 if space.unit else image  # Stable Cascade's VQ-GAN decodes to [0, 1]

    return decode


def build_vae(model: Model, note: Note, cut: Cut) -> Decode:
    """Decoder vae: callback latents -> (B, 3, H, W) in [0, 1]."""
    decode = vae_decoder(model, cut)
    return lambda latents, h, w: ((decode(latents, h, w) + 1) / 2).clamp(0, 1)

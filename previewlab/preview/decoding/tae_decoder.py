"""TAESD as a preview decoder: madebyollin's TAEs (TAESD's layout, TAEHV for a clip's frames) and diffusers'
AutoencoderTiny, on the model's own latents; and why a model has none, in one line."""
from __future__ import annotations

from typing import Any

import torch

from previewlab.preview.decoding.stops import Cut, shrink
from previewlab.preview.decoding.contract import Decode, DecoderError, Note
from previewlab.preview.models import Model, taesd
from previewlab.preview.models.families import CHANNELS
from previewlab.preview.models.taehv import TAEHV
from previewlab.preview.models.taehv_files import FAMILY_FILES, NO_TAE
from previewlab.preview.models.taesd import PREFIXES

# madebyollin/taesd's file stem per image family (taesd.PREFIXES, read the other way)
TAE_NAMES: dict[str, str] = {family: prefix.rstrip("_") for prefix, family in PREFIXES.items()}


def taesd_refusal(model: Model) -> str:
    """Why decoder taesd cannot run for this model, in one line that names its latent space and what would fit."""
    space = model.space
    if space.family in TAE_NAMES:
        return (f"decoder taesd needs TAE weights for {space.family}: pass --taesd PATH "
                f"({TAE_NAMES[space.family]}_decoder.pth from github.com/madebyollin/taesd, or a diffusers "
                "AutoencoderTiny folder)")
    if space.family in FAMILY_FILES:  # the video TAEs
        return (f"decoder taesd needs TAE weights for {space.family}: pass --taesd PATH "
                f"({FAMILY_FILES[space.family]}.pth from github.com/madebyollin/taehv)")
    if space.family in NO_TAE:
        return f"decoder taesd: {NO_TAE[space.family]}; use latent2rgb or vae"
    fits = ", ".join(f"{n} ({CHANNELS[f]})" for f, n in TAE_NAMES.items() if f in CHANNELS)
    return (f"decoder taesd: no TAE fits latent space {space.describe()}; a TAE must take its {space.channels} "
            f"latent channels (madebyollin's take: {fits}); use latent2rgb or vae")


def build_taesd(model: Model, note: Note, cut: Cut) -> Decode:
    """Decoder taesd: callback latents -> (B, 3, H, W) in [0, 1], H and W `cut.scale` times smaller. Raises
    DecoderError when the model has no TAE (taesd_refusal)."""
    tiny: Any = model.taesd
    if tiny is None:
        raise DecoderError(taesd_refusal(model))
    space_in, smaller = model.space.tae_input(model.pipe, model.device, model.dtype), shrink(cut)

    def to_tae(latents: torch.Tensor, h: int, w: int) -> torch.Tensor:
        return smaller(space_in(latents, h, w)).to(model.dtype)

    if isinstance(tiny, TAEHV):
        # madebyollin/taehv's video TAEs decode the diffusion model's own latents, as madebyollin's image TAEs
        # do (ComfyUI hands its TAEHV process_in(latents)), frames before channels; one latent frame, one frame
        net = tiny.smaller(cut.stages)
        return lambda latents, h, w: net(to_tae(latents, h, w).unsqueeze(1))[:, 0]
    if model.taesd_kind == "madebyollin":
        layers = taesd.cut(tiny, cut.stages)
        return lambda latents, h, w: layers(to_tae(latents, h, w)).clamp(0, 1)
    if cut.stages:
        # diffusers' AutoencoderTiny cut: its decoder's own clamp, then its layers with the last stages left out
        # (its decode() would run them whole, sliced or tiled as its switches say; a preview is neither); the
        # layers make [0, 1], as madebyollin's do
        cut_layers = taesd.cut(tiny.decoder.layers, cut.stages)
        return lambda latents, h, w: cut_layers(torch.tanh(to_tae(latents, h, w) / 3) * 3).clamp(0, 1)
    # diffusers' AutoencoderTiny takes the model's latents as they are and returns [-1, 1]
    return lambda latents, h, w: ((tiny.decode(to_tae(latents, h, w), return_dict=False)[0] + 1) / 2).clamp(0, 1)

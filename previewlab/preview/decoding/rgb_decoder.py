"""latent2rgb as a preview decoder: a linear projection of the latents' channels to RGB at latent size, with
a known family's factors, the model's own, or factors fitted against its VAE at the first preview (fit.py)."""
from __future__ import annotations

from typing import Callable

import torch

from previewlab.preview.decoding.stops import Cut, shrink
from previewlab.preview.decoding.contract import Decode, DecoderError, Note
from previewlab.preview.models import Model, fit
from previewlab.preview.models.families import vae_of
from previewlab.preview.models.latent_formats import LATENT_RGB, latent2rgb
from previewlab.preview.decoding.vae_decoder import vae_decoder


def has_factors(model: Model) -> bool:
    """latent2rgb has factors for this model before any preview: its own, its family's, or a fit made earlier."""
    family = model.space.family
    known = family is not None and family in LATENT_RGB or model.space.pixel
    return model.latent_rgb is not None or known or fit.cached(vae_of(model.pipe)) is not None


def build_latent2rgb(model: Model, note: Note, cut: Cut) -> Decode:
    """A known family's factors (or the model's own), else factors fitted at the first preview (fit.py): that
    preview's decode_ms holds the fit, and its row's event says so. Its image is at latent size (half of it with
    half_latents): it never upscales, so it is never larger than what the latents hold."""
    space, smaller = model.space, shrink(cut)
    to_tae = space.tae_input(model.pipe, model.device, model.dtype)
    known = model.latent_rgb or (LATENT_RGB.get(space.family) if space.family is not None else None)
    if known is not None:
        rgb = latent2rgb(known, model.device, model.dtype)
        return lambda latents, h, w: rgb(smaller(to_tae(latents, h, w)))
    if vae_of(model.pipe) is None:
        raise DecoderError(f"decoder latent2rgb: latent space {space.describe()}: no latent2rgb factors are known for "
                           "it, and there is no VAE to fit them against; use taesd with a TAE of its channels")
    vae, full = vae_of(model.pipe), vae_decoder(model)
    fitted: list[Callable[[torch.Tensor], torch.Tensor]] = []

    def decode(latents: torch.Tensor, h: int, w: int) -> torch.Tensor:
        z = to_tae(latents, h, w)
        if not fitted:
            made = fit.cached(vae)
            if made is None:
                made = fit.fit(vae, z[:1], lambda: full(latents[:1], h, w))
                note(made.note(space.name))
            else:
                note(f"latent2rgb factors for {space.name} fitted earlier in this process (R² {made.r2:.3f})")
            fitted.append(latent2rgb(made.factors, model.device, model.dtype))
        return fitted[0](smaller(z))  # fitted on the whole latents, applied to what the cut leaves

    return decode

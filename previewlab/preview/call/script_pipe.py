"""A script's own pipeline as a watch reads it, never touching its modules: its Model, the size of its call's
image, its call's seed and guidance, and what the call asked (a ScriptCall) at its first step."""
from __future__ import annotations

import math
import sys
from typing import Any

import torch

from previewlab.preview.decoding.clips import clip_length
from previewlab.preview.models import Model, default_size, denoiser, previews_of
from previewlab.preview.models.families import Family, FamilyError
from previewlab.preview.models.reading import latent_space
from previewlab.preview.record.run import ScriptCall
from previewlab.preview.settings import PreviewSettings
from previewlab.preview.source.steps import Step, cpu_schedule


def model_of(pipe: Any, taesd: str | None) -> Model:
    """Describe a user's pipeline as the engine's Model, without touching its modules: the TAE `taesd` names,
    else the one its folder ships, and the folder's latent2rgb.json (models.previews_of, as the server loads a
    folder). Raises FamilyError for a pipeline previewlab cannot preview, ModelError for a TAE of another
    family or width or unreadable factors."""
    family: Family | None = latent_space(pipe).family
    device = torch.device(pipe._execution_device)
    dtype = denoiser(pipe).dtype
    tiny, kind, own_rgb = previews_of(pipe, family, taesd)
    if tiny is not None:
        tiny.to(device, dtype).eval().requires_grad_(False)  # a decoder of ours, not the user's: ours to place
    offload = "model" if getattr(pipe, "_offload_gpu_id", None) is not None else "none"
    return Model(name=type(pipe).__name__, pipe=pipe, family=family, synthetic=False, taesd=tiny, taesd_kind=kind,
                 device=device, dtype=dtype, default_size=default_size(pipe, family), load_s=0.0,
                 offload=offload, latent_rgb=own_rgb)


def image_size(model: Model, latents: torch.Tensor, size: tuple[int, int] | None,
               latent_hw: tuple[int, int] | None = None, asked: tuple[int, int] | None = None) -> tuple[int, int]:
    """(height, width) in pixels of the call's image, from the callback's latents without a device read:
    spatial latents carry it; packed ones (B, tokens, D) only their count of tokens, so the size the call itself
    was given (`asked`, its height= and width=) says it where that size makes as many tokens, else a square is
    assumed; LTX's clip tokens not even that, so the latent height and width its transformer was called with
    (latent_hw), else the call's own size. `size` (watch's size=) wins over all. Raises FamilyError for LTX
    latents with neither."""
    if size is not None:
        return size
    vsf = model.vae_scale_factor
    if model.space.packing == "ltx":
        if latent_hw is not None:
            return latent_hw[0] * vsf, latent_hw[1] * vsf
        if asked is None:
            raise FamilyError(f"{model.space.pipeline}: its packed clip latents do not say the clip's size, and its "
                              "call was given no height= and width=; pass size=(height, width)")
        return asked
    if (latents.dim() == 5 and not model.space.video and latents.shape[1] == 1
            and latents.shape[-1] >= model.space.channels):
        return int(latents.shape[2]) * vsf, int(latents.shape[3]) * vsf  # one frame, channels last (Kandinsky 5)
    if latents.dim() >= 4:  # (B, C, h, w), and clips: (B, C, T, h, w) or (B, T, C, h, w)
        return int(latents.shape[-2]) * vsf, int(latents.shape[-1]) * vsf
    tokens = int(latents.shape[1])
    if asked is not None:
        h, w = asked[0] // vsf, asked[1] // vsf
        # a token per 2x2 patch (FLUX, rounded as its prepare_latents rounds), or per latent pixel (Bria Fibo)
        if tokens in ((h // 2) * (w // 2), h * w):
            return asked
    side = int(round(math.sqrt(tokens))) * 2 * vsf
    return side, side


def call_locals(pipe: Any) -> dict[str, Any]:
    """The local variables of the pipeline's __call__ in progress (a snapshot, read without a device read), {}
    where its __call__ is not on the stack (a Modular pipeline's)."""
    frame: Any = sys._getframe(1)
    while frame is not None:  # the callback, or the scheduler's step, runs inside the pipeline's __call__
        if frame.f_code.co_name == "__call__" and frame.f_locals.get("self") is pipe:
            return dict(frame.f_locals)
        frame = frame.f_back
    return {}


def asked_size(found: dict[str, Any]) -> tuple[int, int] | None:
    """(height, width) px the call was given (its height= and width=, as its __call__ holds them), or None."""
    h, w = found.get("height"), found.get("width")
    ok = all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (h, w))
    return (int(h), int(w)) if ok else None  # type: ignore[arg-type]


def call_inputs(pipe: Any, found: dict[str, Any]) -> tuple[int, float | None]:
    """(seed, guidance scale) of the pipeline's call in progress, for its record, without a device read, from
    its __call__'s locals (call_locals): the guidance scale it was called with (its `guidance_scale`, else the
    `_guidance_scale` diffusers pipelines keep for the call), and the seed of the torch.Generator it was given
    (initial_seed(), a host value; a list's first, one per image). (-1, None) where the call does not show them:
    no generator (a random seed), or a pipeline whose __call__ is not on the stack (a Modular one). A generator
    already drawn from before the call still says the seed it was made with: the call did not start from it."""
    gen = found.get("generator")
    gen = gen[0] if isinstance(gen, (list, tuple)) and gen else gen
    seed = int(gen.initial_seed()) if isinstance(gen, torch.Generator) else -1
    for guidance in (found.get("guidance_scale"), getattr(pipe, "_guidance_scale", None), _scale_of(pipe)):
        if isinstance(guidance, (int, float)) and not isinstance(guidance, bool) and math.isfinite(guidance):
            return seed, float(guidance)
    return seed, None


def _scale_of(pipe: Any) -> Any:
    """The pipeline's guidance_scale property, where it has one that reads (diffusers' reads _guidance_scale,
    which the call sets; a property may read state the pipeline has not set)."""
    try:
        return getattr(pipe, "guidance_scale", None)
    except Exception:
        return None


def script_call(model: Model, step: Step, scheduler: Any, preview: PreviewSettings, fps: float,
                size: tuple[int, int] | None, latent_hw: tuple[int, int] | None) -> tuple[ScriptCall, list[float]]:
    """What the call in progress asked, read at its first step without a device read, and its timestep values:
    the tail of the schedule the pipeline set (img2img and inpaint run part of it; its length is host metadata).
    preview: the watch's settings now; size and latent_hw as image_size takes them."""
    steps, latents = step.total, step.latents
    set_ts = getattr(scheduler, "timesteps", None)
    order = max(1, int(getattr(scheduler, "order", 1) or 1))  # Heun-like: two entries a step
    total = len(set_ts) // order if set_ts is not None else steps
    timesteps = cpu_schedule(scheduler, max(total, steps))[-steps:] if steps else []
    known = (step.height, step.width) if step.height and step.width else None
    found = call_locals(model.pipe)
    h, w = image_size(model, latents, size or known, latent_hw, asked_size(found))
    space = model.space
    frames = clip_length(space.latent_frames(latents, h, w), space.temporal) if space.video else 1
    seed, guidance = call_inputs(model.pipe, found)
    return ScriptCall(steps=steps, width=w, height=h, preview=preview, batch=int(latents.shape[0]),
                      num_frames=frames, fps=fps, seed=seed, guidance=guidance), timesteps

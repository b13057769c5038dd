"""The text encoding previewlab runs ahead of the pipeline's call, so its time is a phase of its own
(text_encode_ms) and not part of step 1's."""
from __future__ import annotations

import inspect
from typing import Any, Callable

from previewlab.preview.models import Model


def _sd15(pipe: Any, prompt: str, dev: Any, cfg: bool) -> dict[str, Any]:
    pe, npe = pipe.encode_prompt(prompt, dev, 1, cfg)
    return dict(prompt_embeds=pe, negative_prompt_embeds=npe)


def _sdxl(pipe: Any, prompt: str, dev: Any, cfg: bool) -> dict[str, Any]:
    pe, npe, ppe, nppe = pipe.encode_prompt(prompt=prompt, device=dev, num_images_per_prompt=1,
                                            do_classifier_free_guidance=cfg)
    return dict(prompt_embeds=pe, negative_prompt_embeds=npe, pooled_prompt_embeds=ppe,
                negative_pooled_prompt_embeds=nppe)


def _sd3(pipe: Any, prompt: str, dev: Any, cfg: bool) -> dict[str, Any]:
    pe, npe, ppe, nppe = pipe.encode_prompt(prompt=prompt, prompt_2=None, prompt_3=None, device=dev,
                                            num_images_per_prompt=1, do_classifier_free_guidance=cfg)
    return dict(prompt_embeds=pe, negative_prompt_embeds=npe, pooled_prompt_embeds=ppe,
                negative_pooled_prompt_embeds=nppe)


def _flux1(pipe: Any, prompt: str, dev: Any, cfg: bool) -> dict[str, Any]:
    pe, ppe, _ = pipe.encode_prompt(prompt=prompt, prompt_2=None, device=dev, num_images_per_prompt=1)
    return dict(prompt_embeds=pe, pooled_prompt_embeds=ppe)  # FLUX.1's guidance is distilled: no negative


def _flux2(pipe: Any, prompt: str, dev: Any, cfg: bool) -> dict[str, Any]:
    pe, _ = pipe.encode_prompt(prompt=prompt, device=dev, num_images_per_prompt=1)
    return dict(prompt_embeds=pe)


# The text encodings previewlab runs ahead of the call, so they are timed apart from step 1: chosen by the
# leading parameters of the pipeline's own encode_prompt (its img2img, inpaint and ControlNet variants share
# them). Any other pipeline encodes its prompt inside the call, in step 1's time.
_ENCODES: tuple[tuple[tuple[str, ...], Callable[[Any, str, Any, bool], dict[str, Any]]], ...] = (
    (("prompt", "prompt_2", "prompt_3", "device", "num_images_per_prompt", "do_classifier_free_guidance"), _sd3),
    (("prompt", "prompt_2", "device", "num_images_per_prompt", "do_classifier_free_guidance"), _sdxl),
    (("prompt", "prompt_2", "device", "num_images_per_prompt", "prompt_embeds", "pooled_prompt_embeds"), _flux1),
    (("prompt", "device", "num_images_per_prompt", "do_classifier_free_guidance"), _sd15),
    (("prompt", "device", "num_images_per_prompt", "prompt_embeds"), _flux2),
)


def encode_prompt(model: Model, prompt: str, guidance: float, pipe: Any = None) -> dict[str, Any]:
    """The pipeline's own text encoding, as keyword arguments for its __call__, when its encode_prompt is one
    of the known signatures; else the prompt itself (the call encodes it)."""
    pipe = pipe if pipe is not None else model.pipe
    own = getattr(pipe, "encode_prompt", None)
    if own is not None and model.family is not None:
        params = tuple(inspect.signature(own).parameters)
        for lead, encode in _ENCODES:
            if params[:len(lead)] == lead:
                return encode(pipe, prompt, model.device, guidance > 1.0)
    return dict(prompt=prompt)

"""One server or bench run of a Modular Diffusers pipeline: its own call, its phases marked by hooks.

A Modular pipeline encodes its prompt, denoises and decodes inside one call, with no encode_prompt or
output_type="latent" common to every family. So the run calls it whole, as a user does, and marks its phases
where they pass: the denoiser's first forward ends the text encoding (and whatever prepares the latents), the
meter takes each step from previewlab's loop block (modular.attach), and the VAE decoder's first forward on
the calling thread, outside a preview, begins the final decode. Previews in flight finish there, before the
final decode uses the VAE, as engine.generate has them do.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from . import modular
from .frames import grid, to_uint8_hwc
from .meter import StepMeter
from .models import Model, denoiser
from .models.families import vae_of
from .settings import RunSettings
from .steps import Step, StepTap


@dataclass
class Marks:
    """Where the call's phases passed: stopwatch marks, and host times (s) of the final decode's end."""
    denoise0: Any = None     # the denoiser's first forward: text encoding and latent preparation are before it
    loop_end: Any = None     # the final decode is about to start: the last step's work is queued before it
    decode0: Any = None      # previews in flight have finished
    decode1: Any = None
    t_decode1: float | None = None
    peak: int = 0            # the most previews in flight at once (overlap)


def call(model: Model, settings: RunSettings, gen: torch.Generator, meter: StepMeter) -> tuple[np.ndarray, Marks]:
    """Run the pipeline once and measure it: its image as uint8 (H, W, 3) on the host (a batch as one grid),
    and the marks of its phases (on the meter's stopwatch). The loop block and the hooks are removed whatever
    happens."""
    pipe, marks, sw = model.pipe, Marks(), meter.sw
    caller = threading.get_ident()
    stepping = [False]  # a sync preview runs the VAE inside a step: never the final decode

    def on_step(step: Step) -> bool:
        stepping[0] = True
        try:
            return meter.step(step)
        finally:
            stepping[0] = False

    def first_forward(*_: Any) -> None:
        if marks.denoise0 is None:
            marks.denoise0 = sw.mark()
            meter.begin(marks.denoise0)

    def decode_start(*_: Any) -> None:
        if threading.get_ident() == caller and not stepping[0] and marks.decode0 is None:
            marks.loop_end = sw.mark()
            meter.denoised()
            marks.peak = meter.finish_previews()
            marks.decode0 = sw.mark()

    def decode_end(*_: Any) -> None:
        if threading.get_ident() == caller and not stepping[0] and marks.decode1 is None:
            marks.decode1, marks.t_decode1 = sw.mark(), sw.clock()

    decoder = vae_of(pipe).decoder
    hooks = [denoiser(pipe).register_forward_pre_hook(first_forward),
             decoder.register_forward_pre_hook(decode_start), decoder.register_forward_hook(decode_end)]
    block = modular.attach(pipe, on_step)
    # a loop per chunk (Helios): the scheduler's step, steps numbered across chunks
    tap = StepTap(pipe.scheduler, on_step=on_step, pipe=pipe, chunked=True) if block is None else None
    if tap is not None:
        tap.install()
    try:
        kwargs: dict[str, Any] = dict(prompt=settings.prompt, num_inference_steps=settings.steps,
                                      height=settings.height, width=settings.width, generator=gen,
                                      output_type="np")
        if settings.batch > 1:
            kwargs["num_images_per_prompt"] = settings.batch
        out = pipe(**kwargs, output="images")
    finally:
        if tap is not None:
            tap.remove()
        if block is not None:
            modular.detach(pipe, block)
        for h in hooks:
            h.remove()
    return _u8(out), marks


def _u8(images: Any) -> np.ndarray:
    """The pipeline's images (float (B, H, W, 3) in [0, 1], or PIL images) as one uint8 (H, W, 3) grid."""
    if isinstance(images, list):
        images = np.stack([np.asarray(x, dtype=np.float32) / 255.0 if not isinstance(x, np.ndarray) else x
                           for x in images])
    chw = torch.from_numpy(np.asarray(images, dtype=np.float32)).permute(0, 3, 1, 2)
    return to_uint8_hwc(grid(chw).clamp(0, 1)).numpy()

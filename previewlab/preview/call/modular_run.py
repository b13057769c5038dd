"""One server or bench run of a Modular Diffusers pipeline: its own call, its phases marked by hooks.

A Modular pipeline encodes its prompt, denoises and decodes inside one call, with no encode_prompt or
output_type="latent" common to every family. So the run calls it whole, as a user does, and marks its phases
where they pass: the denoiser's first forward ends the text encoding (and whatever prepares the latents), the
meter takes each step from previewlab's loop block (modular.attach), and the VAE decoder's first forward on
the calling thread, outside a preview, begins the final decode. Previews in flight finish there, before the
final decode uses the VAE, as engine.generate has them do.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from previewlab.preview.source import modular
from previewlab.preview.call.lifecycle import MeasuredCall
from previewlab.preview.frames import grid, to_uint8_hwc
from previewlab.preview.call.meter import StepMeter
from previewlab.preview.models import Model
from previewlab.preview.call.phase_hooks import PhaseHooks
from previewlab.preview.record.run import RunMeta
from previewlab.preview.settings import RunSettings
from previewlab.preview.source.steps import Step, StepTap


def call(model: Model, settings: RunSettings, gen: torch.Generator, measured: MeasuredCall, meta: RunMeta,
         meter: StepMeter) -> np.ndarray:
    """Run the pipeline once and measure it: its image as uint8 (H, W, 3) on the host (a batch as one grid).
    Where its phases passed goes to `measured`, which the caller started (its clock runs from the call's start,
    the text encoding is everything before the denoiser's first forward). The loop block and the hooks are
    removed whatever happens."""
    pipe = model.pipe

    def on_step(step: Step) -> bool:
        with hooks.step():
            return measured.step(step)

    def first_forward(kwargs: dict[str, Any]) -> None:
        measured.denoiser_start()
        measured.begin(meta, meter)

    def decode_start() -> None:
        if measured.state == "denoising":
            measured.drain_for_decode()

    hooks = PhaseHooks(pipe, first_forward=first_forward, decode_start=decode_start, decode_end=measured.decode_end)
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
        hooks.remove()
    image = _u8(out)
    measured.returned()  # its text encoding ran to the first forward; its postprocess and copy after the decode
    return image


def _u8(images: Any) -> np.ndarray:
    """The pipeline's images (float (B, H, W, 3) in [0, 1], or PIL images) as one uint8 (H, W, 3) grid."""
    if isinstance(images, list):
        images = np.stack([np.asarray(x, dtype=np.float32) / 255.0 if not isinstance(x, np.ndarray) else x
                           for x in images])
    chw = torch.from_numpy(np.asarray(images, dtype=np.float32)).permute(0, 3, 1, 2)
    return to_uint8_hwc(grid(chw).clamp(0, 1)).numpy()

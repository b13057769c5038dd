"""The fidelity pass: what each preview shows against what the full VAE would show, measured off the measured path.

Per seed and step count, one pipeline call with no preview keeps each step's latents (or x0, as the target asks:
targets.choose, as the previews pick it) on the host. Once the call has ended, each kept tensor is decoded by every
decoder asked at each decode_at, as a preview makes it (Previewer's decoder and cut, then frames.to_uint8_hwc at the
preview's largest side), and by the full VAE at the image's size (final.final_image, the run's own final decode).
Both are brought to the preview's size, the size the page shows it at (frames.preview_size of the image and
preview_max; likeness.fitted): a decoder that makes fewer pixels (latent2rgb at the latents' size, a cut, half
latents) is judged as it is seen, enlarged, never at its own few pixels; then compared (likeness.ssim,
likeness.psnr_db). These calls are never timed, never paired, and never make a run: the samples are their only
record. The bench (bench/fidelity.py) runs it after a sweep; the server (server/server.py) between runs.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

import numpy as np
import torch

from previewlab.preview.call.final import final_image
from previewlab.preview.decoding.previewer import Previewer
from previewlab.preview.judging import likeness
from previewlab.preview.judging.fidelity import Final, Sample
from previewlab.preview.models import Model
from previewlab.preview.frames import grid, grid_size, preview_size, to_uint8_hwc
from previewlab.preview.settings import PreviewSettings, RunSettings
from previewlab.preview.source.steps import StepTap
from previewlab.preview.source.targets import X0Tap, choose


class FidelityError(ValueError):
    """The pass cannot run on this model or these settings; str() is the one line."""


@dataclass(frozen=True)
class Kept:
    """One call's course: each step's tensor on the host (what a preview would decode), what it is (x0 or
    latents), and the final latents."""
    steps: tuple[tuple[int, torch.Tensor, str], ...]
    final: torch.Tensor


def kept(model: Model, settings: RunSettings, target: str) -> Kept:
    """One pipeline call with no preview: each step's tensor copied to the host in the step callback (the copy
    waits for the device; nothing here is timed), x0 read through the same scheduler tap the previews use."""
    pipe = model.pipe
    tap = X0Tap(pipe.scheduler) if target != "latents" else None
    step_tap = StepTap(pipe.scheduler, x0=tap, pipe=pipe)
    out: list[tuple[int, torch.Tensor, str]] = []

    def on_step(_pipe: Any, i: int, _t: Any, kw: dict[str, Any]) -> dict[str, Any]:
        shown, what = choose(target, tap, kw["latents"])  # type: ignore[arg-type]
        out.append((i + 1, shown.detach().to("cpu", copy=True), what))
        return kw

    step_tap.install()
    try:
        with torch.inference_mode():
            res = pipe(prompt=settings.prompt, num_inference_steps=settings.steps, width=settings.width,
                       height=settings.height, guidance_scale=settings.guidance,
                       generator=torch.Generator("cpu").manual_seed(settings.seed), output_type="latent",
                       callback_on_step_end=on_step, callback_on_step_end_tensor_inputs=["latents"])
    finally:
        step_tap.remove()
    return Kept(tuple(out), res.images.detach().to("cpu", copy=True))


def preview_of(model: Model, prev: Previewer, decoder: str, decode_at: str, preview_max: int, z: torch.Tensor,
               width: int, height: int) -> np.ndarray:
    """The preview decoder makes of z, as a run makes it: uint8 (h, w, 3) at the preview's size."""
    s = PreviewSettings(decoder=decoder, decode_at=decode_at, preview_max=preview_max)  # type: ignore[arg-type]
    decode = prev.decoder(decoder, prev.cut(decoder, s, width, height, int(z.shape[0])))
    assert decode is not None
    with torch.inference_mode():
        img = grid(decode(z.to(model.device, model.dtype), height, width))
        return to_uint8_hwc(img, preview_max).cpu().numpy()  # type: ignore[no-any-return]


def measure(model: Model, base: RunSettings, decoders: Sequence[str], decode_ats: Sequence[str],
            step_counts: Sequence[int], seeds: int, log: Callable[[str], Any] = lambda _: None,
            previewer: Previewer | None = None, should_stop: Callable[[], bool] = lambda: False,
            ) -> tuple[list[Sample], list[Final]]:
    """The pass over `seeds` seeds from base.seed, each of step_counts, each decoder (none left out) at each
    decode_at, with base's size, prompt, guidance, target and preview_max; finals: each shorter step count's final
    image against the most's. should_stop: asked between calls (True: the samples so far). Raises FidelityError
    for a video model or no decoder to judge."""
    if model.space.video:
        raise FidelityError("fidelity: a video model's clips are not measured yet (images only)")
    decoders = [d for d in dict.fromkeys(decoders) if d != "none"]
    if not decoders:
        raise FidelityError("fidelity: no decoder to judge (decoder none shows nothing)")
    target, pmax = base.preview.target, base.preview.preview_max
    counts = sorted(set(step_counts))
    prev = previewer or Previewer(model)
    samples: list[Sample] = []
    finals: list[Final] = []
    h, w = base.height, base.width
    for seed in range(base.seed, base.seed + seeds):
        last: dict[int, np.ndarray] = {}
        for steps in counts:
            if should_stop():
                return samples, finals
            course = kept(model, replace(base, seed=seed, steps=steps), target)
            last[steps] = final_image(model, course.final.to(model.device), h, w)
            for step, z, what in course.steps:
                ref = final_image(model, z.to(model.device, model.dtype), h, w)  # the VAE at the image's size
                pw, ph = preview_size(*grid_size(base.batch, w, h), pmax)  # the size the page shows it at
                vae = likeness.fitted(ref, pw, ph)
                for d in decoders:
                    for at in decode_ats:
                        img = likeness.fitted(preview_of(model, prev, d, at, pmax, z, w, h), pw, ph)
                        samples.append(Sample(seed=seed, steps=steps, step=step, decoder=d, decode_at=at,
                                              target=what, width=pw, height=ph, ssim=likeness.ssim(img, vae),
                                              psnr_db=likeness.psnr_db(img, vae)))
        most = max(counts)
        for steps in counts[:-1]:
            a, b = last[steps], last[most]
            sw, sh = likeness.small_size(b.shape[1], b.shape[0])
            fa, fb = likeness.fitted(a, sw, sh), likeness.fitted(b, sw, sh)
            finals.append(Final(seed, steps, most, likeness.ssim(fa, fb), likeness.psnr_db(fa, fb)))
        log(f"  fidelity: seed {seed} done ({len(counts)} call{'s' * (len(counts) > 1)}, untimed)")
    return samples, finals

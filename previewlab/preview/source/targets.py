"""What a preview shows: the model's prediction of the clean image at this step (x0, what ComfyUI and A1111
preview, readable from the first steps), or the noisy latents the step hands on.

x0 is read without changing the run: the wrapper around the scheduler's `step` (steps.StepTap) hands this tap
references to what the step already computed. Nothing is computed unless a preview asks for it, and the
step's own output is returned untouched, so the final image is bit-identical to a plain call.

- Euler, Euler-Ancestral, DDIM, DDPM, LMS: the scheduler returns `pred_original_sample`.
- DPM-Solver++ (and its SDE form): the x0 it converted the model output to is its `model_outputs[-1]`.
- Flow matching (SD3, FLUX): x_t = (1 - sigma) x0 + sigma noise and the model predicts v = noise - x0, so
  x0 = x_t - sigma v, with sigma of the step (kept as a device tensor: no read-back).
- Anything else: no x0; `auto` falls back to the latents and the row says so.
"""
from __future__ import annotations

from typing import Any, Literal

import torch

from previewlab.preview.names import Target

Shown = Literal["x0", "latents"]


class X0Tap:
    """Each step's x0, kept as references by the scheduler's step wrapper (steps.StepTap) and handed out on
    request."""

    def __init__(self, scheduler: Any) -> None:
        self.sched = scheduler
        self._lazy: tuple[Any, ...] | None = None

    def forget(self) -> None:
        self._lazy = None

    def keep(self, model_output: torch.Tensor, sample: torch.Tensor, out: Any) -> None:
        """References only: what this step computed anyway (no tensor work here)."""
        sched = self.sched
        pred = out[1] if isinstance(out, tuple) and len(out) > 1 else getattr(out, "pred_original_sample", None)
        if pred is not None:
            self._lazy = ("x0", pred)
            return
        cfg = sched.config
        outputs = getattr(sched, "model_outputs", None)
        if getattr(cfg, "algorithm_type", None) in ("dpmsolver++", "sde-dpmsolver++") and outputs and outputs[-1] is not None:
            self._lazy = ("x0", outputs[-1])
            return
        index = getattr(sched, "step_index", None)
        if type(sched).__name__.startswith("FlowMatch") and index is not None:
            self._lazy = ("flow", sample, model_output, sched.sigmas[index - 1])  # step_index has moved on
            return
        self._lazy = None

    def x0(self) -> torch.Tensor | None:
        """This step's x0 in the callback latents' layout, or None when the scheduler gives no way to it."""
        lazy = self._lazy
        if lazy is None:
            return None
        if lazy[0] == "x0":
            return lazy[1]  # type: ignore[no-any-return]
        _, sample, model_output, sigma = lazy
        s = sigma.to(device=sample.device, dtype=torch.float32)  # a device tensor: no host read
        return (sample.float() - s * model_output.float()).to(sample.dtype)


def choose(target: Target, tap: X0Tap | None, latents: torch.Tensor) -> tuple[torch.Tensor, Shown]:
    """The tensor a preview decodes, and what it is."""
    if target != "latents" and tap is not None:
        x0 = tap.x0()
        if x0 is not None:
            return x0, "x0"
    return latents, "latents"

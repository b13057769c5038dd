"""Which step source drives a pipeline (steps.py has the sources): the callback where the pipeline has one that
hands over latents, a Modular loop block where its loop runs per step, else the scheduler's step. Apart from
steps.py, so the sources never import the Modular support that reads a pipeline's blocks (modular.py imports
steps.py)."""
from __future__ import annotations

import inspect
from typing import Any, Literal

from previewlab.preview.source.steps import SOURCES, Source


class SourceError(ValueError):
    """A step source that cannot drive this pipeline, in one line: what is wrong and what would do."""


def is_modular(pipe: Any) -> bool:
    """A Modular Diffusers pipeline (its denoising is a block tree, not a __call__ loop)."""
    return any(c.__name__ == "ModularPipeline" and c.__module__.startswith("diffusers.") for c in type(pipe).__mro__)


def has_callback(pipe: Any) -> bool:
    """Its __call__ takes callback_on_step_end, and the callback hands over latents."""
    call = getattr(type(pipe), "__call__", None)
    params = inspect.signature(call).parameters if callable(call) and type(pipe) is not object else {}
    return "callback_on_step_end" in params and "latents" in list(getattr(pipe, "_callback_tensor_inputs", None) or [])


def has_scheduler(pipe: Any) -> bool:
    return callable(getattr(getattr(pipe, "scheduler", None), "step", None))


def chunked(pipe: Any) -> bool:
    """A Modular pipeline whose denoising loops run per chunk, not per step (Helios, Wan-Animate 2)."""
    from previewlab.preview.source import modular

    return is_modular(pipe) and not modular.step_loops(pipe) and any(modular.denoising(lp)
                                                                      for lp in modular.loops(pipe._blocks))


def source_of(pipe: Any, asked: Source | Literal["auto"] = "auto") -> Source:
    """The step source for `pipe`: the one asked, else the callback where the pipeline has one that hands over
    latents, a loop block for a Modular pipeline whose loop runs per step, else the scheduler's step. Raises
    SourceError for a source this pipeline cannot have."""
    from previewlab.preview.source import modular

    name = type(pipe).__name__
    if asked not in ("auto", *SOURCES):
        raise SourceError(f"source={asked!r}: allowed are auto, {', '.join(SOURCES)}")
    blocks = is_modular(pipe) and bool(modular.step_loops(pipe))
    if asked == "callback" and not has_callback(pipe):
        raise SourceError(f"source='callback': {name}'s __call__ has no callback_on_step_end that hands over "
                          "latents; use source='scheduler' (or 'auto')")
    if asked == "modular" and not blocks:
        what = "is not a Modular pipeline" if not is_modular(pipe) else "has no denoising loop that runs per step"
        raise SourceError(f"source='modular': {name} {what}; use source='scheduler' (or 'auto')")
    if asked == "scheduler" and not has_scheduler(pipe):
        raise SourceError(f"source='scheduler': {name} has no scheduler with a step method; use 'auto'")
    if asked != "auto":
        return asked
    if blocks:
        return "modular"
    if not is_modular(pipe) and has_callback(pipe):
        return "callback"
    if has_scheduler(pipe):
        return "scheduler"
    raise SourceError(f"{name} has no step callback, no Modular denoising loop and no scheduler with a step "
                      "method: previewlab has no step to preview from")

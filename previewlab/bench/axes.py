"""The bench's run axes beside the preview's own: the scheduler, the steps and the VAE's memory mode.

Each combination of them is a run setup with its own no-preview baselines, since a preview's overhead is a share
of the run it rides on. A scheduler is a short name looked up in SCHEDULERS and built from the model's own
scheduler config, so its training schedule and prediction type carry over; one the model's family cannot take
is refused before any run, in one line that names what it can take.
"""
from __future__ import annotations

import copy
import inspect
from dataclasses import dataclass
from typing import Any, Literal

from previewlab.preview.decoding.vae_memory import VAE_MEMORY, VaeMemory, set_vae_memory, vae_memory
from previewlab.preview.models.families import vae_of

# short name -> (diffusers class, what it integrates): noise (epsilon / v / sample prediction), flow (flow
# matching), either (flow matching only through prediction_type "flow_prediction" with use_flow_sigmas)
Kind = Literal["noise", "flow", "either"]
SCHEDULERS: dict[str, tuple[str, Kind]] = {
    "euler": ("EulerDiscreteScheduler", "noise"),
    "euler_a": ("EulerAncestralDiscreteScheduler", "noise"),
    "dpmpp_2m": ("DPMSolverMultistepScheduler", "either"),
    "ddim": ("DDIMScheduler", "noise"),
    "unipc": ("UniPCMultistepScheduler", "either"),
    "heun": ("HeunDiscreteScheduler", "noise"),
    "lms": ("LMSDiscreteScheduler", "noise"),
    "pndm": ("PNDMScheduler", "noise"),
    "flow_euler": ("FlowMatchEulerDiscreteScheduler", "flow"),
    "flow_heun": ("FlowMatchHeunDiscreteScheduler", "flow"),
}
VAE_MODES: tuple[VaeMemory, ...] = VAE_MEMORY


class AxisError(ValueError):
    """A scheduler or VAE mode this model cannot take; str() is the one line to print."""


@dataclass(frozen=True)
class Setup:
    """One combination of the axes. "" / 0: not asked, so the model's own is kept."""
    scheduler: str = ""
    steps: int = 0
    vae: str = ""


def _classes() -> dict[str, Any]:
    """The diffusers classes behind SCHEDULERS, imported by their fixed names."""
    from diffusers import (DDIMScheduler, DPMSolverMultistepScheduler, EulerAncestralDiscreteScheduler,
                           EulerDiscreteScheduler, FlowMatchEulerDiscreteScheduler, FlowMatchHeunDiscreteScheduler,
                           HeunDiscreteScheduler, LMSDiscreteScheduler, PNDMScheduler, UniPCMultistepScheduler)

    found = {c.__name__: c for c in (DDIMScheduler, DPMSolverMultistepScheduler, EulerAncestralDiscreteScheduler,
                                     EulerDiscreteScheduler, FlowMatchEulerDiscreteScheduler,
                                     FlowMatchHeunDiscreteScheduler, HeunDiscreteScheduler, LMSDiscreteScheduler,
                                     PNDMScheduler, UniPCMultistepScheduler)}
    return {name: found[cls] for name, (cls, _) in SCHEDULERS.items()}


def is_flow(scheduler: Any) -> bool:
    """A flow-matching scheduler: diffusers' FlowMatch family, or one set to predict the flow."""
    return type(scheduler).__name__.startswith("FlowMatch") or \
        scheduler.config.get("prediction_type") == "flow_prediction"


def _settable(scheduler: Any, steps: int) -> bool:
    try:
        copy.deepcopy(scheduler).set_timesteps(steps, device="cpu")
        return True
    except Exception:
        return False


def _why_not(own: Any, name: str, built: Any, steps: tuple[int, ...]) -> str:
    """Why the model whose scheduler is `own` cannot take `built` (SCHEDULERS[name] from own's config); ''."""
    kind, flow = SCHEDULERS[name][1], is_flow(own)
    flows = kind == "flow" or (kind == "either" and built.config.get("prediction_type") == "flow_prediction")
    if flow and not flows:
        return "a flow-matching model needs a flow-matching scheduler"
    if not flow and (kind == "flow" or built.config.get("prediction_type") == "flow_prediction"):
        return "a noise-prediction model cannot take a flow-matching scheduler"
    if own.config.get("use_dynamic_shifting") and "mu" not in inspect.signature(built.set_timesteps).parameters:
        return "the model shifts its schedule by resolution (use_dynamic_shifting), which this scheduler lacks"
    for n in steps:
        if _settable(own, n) and not _settable(built, n):
            return f"it cannot set {n} timesteps from the model's scheduler config"
    return ""


def schedulers_for(pipe: Any, names: tuple[str, ...], steps: tuple[int, ...]) -> dict[str, Any]:
    """Each named scheduler built with Class.from_config(the pipeline's scheduler config), for runs of each of
    `steps`. Raises AxisError for one the model cannot take, naming those it can."""
    if not names:
        return {}
    from diffusers.utils import logging

    own, classes, level = pipe.scheduler, _classes(), logging.get_verbosity()
    logging.set_verbosity_error()  # each class names the config keys it ignores; the checks below judge them
    try:
        built = {n: classes[n].from_config(own.config) for n in SCHEDULERS}
    finally:
        logging.set_verbosity(level)
    for name in names:
        why = _why_not(own, name, built[name], steps)
        if why:
            ok = [n for n in SCHEDULERS if not _why_not(own, n, built[n], steps)]
            raise AxisError(f"--scheduler {name}: {why} (the model's own is {type(own).__name__}); allowed for this "
                            f"model: {', '.join(ok) or 'none of ' + ', '.join(SCHEDULERS)}")
    return {n: built[n] for n in names}


def check_vae_modes(pipe: Any, modes: tuple[str, ...]) -> None:
    """Raises AxisError when the pipeline's VAE cannot switch tiling or slicing."""
    vae = vae_of(pipe)
    if any(m != "none" for m in modes) and not all(hasattr(vae, f) for f in ("enable_tiling", "enable_slicing")):
        what = f"its {type(vae).__name__}" if vae is not None else "it has no VAE"
        raise AxisError(f"--vae-mode {','.join(modes)}: this model's VAE cannot tile or slice ({what}); "
                        "allowed for this model: none")


def use(pipe: Any, setup: Setup, schedulers: dict[str, Any]) -> None:
    """Puts the setup's scheduler and VAE mode on the pipeline, for the runs that follow."""
    if setup.scheduler:
        pipe.scheduler = schedulers[setup.scheduler]
    if setup.vae:
        set_vae_memory(pipe, setup.vae)


def as_now(pipe: Any, schedulers: bool, vae: bool) -> tuple[Setup, dict[str, Any]]:
    """What use() takes to put the pipeline back as it is now, for the axes a sweep changes (the others are
    never touched: a VAE that cannot tile is never asked to stop)."""
    return Setup("own" if schedulers else "", 0, (vae_memory(pipe) or "none") if vae else ""), {"own": pipe.scheduler}

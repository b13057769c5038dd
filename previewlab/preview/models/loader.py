"""load: any --model name to a Model on its device (the demo, a synthetic preset, a local folder, a single file
or a repo id in the local cache), with its TAE, its dtype, its offload and its memory format. loading.py and
single_file.py read what users have; the presets build what previewlab makes itself. Nothing here downloads."""
from __future__ import annotations

import time
from typing import Any, Literal

import torch
from torch import nn

from previewlab.preview.models import loading, sd_presets, single_file
from previewlab.preview.models.demo import DEMO_GUIDANCE, DEMO_NOTE, DEMO_PROMPT, DEMO_SIZE, demo_folder
from previewlab.preview.models.devices import choose_device
from previewlab.preview.models.families import Family
from previewlab.preview.models.model import Model, ModelError, default_size, denoiser
from previewlab.preview.models.names import model_refusal, unknown_synthetic
from previewlab.preview.models.presets import PRESETS, build_preset
from previewlab.preview.models.previews import load_taesd, previews_of
from previewlab.preview.models.reading import latent_space
from previewlab.preview.models.video_presets import clip_defaults

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
OFFLOADS = ("none", "model", "sequential")


def _sd_preset(name: str, seed: int) -> sd_presets.Built:
    if name not in sd_presets.SD_PRESETS:
        raise ModelError(unknown_synthetic(name))
    return sd_presets.build(name, seed)


def synthetic_pipeline(name: str = "synthetic:tiny", seed: int = 0) -> Any:
    """A plain diffusers pipeline of a synthetic preset's components (random seeded weights), on the CPU."""
    pipe, _, _, _ = _sd_preset(name, seed)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def _load_local(name: str, dtype: torch.dtype, variant: str | None, config: str | None) -> tuple[Any, Family | None]:
    try:
        if single_file.is_single_file(name):
            return single_file.load_single_file(name, dtype, config)
        if config is not None:
            raise ModelError(f"--config {config}: only for a single-file checkpoint (.safetensors, .ckpt); "
                             f"{name} is not one")
        return loading.local_pipeline(name, dtype, variant)
    except loading.LoadError as e:
        raise ModelError(str(e)) from None


def quiet(pipe: Any) -> None:
    """No progress bars: the pipeline's, and a Modular pipeline's loops' (its own setting reaches only the top)."""
    pipe.set_progress_bar_config(disable=True)
    from previewlab.preview.source.sources import is_modular

    if is_modular(pipe):
        from previewlab.preview.source.modular import loops

        for loop in loops(pipe._blocks):
            loop.set_progress_bar_config(disable=True)


def _place(pipe: Any, tiny: nn.Module | None, dev: torch.device, dtype: torch.dtype, *, offload: str,
           channels_last: bool) -> None:
    """A pipeline built on the CPU and its TAE, cast to `dtype` and put on `dev` (or offloaded to it), quiet."""
    if dtype != torch.float32:
        pipe.to(dtype=dtype)
    if channels_last:
        for part in (denoiser(pipe), pipe.vae):
            part.to(memory_format=torch.channels_last)
        if tiny is not None:
            tiny.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    if offload == "model":
        pipe.enable_model_cpu_offload(device=dev)  # needs the accelerate package
    elif offload == "sequential":
        pipe.enable_sequential_cpu_offload(device=dev)
    else:
        pipe.to(dev)  # load on the CPU, then move
    quiet(pipe)
    if tiny is not None:
        tiny.to(dev, dtype).eval().requires_grad_(False)


def load(name: str, *, taesd: str | None = None, device: str = "auto", dtype: str = "float32",
         seed: int = 0, offload: str = "none", channels_last: bool = False, variant: str | None = None,
         config: str | None = None) -> Model:
    """Load a model onto the chosen device. Raises ModelError with a one-line message.

    offload: diffusers' CPU offload (model: whole models move to the GPU when used; sequential: layer by
    layer). With it, a full-VAE preview moves the VAE to the device and back: a cost worth seeing.
    """
    if dtype not in DTYPES:
        raise ModelError(f"--dtype {dtype!r}: allowed are {', '.join(DTYPES)}")
    if offload not in OFFLOADS:
        raise ModelError(f"--offload {offload!r}: allowed are {', '.join(OFFLOADS)}")
    dev, tdtype = choose_device(device), DTYPES[dtype]
    if offload != "none" and dev.type != "cuda":
        raise ModelError(f"--offload {offload}: needs a CUDA device (it moves models between CPU and GPU memory); "
                         "use --offload none on the CPU")
    from diffusers.utils import logging as dlogging

    dlogging.set_verbosity_error()  # diffusers' cast warnings say nothing a user can act on here
    t0 = time.perf_counter()
    tiny: nn.Module | None
    kind: Literal["diffusers", "madebyollin", "none"]
    family: Family | None
    note, own_rgb = "", None
    frames, fps = 1, 0.0
    if name == "demo":
        pipe, family = _load_local(str(demo_folder()), tdtype, None, None)
        size, synthetic, note = DEMO_SIZE, False, DEMO_NOTE
    elif name in PRESETS:
        pipe, family, tiny, size = build_preset(name, seed)
        kind = "madebyollin" if tiny is not None else "none"  # Mochi has no published TAE
        synthetic, frames, fps = True, PRESETS[name].num_frames, PRESETS[name].fps
    elif name.startswith("synthetic:"):
        pipe, family, tiny, size = _sd_preset(name, seed)
        kind = "diffusers"
        synthetic = True
    else:
        refusal = model_refusal(name)
        if refusal is not None:
            raise ModelError(refusal)
        pipe, family = _load_local(name, tdtype, variant, config)
        synthetic = False
        size = default_size(pipe, family)
        if latent_space(pipe).video:
            frames, fps = clip_defaults(pipe, family)
    if not synthetic:  # a folder's own TAE and factors, unless --taesd names a TAE
        tiny, kind, own_rgb = previews_of(pipe, family, taesd)
    elif taesd is not None:
        tiny, kind = load_taesd(taesd, family, latent_space(pipe))
    _place(pipe, tiny, dev, tdtype, offload=offload, channels_last=channels_last)
    return Model(name=name, pipe=pipe, family=family, synthetic=synthetic, taesd=tiny, taesd_kind=kind,
                 device=dev, dtype=tdtype, default_size=size, load_s=time.perf_counter() - t0, offload=offload,
                 channels_last=channels_last, note=note, latent_rgb=own_rgb,
                 prompt=DEMO_PROMPT if name == "demo" else "", guidance=DEMO_GUIDANCE if name == "demo" else None,
                 num_frames=frames, fps=fps)

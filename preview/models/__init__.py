"""Models: the demo model, offline synthetic presets of real architectures, local folders, single files, TAEs.

Nothing here downloads. A synthetic model has random seeded weights: its costs are real, its pictures
are noise, and `Model.synthetic` says so everywhere it is reported. The demo model (`--model demo`) is a small
SD1.5-family pipeline trained here on drawn scenes (bench/demo/train.py) and shipped in preview/models/demo_model/: its
pictures are real, its costs a small model's, and `Model.note` says so everywhere it is reported.
"""
from __future__ import annotations

import argparse
import difflib
import importlib.resources
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from . import loading, single_file
from .families import Family, LatentSpace
from .reading import latent_space
from .latent_formats import Factors
from .offline_tokenizers import clip_tokenizer
from .presets import PRESETS, build_preset
from .video_presets import clip_defaults

# transformers warns at import that torchvision is missing; nothing here uses image processors
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

DEMO_DIR = Path(str(importlib.resources.files(__name__) / "demo_model"))  # package data, in a wheel too
DEMO_NOTE = ("demo model trained on drawn scenes: real pictures from a small model; its costs are a small model's "
             "(use synthetic:sd15 for SD1.5's)")
DEMO_SIZE = 128  # what it was trained at
DEMO_PROMPT = "a red circle on the left and a blue square on the right, on a yellow background"  # one it knows
DEMO_GUIDANCE = 3.0  # its checker's best (README: color 88, position 92, shape 66 % at 3; 80, 90, 56 % at 7.5)
SD_PRESETS = ("synthetic:tiny", "synthetic:tiny-xl", "synthetic:small", "synthetic:sd15", "synthetic:sdxl",
              "synthetic:tiny-xl-real-taesd")
SYNTHETIC = SD_PRESETS + tuple(PRESETS)
# SDXL at 1024 px for the bench's measurements: its real architecture (3.5 B random weights, minutes a step on a
# CPU), and tiny-xl with TAESD's real decoder on SDXL's 1024 px latents; docs/gpu-check.md describes both
BENCH_PRESETS = ("synthetic:sdxl", "synthetic:tiny-xl-real-taesd")
KNOWN = ("demo", *SYNTHETIC)  # every --model name previewlab builds itself
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


class ModelError(ValueError):
    """A model or weights that cannot be loaded; the message is one line a person can act on."""


def known_models() -> str:
    """The names previewlab builds itself, as a line: the two the bench's SDXL measurements use named apart."""
    everyday = [n for n in KNOWN if n not in BENCH_PRESETS]
    return (f"{', '.join(everyday)}; for the bench's SDXL measurements at 1024 px also {' and '.join(BENCH_PRESETS)}, "
            "described in docs/gpu-check.md")


def did_you_mean(name: str) -> str:
    """"; did you mean demo?" for a name close to one previewlab builds (a typo), else ""."""
    close = difflib.get_close_matches(name, KNOWN, n=1)
    return f"; did you mean {close[0]}?" if close else ""


def model_refusal(name: str) -> str | None:
    """Why --model `name` (neither demo nor a synthetic preset) cannot be a folder, a checkpoint or a cached repo
    id, asked before anything loads; None when it may be one. A name of one `owner/name` that is not here may
    still be in the local Hugging Face cache: loading asks there."""
    p = Path(name)
    if p.is_file() and not single_file.is_single_file(name):
        return f"--model: a checkpoint is a .safetensors or .ckpt file (or FLUX's .sft): {name}"
    if p.exists() or not (p.is_absolute() or name.startswith(".") or name.count("/") != 1):
        return None
    typo = did_you_mean(name) if "/" not in name and not name.startswith(".") else ""  # a name, not a path
    hint = typo or ("; give a local diffusers folder, a .safetensors or .ckpt file, a repo id already in the "
                    "local Hugging Face cache, demo, or a synthetic preset such as synthetic:small")
    return f"--model: no such file or folder: {name}{hint}"


@dataclass
class Model:
    name: str                # the --model value as given
    pipe: Any                # any diffusers pipeline with a step callback and a VAE (reading.latent_space)
    family: Family | None    # a known family, None for an unnamed latent space
    synthetic: bool
    taesd: nn.Module | None  # None when no TAESD weights were given for a real model
    taesd_kind: Literal["diffusers", "madebyollin", "none"]
    device: torch.device
    dtype: torch.dtype
    default_size: int        # pixels, square
    load_s: float
    offload: str = "none"
    channels_last: bool = False
    note: str = ""                    # what a report must say about the model beside its name (the demo's label)
    latent_rgb: Factors | None = None  # the model's own latent2rgb factors; None: its family's
    prompt: str = ""                   # a prompt the model knows, for the page's default; "": the settings' one
    guidance: float | None = None      # the guidance scale it works best at, for the page's default
    num_frames: int = 1                # a video model's default clip length in frames; 1: an image model
    fps: float = 0.0                   # a video model's playback rate in frames per second; 0: an image model
    _space: tuple[Any, LatentSpace] | None = field(default=None, repr=False, compare=False)

    @property
    def label(self) -> str:
        """The model's name with what every report says about it: SYNTHETIC (random weights) or its note."""
        if self.synthetic:
            return f"SYNTHETIC (random weights: real costs, noise pictures) {self.name}"
        return f"{self.name} ({self.note})" if self.note else self.name

    @property
    def vae_scale_factor(self) -> int:
        return self.space.factor

    @property
    def space(self) -> LatentSpace:
        """The pipeline's latent space: how the callback's latents reach the TAE, latent2rgb and the VAE."""
        if self._space is None or self._space[0] is not self.pipe:
            self._space = (self.pipe, latent_space(self.pipe))
        return self._space[1]


def denoiser(pipe: Any) -> Any:
    """The model that runs every step: the UNet (SD1.5, SDXL, Kandinsky) or the transformer (SD3, FLUX, ...)."""
    return getattr(pipe, "unet", None) or getattr(pipe, "transformer", None) or pipe.transformer_2


def tae_channels(tae: Any) -> int | None:
    """The latent channels a TAE decoder takes: madebyollin's (its first conv after the clamp) or a diffusers
    AutoencoderTiny's config."""
    cfg = getattr(tae, "config", None)
    if cfg is not None and getattr(cfg, "latent_channels", None) is not None:
        return int(cfg.latent_channels)
    first = next((m for m in tae.modules() if isinstance(m, nn.Conv2d)), None)
    return int(first.in_channels) if first is not None else None


def check_tae(tae: Any, space: LatentSpace, path: str) -> None:
    """A TAE that does not take this latent space's channels is refused before any run, in one line."""
    got = tae_channels(tae)
    if got is not None and got != space.channels:
        raise ModelError(f"--taesd {path}: a TAE for {got} latent channels, but the model's latent space is "
                         f"{space.describe()}; a TAE must take {space.channels} channels")


DEVICES = ("cpu", "cuda", "mps", "xpu")  # what --device may name, where torch sees it (besides auto)


def _sees(name: str) -> bool:
    if name == "cuda":
        return torch.cuda.is_available()
    if name == "mps":
        return torch.backends.mps.is_available()
    if name == "xpu":
        return hasattr(torch, "xpu") and torch.xpu.is_available()
    return name == "cpu"


def allowed_devices() -> tuple[str, ...]:
    """What --device accepts on this machine: auto, cpu and each accelerator torch sees here."""
    return ("auto", *(d for d in DEVICES if _sees(d)))


def device_refusal(name: str) -> str | None:
    """Why --device `name` cannot run here, in one line naming what can; None when it can."""
    allowed = allowed_devices()
    if name in allowed:
        return None
    why = f"torch sees no {name.upper()} device here" if name in DEVICES else "not a device"
    return f"{name!r}: {why}; allowed on this machine: {', '.join(allowed)}"


def device_arg(name: str) -> str:
    """--device as the server's and the bench's parsers take it: argparse's one-line error where it cannot run."""
    refusal = device_refusal(name)
    if refusal is not None:
        raise argparse.ArgumentTypeError(refusal)
    return name


def device_name(dev: torch.device) -> str:
    """The device as reports name it: the GPU's own name on CUDA and XPU, else its type (cpu, mps)."""
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    if dev.type == "xpu":
        return str(torch.xpu.get_device_name(dev))
    return dev.type


def choose_device(name: str) -> torch.device:
    """The one place that decides the device: auto takes CUDA when torch sees one, else the CPU; cuda,
    mps and xpu where torch sees them, when asked for."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    refusal = device_refusal(name)
    if refusal is not None:
        raise ModelError(f"--device {refusal}")
    return torch.device(name)


def _scheduler() -> Any:
    from diffusers import EulerDiscreteScheduler

    # SD1.5's training schedule; Euler is what most local UIs default to.
    return EulerDiscreteScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                                  num_train_timesteps=1000, steps_offset=1, timestep_spacing="leading")


def _clip(hidden: int, layers: int, heads: int, inter: int, vocab: int = 1000, **kw: Any) -> Any:
    from transformers import CLIPTextConfig

    return CLIPTextConfig(bos_token_id=0, eos_token_id=2, pad_token_id=1, vocab_size=vocab, hidden_size=hidden,
                          intermediate_size=inter, num_attention_heads=heads, num_hidden_layers=layers,
                          max_position_embeddings=77, layer_norm_eps=1e-5, **kw)


def _vae(widths: tuple[int, ...], norm_groups: int = 32) -> Any:
    from diffusers import AutoencoderKL

    n = len(widths)
    return AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4, block_out_channels=widths,
                         layers_per_block=2, norm_num_groups=norm_groups, sample_size=64,
                         down_block_types=("DownEncoderBlock2D",) * n, up_block_types=("UpDecoderBlock2D",) * n,
                         scaling_factor=0.18215)


def _taesd(stages: int) -> Any:
    from diffusers import AutoencoderTiny

    if stages == 4:
        return AutoencoderTiny()  # the real TAESD architecture, 2,445,063 parameters
    # As many upsampling stages as the VAE has, or the preview is the wrong size.
    return AutoencoderTiny(encoder_block_out_channels=(32,) * stages, decoder_block_out_channels=(32,) * stages,
                           num_encoder_blocks=(1,) * stages, num_decoder_blocks=(1,) * stages)


def _unet(widths: tuple[int, ...], cross_dim: int, **kw: Any) -> Any:
    from diffusers import UNet2DConditionModel

    n = len(widths)
    down: tuple[str, ...]
    up: tuple[str, ...]
    if n == 2:
        down, up = ("DownBlock2D", "CrossAttnDownBlock2D"), ("CrossAttnUpBlock2D", "UpBlock2D")
    else:
        down = ("CrossAttnDownBlock2D",) * (n - 1) + ("DownBlock2D",)
        up = ("UpBlock2D",) + ("CrossAttnUpBlock2D",) * (n - 1)
    return UNet2DConditionModel(sample_size=64, in_channels=4, out_channels=4, layers_per_block=2,
                                block_out_channels=widths, down_block_types=down, up_block_types=up,
                                cross_attention_dim=cross_dim, **kw)


def _sdxl() -> Any:
    """SDXL base 1.0's architecture, built from the configs shipped for its single files (single_file_configs/
    xl_base): the UNet (2,567,463,684 parameters), CLIP ViT-L (123,060,480), OpenCLIP bigG with its projection
    (694,659,840) and the VAE (83,653,863; scaling 0.13025, force_upcast), counted on the meta device. 3.47 B
    random parameters, 13.9 GB in float32. On a shared 2-core CPU: built in 97 s (13.4 GiB peak), a UNet step at
    1024 px 170-220 s without CFG, the VAE's decode at 1024 px 236 s (17.6 GiB peak)."""
    from diffusers import AutoencoderKL, StableDiffusionXLPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

    def config(part: str) -> Path:
        return single_file.CONFIGS / "xl_base" / part / "config.json"

    return StableDiffusionXLPipeline(
        vae=AutoencoderKL.from_config(json.loads(config("vae").read_text())),
        text_encoder=CLIPTextModel(CLIPTextConfig.from_json_file(config("text_encoder"))),
        text_encoder_2=CLIPTextModelWithProjection(CLIPTextConfig.from_json_file(config("text_encoder_2"))),
        tokenizer=clip_tokenizer(), tokenizer_2=clip_tokenizer(),
        unet=UNet2DConditionModel.from_config(json.loads(config("unet").read_text())), scheduler=_scheduler())


def _build_synthetic(name: str, seed: int) -> tuple[Any, Family, Any, int]:
    from diffusers import StableDiffusionPipeline, StableDiffusionXLPipeline
    from transformers import CLIPTextModel, CLIPTextModelWithProjection

    torch.manual_seed(seed)  # weights are deterministic for a seed
    common = dict(tokenizer=clip_tokenizer(), scheduler=_scheduler(), safety_checker=None, feature_extractor=None,
                  requires_safety_checker=False)
    if name == "synthetic:tiny":
        unet = _unet((32, 64), 32)
        vae, taesd = _vae((32, 64)), _taesd(2)
        te = CLIPTextModel(_clip(32, 5, 4, 37))
        return StableDiffusionPipeline(vae=vae, text_encoder=te, unet=unet, **common), "sd15", taesd, 64
    if name in ("synthetic:tiny-xl", "synthetic:tiny-xl-real-taesd"):
        tiny = name == "synthetic:tiny-xl"
        unet = _unet((32, 64), 64, attention_head_dim=(2, 4), use_linear_projection=True,
                     addition_embed_type="text_time", addition_time_embed_dim=8, transformer_layers_per_block=(1, 2),
                     projection_class_embeddings_input_dim=80, norm_num_groups=1)
        # tiny-xl-real-taesd: TAESD's real architecture on SDXL's latents at 1024 px (4 channels at 1/8: a tiny VAE
        # of 4 stages), everything else tiny-xl's. A TAESD preview costs what it costs on SDXL (its decoder, the
        # latents' size); the run's wall time is not SDXL's. On 2 CPU cores a real SDXL UNet step at 1024 px
        # takes about 3 minutes and the real VAE's final decode 4 (synthetic:sdxl)
        vae, taesd = (_vae((32, 64)), _taesd(2)) if tiny else (_vae((16,) * 4, norm_groups=8), _taesd(4))
        cfg = _clip(32, 5, 4, 37, hidden_act="gelu", projection_dim=32)
        pipe = StableDiffusionXLPipeline(vae=vae, text_encoder=CLIPTextModel(cfg), text_encoder_2=CLIPTextModelWithProjection(cfg),
                                         tokenizer=clip_tokenizer(), tokenizer_2=clip_tokenizer(), unet=unet,
                                         scheduler=_scheduler())
        return pipe, "sdxl", taesd, 64 if tiny else 1024
    if name == "synthetic:sdxl":  # TAESDXL has TAESD's architecture
        return _sdxl(), "sdxl", _taesd(4), 1024
    if name == "synthetic:small":
        unet = _unet((64, 128, 256, 256), 256, attention_head_dim=8)
        vae, taesd = _vae((32, 64, 128, 128)), _taesd(4)
        te = CLIPTextModel(_clip(256, 4, 4, 1024))
        return StableDiffusionPipeline(vae=vae, text_encoder=te, unet=unet, **common), "sd15", taesd, 256
    if name == "synthetic:sd15":
        unet = _unet((320, 640, 1280, 1280), 768, attention_head_dim=8)
        vae, taesd = _vae((128, 256, 512, 512)), _taesd(4)
        te = CLIPTextModel(_clip(768, 12, 12, 3072, vocab=49408, hidden_act="quick_gelu"))
        return StableDiffusionPipeline(vae=vae, text_encoder=te, unet=unet, **common), "sd15", taesd, 512
    raise ModelError(f"unknown synthetic model {name!r}{did_you_mean(name)} (allowed: {known_models()})")


def synthetic_pipeline(name: str = "synthetic:tiny", seed: int = 0) -> Any:
    """A plain diffusers pipeline of a synthetic preset's components (random seeded weights), on the CPU."""
    pipe, _, _, _ = _build_synthetic(name, seed)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def load_taesd(path: str, family: Family | None = None, space: LatentSpace | None = None
               ) -> tuple[nn.Module, Literal["diffusers", "madebyollin"]]:
    """A TAE decoder for `family` (see loading.load_taesd), refused when it does not take `space`'s channels.
    Raises ModelError."""
    try:
        module, kind = loading.load_taesd(path, family)
    except loading.LoadError as e:
        raise ModelError(str(e)) from None
    if space is not None:
        check_tae(module, space, path)
    return module, "diffusers" if kind == "diffusers" else "madebyollin"


def previews_of(pipe: Any, family: Family | None, taesd: str | None
                ) -> tuple[nn.Module | None, Literal["diffusers", "madebyollin", "none"], Factors | None]:
    """What a real pipeline previews with: the TAE `taesd` names, else the one its folder ships (loading.shipped),
    on the CPU; and the folder's own latent2rgb factors, else None (its family's). The server's load() and
    watch() both ask here. Raises ModelError."""
    space = latent_space(pipe)
    try:
        found = loading.shipped(pipe, family, space.channels)
    except loading.LoadError as e:
        raise ModelError(str(e)) from None
    own_rgb = found.latent_rgb if found else None
    path = taesd if taesd is not None else str(found.taesd) if found and found.taesd else None
    if path is None:
        return None, "none", own_rgb
    tiny, kind = load_taesd(path, family, space)
    return tiny, kind, own_rgb


def _demo(dtype: torch.dtype) -> tuple[Any, Family | None]:
    """The shipped demo model through the ordinary local-folder path (its TAESD and factors: previews_of)."""
    missing = [n for n in ("model_index.json", "taesd_decoder.safetensors", loading.LATENT_RGB_FILE)
               if not (DEMO_DIR / n).is_file()]
    if missing:
        raise ModelError(f"--model demo: {', '.join(missing)} missing from {DEMO_DIR}; "
                         f"previewlab train-demo --out {DEMO_DIR} trains them (about 50 minutes on 2 cores)")
    return _load_local(str(DEMO_DIR), dtype, None, None)


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
    from ..steps import is_modular

    if is_modular(pipe):
        from ..modular import loops

        for loop in loops(pipe._blocks):
            loop.set_progress_bar_config(disable=True)


OFFLOADS = ("none", "model", "sequential")


def default_size(pipe: Any, family: Family | None) -> int:
    """The pipeline's own default image side in px: its UNet's sample size for SD 1.x/2.x and SDXL (512, 768,
    1024), its default_sample_size where it has one, else 1024 for the newer families and 512 otherwise."""
    vsf = latent_space(pipe).factor
    unet = getattr(pipe, "unet", None)
    if unet is not None and getattr(unet.config, "sample_size", None):
        return int(unet.config.sample_size) * vsf
    own = getattr(pipe, "default_sample_size", None)
    if isinstance(own, int) and own > 0:
        return own * vsf
    return 1024 if family in ("sdxl", "sd3", "flux1", "flux2") else 512


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
        pipe, family = _demo(tdtype)
        size, synthetic, note = DEMO_SIZE, False, DEMO_NOTE
    elif name in PRESETS:
        pipe, family, tiny, size = build_preset(name, seed)
        kind = "madebyollin" if tiny is not None else "none"  # Mochi has no published TAE
        synthetic, frames, fps = True, PRESETS[name].num_frames, PRESETS[name].fps
    elif name.startswith("synthetic:"):
        pipe, family, tiny, size = _build_synthetic(name, seed)
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
    if tdtype != torch.float32:
        pipe.to(dtype=tdtype)
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
        tiny.to(dev, tdtype).eval().requires_grad_(False)
    return Model(name=name, pipe=pipe, family=family, synthetic=synthetic, taesd=tiny, taesd_kind=kind,
                 device=dev, dtype=tdtype, default_size=size, load_s=time.perf_counter() - t0, offload=offload,
                 channels_last=channels_last, note=note, latent_rgb=own_rgb,
                 prompt=DEMO_PROMPT if name == "demo" else "", guidance=DEMO_GUIDANCE if name == "demo" else None,
                 num_frames=frames, fps=fps)

"""Latent spaces: what the step callback's latents are, and how they become what a TAE, latent2rgb or the
pipeline's own VAE takes.

A latent space is read from the pipeline's VAE (its class and config: channels, scaling_factor, shift_factor,
latents_mean / latents_std, batch-norm statistics), the pipeline's spatial compression (vae_scale_factor) and
how its step callback hands the latents over, never from a list of pipeline classes. So img2img, inpaint,
ControlNet, PAG and edit variants read the same as their family's txt2img pipeline, and a VAE of an unusual
width is an unnamed latent space, previewed with fitted latent2rgb factors (fit.py) rather than refused.

Three views of the same step's latents:

- callback: what callback_on_step_end gets. spatial: (B, C, h, w) (SD1.5, SDXL, SD3, Z-Image, HiDream, Sana,
  Lumina 2, ...). packed: 2x2 patches as a sequence, (B, h/2 * w/2, 4C), unpacked by the pipeline class's own
  static `_unpack_latents(latents, height, width, vae_scale_factor)` (FLUX.1 and its Fill, Kontext and
  ControlNet variants, Chroma, Qwen-Image, whose unpacking gives (B, C, 1, h, w) for its Wan-style VAE).
  flux2: patchified and normalised by the VAE's batch-norm statistics, (B, h/2 * w/2, 4 * 32).
- tae: the model's own latents, unpacked to (B, C, h, w), in [-3, 3] or so. madebyollin's TAEs and ComfyUI's
  latent2rgb factors take these. ComfyUI (latent_preview.py) hands both the sampler's x0, which is in model
  space; used as a VAE, a TAE decodes decoder((x - vae_shift) * vae_scale) with the family's shift and scale
  (nodes.py, VAELoader.load_taesd: taesd3 1.5305/0.0609, taef1 0.3611/0.1159), model space again. ComfyUI's
  FLUX.2 VAE applies the batch norm itself (comfy/sd.py, batch_norm_latent), so its latents are the
  normalised ones, and its TAEF2 decoder (comfy/taesd/taesd.py, DecoderFlux2) only unpatchifies them.
- vae: what the pipeline's final decode hands vae.decode, unscaled exactly as it does it (UNSCALES).

h and w are the image size over the VAE's factor; all shapes assume the pipeline's own rounding of height and
width (to multiples of 2 * factor for packed latents).
"""
from __future__ import annotations

import functools
import inspect
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

import torch

# Known families: a name, ComfyUI's latent2rgb factors and madebyollin's TAE. Any other space is unnamed.
Family = Literal["sd15", "sdxl", "sd3", "flux1", "flux2"]
FAMILIES: tuple[Family, ...] = ("sd15", "sdxl", "sd3", "flux1", "flux2")
CHANNELS: dict[Family, int] = {"sd15": 4, "sdxl": 4, "sd3": 16, "flux1": 16, "flux2": 32}
Packing = Literal["spatial", "packed", "flux2"]
Unscale = Literal["scale", "scale_shift", "mean_std", "inv_std", "batch_norm", "none"]
# What each pipeline's final decode does with the last latents (diffusers 0.42.1), as the README names it:
UNSCALES: dict[Unscale, str] = {
    # StableDiffusion*, Kolors, Sana, AuraFlow, HunyuanDiT, CogView: a VAE without a shift_factor
    "scale": "latents / scaling_factor",
    # SD3, FLUX.1, Chroma, Lumina 2, Z-Image, HiDream: a VAE with a shift_factor
    "scale_shift": "latents / scaling_factor + shift_factor",
    # SDXL pipelines with a VAE that publishes latents_mean / latents_std (Playground v2.5)
    "mean_std": "latents * latents_std / scaling_factor + latents_mean",
    # Qwen-Image (Wan 2.1's VAE, no scaling_factor): latents_std = 1 / std, then latents / latents_std + mean
    "inv_std": "latents / (1 / latents_std) + latents_mean",
    # FLUX.2 (AutoencoderKLFlux2)
    "batch_norm": "latents * sqrt(bn.running_var + batch_norm_eps) + bn.running_mean, then unpatchify",
    # Kandinsky's MoVQ: decoded as they are, with force_not_quantize=True
    "none": "latents as they are",
}
# (callback latents, image height px, image width px) -> latents
Convert = Callable[[torch.Tensor, int, int], torch.Tensor]
Unpack = Callable[[torch.Tensor, int, int, int], torch.Tensor]  # the pipeline's _unpack_latents

SDXL_SCALE = 0.13025  # the scale taesdxl was distilled on: SDXL's VAE config, scaling_factor
SD15_SCALE = 0.18215


class FamilyError(ValueError):
    """A pipeline that previewlab cannot preview; one line a person can act on."""


def constant(values: Any, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """A small constant on the device, built once. On CUDA it goes through pinned memory without blocking:
    a plain torch.tensor(..., device=cuda) waits for the whole queue, a hidden sync. A tensor already on the
    device (a VAE's batch-norm buffer) is cast and copied there. Devices compare by type, then by index where
    `device` names one: a buffer on cuda:0 is on torch.device("cuda"), and the host copy would block."""
    if isinstance(values, torch.Tensor) and values.device.type == device.type:
        same = device.index is None or values.device.index == device.index
        return values.detach().to(dtype, copy=True) if same else values.detach().to(device, dtype, copy=True)
    t = torch.as_tensor(values).detach().to("cpu", dtype)
    if device.type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


def unpatchify(z: torch.Tensor) -> torch.Tensor:
    """(B, 4C, h, w) -> (B, C, 2h, 2w); the inverse of the 2x2 patchify, as Flux2Pipeline._unpatchify_latents
    (diffusers 0.42.1, pipelines/flux2/pipeline_flux2.py) and ComfyUI's latent_rgb_factors_reshape do it."""
    b, c, h, w = z.shape
    return z.reshape(b, c // 4, 2, 2, h, w).permute(0, 1, 4, 2, 5, 3).reshape(b, c // 4, h * 2, w * 2)


def _flux2_unpack(z: torch.Tensor, height: int, width: int, vae_scale_factor: int) -> torch.Tensor:
    """Flux2Pipeline._unpack_latents_with_ids: its latent ids are (0, row, column, 0) in row-major order
    (_prepare_latent_ids, a cartesian product), so the scatter is a reshape: (B, N, 4C) -> (B, 4C, h/2, w/2)."""
    b, _, c = z.shape
    f2 = vae_scale_factor * 2
    return z.reshape(b, int(height) // f2, int(width) // f2, c).permute(0, 3, 1, 2)


@dataclass(frozen=True)
class LatentSpace:
    """One pipeline's latent space, as read from its VAE and its step callback.

    family: a known family's name, or None (unnamed: described by what was read). channels: latent channels as
    the VAE sees them; factor: image pixels per latent pixel (the pipeline's vae_scale_factor); packing: how
    the callback hands the latents over; unscale: what the final decode does to them (UNSCALES); frames: the
    VAE takes (B, C, T, h, w) and the image is frame 0; quantized: a VQ model, decoded unquantized; unpack:
    the pipeline class's own _unpack_latents (packed latents).
    """
    family: Family | None
    channels: int
    factor: int
    packing: Packing
    unscale: Unscale
    vae: str
    frames: bool = False
    quantized: bool = False
    video: bool = False          # the pipeline makes a clip: previews show its first latent frame
    frames_first: bool = False   # video latents come (B, T, C, h, w) (CogVideoX), not (B, C, T, h, w)
    pipeline: str = ""
    unpack: Unpack | None = field(default=None, compare=False, repr=False)

    @property
    def name(self) -> str:
        return self.family or "unnamed"

    def describe(self) -> str:
        """One line: "flux1: 16 channels at 1/8, packed 2x2 (FluxPipeline._unpack_latents), decoded as
        latents / scaling_factor + shift_factor by AutoencoderKL"."""
        how = {"spatial": "spatial (B, C, h, w)", "flux2": "packed 2x2 and batch-normalised (FLUX.2)",
               "packed": f"packed 2x2 ({self.pipeline}._unpack_latents)"}[self.packing]
        if self.video:
            how = f"a clip {'(B, T, C, h, w)' if self.frames_first else '(B, C, T, h, w)'}, previewed by its first latent frame"
        frame = ", frame 0 of (B, C, T, h, w)" if self.frames and not self.video else ""
        return (f"{self.name}: {self.channels} channels at 1/{self.factor}, {how}{frame}, decoded as "
                f"{UNSCALES[self.unscale]} by {self.vae}")

    def callback_shape(self, height: int, width: int, batch: int = 1) -> tuple[int, ...]:
        """The shape of the callback's latents for an image of height x width pixels."""
        h, w = height // self.factor, width // self.factor
        if self.packing != "spatial":
            return (batch, (h // 2) * (w // 2), 4 * self.channels)
        return (batch, self.channels, h, w)

    def _unpack(self, vae_scale_factor: int) -> Convert:
        """Callback latents -> (B, C', h', w') in model space, before any unscaling: FLUX.2's 128 normalised
        channels at 1/16, the others' own channels at 1/factor."""
        if self.packing == "flux2":
            return lambda z, height, width: _flux2_unpack(z, height, width, vae_scale_factor)
        unpack = self.unpack
        if self.packing == "packed" and unpack is not None:
            own = unpack
            if self.frames:  # Qwen-Image: (B, C, 1, h, w)
                return lambda z, height, width: own(z, height, width, vae_scale_factor)[:, :, 0]
            return lambda z, height, width: own(z, height, width, vae_scale_factor)
        what, c, first = (f"{self.pipeline}: " if self.pipeline else ""), self.channels, self.frames_first

        def spatial(z: torch.Tensor, height: int, width: int) -> torch.Tensor:
            if z.dim() == 4:  # shape checks only, no device read
                return z
            if self.video and z.dim() == 5:  # a clip: its first latent frame, (B, C, h, w)
                return z[:, 0] if first else z[:, :, 0]
            if z.dim() == 5 and z.shape[1] == 1 and z.shape[-1] >= c:
                # one frame, channels last, conditioning channels after the latent ones: Kandinsky 5's image
                # pipelines hand (B, 1, h, w, C'), and keep [..., :C] for the decode
                return z[:, 0, :, :, :c].permute(0, 3, 1, 2)
            if z.dim() == 5 and z.shape[2] == 1 and z.shape[1] == c:  # one frame of (B, C, T, h, w)
                return z[:, :, 0]
            raise FamilyError(f"{what}its step callback hands latents of shape {tuple(z.shape)}, not (B, C, h, w), "
                              "and the pipeline has no _unpack_latents(latents, height, width, vae_scale_factor) "
                              "to unpack them")
        return spatial

    def tae_input(self, pipe: Any, device: torch.device, dtype: torch.dtype) -> Convert:
        """Callback latents -> (B, channels, h, w) in the model's space: what madebyollin's TAE decoders and the
        latent2rgb factors take. Constants are built here, once; the closure only reshapes and does arithmetic."""
        unpack = self._unpack(vae_scale_factor(pipe))
        if self.packing == "flux2":
            return lambda z, height, width: unpatchify(unpack(z, height, width))
        if self.family == "sdxl" and self.unscale == "mean_std":
            # a VAE with published latent statistics (Playground v2.5): taesdxl knows SDXL's plain scale only
            to_vae = self.vae_input(pipe, device, dtype)
            return lambda z, height, width: to_vae(z, height, width) * SDXL_SCALE
        return unpack

    def vae_input(self, pipe: Any, device: torch.device, dtype: torch.dtype) -> Convert:
        """Callback latents -> exactly what the pipeline's final decode hands vae.decode: (B, channels, h, w),
        or (B, channels, 1, h, w) for a VAE that takes frames.

        dtype: the latents' dtype (the transformer's or UNet's); the arithmetic runs in it, as in the pipeline.
        ZImagePipeline, CogView4 and AuraFlow cast to the VAE's dtype before unscaling: for them, pass the
        VAE's dtype and cast the latents to it first (decoders.vae_decoder does).
        """
        vae = vae_of(pipe)
        cfg = vae.config
        unpack = self._unpack(vae_scale_factor(pipe))
        to5 = (lambda z: z.unsqueeze(2)) if self.frames else (lambda z: z)
        scale = float(getattr(cfg, "scaling_factor", None) or 1.0)
        if self.unscale == "batch_norm":
            bn = vae.bn
            mean = constant(bn.running_mean.view(1, -1, 1, 1), device, dtype)
            # as the pipeline: sqrt in the buffers' own dtype, then cast
            std = constant(torch.sqrt(bn.running_var.view(1, -1, 1, 1) + cfg.batch_norm_eps), device, dtype)
            return lambda z, height, width: unpatchify(unpack(z, height, width) * std + mean)
        if self.unscale == "scale_shift":
            shift = float(cfg.shift_factor)
            return lambda z, height, width: to5(unpack(z, height, width) / scale + shift)
        if self.unscale in ("mean_std", "inv_std"):
            m = constant(list(cfg.latents_mean), device, dtype).view(1, -1, 1, 1)
            if self.unscale == "inv_std":  # Qwen-Image: 1.0 / tensor(std) in float32, then cast, then divide
                inv = constant(1.0 / torch.tensor(list(cfg.latents_std)), device, dtype).view(1, -1, 1, 1)
                return lambda z, height, width: to5(unpack(z, height, width) / inv + m)
            s = constant(list(cfg.latents_std), device, dtype).view(1, -1, 1, 1)
            return lambda z, height, width: to5(unpack(z, height, width) * s / scale + m)
        if self.unscale == "none":
            return lambda z, height, width: to5(unpack(z, height, width))
        return lambda z, height, width: to5(unpack(z, height, width) / scale)


def vae_of(pipe: Any) -> Any:
    """The pipeline's image decoder: its `vae`, or Kandinsky's `movq`; None when it has neither."""
    return getattr(pipe, "vae", None) or getattr(pipe, "movq", None)


def vae_scale_factor(pipe: Any) -> int:
    """Image pixels per latent pixel: the pipeline's own vae_scale_factor (vae_scale_factor_spatial for most video
    pipelines, vae_spatial_scale_factor for Mochi, movq_scale_factor for Kandinsky), else 2 per VAE stage after
    the first."""
    for name in ("vae_scale_factor", "vae_scale_factor_spatial", "vae_spatial_scale_factor", "movq_scale_factor"):
        value = getattr(pipe, name, None)
        if isinstance(value, int) and value > 0:
            return value
    widths = getattr(vae_of(pipe).config, "block_out_channels", None) or (0,)
    return 2 ** (len(widths) - 1)


def _unpack_of(cls: type) -> tuple[Unpack | None, str | None]:
    """The class's own static _unpack_latents when it takes (latents, height, width, vae_scale_factor);
    (None, its signature) when it has one previewlab cannot call; (None, None) when it has none."""
    own = inspect.getattr_static(cls, "_unpack_latents", None)
    if own is None:
        return None, None
    fn = own.__func__ if isinstance(own, staticmethod) else None
    params = list(inspect.signature(fn).parameters) if fn is not None else []
    if params == ["latents", "height", "width", "vae_scale_factor"]:
        return fn, None
    shown = ", ".join(params) if fn is not None else "self, ..."
    return None, f"_unpack_latents({shown})"


def refusal(pipe: Any) -> str | None:
    """Why previewlab cannot preview this pipeline, in one line; None when it can."""
    cls = type(pipe)
    name = cls.__name__
    call = getattr(cls, "__call__", None)
    params = inspect.signature(call).parameters if callable(call) and cls is not object else {}
    if "callback_on_step_end" not in params:
        return (f"{name} has no step callback: diffusers gives its __call__ no callback_on_step_end, so no "
                "preview can be taken from it")
    inputs = list(getattr(pipe, "_callback_tensor_inputs", None) or [])
    if "latents" not in inputs:
        return (f"{name}'s step callback does not hand over latents (it offers {', '.join(inputs) or 'nothing'}), "
                "so there is nothing to preview")
    vae = vae_of(pipe)
    cfg = getattr(vae, "config", None) or {}
    sound = [k for k in ("audio_channels", "sample_rate", "sampling_rate") if k in cfg]
    if getattr(pipe, "vocoder", None) is not None or sound:
        what = "it has a vocoder" if getattr(pipe, "vocoder", None) is not None else f"its VAE has {sound[0]}"
        return f"{name} makes audio ({what}): previewlab previews images, and audio has none to show"
    if vae is None:
        return f"{name} has no VAE (no vae or movq component): previews and the final decode need one"
    _, odd = _unpack_of(cls)
    if odd is not None:
        return (f"{name} packs its latents and unpacks them with {odd}, which needs more than the image size: "
                "previewlab cannot unpack them")
    return None


@functools.lru_cache(maxsize=None)
def _source(cls: type) -> str:
    """The source of the modules that define a pipeline class and its bases ("" where none is readable)."""
    parts = []
    for base in cls.__mro__:
        module = sys.modules.get(base.__module__)
        if module is None or not base.__module__.startswith("diffusers.pipelines."):
            continue
        try:
            parts.append(inspect.getsource(module))
        except (OSError, TypeError):
            continue
    return "\n".join(parts)


def _applies(cls: type, name: str) -> bool:
    """Whether the pipeline's own code can read the VAE's config value `name`. A VAE may publish a shift or
    statistics that a pipeline never applies (Kandinsky 5 decodes FLUX.1's VAE with / scaling_factor alone): a
    pipeline whose modules never name the value cannot be applying it. Unreadable source: assume it does."""
    text = _source(cls)
    return not text or name in text


def _frames_first(cls: type) -> bool:
    """Whether a video pipeline's latents are (B, T, C, h, w): the shape its own prepare_latents builds names the
    frames before the channels (CogVideoX's `(batch_size, num_frames, num_channels_latents, ...)`)."""
    try:
        text = inspect.getsource(getattr(cls, "prepare_latents"))
    except (AttributeError, OSError, TypeError):
        return False
    at = text.find("shape = (")
    line = text[at:at + 300] if at >= 0 else ""  # the tuple's first lines name its axes in order
    c, t = line.find("num_channels_latents"), line.find("frames")
    return 0 <= t < c


def _unscale(pipe: Any, vae: Any, cfg: Any) -> Unscale:
    cls = type(pipe)
    if getattr(vae, "bn", None) is not None:
        return "batch_norm"
    if type(vae).__name__ == "VQModel":
        return "none"
    if (getattr(cfg, "latents_mean", None) is not None and getattr(cfg, "latents_std", None) is not None
            and _applies(cls, "latents_mean")):
        return "mean_std" if getattr(cfg, "scaling_factor", None) is not None else "inv_std"
    if getattr(cfg, "shift_factor", None) is not None and _applies(cls, "shift_factor"):
        return "scale_shift"
    return "scale" if getattr(cfg, "scaling_factor", None) is not None else "none"


def _factor(pipe: Any, vae: Any, packing: Packing) -> int:
    """Image pixels per latent pixel once unpacked. A packing pipeline may fold its 2x2 patches into its own
    vae_scale_factor (Bria's is 16 over a VAE of factor 8): an AutoencoderKL's own stages say the real one."""
    widths = getattr(vae.config, "block_out_channels", None)
    if packing == "packed" and type(vae).__name__ == "AutoencoderKL" and widths:
        return 2 ** (len(widths) - 1)
    return vae_scale_factor(pipe)


def _family(pipe: Any, vae: Any, channels: int, packing: Packing, unscale: Unscale) -> Family | None:
    """A known family when the VAE is one of theirs: its class, channels and way of unscaling, with the
    pipeline's scaling constants or its denoiser as the tie-breaker between two families of one VAE shape."""
    cfg = vae.config
    if packing == "flux2":
        return "flux2" if channels == CHANNELS["flux2"] else None
    if type(vae).__name__ != "AutoencoderKL":
        return None
    scale = float(getattr(cfg, "scaling_factor", 0.0) or 0.0)
    if channels == 4 and unscale == "scale" or channels == 4 and unscale == "mean_std":
        unet = getattr(pipe, "unet", None)
        text_time = getattr(getattr(unet, "config", None), "addition_embed_type", None) == "text_time"
        return "sdxl" if text_time or unscale == "mean_std" or abs(scale - SDXL_SCALE) < 1e-6 else "sd15"
    if channels == 16 and unscale == "scale_shift":
        shift = float(cfg.shift_factor)
        if packing == "packed" or abs(shift - 0.1159) < 1e-6:
            return "flux1"
        transformer = type(getattr(pipe, "transformer", None)).__name__
        return "sd3" if abs(shift - 0.0609) < 1e-6 or transformer.startswith("SD3") else "flux1"
    return None


def latent_space(pipe: Any) -> LatentSpace:
    """The latent space of a diffusers pipeline, read from its VAE and its step callback. Raises FamilyError
    (refusal) for a pipeline that gives nothing to preview."""
    why = refusal(pipe)
    if why is not None:
        raise FamilyError(why)
    vae = vae_of(pipe)
    cfg = vae.config
    channels = int(getattr(cfg, "latent_channels", 0) or getattr(cfg, "z_dim", 0) or 0)
    if channels <= 0:
        raise FamilyError(f"{type(pipe).__name__}: its {type(vae).__name__} config names no latent_channels or "
                          "z_dim, so its latents cannot be read")
    unpack, _ = _unpack_of(type(pipe))
    unscale = _unscale(pipe, vae, cfg)
    packing: Packing = "flux2" if unscale == "batch_norm" else "packed" if unpack is not None else "spatial"
    # a VAE with 3-D convolutions takes (B, C, T, h, w) (Wan's, Qwen-Image's, HunyuanVideo's, CogVideoX's, ...)
    frames = any(isinstance(m, torch.nn.Conv3d) for m in vae.modules())
    video = getattr(pipe, "video_processor", None) is not None
    return LatentSpace(family=_family(pipe, vae, channels, packing, unscale), channels=channels,
                       factor=_factor(pipe, vae, packing), packing=packing, unscale=unscale, vae=type(vae).__name__,
                       frames=frames, quantized=type(vae).__name__ == "VQModel", pipeline=type(pipe).__name__,
                       unpack=unpack, video=video, frames_first=video and _frames_first(type(pipe)))


def detect_family(pipe: Any) -> Family | None:
    """The known family of a pipeline's latent space, None for an unnamed one. Raises FamilyError."""
    return latent_space(pipe).family


def to_vae_space(latents: torch.Tensor, pipe: Any, height: int, width: int) -> torch.Tensor:
    """One conversion, callback latents -> vae.decode's input. Builds its constants: not for the step loop."""
    space = latent_space(pipe)
    return space.vae_input(pipe, latents.device, latents.dtype)(latents, height, width)


def to_tae_space(latents: torch.Tensor, pipe: Any, height: int, width: int) -> torch.Tensor:
    """One conversion, callback latents -> a TAE's (and latent2rgb's) input. Not for the step loop."""
    space = latent_space(pipe)
    return space.tae_input(pipe, latents.device, latents.dtype)(latents, height, width)

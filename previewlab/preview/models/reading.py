"""Reading a pipeline's latent space: from its VAE (class, config, 3-D convolutions), its spatial factor, its
step callback's layout and its own code (the unpack it defines, the values its modules apply, the shape its
prepare_latents builds), never from a list of pipeline classes; and why a pipeline cannot be previewed.
"""
from __future__ import annotations

import functools
import inspect
import sys
from typing import Any, Callable

import torch

from previewlab.preview.models.families import (CHANNELS, IMAGE_VAES, SDXL_SCALE, VIDEO_VAES, Family, FamilyError,
                                                LatentSpace, Packing, vae_of, vae_scale_factor)
from previewlab.preview.models.unscaling import Unscale


# The static _unpack_latents signatures previewlab can call, and the packing each means: FLUX.1's 2x2 patches
# (the image size says everything), LTX-Video's tokens (the frame count follows from the sequence and the size)
UNPACKS: dict[tuple[str, ...], Packing] = {
    ("latents", "height", "width", "vae_scale_factor"): "packed",
    ("latents", "num_frames", "height", "width", "patch_size", "patch_size_t"): "ltx",
}


# what else a packed (FLUX.1-like) _unpack_latents may ask for beyond the latents, the image size and the scale
# factor, and where the pipeline keeps it: its patch size, on itself (Krea 2) or its transformer's config
# (NucleusMoE), which its final decode passes
def _patch_size(pipe: Any) -> Any:
    own = getattr(pipe, "patch_size", None)
    return own if isinstance(own, int) else getattr(getattr(getattr(pipe, "transformer", None), "config", None),
                                                    "patch_size", None)


def _unpack_of(pipe: Any) -> tuple[Callable[..., torch.Tensor] | None, Packing | None, str | None]:
    """The pipeline's own _unpack_latents and its packing when previewlab can call it: one of UNPACKS' static
    signatures, or a packed one (a method too) that also takes the patch size the pipeline keeps; (None, None,
    its signature) when it cannot; (None, None, None) when it has none."""
    cls = type(pipe)
    own = inspect.getattr_static(cls, "_unpack_latents", None)
    if own is None:
        return None, None, None
    fn = own.__func__ if isinstance(own, staticmethod) else own if inspect.isfunction(own) else None
    params = tuple(inspect.signature(fn).parameters) if fn is not None else ()
    if isinstance(own, staticmethod) and params in UNPACKS:
        return fn, UNPACKS[params], None
    bound = getattr(pipe, "_unpack_latents", None)
    args = params[1:] if not isinstance(own, staticmethod) else params
    patch = _patch_size(pipe)
    packed = {"latents", "height", "width"} <= set(args) <= {"latents", "height", "width", "vae_scale_factor",
                                                             "patch_size"}
    if bound is not None and args and args[0] == "latents" and packed and (patch is not None or "patch_size" not in args):
        call = bound

        def unpack(z: torch.Tensor, height: int, width: int, vae_scale_factor: int) -> torch.Tensor:
            known = {"height": height, "width": width, "vae_scale_factor": vae_scale_factor, "patch_size": patch}
            return call(z, *(known[a] for a in args[1:]))
        return unpack, "packed", None
    return None, None, f"_unpack_latents({', '.join(params) if fn is not None else 'self, ...'})"


def _modular_unpack(pipe: Any) -> tuple[Callable[..., torch.Tensor] | None, Packing | None]:
    """A Modular pipeline's own unpacking of packed latents: a component's `unpack_latents` (Qwen-Image's and
    LTX-Video's pachifier), else a module-level `_unpack_latents` of its package (FLUX's, LTX-2's), when it takes
    one of UNPACKS' signatures, or LTX's without the patch sizes (a pachifier knows its own). (None, None) for a
    pipeline whose latents are not packed."""
    found: list[Callable[..., torch.Tensor]] = []
    for name in getattr(pipe, "components", {}) or {}:
        part = getattr(pipe, name, None)
        method = getattr(part, "unpack_latents", None)
        if callable(method) and not isinstance(part, torch.nn.Module):
            found.append(method)
    package = type(pipe).__module__.rsplit(".", 1)[0]
    for module_name, module in sorted(sys.modules.items()):
        if module is not None and module_name.startswith(package + "."):
            fn = vars(module).get("_unpack_latents")
            if callable(fn):
                found.append(fn)
    patch = _patch_size(pipe)
    for fn in found:
        params = tuple(p for p in inspect.signature(fn).parameters if p != "self")
        if params in UNPACKS:
            return fn, UNPACKS[params]
        if patch is not None and set(params) == {"latents", "height", "width", "vae_scale_factor", "patch_size"}:
            # a packed unpack that also takes the patch size the pipeline keeps (Krea 2's decoders._unpack_latents:
            # (B, h/p * w/p, C * p * p) -> (B, C, 1, h, w)), its arguments by name
            own_packed = fn

            def unpack(z: torch.Tensor, height: int, width: int, vae_scale_factor: int) -> torch.Tensor:
                return own_packed(z, height=height, width=width, patch_size=patch,
                                  vae_scale_factor=vae_scale_factor)
            return unpack, "packed"
        if params == ("latents", "num_frames", "height", "width"):
            own = fn
            return (lambda z, f, h, w, p=1, pt=1: own(z, f, h, w)), "ltx"
    return None, None


def makes_video(pipe: Any) -> bool:
    """The pipeline makes a clip: it has a video processor (LTX-2 HDR's is hdr_video_processor)."""
    return any(getattr(pipe, name, None) is not None for name in ("video_processor", "hdr_video_processor"))


def refusal(pipe: Any) -> str | None:
    """Why previewlab cannot preview this pipeline, in one line; None when it can. A step comes from its step
    callback, its scheduler's step or a Modular loop block (preview/source/steps.py): only a pipeline with none of them
    has no step to preview from."""
    from previewlab.preview.source.sources import SourceError, source_of

    cls = type(pipe)
    name = cls.__name__
    for attr, part in inner_pipelines(pipe):
        why = refusal(part) if "prior" not in attr else None
        if why is not None:
            # it denoises in a pipeline of its own that cannot be previewed (VisualCloze's generation_pipe, which
            # the step callback is handed to); a prior makes embeddings, not an image, so a combined pipeline
            # whose decoder can be previewed (Kandinsky's) is
            return f"{name} denoises in its {attr}: {why}"
    try:
        source_of(pipe)
    except SourceError as e:
        return str(e)
    vae = vae_of(pipe)
    cfg = getattr(vae, "config", None) or {}
    sound = [k for k in ("audio_channels", "sample_rate", "sampling_rate") if k in cfg]
    video = makes_video(pipe)  # LTX-2: a clip, its audio beside it
    if getattr(pipe, "vocoder", None) is not None and not video or sound:
        what = f"its VAE has {sound[0]}" if sound else "it has a vocoder and no video"
        return f"{name} makes audio ({what}): previewlab previews images, and audio has none to show"
    if vae is None and not _pixel(pipe) and _second_stage(pipe) is None:
        return (f"{name} has no VAE (no vae, movq or vqvae component) and does not denoise in pixel space: previews "
                "need one or the other")
    _, _, odd = _unpack_of(pipe)
    if odd is not None:
        return (f"{name} packs its latents and unpacks them with {odd}, which needs more than the image size: "
                "previewlab cannot unpack them")
    return None


def _second_stage(pipe: Any) -> tuple[str, int, Family | None, str] | None:
    """Where a pipeline has no VAE but a second diffusion makes the image from its latents: (the model that made
    them or takes them, their channels, their family, what the page says of them); None otherwise.
    - LTX-2.5's `diffusion_decoder` takes LTX-2.3's latents (madebyollin's taeltx2_3 "LTX-2.3, also LTX-2.5");
    - Stable Cascade's prior (a StableCascadeUNet of 16 channels) makes stage C latents, which its decoder pipeline
      (stage B) turns into the image's."""
    decoder = getattr(pipe, "diffusion_decoder", None)
    if decoder is not None:
        kind = type(decoder).__name__
        channels = int(getattr(decoder.config, "latent_channels", 0) or 0)
        family: Family | None = "ltx2_3" if kind == "LTX2VideoDiffusionDecoderModel" and channels == 128 else None
        return kind, channels, family, (f"the first stage's latents: {kind}, a diffusion model, makes the final image "
                                        "from them, so previews show them by latent2rgb or the family's TAE")
    prior = getattr(pipe, "prior", None)
    if type(prior).__name__ == "StableCascadeUNet":
        channels = int(getattr(getattr(prior, "config", None), "out_channels", 0) or 0)
        return "StableCascadeUNet", channels, "cascade_c" if channels == 16 else None, (
            "Stable Cascade's stage C latents: its decoder pipeline (stage B) makes the image from them, so previews "
            "show them by latent2rgb")
    return None


def _staged_space(pipe: Any, kind: str, channels: int, family: Family | None, stage: str) -> LatentSpace:
    """The latent space a second stage takes (_second_stage): the pipeline's own spatial and temporal factors and
    unpacking."""
    from previewlab.preview.source.sources import is_modular

    unpack, packed, _ = _unpack_of(pipe)
    if unpack is None and is_modular(pipe):
        unpack, packed = _modular_unpack(pipe)
    packing: Packing = packed or "spatial"
    patch, patch_t = _patches(pipe) if packing == "ltx" else (1, 1)
    video = makes_video(pipe) or packing == "ltx"
    return LatentSpace(family=family, channels=channels, factor=vae_scale_factor(pipe), packing=packing,
                       unscale="none", vae=kind, pipeline=type(pipe).__name__,
                       unpack=unpack if packing == "packed" else None, unpack_clip=unpack if packing == "ltx" else None,
                       patch=patch, patch_t=patch_t, video=video, temporal=_temporal(pipe) if video else 1,
                       stage=stage)


def inner_pipelines(pipe: Any) -> list[tuple[str, Any]]:
    """The pipelines a pipeline keeps as attributes and runs its denoising in (VisualClozePipeline's
    generation_pipe; Kandinsky's and Stable Cascade's combined pipelines' prior_pipe and decoder_pipe)."""
    from diffusers import DiffusionPipeline

    own = getattr(pipe, "__dict__", {})
    return [(k, v) for k, v in own.items() if isinstance(v, DiffusionPipeline) and v is not pipe]


def denoiser_config(pipe: Any) -> Any:
    model = getattr(pipe, "unet", None) or getattr(pipe, "transformer", None)
    return getattr(model, "config", None)


def _pixel(pipe: Any) -> bool:
    """The pipeline denoises images, not latents: no VAE, and a UNet or transformer that takes an RGB image (IF's
    super-resolution stages take 6 channels: the image and the low-resolution one beside it) and makes it (or 6: a
    learned variance beside it, which the scheduler splits off). A transformer whose config names no out_channels
    makes what it takes (PRX Pixel's)."""
    cfg = denoiser_config(pipe)
    taken = getattr(cfg, "in_channels", None)
    return cfg is not None and taken in (3, 6) and getattr(cfg, "out_channels", None) in (3, 6, None)


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


def _temporal(pipe: Any) -> int:
    """A video pipeline's frames per latent frame after the first, by the names its pipelines give it
    (vae_scale_factor_temporal: Wan, HunyuanVideo, CogVideoX; vae_temporal_scale_factor: Mochi;
    vae_temporal_compression_ratio: LTX); 1 when it names none (AnimateDiff's 2-D VAE decodes frame by frame)."""
    for name in ("vae_scale_factor_temporal", "vae_temporal_scale_factor", "vae_temporal_compression_ratio"):
        value = getattr(pipe, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return 1


def _unscale(pipe: Any, vae: Any, cfg: Any) -> Unscale:
    cls = type(pipe)
    if getattr(vae, "bn", None) is not None:
        return "batch_norm"
    if type(vae).__name__ == "VQModel":
        return "none"
    if type(vae).__name__ == "PaellaVQModel":
        return "vq_scale"
    if (getattr(cfg, "latents_mean", None) is not None and getattr(cfg, "latents_std", None) is not None
            and _applies(cls, "latents_mean")):
        return "mean_std" if getattr(cfg, "scaling_factor", None) is not None else "inv_std"
    # LTX-Video's VAE keeps its statistics as buffers (registered, saved with the weights), not in its config
    # (named_buffers, not getattr: a diffusers model answers getattr of a config name with a FutureWarning)
    buffers = dict(vae.named_buffers(recurse=False)) if isinstance(vae, torch.nn.Module) else {}
    if ("latents_mean" in buffers and "latents_std" in buffers
            and getattr(cfg, "scaling_factor", None) is not None and _applies(cls, "vae.latents_mean")):
        return "mean_std_buffers"
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
    known = VIDEO_VAES.get((type(vae).__name__, channels)) or IMAGE_VAES.get((type(vae).__name__, channels))
    if known == "ltx2" and _ltx2_3(pipe):
        return "ltx2_3"
    if known is not None:
        return known
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


def _ltx2_3(pipe: Any) -> bool:
    """LTX-2.3 (and 2.5) against LTX-2: one VAE class, one latent shape, another VAE's weights (madebyollin's
    taeltx2_3 against taeltx_2). The transformer says which: LTX-2.3's modulates its cross-attention by the
    prompt (cross_attn_mod, audio_cross_attn_mod in its config), LTX-2.0's does not."""
    cfg = denoiser_config(pipe)
    return bool(getattr(cfg, "cross_attn_mod", False) or getattr(cfg, "audio_cross_attn_mod", False))


def _takes(fn: Any, name: str) -> bool:
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _timestep(vae: Any) -> bool:
    """The VAE's decoder is conditioned on a timestep (LTX-Video 0.9.1 and later: timestep_conditioning), and its
    decode takes it as `temb`, as LTXPipeline hands it."""
    return bool(getattr(vae.config, "timestep_conditioning", False)) and _takes(getattr(vae, "decode", None), "temb")


def _patches(pipe: Any) -> tuple[int, int]:
    """LTX: (spatial, temporal) patch sizes of its transformer, by the names the pipeline passes its own
    _unpack_latents (1, 1 for LTX-Video 0.9)."""
    def size(name: str) -> int:
        value = getattr(pipe, name, 1)
        return value if isinstance(value, int) and value > 0 else 1

    return size("transformer_spatial_patch_size"), size("transformer_temporal_patch_size")


def latent_space(pipe: Any) -> LatentSpace:
    """The latent space of a diffusers pipeline, read from its VAE and its step callback. Raises FamilyError
    (refusal) for a pipeline that gives nothing to preview."""
    why = refusal(pipe)
    if why is not None:
        raise FamilyError(why)
    vae = vae_of(pipe)
    staged = _second_stage(pipe) if vae is None else None
    if staged is not None:
        return _staged_space(pipe, *staged)
    if vae is None:  # refusal() let it through: pixel space
        return LatentSpace(family=None, channels=3, factor=1, packing="spatial", unscale="none",
                           vae="none (pixel space)", pipeline=type(pipe).__name__, pixel=True,
                           video=makes_video(pipe))
    cfg = vae.config
    channels = int(getattr(cfg, "latent_channels", 0) or getattr(cfg, "z_dim", 0) or 0)
    if channels <= 0:
        raise FamilyError(f"{type(pipe).__name__}: its {type(vae).__name__} config names no latent_channels or "
                          "z_dim, so its latents cannot be read")
    from previewlab.preview.source.sources import is_modular

    unpack, packed, _ = _unpack_of(pipe)
    if unpack is None and is_modular(pipe):
        unpack, packed = _modular_unpack(pipe)
    unscale = _unscale(pipe, vae, cfg)
    packing: Packing = "flux2" if unscale == "batch_norm" else packed or "spatial"
    patch, patch_t = _patches(pipe) if packing == "ltx" else (1, 1)
    # a VAE with 3-D convolutions takes (B, C, T, h, w) (Wan's, Qwen-Image's, HunyuanVideo's, CogVideoX's, ...)
    # (SVD's temporal decoder has 3-D convolutions too, but takes frames as a batch with num_frames)
    frames = any(isinstance(m, torch.nn.Conv3d) for m in vae.modules()) and not _takes(vae.decode, "num_frames")
    video = makes_video(pipe)
    return LatentSpace(family=_family(pipe, vae, channels, packing, unscale), channels=channels,
                       factor=_factor(pipe, vae, packing), packing=packing, unscale=unscale, vae=type(vae).__name__,
                       frames=frames, quantized=type(vae).__name__ == "VQModel", pipeline=type(pipe).__name__,
                       unit=type(vae).__name__ == "PaellaVQModel",
                       unpack=unpack if packing == "packed" else None,
                       unpack_clip=unpack if packing == "ltx" else None, patch=patch, patch_t=patch_t,
                       timestep=_timestep(vae), video=video, frames_first=video and _frames_first(type(pipe)),
                       temporal=_temporal(pipe) if video else 1)


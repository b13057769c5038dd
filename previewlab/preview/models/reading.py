"""Reading a pipeline's latent space: from its VAE (class, config, 3-D convolutions), its spatial factor, its
step callback's layout and its own code (the unpack it defines: unpacks.py; the values its modules apply:
vae_reading.py; the shape its prepare_latents builds), never from a list of pipeline classes; and why a pipeline
cannot be previewed.
"""
from __future__ import annotations

import inspect
from typing import Any

import torch

from previewlab.preview.models.families import Family, FamilyError, vae_of, vae_scale_factor
from previewlab.preview.models.latent_spaces import LatentSpace, Packing
from previewlab.preview.models.unpacks import modular_unpack, patches, unpack_of
from previewlab.preview.models.vae_reading import denoiser_config, factor_of, family_of, unscale_of


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
    _, _, odd = unpack_of(pipe)
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

    unpack, packed, _ = unpack_of(pipe)
    if unpack is None and is_modular(pipe):
        unpack, packed = modular_unpack(pipe)
    packing: Packing = packed or "spatial"
    patch, patch_t = patches(pipe) if packing == "ltx" else (1, 1)
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


def _pixel(pipe: Any) -> bool:
    """The pipeline denoises images, not latents: no VAE, and a UNet or transformer that takes an RGB image (IF's
    super-resolution stages take 6 channels: the image and the low-resolution one beside it) and makes it (or 6: a
    learned variance beside it, which the scheduler splits off). A transformer whose config names no out_channels
    makes what it takes (PRX Pixel's)."""
    cfg = denoiser_config(pipe)
    taken = getattr(cfg, "in_channels", None)
    return cfg is not None and taken in (3, 6) and getattr(cfg, "out_channels", None) in (3, 6, None)


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


def _time_tile(vae: Any) -> int:
    """Latent frames a VAE decodes only in whole tiles of: AutoencoderKLAllegro's tiled decode (its only decode)
    takes tiles of kernel[0] frames, temporal_compression_ratio frames per latent frame (24 / 4 = 6); 1 for a
    VAE that decodes any number of latent frames."""
    kernel, ratio = getattr(vae, "kernel", None), getattr(vae.config, "temporal_compression_ratio", None)
    if not getattr(vae, "use_tiling", False) or not isinstance(kernel, tuple) or not kernel:
        return 1
    return max(1, int(kernel[0]) // int(ratio)) if isinstance(ratio, int) and ratio > 0 else 1


def _takes(fn: Any, name: str) -> bool:
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _timestep(vae: Any) -> bool:
    """The VAE's decoder is conditioned on a timestep (LTX-Video 0.9.1 and later: timestep_conditioning), and its
    decode takes it as `temb`, as LTXPipeline hands it."""
    return bool(getattr(vae.config, "timestep_conditioning", False)) and _takes(getattr(vae, "decode", None), "temb")


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

    unpack, packed, _ = unpack_of(pipe)
    if unpack is None and is_modular(pipe):
        unpack, packed = modular_unpack(pipe)
    unscale = unscale_of(pipe, vae, cfg)
    packing: Packing = "flux2" if unscale == "batch_norm" else packed or "spatial"
    patch, patch_t = patches(pipe) if packing == "ltx" else (1, 1)
    # a VAE with 3-D convolutions takes (B, C, T, h, w) (Wan's, Qwen-Image's, HunyuanVideo's, CogVideoX's, ...)
    # (SVD's temporal decoder has 3-D convolutions too, but takes frames as a batch with num_frames)
    frames = any(isinstance(m, torch.nn.Conv3d) for m in vae.modules()) and not _takes(vae.decode, "num_frames")
    video = makes_video(pipe)
    return LatentSpace(family=family_of(pipe, vae, channels, packing, unscale), channels=channels,
                       factor=factor_of(pipe, vae, packing), packing=packing, unscale=unscale, vae=type(vae).__name__,
                       frames=frames, quantized=type(vae).__name__ == "VQModel", pipeline=type(pipe).__name__,
                       unit=type(vae).__name__ == "PaellaVQModel",
                       unpack=unpack if packing == "packed" else None,
                       unpack_clip=unpack if packing == "ltx" else None, patch=patch, patch_t=patch_t,
                       timestep=_timestep(vae), video=video, frames_first=video and _frames_first(type(pipe)),
                       temporal=_temporal(pipe) if video else 1, tile_t=_time_tile(vae) if frames else 1)

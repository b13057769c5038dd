"""The known latent families: each one's name, latent channels and the VAE classes that mark it, the scales its
TAEs were distilled on; FamilyError, the one-line refusal of a pipeline that cannot be previewed; and where a
pipeline keeps its VAE and its spatial factor. What a family's latents are, step by step, is latent_spaces.py's.
"""
from __future__ import annotations

from typing import Any, Literal

# Known families: a name, ComfyUI's latent2rgb factors and madebyollin's TAE. Any other space is unnamed.
# cascade_c and cascade_b: Stable Cascade's stage C (the prior's 16-channel latents, with no VAE of their own) and
# stage B (the decoder pipeline's, which its Paella VQ-GAN decodes)
Family = Literal["sd15", "sdxl", "sd3", "flux1", "flux2", "wan21", "wan22", "hunyuanvideo", "mochi", "cogvideox",
                 "ltxv", "hunyuanvideo15", "ltx2", "ltx2_3", "minimaxh3", "sana", "qwenimage21", "cascade_c",
                 "cascade_b"]
FAMILIES: tuple[Family, ...] = ("sd15", "sdxl", "sd3", "flux1", "flux2", "wan21", "wan22", "hunyuanvideo", "mochi",
                                "cogvideox", "ltxv", "hunyuanvideo15", "ltx2", "ltx2_3", "minimaxh3", "sana",
                                "qwenimage21", "cascade_c", "cascade_b")
CHANNELS: dict[Family, int] = {"sd15": 4, "sdxl": 4, "sd3": 16, "flux1": 16, "flux2": 32, "wan21": 16, "wan22": 48,
                               "hunyuanvideo": 16, "mochi": 12, "cogvideox": 16, "ltxv": 128, "hunyuanvideo15": 32,
                               "ltx2": 128, "ltx2_3": 128, "minimaxh3": 24, "sana": 32, "qwenimage21": 64,
                               "cascade_c": 16, "cascade_b": 4}
# The video families' VAEs (and Qwen-Image's, which is Wan 2.1's), by class and latent channels. LTX-2.3 keeps
# LTX-2's VAE class (reading.py tells them apart by the transformer); MiniMax H3's VAE decodes with a transformer.
VIDEO_VAES: dict[tuple[str, int], Family] = {
    ("AutoencoderKLWan", 16): "wan21", ("AutoencoderKLQwenImage", 16): "wan21", ("AutoencoderKLWan", 48): "wan22",
    ("AutoencoderKLHunyuanVideo", 16): "hunyuanvideo", ("AutoencoderKLMochi", 12): "mochi",
    ("AutoencoderKLCogVideoX", 16): "cogvideox", ("AutoencoderKLLTXVideo", 128): "ltxv",
    ("AutoencoderKLHunyuanVideo15", 32): "hunyuanvideo15", ("AutoencoderKLLTX2Video", 128): "ltx2",
    ("AutoencoderKLMiniMaxH3", 24): "minimaxh3",
}
# The newer image families' VAEs: Sana's DC-AE (32 channels at 1/32), Qwen-Image 2.1's (64 at 1/16), Stable
# Cascade's stage B VQ-GAN (4 at 1/4)
IMAGE_VAES: dict[tuple[str, int], Family] = {
    ("AutoencoderDC", 32): "sana", ("AutoencoderKLQwenImage21", 64): "qwenimage21", ("PaellaVQModel", 4): "cascade_b",
}

SDXL_SCALE = 0.13025  # the scale taesdxl was distilled on: SDXL's VAE config, scaling_factor
SD15_SCALE = 0.18215


class FamilyError(ValueError):
    """A pipeline that previewlab cannot preview; one line a person can act on."""


def vae_of(pipe: Any) -> Any:
    """The pipeline's image decoder: its `vae`, Kandinsky's `movq`, LDM's `vqvae` or Stable Cascade's `vqgan`; None
    when it has none."""
    for name in ("vae", "movq", "vqvae", "vqgan"):
        part = getattr(pipe, name, None)
        if part is not None:
            return part
    return None


def vae_scale_factor(pipe: Any) -> int:
    """Image pixels per latent pixel: the pipeline's own vae_scale_factor (vae_scale_factor_spatial for most video
    pipelines, vae_spatial_scale_factor for Mochi, vae_spatial_compression_ratio for LTX, movq_scale_factor for
    Kandinsky), else 2 per VAE stage after the first (Stable Cascade: its VQ-GAN's levels, or its prior's
    resolution_multiple)."""
    for name in ("vae_scale_factor", "vae_scale_factor_spatial", "vae_spatial_scale_factor",
                 "vae_spatial_compression_ratio", "movq_scale_factor"):
        value = getattr(pipe, name, None)
        if isinstance(value, int) and value > 0:
            return value
    vae = vae_of(pipe)
    if vae is None:  # Stable Cascade's prior: the pipeline's own resolution_multiple (42.67 px per latent pixel)
        return max(1, int(round(float(getattr(getattr(pipe, "config", None), "resolution_multiple", 1) or 1))))
    cfg = vae.config
    if getattr(cfg, "levels", None) and getattr(cfg, "up_down_scale_factor", None):
        # Stable Cascade's Paella VQ-GAN: a pixel unshuffle, then a downsample per level after the first
        return int(cfg.up_down_scale_factor) * 2 ** (int(cfg.levels) - 1)
    widths = getattr(cfg, "block_out_channels", None) or (0,)
    return 2 ** (len(widths) - 1)

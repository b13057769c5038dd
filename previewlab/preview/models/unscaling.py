"""Unscaling: what each pipeline's final decode does to the last latents before vae.decode (UNSCALES, as
docs/models.md names it), as arithmetic on the device, with its constants built once (`constant`)."""
from __future__ import annotations

from typing import Any, Callable, Literal

import torch

Unscale = Literal["scale", "scale_shift", "mean_std", "mean_std_buffers", "inv_std", "batch_norm", "vq_scale", "none"]
# What each pipeline's final decode does with the last latents (diffusers 0.42.1), as docs/models.md names it:
UNSCALES: dict[Unscale, str] = {
    # StableDiffusion*, Kolors, Sana, AuraFlow, HunyuanDiT, CogView: a VAE without a shift_factor
    "scale": "latents / scaling_factor",
    # SD3, FLUX.1, Chroma, Lumina 2, Z-Image, HiDream: a VAE with a shift_factor
    "scale_shift": "latents / scaling_factor + shift_factor",
    # SDXL pipelines with a VAE that publishes latents_mean / latents_std (Playground v2.5)
    "mean_std": "latents * latents_std / scaling_factor + latents_mean",
    # LTX-Video (_denormalize_latents): the statistics are the VAE's registered buffers, not config entries
    "mean_std_buffers": "latents * vae.latents_std / scaling_factor + vae.latents_mean (the VAE's buffers)",
    # Qwen-Image (Wan 2.1's VAE, no scaling_factor): latents_std = 1 / std, then latents / latents_std + mean
    "inv_std": "latents / (1 / latents_std) + latents_mean",
    # FLUX.2 (AutoencoderKLFlux2)
    "batch_norm": "latents * sqrt(bn.running_var + batch_norm_eps) + bn.running_mean, then unpatchify",
    # Stable Cascade's decoder stage: its Paella VQ-GAN takes them scaled up
    "vq_scale": "latents * vqgan.config.scale_factor",
    # Kandinsky's MoVQ: decoded as they are, with force_not_quantize=True
    "none": "latents as they are",
}


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


def unscaler(unscale: Unscale, pipe: Any, vae: Any, device: torch.device, dtype: torch.dtype
             ) -> Callable[[torch.Tensor], torch.Tensor]:
    """Unpacked latents (B, C', h', w') in model space -> what the pipeline's final decode hands vae.decode,
    before any frame axis: (B, C, h, w), FLUX.2's unpatchified to 32 channels at 1/8.

    dtype: the latents' dtype; the arithmetic runs in it, as in the pipeline. LTX (mean_std_buffers) does as
    LTXPipeline's final decode: _denormalize_latents with the VAE's latents_mean / latents_std buffers cast to the
    latents' float32, latents * std / scaling_factor + mean there, then a cast to the text encoder's dtype (the
    pipeline's `latents.to(prompt_embeds.dtype)`) and one to `dtype`.
    """
    cfg = vae.config
    scale = float(getattr(cfg, "scaling_factor", None) or 1.0)
    if unscale == "batch_norm":
        bn = vae.bn
        mean = constant(bn.running_mean.view(1, -1, 1, 1), device, dtype)
        # as the pipeline: sqrt in the buffers' own dtype, then cast
        std = constant(torch.sqrt(bn.running_var.view(1, -1, 1, 1) + cfg.batch_norm_eps), device, dtype)
        return lambda x: unpatchify(x * std + mean)
    if unscale == "mean_std_buffers":
        f32 = torch.float32
        mean = constant(vae.latents_mean.view(1, -1, 1, 1), device, f32)
        std = constant(vae.latents_std.view(1, -1, 1, 1), device, f32)
        text = getattr(getattr(pipe, "text_encoder", None), "dtype", None) or dtype
        return lambda x: (x.to(f32) * std / scale + mean).to(text).to(dtype)
    if unscale == "scale_shift":
        shift = float(cfg.shift_factor)
        return lambda x: x / scale + shift
    if unscale in ("mean_std", "inv_std"):
        m = constant(list(cfg.latents_mean), device, dtype).view(1, -1, 1, 1)
        if unscale == "inv_std":  # Wan, Qwen-Image: tensor(std) cast to the latents' dtype, 1.0 / it there
            inv = 1.0 / constant(list(cfg.latents_std), device, dtype).view(1, -1, 1, 1)
            return lambda x: x / inv + m
        s = constant(list(cfg.latents_std), device, dtype).view(1, -1, 1, 1)
        return lambda x: x * s / scale + m
    if unscale == "none":
        return lambda x: x
    if unscale == "vq_scale":  # Stable Cascade's decoder: vqgan.decode(vqgan.config.scale_factor * latents)
        vq = float(cfg.scale_factor)
        return lambda x: vq * x
    return lambda x: x / scale

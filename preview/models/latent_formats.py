"""Latent-to-RGB factors per known family: the cheapest preview, one matrix per latent pixel (fit.py fits them
for a latent space with none known).

rgb = latent . F + bias, latent channels as rows, columns R, G, B; the result is an image in about [-1, 1]
(map it with (rgb + 1) / 2 and clamp to [0, 1]). The latents are the diffusion model's own, unpacked to
(B, C, h, w): families.LatentSpace.tae_input gives them (for FLUX.2 the batch-norm-normalised latents,
unpatchified to 32 channels at 1/8, as ComfyUI reshapes them with `latent_rgb_factors_reshape`).

Values copied from ComfyUI, comfy/latent_formats.py at Comfy-Org/ComfyUI commit
75399d78ddcc01f46f9b94521b29f1fe8a90ed53 (classes SD15, SDXL, SD3, Flux, Flux2); SD3 and Flux match
comfyanonymous/ComfyUI commit 040a3243468ecefd1f2802592d90458f1ce4d65f too. ComfyUI gives FLUX.1 a bias
(the same one as FLUX.2's), so FLUX.1 has one here.
"""
from __future__ import annotations

from typing import Callable

import torch

from .families import Family, constant

Factors = tuple[tuple[tuple[float, float, float], ...], tuple[float, float, float]]

LATENT_RGB: dict[Family, Factors] = {
    "sd15": (((0.3512, 0.2297, 0.3227), (0.3250, 0.4974, 0.2350), (-0.2829, 0.1762, 0.2721),
              (-0.2120, -0.2616, -0.7177)),
             (0.0, 0.0, 0.0)),
    "sdxl": (((0.3651, 0.4232, 0.4341), (-0.2533, -0.0042, 0.1068), (0.1076, 0.1111, -0.0362),
              (-0.3165, -0.2492, -0.2188)),
             (0.1084, -0.0175, -0.0011)),
    "sd3": (((-0.0922, -0.0175, 0.0749), (0.0311, 0.0633, 0.0954), (0.1994, 0.0927, 0.0458),
             (0.0856, 0.0339, 0.0902), (0.0587, 0.0272, -0.0496), (-0.0006, 0.1104, 0.0309),
             (0.0978, 0.0306, 0.0427), (-0.0042, 0.1038, 0.1358), (-0.0194, 0.0020, 0.0669),
             (-0.0488, 0.0130, -0.0268), (0.0922, 0.0988, 0.0951), (-0.0278, 0.0524, -0.0542),
             (0.0332, 0.0456, 0.0895), (-0.0069, -0.0030, -0.0810), (-0.0596, -0.0465, -0.0293),
             (-0.1448, -0.1463, -0.1189)),
            (0.2394, 0.2135, 0.1925)),
    "flux1": (((-0.0346, 0.0244, 0.0681), (0.0034, 0.0210, 0.0687), (0.0275, -0.0668, -0.0433),
               (-0.0174, 0.0160, 0.0617), (0.0859, 0.0721, 0.0329), (0.0004, 0.0383, 0.0115),
               (0.0405, 0.0861, 0.0915), (-0.0236, -0.0185, -0.0259), (-0.0245, 0.0250, 0.1180),
               (0.1008, 0.0755, -0.0421), (-0.0515, 0.0201, 0.0011), (0.0428, -0.0012, -0.0036),
               (0.0817, 0.0765, 0.0749), (-0.1264, -0.0522, -0.1103), (-0.0280, -0.0881, -0.0499),
               (-0.1262, -0.0982, -0.0778)),
              (-0.0329, -0.0718, -0.0851)),
    "flux2": (((0.0058, 0.0113, 0.0073), (0.0495, 0.0443, 0.0836), (-0.0099, 0.0096, 0.0644),
               (0.2144, 0.3009, 0.3652), (0.0166, -0.0039, -0.0054), (0.0157, 0.0103, -0.0160),
               (-0.0398, 0.0902, -0.0235), (-0.0052, 0.0095, 0.0109), (-0.3527, -0.2712, -0.1666),
               (-0.0301, -0.0356, -0.0180), (-0.0107, 0.0078, 0.0013), (0.0746, 0.0090, -0.0941),
               (0.0156, 0.0169, 0.0070), (-0.0034, -0.0040, -0.0114), (0.0032, 0.0181, 0.0080),
               (-0.0939, -0.0008, 0.0186), (0.0018, 0.0043, 0.0104), (0.0284, 0.0056, -0.0127),
               (-0.0024, -0.0022, -0.0030), (0.1207, -0.0026, 0.0065), (0.0128, 0.0101, 0.0142),
               (0.0137, -0.0072, -0.0007), (0.0095, 0.0092, -0.0059), (0.0000, -0.0077, -0.0049),
               (-0.0465, -0.0204, -0.0312), (0.0095, 0.0012, -0.0066), (0.0290, -0.0034, 0.0025),
               (0.0220, 0.0169, -0.0048), (-0.0332, -0.0457, -0.0468), (-0.0085, 0.0389, 0.0609),
               (-0.0076, 0.0003, -0.0043), (-0.0111, -0.0460, -0.0614)),
              (-0.0329, -0.0718, -0.0851)),
}


def latent2rgb(factors: Factors, device: torch.device, dtype: torch.dtype) -> Callable[[torch.Tensor], torch.Tensor]:
    """Latents (B, C, h, w) in the model's space (families.LatentSpace.tae_input) -> RGB (B, 3, h, w) in [0, 1],
    at latent resolution. factors: a family's (LATENT_RGB), a model's own (the demo's) or fitted ones (fit.py).
    The factors go to the device once, here."""
    f, b = factors
    weights = constant(f, device, dtype)
    bias = constant(b, device, dtype).view(1, 3, 1, 1)

    def decode(latents: torch.Tensor) -> torch.Tensor:
        rgb = torch.einsum("bchw,cr->brhw", latents.to(dtype), weights) + bias
        return ((rgb + 1) / 2).clamp(0, 1)

    return decode

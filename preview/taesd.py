"""madebyollin's TAESD decoder, so taesd_decoder.pth / .safetensors load without diffusers' wrapper.

The layer layout matches https://github.com/madebyollin/taesd (taesd.py): state-dict keys are the
indices of one nn.Sequential, so the published weights load as they are.
"""
from __future__ import annotations

import torch
from torch import nn


def conv(n_in: int, n_out: int, **kwargs: object) -> nn.Conv2d:
    return nn.Conv2d(n_in, n_out, 3, padding=1, **kwargs)  # type: ignore[arg-type]


class Clamp(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x / 3) * 3


class Block(nn.Module):
    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__()
        self.conv = nn.Sequential(conv(n_in, n_out), nn.ReLU(), conv(n_out, n_out), nn.ReLU(), conv(n_out, n_out))
        self.skip = nn.Conv2d(n_in, n_out, 1, bias=False) if n_in != n_out else nn.Identity()
        self.fuse = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fuse(self.conv(x) + self.skip(x))


def Decoder(latent_channels: int = 4) -> nn.Sequential:
    """Raw latents (B, C, h, w) -> RGB (B, 3, 8h, 8w) in [0, 1] (clamp it: the last conv is unbounded)."""
    return nn.Sequential(
        Clamp(), conv(latent_channels, 64), nn.ReLU(),
        Block(64, 64), Block(64, 64), Block(64, 64), nn.Upsample(scale_factor=2), conv(64, 64, bias=False),
        Block(64, 64), Block(64, 64), Block(64, 64), nn.Upsample(scale_factor=2), conv(64, 64, bias=False),
        Block(64, 64), Block(64, 64), Block(64, 64), nn.Upsample(scale_factor=2), conv(64, 64, bias=False),
        Block(64, 64), conv(64, 3),
    )

"""Frames: a preview image made ready to send, and the device-side conversion that produces its pixels."""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class Frame:
    """One encoded preview, made once and shared by every watcher."""
    run_id: str
    step: int
    decoder: str
    format: str
    width: int
    height: int
    data: bytes


def preview_size(width: int, height: int, preview_max: int) -> tuple[int, int]:
    """(w, h) with the long side at most preview_max (0 = native), aspect kept."""
    long = max(width, height)
    if preview_max == 0 or long <= preview_max:
        return width, height
    s = preview_max / long
    return max(1, round(width * s)), max(1, round(height * s))


def to_uint8_hwc(image: torch.Tensor, preview_max: int = 0) -> torch.Tensor:
    """(3, H, W) in [0, 1] -> uint8 (h, w, 3), downscaled on the tensor's device when preview_max asks."""
    _, h, w = image.shape
    pw, ph = preview_size(w, h, preview_max)
    if (pw, ph) != (w, h):
        image = F.interpolate(image[None].float(), size=(ph, pw), mode="bilinear", antialias=True,
                              align_corners=False)[0]
    return (image * 255).round().clamp(0, 255).to(torch.uint8).permute(1, 2, 0).contiguous()

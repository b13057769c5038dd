"""How alike two pictures are: scikit-image's SSIM and PSNR, after both are brought to one small size.

A preview against the run's final image (progress), or a decoder's preview against the full VAE's decode of the
same latents (fidelity), are compared here and nowhere else. Pictures are uint8 RGB arrays (H, W, 3). Both are
resized to the same size first (PIL's box filter: each output pixel the mean of the input pixels it covers), so a
preview and a larger image compare at the preview's scale, where a watcher judges it. No torch here.
"""
from __future__ import annotations

import importlib.util
import math

import numpy as np
from PIL import Image

SIDE = 64  # px, the long side progress compares at: about a millisecond a pair, the scale a glance judges


def available() -> bool:
    """scikit-image is installed: a dependency of previewlab, absent only where an environment was put together
    by hand (the GPU machine's bare one, bench/gpu/gpu_wheels.sh), where no picture is compared."""
    return importlib.util.find_spec("skimage") is not None


def fitted(rgb: np.ndarray, width: int, height: int) -> np.ndarray:
    """rgb (H, W, 3) uint8 resized to (height, width, 3) with a box filter; itself when it has that size."""
    if rgb.shape[:2] == (height, width):
        return rgb
    return np.asarray(Image.fromarray(rgb).resize((width, height), Image.Resampling.BOX))


def small_size(width: int, height: int, side: int = SIDE) -> tuple[int, int]:
    """(w, h) with the long side at most `side`, aspect kept, never under 1 px."""
    long = max(width, height)
    if long <= side:
        return width, height
    return max(1, round(width * side / long)), max(1, round(height * side / long))


def ssim(a: np.ndarray, b: np.ndarray) -> float | None:
    """SSIM of two uint8 RGB pictures of one size, in [-1, 1] (1: the same), over 7 px windows (scikit-image's
    default), or the largest odd window the picture holds; None for a picture under 3 px on a side."""
    side = min(a.shape[0], a.shape[1])
    win = min(7, side if side % 2 else side - 1)
    if win < 3:
        return None
    from skimage.metrics import structural_similarity  # here: scipy's import is half a second, paid once used
    return float(structural_similarity(a, b, channel_axis=2, data_range=255, win_size=win))


def psnr_db(a: np.ndarray, b: np.ndarray) -> float:
    """PSNR in dB of two uint8 RGB pictures of one size; math.inf where they are equal."""
    if np.array_equal(a, b):
        return math.inf
    from skimage.metrics import peak_signal_noise_ratio
    return float(peak_signal_noise_ratio(a, b, data_range=255))


def alike(a: np.ndarray, b: np.ndarray, side: int = SIDE) -> float | None:
    """SSIM of a against b, both at b's size brought to `side` on its long side (None: too small to judge)."""
    w, h = small_size(b.shape[1], b.shape[0], side)
    return ssim(fitted(a, w, h), fitted(b, w, h))

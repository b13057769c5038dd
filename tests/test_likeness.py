"""preview/judging/likeness.py: the one place two pictures are compared (scikit-image's SSIM and PSNR)."""
from __future__ import annotations

import math

import numpy as np

from previewlab.preview.judging.likeness import alike, fitted, psnr_db, small_size, ssim


def picture(h: int = 96, w: int = 128, seed: int = 0) -> np.ndarray:
    """A smooth picture (gradients and a disc), as a decoder paints, not noise."""
    y, x = np.mgrid[0:h, 0:w] / max(h, w)
    disc = ((x - 0.5) ** 2 + (y - 0.4) ** 2 < 0.05).astype(float)
    rgb = np.stack([x, y, disc], axis=2) * 255
    return np.clip(rgb + np.random.default_rng(seed).normal(0, 2, rgb.shape), 0, 255).astype(np.uint8)


def test_a_picture_is_itself_and_its_negative_is_far():
    a = picture()
    assert ssim(a, a) == 1.0 and psnr_db(a, a) == math.inf
    far = ssim(a, 255 - a)
    assert far is not None and far < 0.5


def test_a_preview_at_half_the_size_is_judged_at_the_small_size_and_is_near_its_image():
    big = picture(192, 256)
    half = fitted(big, 128, 96)
    near = alike(half, big)
    assert near is not None and 0.9 < near < 1.0  # a box-downscaled copy: alike, not equal
    assert small_size(256, 192) == (64, 48) and small_size(40, 30) == (40, 30)


def test_a_picture_too_small_for_a_window_has_no_figure():
    a = picture(2, 2)
    assert ssim(a, a) is None
    assert ssim(picture(5, 5), picture(5, 5)) == 1.0  # a 5 px window where 7 does not fit

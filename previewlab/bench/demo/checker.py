"""The checker that finds objects in an image, and how a generated image is judged against its caption.

It reads an image back by color segmentation: every pixel goes to its nearest palette color, the colors that
hold the border are background, and each remaining color's largest connected region is an object whose centroid
gives its position and whose outline, matched against the three templates, gives its shape. Drawn scenes
(scenes.py) read back perfectly (tests/test_train_demo.py), so a miss on a generated image is the model's.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from previewlab.preview.models.demo_scenes import (ANCHORS, COLORS, GRASS_BOTTOM, GRASS_TOP, POSITIONS, SHAPES, SKY_BOTTOM, SKY_TOP, Position,
                     Scene, Shape)


def _mix(a: tuple[int, int, int], b: tuple[int, int, int], t: float) -> list[float]:
    return [(1 - t) * x + t * y for x, y in zip(a, b)]


# The palette a pixel is matched against: the named colors, then background-only shades (the sky and grass
# gradients at their ends and middles).
_SHADES = [(name, [float(v) for v in rgb]) for name, rgb in COLORS.items()]
_SHADES += [(name, _mix(a, b, t)) for t in (0.0, 0.5, 1.0)
            for name, a, b in (("sky", SKY_TOP, SKY_BOTTOM), ("grass", GRASS_TOP, GRASS_BOTTOM))]
LABELS = list(COLORS) + ["sky", "grass"]
MAX_DISTANCE = 110.0   # RGB distance beyond which a pixel is no palette color at all (muddy or mixed)
BORDER_SHARE = 0.15    # a color holding this share of the border is background ...
BACKGROUND_AREA = 0.4  # ... and so is one holding this share of the image (objects hold 3-10 %): a decoder's
                       # border pixels drift, so the border alone misses some backgrounds
MIN_AREA = 0.01        # regions under 1 % of the image are edge fringes or specks, not objects


@dataclass(frozen=True)
class Found:
    color: str
    position: Position
    shape: Shape
    area: float  # fraction of the image


def _labels(image: np.ndarray) -> np.ndarray:
    """(H, W) index into LABELS per pixel, -1 where no palette color is near."""
    rgb = np.array([s[1] for s in _SHADES], np.float32)
    names = np.array([LABELS.index(s[0]) for s in _SHADES])
    d = np.linalg.norm(image.astype(np.float32)[:, :, None, :] - rgb[None, None], axis=-1)
    best = d.argmin(-1)
    return np.where(d.min(-1) <= MAX_DISTANCE, names[best], -1)


def _largest_region(mask: np.ndarray) -> np.ndarray:
    """The largest 4-connected region of a boolean mask, as a mask (breadth-first; no scipy here)."""
    h, w = mask.shape
    seen = np.zeros_like(mask)
    best: list[tuple[int, int]] = []
    for y0, x0 in zip(*np.nonzero(mask)):
        if seen[y0, x0]:
            continue
        region, queue = [], deque([(int(y0), int(x0))])
        seen[y0, x0] = True
        while queue:
            y, x = queue.popleft()
            region.append((y, x))
            for ny, nx in ((y - 1, x), (y + 1, x), (y, x - 1), (y, x + 1)):
                if 0 <= ny < h and 0 <= nx < w and mask[ny, nx] and not seen[ny, nx]:
                    seen[ny, nx] = True
                    queue.append((ny, nx))
        if len(region) > len(best):
            best = region
    out = np.zeros_like(mask)
    if best:
        ys, xs = zip(*best)
        out[list(ys), list(xs)] = True
    return out


def _shape(region: np.ndarray) -> Shape:
    """The template (circle, square, upward triangle) inscribed in the region's box that overlaps it best."""
    ys, xs = np.nonzero(region)
    y0, y1, x0, x1 = ys.min(), ys.max() + 1, xs.min(), xs.max() + 1
    crop = region[y0:y1, x0:x1]
    h, w = crop.shape
    v, u = np.mgrid[0:h, 0:w]
    fy, fx = (v + 0.5) / h, (u + 0.5) / w  # pixel centers in [0, 1] of the box
    templates: dict[Shape, np.ndarray] = {
        "circle": (fx - 0.5) ** 2 + (fy - 0.5) ** 2 <= 0.25,
        "square": np.ones_like(crop),
        "triangle": np.abs(fx - 0.5) <= fy / 2,
    }

    def iou(t: np.ndarray) -> float:
        return float((t & crop).sum() / max((t | crop).sum(), 1))

    return max(SHAPES, key=lambda s: iou(templates[s]))


def _position(region: np.ndarray) -> Position:
    ys, xs = np.nonzero(region)
    cx, cy = (xs.mean() + 0.5) / region.shape[1], (ys.mean() + 0.5) / region.shape[0]
    return min(POSITIONS, key=lambda p: (ANCHORS[p][0] - cx) ** 2 + (ANCHORS[p][1] - cy) ** 2)


def find_objects(image: np.ndarray) -> list[Found]:
    """The objects in an RGB image (H, W, 3) uint8, largest first."""
    labels = _labels(image)
    border = np.concatenate([labels[0], labels[-1], labels[:, 0], labels[:, -1]])
    background = {i for i in range(len(LABELS)) if (border == i).mean() >= BORDER_SHARE}
    background |= {i for i in range(len(LABELS)) if (labels == i).mean() >= BACKGROUND_AREA}
    background |= {LABELS.index("sky"), LABELS.index("grass")}
    found = []
    for i, name in enumerate(LABELS):
        if i in background or (labels == i).mean() < MIN_AREA:
            continue
        region = _largest_region(labels == i)
        if region.mean() >= MIN_AREA:
            found.append(Found(name, _position(region), _shape(region), float(region.mean())))
    return sorted(found, key=lambda f: -f.area)


@dataclass(frozen=True)
class Verdict:
    caption: str
    found: Found | None  # the largest object, None when the checker found nothing
    color: bool
    position: bool
    shape: bool


def judge(scenes: Sequence[Scene], images: Sequence[np.ndarray]) -> list[Verdict]:
    """Single-object scenes against images: does the largest object found have the caption's color,
    position and shape?"""
    out = []
    for scene, image in zip(scenes, images, strict=True):
        want = scene.objects[0]
        objs = find_objects(image)
        f = objs[0] if objs else None
        out.append(Verdict(scene.caption, f, f is not None and f.color == want.color,
                           f is not None and f.position == want.position, f is not None and f.shape == want.shape))
    return out


def figures(verdicts: Sequence[Verdict]) -> dict[str, float]:
    """Percent of images whose color, position and shape match their caption."""
    n = max(len(verdicts), 1)
    return {k: 100.0 * sum(getattr(v, k) for v in verdicts) / n for k in ("color", "position", "shape")}

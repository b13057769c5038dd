"""Frames: a preview image made ready to send, and the device-side work that produces its pixels (a batch's
grid, the downscale, the uint8 conversion). The downscale works from the size it is given: a decoder that already
stopped at the preview's size (stops.Cut) is resized only by what is left, or not at all."""
from __future__ import annotations

import collections
import math
import threading
from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class Frame:
    """One encoded preview, made once and shared by every watcher: one image, or a clip's frames one after
    another in `data` (sizes: each frame's bytes, in order; fps: the rate that plays them over the clip's
    duration, 0 for one frame)."""
    run_id: str
    step: int
    decoder: str
    format: str
    width: int
    height: int
    data: bytes
    sizes: tuple[int, ...] = ()
    fps: float = 0.0

    @property
    def frames(self) -> int:
        return len(self.sizes) or 1


def preview_size(width: int, height: int, preview_max: int) -> tuple[int, int]:
    """(w, h) with the long side at most preview_max (0 = native), aspect kept."""
    long = max(width, height)
    if preview_max == 0 or long <= preview_max:
        return width, height
    s = preview_max / long
    return max(1, round(width * s)), max(1, round(height * s))


def grid_shape(b: int) -> tuple[int, int]:
    """(rows, cols) of a batch's grid: ceil(sqrt(b)) columns, as many rows as it takes."""
    cols = math.ceil(math.sqrt(b))
    return math.ceil(b / cols), cols


def grid_size(b: int, width: int, height: int) -> tuple[int, int]:
    """(w, h) in pixels of the grid of b images of width x height (grid())."""
    rows, cols = grid_shape(b)
    return cols * width, rows * height


def grid(images: torch.Tensor) -> torch.Tensor:
    """(B, 3, H, W) -> one (3, rows * H, cols * W) image: a batch side by side, ceil(sqrt(B)) columns, row by row,
    empty cells black. A batch of one is its image. On the images' device, no host read."""
    b, c, h, w = images.shape
    if b == 1:
        return images[0]
    rows, cols = grid_shape(b)
    if rows * cols > b:
        images = torch.cat([images, images.new_zeros(rows * cols - b, c, h, w)])
    return images.reshape(rows, cols, c, h, w).permute(2, 0, 3, 1, 4).reshape(c, rows * h, cols * w)


def tile(clip: torch.Tensor) -> torch.Tensor:
    """(B, F, 3, H, W) -> (F, 3, rows * H, cols * W): each frame of a batch's clips as one grid (grid())."""
    b, f, c, h, w = clip.shape
    if b == 1:
        return clip[0]
    return torch.stack([grid(clip[:, i]) for i in range(f)]) if f > 1 else grid(clip[:, 0])[None]


def _to_uint8(image: torch.Tensor, preview_max: int) -> torch.Tensor:
    """(3, H, W) or frames (F, 3, H, W) in [0, 1] -> uint8 of the same layout, downscaled on the tensor's
    device when preview_max asks."""
    h, w = int(image.shape[-2]), int(image.shape[-1])
    pw, ph = preview_size(w, h, preview_max)
    if (pw, ph) != (w, h):
        batch = image if image.dim() == 4 else image[None]
        small = F.interpolate(batch.float(), size=(ph, pw), mode="bilinear", antialias=True, align_corners=False)
        image = small if image.dim() == 4 else small[0]
    return (image * 255).round().clamp(0, 255).to(torch.uint8)


def to_uint8_hwc(image: torch.Tensor, preview_max: int = 0) -> torch.Tensor:
    """(3, H, W) in [0, 1] -> contiguous uint8 (h, w, 3): what a host encoder reads once copied; frames
    (F, 3, H, W) -> (F, h, w, 3)."""
    return _to_uint8(image, preview_max).movedim(-3, -1).contiguous()


def to_uint8_chw(image: torch.Tensor, preview_max: int = 0) -> torch.Tensor:
    """(3, H, W) in [0, 1] -> contiguous uint8 (3, h, w): what an on-device JPEG encoder reads. Made here, on
    the stream of the conversion, so the host's wait for the conversion covers it before the encoder runs;
    frames (F, 3, H, W) stay (F, 3, h, w)."""
    return _to_uint8(image, preview_max).contiguous()


KEEP_BYTES = 64 << 20  # a run's previews kept for its progress: 50 steps of 1024 px JPEGs take about 8 MiB


class KeptFrames:
    """The frames a run sent, kept by reference (no copy, no decode: the frame path already made their bytes) so
    that its progress can be read once it has ended (preview/judging/progress.py). Bounded: past max_bytes the
    oldest go (dropped counts them), since the newest say where the picture settles. Called from the step's
    thread (sync) and the encode thread (overlap)."""

    def __init__(self, max_bytes: int = KEEP_BYTES) -> None:
        self.max_bytes = max_bytes
        self.dropped = 0
        self._frames: collections.deque[Frame] = collections.deque()
        self._bytes = 0
        self._lock = threading.Lock()

    def keep(self, f: Frame) -> None:
        with self._lock:
            self._frames.append(f)
            self._bytes += len(f.data)
            while self._bytes > self.max_bytes and self._frames:
                self._bytes -= len(self._frames.popleft().data)
                self.dropped += 1

    def frames(self) -> list[Frame]:
        """The frames kept, in the order they came."""
        with self._lock:
            return list(self._frames)

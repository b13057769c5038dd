"""A run's progress: how much its picture still changed, read from the previews it sent, once it has ended.

Each preview is compared with the run's final image, and with the preview before it, by SSIM at the final image's
size brought to 64 px on its long side (likeness.py). The picture settles at the step of the first preview after
which no preview changes by more than SETTLE_CHANGE from the one before. Settling is read from the change between
previews, never from the distance to the final image: a TAESD or latent2rgb preview never reaches the full VAE's
picture (on the demo model TAESD's SSIM against its VAE is about 0.66), so a threshold on that would never be met.

Free for the run: its frames are kept by reference as the frame path made them (frames.KeptFrames), decoded and
compared here after the run has ended (the server's writer thread, a watch's close, the bench between runs),
never inside a step or on the frame path. No torch here.
"""
from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
from PIL import Image

from previewlab.preview.judging.likeness import SIDE, available, fitted, small_size, ssim
from previewlab.preview.record.records import StepRow, Totals
from previewlab.preview.record.run import RunMeta, RunRecord

if TYPE_CHECKING:  # frames.py holds torch: the server's figures read the settle line without it
    from previewlab.preview.frames import Frame, KeptFrames

# 1 - SSIM between consecutive previews at 64 px. Measured on the demo model (docs/figures.md, "Progress"): two
# JPEG previews (quality 80, the default) of a picture that has all but stopped changing still differ by 0.02 to
# 0.03 at its 128 px, from the encoding alone (PNG previews of the same run: 0.003 to 0.005; at 256 px JPEG's
# floor is 0.015). 0.06 is twice the larger floor, so a JPEG preview's own noise never reads as change. The price:
# on lossless previews it names an earlier step than 0.02 would (PNG, guidance 7.5: step 4 of 20 against 14),
# changes of 2 to 6 % being ones a default preview cannot show apart from its own noise. One limit for every run
# keeps runs comparable.
SETTLE_CHANGE = 0.06


@dataclass(frozen=True)
class Progress:
    """What a run's previews said of its picture: per preview step, its SSIM against the final image and its
    change (1 - SSIM) since the previous preview (None: the first one, or a preview that could not be read); the
    settle step (None: fewer than two previews, or the last one still changed by more than SETTLE_CHANGE)."""
    steps: tuple[tuple[int, float | None, float | None], ...]  # (step, final_ssim, change), in step order
    settle_step: int | None
    dropped: int = 0  # previews not kept (frames.KEEP_BYTES): the earliest ones

    @property
    def compared(self) -> int:
        return sum(1 for _, f, _ in self.steps if f is not None)

    @property
    def last_final_ssim(self) -> float | None:
        return self.steps[-1][1] if self.steps else None


def pixels(data: bytes) -> np.ndarray:
    """A JPEG, WebP or PNG as uint8 RGB (H, W, 3), decoded with Pillow. Raises OSError (PIL's
    UnidentifiedImageError among them) for bytes it cannot read."""
    with Image.open(io.BytesIO(data)) as im:
        return np.asarray(im.convert("RGB"))


def first_frame(f: Frame) -> np.ndarray:
    """A frame's first picture (a clip's first frame) as pixels()."""
    return pixels(f.data[:f.sizes[0]] if len(f.sizes) > 1 else f.data)


def first_cell(final: np.ndarray, batch: int, preview: np.ndarray) -> np.ndarray:
    """The part of the final image a preview shows: the whole grid, or (a batch previewed `first`) its first
    image, told apart by which of the two shapes the preview's is closer to."""
    if batch <= 1:
        return final
    from previewlab.preview.frames import grid_shape  # torch's module: only a batch's run loads it here

    rows, cols = grid_shape(batch)
    h, w = final.shape[0] // rows, final.shape[1] // cols
    aspect = preview.shape[1] / preview.shape[0]
    if abs(aspect - w / h) < abs(aspect - final.shape[1] / final.shape[0]):
        return final[:h, :w]
    return final


def read(frames: Sequence[Frame], final: np.ndarray, batch: int = 1, dropped: int = 0,
         limit: float = SETTLE_CHANGE) -> Progress:
    """Each frame (one a step: the last one kept where a step has two) against `final`, the run's final image
    (uint8 RGB (H, W, 3), the grid of a batch), and against the frame before it, at final's size brought to
    likeness.SIDE px on its long side. A frame that cannot be decoded has no figures; its neighbour's change is
    then read against the frame before it."""
    by_step = {f.step: f for f in frames}
    small = small_size(final.shape[1], final.shape[0], SIDE)
    out: list[tuple[int, float | None, float | None]] = []
    before: np.ndarray | None = None
    for step in sorted(by_step):
        try:
            pic = first_frame(by_step[step])
        except (OSError, ValueError):
            out.append((step, None, None))
            continue
        target = fitted(first_cell(final, batch, pic), *small)
        now = fitted(pic, *small)
        to_final = ssim(now, target)
        since = ssim(now, before) if before is not None else None
        out.append((step, to_final, None if since is None else 1.0 - since))
        before = now
    return Progress(tuple(out), settle(out, limit), dropped)


def settle(steps: Sequence[tuple[int, float | None, float | None]], limit: float = SETTLE_CHANGE) -> int | None:
    """The step of the first preview after which no preview changes by more than `limit` from the one before;
    None with fewer than two previews read, or where the last one still changed by more."""
    read_ = [(s, c) for s, f, c in steps if f is not None]
    if len(read_) < 2:
        return None
    at: int | None = None
    for (step, _), (_, change) in zip(read_, read_[1:]):
        if change is None or change > limit:
            at = None
        elif at is None:
            at = step
    return at


def filled(rows: Sequence[StepRow], p: Progress) -> list[StepRow]:
    """The run's rows with their progress cells: a preview's step its figures, every other row left empty."""
    by = {s: (f, c) for s, f, c in p.steps}
    return [replace(r, final_ssim=by[r.step][0], change=by[r.step][1]) if r.step in by else r for r in rows]


def recorded(t: Totals, p: Progress) -> Totals:
    """The run's totals with its progress: previews compared, settle step, last preview's SSIM to the final."""
    return replace(t, compared=p.compared, settle_step=p.settle_step, last_final_ssim=p.last_final_ssim)


def unmatched(meta: RunMeta) -> bool:
    """A clip previewing its middle frame: the final image (the clip's first frame) has no frame to match it."""
    return meta.preview is not None and meta.num_frames > 1 and meta.preview.frames == "middle"


def settle_line(meta: RunMeta, t: Totals, limit: float = SETTLE_CHANGE) -> str:
    """The run's progress in one line, as the page (under the cost chart) and watch.summary() say it; "" for a
    run whose progress was not read (an older record, a watch closed without save())."""
    stopped = (f"stopped at step {t.steps_run} of {meta.steps}: its final image is where it stopped; "
               if t.status == "stopped" else "")
    if t.previews == 0:
        return f"{stopped}no previews: nothing settles"
    if t.compared == 0 and unmatched(meta):
        return f"{stopped}progress not read: a clip previewing its middle frame has no final frame to match"
    if t.compared == 0:
        return f"{stopped}progress not read" if stopped else ""
    n = t.steps_run or meta.steps
    last = f"the last preview's SSIM to the final image {t.last_final_ssim:.2f}" \
        if t.last_final_ssim is not None else "the last preview could not be read"
    if t.compared == 1:
        return f"{stopped}one preview: no change to read; {last}"
    if t.settle_step is None:
        return f"{stopped}the picture still changes at its last preview (by more than {limit * 100:g} %); {last}"
    return (f"{stopped}the picture settles at step {t.settle_step} of {n} (no preview after it changes by more "
            f"than {limit * 100:g} %); {last}")


def with_progress(record: RunRecord, rows: Sequence[StepRow], kept: KeptFrames | None,
                  final: np.ndarray | None) -> tuple[RunRecord, list[StepRow]]:
    """A finished run's record and rows with its progress (read()), from the frames it kept and its final image
    (uint8 RGB (H, W, 3)); as they were where either is missing, where a clip previewed its middle frame,
    which has no frame of the final image (the clip's first) to match, or where scikit-image is not installed
    (the GPU machine's bare environment: likeness.available)."""
    frames = kept.frames() if kept is not None else []
    if not frames or final is None or unmatched(record.meta) or not available():  # (no previews: the totals say so, previews 0)
        return record, list(rows)
    progress = read(frames, final, record.meta.batch, kept.dropped if kept is not None else 0)
    return replace(record, totals=recorded(record.totals, progress)), filled(rows, progress)

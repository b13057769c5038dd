"""Sync mode, what the popular UIs do: a preview's whole pipeline inside the step callback, on the denoising
thread. The same stages as overlap mode (stages.py), then the wait for the device and the host copy on the spot;
overlap.py is the other strategy, with the same submit()."""
from __future__ import annotations

from typing import Any, Callable

import torch

from previewlab.preview.pipeline.row_ledger import Marks
from previewlab.preview.pipeline.stages import decode_resize
from previewlab.preview.timing.ranges import Ranges
from previewlab.preview.timing.stopwatch import Stopwatch


class Sync:
    def __init__(self, sw: Stopwatch, ranges: Ranges) -> None:
        self.sw, self.ranges = sw, ranges

    def submit(self, latents: torch.Tensor, decode: Callable[[torch.Tensor], torch.Tensor],
               to_u8: Callable[[torch.Tensor], torch.Tensor], finish: Callable[[Any, float], None],
               marks: Marks, on_device: bool = False) -> None:
        """Make one preview now: decode and resize (stages.py), wait for the device, copy the pixels to the host
        (transfer_ms; an on-device encoder copies only its bytes, in finish), then finish(pixels, sync_ms):
        encode and hand off. sync_ms is the part of the wait no event times (Stopwatch.wait)."""
        sw, ranges = self.sw, self.ranges
        u8 = decode_resize(sw, ranges, marks, latents, decode, to_u8)
        ranges.begin("sync")
        waited = sw.wait(marks.res1)  # the wait the host copy needs anyway; only its uncounted part is sync_ms
        t1 = sw.clock()
        ranges.end("sync")
        pixels: Any = u8
        if not on_device:
            ranges.begin("transfer")
            pixels = u8.cpu().numpy()
            marks.cells.transfer_ms = (sw.clock() - t1) * 1e3
            ranges.end("transfer")
        ranges.begin("encode")
        finish(pixels, waited.uncounted_ms)
        ranges.end("encode")


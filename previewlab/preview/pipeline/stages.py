"""A preview's first stages, written once: decode, then resize into uint8, each passage marked on the stopwatch and
named in a profiler trace. Both strategies run them: sync inside the step callback (preview_maker.py), overlap on the
device's side stream or, on a CPU, still on the denoising thread (overlap.py). What follows differs by strategy:
sync waits for the device and copies on the spot; overlap copies on the side stream and waits on its encode
thread. The encode and the hand-off are one function again (PreviewMaker._finish)."""
from __future__ import annotations

from typing import Callable

import torch

from previewlab.preview.pipeline.row_ledger import Marks
from previewlab.preview.timing.ranges import Ranges
from previewlab.preview.timing.stopwatch import Stopwatch


def decode_resize(sw: Stopwatch, ranges: Ranges, marks: Marks, latents: torch.Tensor,
                  decode: Callable[[torch.Tensor], torch.Tensor],
                  to_u8: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """latents -> frames (decode) -> uint8 at the preview's size (to_u8), on the current stream. marks (a step's
    row_ledger.Marks) gets dec0, dec1 and res1: the decode is dec0..dec1, the resize dec1..res1."""
    ranges.begin("decode")
    marks.dec0 = sw.mark()
    image = decode(latents)
    marks.dec1 = sw.mark()
    ranges.end("decode")
    ranges.begin("resize")
    u8 = to_u8(image)
    marks.res1 = sw.mark()
    ranges.end("resize")
    return u8

"""What every preview decoder is: how it is called, what it returns, and the one error it raises."""
from __future__ import annotations

from typing import Callable

import torch

from previewlab.preview.decoding.clips import Pick

Decode = Callable[[torch.Tensor, int, int], torch.Tensor]  # (callback latents, height px, width px) -> image
# a clip's preview: (callback latents, height px, width px, the frames to read and show) -> (B, F, 3, H, W)
ClipDecode = Callable[[torch.Tensor, int, int, Pick], torch.Tensor]
Note = Callable[[str], None]  # what a decoder has to say on the row of the preview it is making (a fit)


class DecoderError(ValueError):
    """An unknown decoder, or one this model cannot run; one line a person can act on."""

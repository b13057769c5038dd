"""The closed sets of names a user chooses from: decoders, encoders, modes, targets and batch previews.

No torch here: the settings and the wire protocol validate against these without loading the model stack.
Each registry (decoders.DECODERS, encoders.ENCODERS) holds exactly these names, in this order.
"""
from __future__ import annotations

from typing import Literal, TypeVar, get_args

DecoderName = Literal["none", "latent2rgb", "taesd", "vae"]
EncoderName = Literal["turbojpeg", "pillow", "webp", "png", "nvjpeg"]
Mode = Literal["sync", "overlap"]
Target = Literal["auto", "x0", "latents"]
BatchPreview = Literal["grid", "first"]  # a batch's preview: every image tiled into one frame, or the first only

DECODER_NAMES: tuple[DecoderName, ...] = get_args(DecoderName)
ENCODER_NAMES: tuple[EncoderName, ...] = get_args(EncoderName)
MODES: tuple[Mode, ...] = get_args(Mode)
TARGETS: tuple[Target, ...] = get_args(Target)
BATCH_PREVIEWS: tuple[BatchPreview, ...] = get_args(BatchPreview)

N = TypeVar("N", bound=str)


def check(field: str, name: object, allowed: tuple[N, ...], error: type[ValueError] = ValueError) -> N:
    """`name` as one of `allowed`; else `error` with one line naming the field, the bad value and the names allowed."""
    for known in allowed:
        if name == known:
            return known
    raise error(f"{field}={name!r}: allowed are {', '.join(allowed)}")

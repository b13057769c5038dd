"""The closed sets of names a user chooses from: decoders, encoders, modes, targets, batch and clip previews, and
the size a decoder stops at.

No torch here: the settings and the wire protocol validate against these without loading the model stack.
Each registry (decoders.DECODERS, encoders.ENCODERS) holds exactly these names, in this order.
"""
from __future__ import annotations

import re
from typing import Literal, TypeVar, Union, get_args

DecoderName = Literal["none", "latent2rgb", "taesd", "vae"]
EncoderName = Literal["turbojpeg", "pillow", "webp", "png", "nvjpeg"]
Mode = Literal["sync", "overlap"]
Target = Literal["auto", "x0", "latents"]
BatchPreview = Literal["grid", "first"]  # a batch's preview: every image tiled into one frame, or the first only
FramesName = Literal["first", "middle", "all"]  # a clip's preview: its first frame, its middle one, all of it
FrameChoice = Union[FramesName, int]  # or N frames spread evenly over the clip
# where a preview decoder stops: `preview`, a TAE's last upsampling stages left out down to the preview's size;
# `full`, the image's size, then resized; `half_latents`, the latents 2x smaller per side before the decoder
# runs whole (the full VAE's cheap choice: blurrier). stops.Cut says what each means per decoder.
DecodeAt = Literal["preview", "full", "half_latents"]

DECODER_NAMES: tuple[DecoderName, ...] = get_args(DecoderName)
ENCODER_NAMES: tuple[EncoderName, ...] = get_args(EncoderName)
MODES: tuple[Mode, ...] = get_args(Mode)
TARGETS: tuple[Target, ...] = get_args(Target)
BATCH_PREVIEWS: tuple[BatchPreview, ...] = get_args(BatchPreview)
FRAMES_NAMES: tuple[FramesName, ...] = get_args(FramesName)
DECODE_ATS: tuple[DecodeAt, ...] = get_args(DecodeAt)
MAX_PREVIEW_FRAMES = 256  # N frames of a clip in one preview

N = TypeVar("N", bound=str)


def check(field: str, name: object, allowed: tuple[N, ...], error: type[ValueError] = ValueError) -> N:
    """`name` as one of `allowed`; else `error` with one line naming the field, the bad value and the names allowed."""
    for known in allowed:
        if name == known:
            return known
    raise error(f"{field}={name!r}: allowed are {', '.join(allowed)}")


def check_frames(field: str, value: object, error: type[ValueError] = ValueError) -> FrameChoice:
    """A clip preview's frames: first, middle, all, or a whole number N from 2 to MAX_PREVIEW_FRAMES (N frames
    spread evenly); a digit string is taken as N (a command line's "8"). Else `error` with one line."""
    if isinstance(value, str) and re.fullmatch(r"[0-9]{1,3}", value):  # ASCII digits only: "²" and 5000 digits are names
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        if 2 <= value <= MAX_PREVIEW_FRAMES:
            return value
        raise error(f"{field}={value}: a number of frames must be from 2 to {MAX_PREVIEW_FRAMES} "
                    "(use first or middle for one frame)")
    for known in FRAMES_NAMES:
        if value == known:
            return known
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:40] + "..."
    raise error(f"{field}={shown}: allowed are {', '.join(FRAMES_NAMES)} or a number of frames from 2 to "
                f"{MAX_PREVIEW_FRAMES}")

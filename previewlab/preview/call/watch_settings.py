"""A watch's settings, frozen: built from the keywords watch() takes, and checked in one place, so a bad value
fails in one line as the server's and the bench's do (settings.py)."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict

from previewlab.preview.names import BatchPreview, DecodeAt, DecoderName, EncoderName, FrameChoice, Mode, Target
from previewlab.preview.settings import PREVIEW_FIELDS, PreviewSettings, check_fps
from previewlab.preview.source.steps import Source
from previewlab.preview.timing.stopwatch import Clock, Device


class WatchKeywords(TypedDict, total=False):
    """watch()'s keywords: the preview settings' (settings.PreviewSettings), then a watch's own (WatchSettings)."""
    decoder: DecoderName
    every: int
    preview_max: int
    encoder: EncoderName
    quality: int
    mode: Mode
    budget: float
    target: Target
    batch_preview: BatchPreview
    frames: FrameChoice
    decode_at: DecodeAt
    taesd: str | None
    fps: float
    inflight: int
    size: tuple[int, int] | None
    source: Source | Literal["auto"]
    clock: Clock
    device: Device | None


@dataclass(frozen=True)
class WatchSettings:
    """What a watch is made with. The preview settings are where its live controls start (the page may change
    them); the rest holds for the watch's life. source: `callback` (pass the watch as callback_on_step_end),
    `scheduler` (the scheduler's own step, for the call; call the pipeline as it is) or `modular` (a block in a
    Modular pipeline's denoising loop); `auto` takes the callback where the pipeline has one that hands over
    latents, the block for a Modular pipeline, else the scheduler."""
    preview: PreviewSettings = field(default_factory=PreviewSettings)
    taesd: str | None = None             # a TAE's path (file or folder); None: the one the pipe's folder ships
    fps: float = 0.0                     # a clip's playback rate, for the page's animated previews (0: its family's)
    inflight: int = 2                    # overlap: previews in flight at once at most; one more is skipped
    size: tuple[int, int] | None = None  # (height, width) px where the latents do not say it (FLUX's packed ones
                                         # at a non-square size)
    source: Source | Literal["auto"] = "auto"  # where the steps come from (steps.py); auto: the best the pipe has
    clock: Clock = time.perf_counter     # tests: a fake host clock
    device: Device | None = None         # tests: a fake asynchronous device

    def __post_init__(self) -> None:
        object.__setattr__(self, "fps", check_fps(self.fps))  # raises SettingsError

    @classmethod
    def of(cls, **keywords: Any) -> WatchSettings:
        """From watch()'s keywords (WatchKeywords). Raises TypeError naming an unknown keyword, SettingsError
        for a bad value."""
        unknown = sorted(set(keywords) - set(WatchKeywords.__annotations__))
        if unknown:
            raise TypeError(f"watch() got an unexpected keyword argument {unknown[0]!r}; its keywords: "
                            f"{', '.join(WatchKeywords.__annotations__)}")
        preview = PreviewSettings(**{k: keywords.pop(k) for k in PREVIEW_FIELDS if k in keywords})
        return cls(preview, **keywords)

"""What a run may ask of this server, and what the server offers the page: its defaults, its encoders, its notes.

Both are fixed when the server is built (from the model and the RunOptions) and never change after: every
`start` and `set` is checked against the Offer, and `hello` shows it.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from previewlab.preview.decoding.decoders import default_for
from previewlab.preview.decoding.encoders import ENCODERS
from previewlab.preview.models import Model
from previewlab.preview.record.run import RunMeta
from previewlab.preview.timing.busy import usable_cores
from previewlab.preview.timing.stopwatch import Clock, host_clock
from previewlab.preview.settings import MAX_NUM_FRAMES, PreviewSettings, RunSettings, default_mode

from previewlab.server.ws import outbound, protocol
from previewlab.server.core.limits import DEFAULT_MAX_PIXEL_STEPS


@dataclass(frozen=True)
class RunOptions:
    """What a start may ask (the largest side, pixels times steps), and how the worker runs it (previews in
    flight, a compiled decoder)."""
    max_side: int = 1024
    max_pixel_steps: int = DEFAULT_MAX_PIXEL_STEPS
    inflight: int = 2
    compile_decoder: bool = False
    shutdown_grace_s: float = 10.0  # SIGTERM waits this long for the run's step and final image (graceful)
    clock: Callable[[], Clock] = host_clock  # each run's host clock, asked at its start (tests: a fake one)


def fitting_frames(frames: int, step: int, pixel_steps: int, limit: int) -> int:
    """A video model's default clip length for the page: its own (Wan 81, HunyuanVideo 129), shortened to the
    longest 1 + k x step frames whose run of pixel_steps per frame fits the server's work limit, so the page's
    first Start is not refused; at least two latent frames (1 + step)."""
    if limit <= 0 or frames * pixel_steps <= limit:
        return frames
    k = max(1, (limit // max(1, pixel_steps) - 1) // step)
    return min(frames, 1 + k * step)


@dataclass(frozen=True)
class Offer:
    """The run defaults the page starts from (the model's size, capped by max_side; a clip's length within the
    work limit), the work limit, the encoders this server can run (`hello` offers these, and a start or set
    naming another is refused), why the default decoder is not the model's TAESD ("" when it is), and the words
    the page hints at (the demo model's only)."""
    defaults: RunSettings
    max_pixel_steps: int
    encoders: tuple[str, ...]
    decoder_note: str = ""
    vocabulary: dict[str, list[str]] | None = None

    @classmethod
    def of(cls, model: Model, runs: RunOptions) -> Offer:
        side = min(model.default_size, runs.max_side)
        video = model.space.video  # a clip: its default length and rate, and up to MAX_NUM_FRAMES frames
        step = model.space.temporal if video else 1
        frames = fitting_frames(model.num_frames, step, 20 * side * side, runs.max_pixel_steps) if video else 1
        decoder, note = default_for(model)
        defaults = RunSettings(steps=20, width=side, height=side, max_side=runs.max_side,
                               preview=PreviewSettings(decoder=decoder, mode=default_mode(model.device.type)),
                               num_frames=frames, fps=model.fps if video else 0.0,
                               max_frames=MAX_NUM_FRAMES if video else 1, frame_step=step)
        if model.prompt:  # a prompt the model knows (the demo model's): the page starts with it
            defaults = replace(defaults, prompt=model.prompt)
        if model.guidance is not None:
            defaults = replace(defaults, guidance=model.guidance)
        vocabulary = None
        if model.name == "demo":
            from previewlab.preview.models.demo_scenes import vocabulary as scenes

            vocabulary = scenes()
        encoders = tuple(e for e in ENCODERS if e != "nvjpeg" or model.device.type == "cuda")
        return cls(defaults, runs.max_pixel_steps, encoders, note, vocabulary)

    def parse(self, text: str) -> protocol.Message:
        """One text frame, checked against what this server offers; raises ProtocolError."""
        return protocol.parse(text, defaults=self.defaults, max_pixel_steps=self.max_pixel_steps,
                              encoders=self.encoders)

    def hello(self, model: Model, live: PreviewSettings | None, running: RunMeta | None,
              starts: bool) -> outbound.Outbound:
        """The defaults offered carry the preview settings now: a running run's live ones, or a script's (live)."""
        defaults = self.defaults if live is None else replace(self.defaults, preview=live)
        return outbound.hello(model, defaults, max_pixel_steps=self.max_pixel_steps, encoders=self.encoders,
                              running=running, starts=starts, decoder_note=self.decoder_note,
                              vocabulary=self.vocabulary, cores=usable_cores())

"""A watched call's phases, from hooks on the user's own modules (phase_hooks.PhaseHooks): its text encoding, its
denoiser's first forward (step 1 begins, and the call where no text encoding came first) and the pipeline's own
final decode, each told to the watched call (watched_call.py) when it fires on the thread that owns the call and
in this watch's pipeline's call, never another pipeline's that shares its modules.
"""
from __future__ import annotations

from typing import Any

from previewlab.preview.call.phase_hooks import PhaseHooks
from previewlab.preview.call.watched_call import WatchedCall
from previewlab.preview.source.steps import StepTap


class WatchPhases:
    """The hooks, installed on construction until hooks.remove(). step_tap: the watch's, installed at a call's
    first forward for that call only (the user's scheduler is left as it was after it)."""

    def __init__(self, pipe: Any, watched: WatchedCall, step_tap: StepTap) -> None:
        self.pipe, self.watched, self.step_tap = pipe, watched, step_tap
        self.latent_hw: tuple[int, int] | None = None  # LTX: the latent height and width of the call's clip
        self.hooks = PhaseHooks(pipe, first_forward=self._first_forward, decode_start=self._decode_start,
                                decode_end=self._decode_end, text_start=self._text_start, text_end=self._text_end,
                                on_error=watched.raised)

    def _first_forward(self, kwargs: dict[str, Any]) -> None:
        """The denoiser's first forward of a call. LTXPipeline calls its transformer with the clip's latent
        height and width, which its packed latents do not say (image_size reads them)."""
        w = self.watched
        cut = w.cut and w.owner.same_call()  # the cut call's own forwards
        if cut or not w.owner.ours():  # (or another pipeline's, sharing this denoiser: its own watch's call)
            self.hooks.arm()
            return
        h, wd = kwargs.get("height"), kwargs.get("width")
        self.latent_hw = (h, wd) if isinstance(h, int) and isinstance(wd, int) else None
        if not w.started_here():  # a call without text encoding (prompt_embeds given)
            w.enter()
        w.call.denoiser_start()
        if not self.step_tap.installed:  # for this call only: the user's scheduler is left as it was after it
            self.step_tap.install()

    def _text_start(self) -> None:
        w = self.watched
        if not w.owner.ours():
            return
        if not w.started_here() or w.call.denoiser_started:  # not a call's second text encoder
            w.enter()
        w.call.text_start()

    def _text_end(self) -> None:
        w = self.watched
        if w.call.state == "started" and w.owner.here() and w.owner.ours():
            w.call.text_end()

    # the pipeline's own final decode, never a preview's (the hooks leave out a VAE run inside a step)
    def _decode_start(self) -> None:
        w = self.watched
        if not w.owner.here() or not w.owner.ours():
            return
        if w.call.state == "denoising":
            w.end_denoise()  # a loop that ended before its last step (stopped, or fewer steps than planned)
        w.call.decode_start()

    def _decode_end(self) -> None:
        w = self.watched
        if w.owner.here() and w.owner.ours():
            w.call.decode_end()

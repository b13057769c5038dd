"""Hooks on a pipeline's own modules that say where a measured call's phases pass: its text encoders (start and
end), its denoiser's first forward (step 1 begins), and its VAE decoder's final decode (start and end). A Modular
run (modular_run.py) and a user's watched call (watch_phases.py) read their phases this way; the engine's classic
run encodes and decodes itself and tells its lifecycle where they passed.

No hook changes what a module computes: each only calls back. The denoiser's hook removes itself at its first
call (arm() sets it again for the next call), so the steps pay for no phase hook. A VAE decode inside a step (a sync
preview with the full VAE) is a preview, never the final decode: the step source runs each step inside step().
The final decode is the one on the thread that made the call (the thread of the denoiser's first forward).

With on_error, a forward hook that torch runs even when the forward raises (always_call) on the text encoders, the
denoiser and the VAE's decoder hands on the exception that leaves them: a call that fails ends at once. It is the
one hook a step pays for (on the denoiser: a Python call that tests its result against None and returns), the
price of ending a call that raises at once rather than at the next call. Torch runs it for an
Exception only; a Ctrl-C (KeyboardInterrupt) is seen where the next call begins, or at the script's exit.
"""
from __future__ import annotations

import contextlib
import sys
import threading
from typing import Any, Callable, Iterator

from previewlab.preview.models import denoiser
from previewlab.preview.models.families import vae_of

Call = Callable[[], None]
OnError = Callable[[BaseException], None]
TEXT_ENCODERS = ("text_encoder", "text_encoder_2", "text_encoder_3")


class PhaseHooks:
    """Installed on construction, until remove(). first_forward is handed the forward's keyword arguments
    (LTX passes the clip's latent height and width there); text_*: None installs no text encoder hooks; on_error:
    None, nothing watches for a forward that raises."""

    def __init__(self, pipe: Any, *, first_forward: Callable[[dict[str, Any]], None], decode_start: Call,
                 decode_end: Call, text_start: Call | None = None, text_end: Call | None = None,
                 on_error: OnError | None = None) -> None:
        self.pipe = pipe
        self.first_forward, self.decode_start, self.decode_end = first_forward, decode_start, decode_end
        self.stepping = False         # a step is running: a VAE decode now is a preview's
        self.caller: int | None = None  # the thread that made the call
        self._hooks: list[Any] = []
        self._first: Any = None
        if text_start is not None and text_end is not None:
            for name in TEXT_ENCODERS:
                te = getattr(pipe, name, None)
                if te is not None:
                    self._hooks.append(te.register_forward_pre_hook(lambda *a: text_start()))
                    self._hooks.append(te.register_forward_hook(lambda *a: text_end()))
        if on_error is not None:
            watched = [getattr(pipe, name, None) for name in TEXT_ENCODERS] + [denoiser(pipe)]
            for module in watched:
                if module is not None:
                    self._hooks.append(module.register_forward_hook(_raised(on_error), always_call=True))
        vae = vae_of(pipe)
        # the module its decode runs: a VAE's `decoder`; Stable Cascade's VQ-GAN has none, its decode runs its
        # up_blocks (then one output conv)
        part = getattr(vae, "decoder", None) or getattr(vae, "up_blocks", None)
        if part is not None:  # pixel space and a second stage's latents have no final decode of theirs
            self._hooks.append(part.register_forward_pre_hook(lambda *a: self._final(self.decode_start)))
            self._hooks.append(part.register_forward_hook(lambda *a: self._final(self.decode_end)))
            if on_error is not None:  # the final decode raising (out of memory), never a preview's
                failed = _raised(on_error)
                self._hooks.append(part.register_forward_hook(
                    lambda *a: self._final(lambda: failed(*a)), always_call=True))
        self.arm()

    def arm(self) -> None:
        """A one-shot hook: the denoiser's first forward of the next call marks where step 1 begins."""
        if self._first is None:
            self._first = denoiser(self.pipe).register_forward_pre_hook(self._forward, with_kwargs=True)

    def _forward(self, module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        self._first.remove()
        self._first = None
        self.caller = threading.get_ident()
        self.first_forward(kwargs)

    def _final(self, then: Call) -> None:
        if not self.stepping and (self.caller is None or threading.get_ident() == self.caller):
            then()

    @contextlib.contextmanager
    def step(self) -> Iterator[None]:
        """Around each step's work: the VAE decodes inside are previews."""
        self.stepping = True
        try:
            yield
        finally:
            self.stepping = False

    def remove(self) -> None:
        for h in self._hooks:
            h.remove()
        self._hooks.clear()
        if self._first is not None:
            self._first.remove()
            self._first = None


def _raised(on_error: OnError) -> Callable[..., None]:
    """A forward hook for always_call: torch calls it with no result while the forward's exception is being
    handled (a module's forward never returns None otherwise); it returns nothing, so no output changes."""
    def hook(module: Any, args: Any, result: Any) -> None:
        if result is None:  # a forward's own result is never None: on the normal path this is the one test
            exc = sys.exc_info()[1]
            if exc is not None:
                on_error(exc)
    return hook

"""Who owns a watched call: the thread that made it, one call at a time, and whether a hook fires in this watch's
pipeline's call or in another pipeline's that shares its modules.

Told from code objects only (the pipeline's __call__ along its classes), never from frames' locals; asked at a
call's phases and where a call begins, never at a step. A thread that has left its call part-way is read from its
frames by call_exit.left_call.
"""
from __future__ import annotations

import inspect
import sys
import threading
import types
from typing import Any, Sequence

from previewlab.preview.call.call_exit import in_call, left_call

CALL_DEPTH = 48  # frames looked up for the pipeline call a hook fires in (a module's forward is a few below it)


class WatchError(RuntimeError):
    """A watch asked to measure what it cannot: another pipeline's call, or a second call at once."""


class SameCall:
    """What the watch leaves in the pipeline's `_interrupt` while its call runs: as falsy as the False it
    replaces (the pipeline reads only its truth: nothing it computes changes). A diffusers pipeline sets
    `self._interrupt = False` as each call begins, so finding False there again says a new call began, where a
    call that failed before its first step (after its text encoding) would otherwise lend it its marks."""

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "False"


SAME_CALL = SameCall()


def call_codes(pipe: Any) -> frozenset[types.CodeType]:
    """The code objects of the pipeline's __call__ along its classes (a user's subclass calls its parent's),
    under diffusers' no_grad wrapper."""
    codes = set()
    for cls in type(pipe).__mro__:
        fn = vars(cls).get("__call__")
        code = getattr(inspect.unwrap(fn), "__code__", None) if callable(fn) else None
        if code is not None:
            codes.add(code)
    return frozenset(codes)


def in_other_pipeline(own: frozenset[types.CodeType], depth: int = CALL_DEPTH) -> bool:
    """The current hook fires in another pipeline class's __call__, not in `own` (modules shared by two
    pipelines, an img2img made from `pipe.components`, fire their hooks for either). Read from the frames' code
    objects only, never their locals (a frame's locals read on Python 3.11 would keep its tensors alive); two
    pipelines of one class are not told apart. Asked at a call's phases, never at a step."""
    f: types.FrameType | None = sys._getframe(1)
    for _ in range(depth):
        if f is None:
            return False
        code = f.f_code
        if code in own:
            return False
        if code.co_name == "__call__" and "pipelines" in code.co_filename.replace("\\", "/").split("/"):
            return True  # a classic diffusers pipeline's __call__ (a Modular one's blocks live in modular_pipelines/)
        f = f.f_back
    return False


class CallOwner:
    """The thread whose call is in progress (None: none) and the calls this watch measures: the pipeline's own
    __call__ and those of the pipelines it runs inside it (`inner`), told from another pipeline's."""

    def __init__(self, pipe: Any, inner: Sequence[Any]) -> None:
        self.pipe = pipe
        self.codes = call_codes(pipe).union(*(call_codes(p) for p in inner))
        self.thread: int | None = None
        self.framed = False  # that call began inside the pipeline's __call__ (call_exit.py)

    def here(self) -> bool:
        """This thread made the call in progress."""
        return threading.get_ident() == self.thread

    def elsewhere(self) -> bool:
        """Another thread's call is in progress."""
        return self.thread is not None and threading.get_ident() != self.thread

    def ours(self) -> bool:
        """The hook fires in this watch's pipeline's call (or in no pipeline call found): not in another
        pipeline's that shares its modules."""
        return not in_other_pipeline(self.codes)

    def left(self) -> bool:
        """The call in progress began inside the pipeline's __call__, and its thread has left that (or ended)."""
        return self.thread is not None and self.framed and left_call(self.thread, self.codes)

    def same_call(self) -> bool:
        """The pipeline's call is still the one that claimed it: it has not set its `_interrupt` to False again
        (SameCall)."""
        return self.pipe.__dict__.get("_interrupt") is not False

    def claim(self) -> None:
        """This thread's call begins: it owns the watch until release()."""
        self.thread, self.framed = threading.get_ident(), in_call(self.codes)
        if self.pipe.__dict__.get("_interrupt") is False:
            self.pipe._interrupt = SAME_CALL  # the pipeline's next call sets False again (same_call)

    def release(self) -> None:
        self.thread = None

    def restore(self) -> None:
        """Leave the pipeline's `_interrupt` as the watch found it (the watch is removed)."""
        if isinstance(self.pipe.__dict__.get("_interrupt"), SameCall):
            self.pipe._interrupt = False

"""Where a watched call leaves its pipeline by an exception no module hook is handed: a user's own step callback
that raises, a scheduler that raises. Two places see it, neither inside a step:

- at once, the pipeline's progress bar: a diffusers pipeline runs its denoising loop inside
  `with self.progress_bar(total=...)`, whose exit an exception passes on its way out. ExitWatch wraps that method
  on the pipeline instance (until remove()); the bar the loop steps is the pipeline's own, unwrapped, so a step
  pays nothing. It hands on an Exception only, as torch's always_call hooks do (phase_hooks.py): a Ctrl-C is told
  where the next call begins, or at the script's exit.
- later, the thread's frames: a pipeline without such a bar, or a BaseException (SystemExit, a Ctrl-C). When
  another thread's call begins, left_call() says whether the thread of the call in progress is still inside the
  pipeline's __call__; one that has left it (or ended) left the call part-way, and nothing runs.
"""
from __future__ import annotations

import sys
import types
from typing import Any, Callable, Iterable, Iterator

OnError = Callable[[BaseException], None]


class _Bar:
    """The pipeline's progress bar as its `with` sees it: entering gives the bar itself (the loop steps it
    directly), leaving by an Exception hands that exception on after the bar has closed."""

    def __init__(self, bar: Any, on_error: OnError) -> None:
        self._bar, self._on_error = bar, on_error

    def __enter__(self) -> Any:
        return self._bar.__enter__()

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> Any:
        try:
            return self._bar.__exit__(kind, exc, tb)
        finally:
            if isinstance(exc, Exception):
                self._on_error(exc)

    def __iter__(self) -> Iterator[Any]:  # `for t in self.progress_bar(timesteps)`: the bar's own iterator
        return iter(self._bar)

    def __getattr__(self, name: str) -> Any:  # a bar made without `with` (update(), close()): the bar's own
        return getattr(self._bar, name)


class ExitWatch:
    """Wraps `progress_bar` on each pipeline given (the watch's and those it runs inside its call) until
    remove(), which leaves each as it was."""

    def __init__(self, pipes: Iterable[Any], on_error: OnError) -> None:
        self._wrapped: list[tuple[Any, Any]] = []  # (pipeline, its instance-level progress_bar before ours)
        for pipe in pipes:
            own = getattr(pipe, "progress_bar", None)
            if not callable(own):
                continue
            self._wrapped.append((pipe, vars(pipe).get("progress_bar")))

            def progress_bar(*args: Any, _own: Callable[..., Any] = own, **kwargs: Any) -> _Bar:
                return _Bar(_own(*args, **kwargs), on_error)

            object.__setattr__(pipe, "progress_bar", progress_bar)  # an instance attribute, never the config

    def remove(self) -> None:
        for pipe, before in self._wrapped:
            if before is not None:
                object.__setattr__(pipe, "progress_bar", before)
            else:
                vars(pipe).pop("progress_bar", None)
        self._wrapped.clear()


def in_call(codes: frozenset[types.CodeType]) -> bool:
    """This thread is inside one of `codes` (the pipeline's __call__): asked once, as a call begins."""
    f: types.FrameType | None = sys._getframe(1)
    while f is not None:
        if f.f_code in codes:
            return True
        f = f.f_back
    return False


def left_call(thread: int, codes: frozenset[types.CodeType]) -> bool:
    """`thread` has ended, or runs none of `codes` now: a call it made inside one of them has been left. Reads
    the thread's frames' code objects only, never their locals."""
    f: types.FrameType | None = sys._current_frames().get(thread)  # None: the thread has ended
    while f is not None:
        if f.f_code in codes:
            return False
        f = f.f_back
    return True

"""previewlab's measuring core: what live previews cost a diffusers run, stage by stage.

The public API for your own scripts is `watch` (a drop-in step-end callback); the rest is the engine the
bench and the server are built on.
"""
from __future__ import annotations

from typing import Any


def watch(pipe: Any, **kw: Any) -> Any:
    """A diffusers step-end callback that measures your pipeline's previews. To see them live:
    `from server.embedded import serve; serve(watch)` (the server takes the watch: the core never imports it)."""
    from .callback import Watch

    if "serve" in kw:
        raise TypeError("watch(serve=...) is gone: make the watch, then `from server.embedded import serve; "
                        "serve(watch, port=8000)`")
    return Watch(pipe, **kw)


__all__ = ["watch"]

"""previewlab's measuring core: what live previews cost a diffusers run, stage by stage.

The public API for your own scripts is `watch` (a drop-in step-end callback); the rest is the engine the
bench and the server are built on.
"""
from __future__ import annotations

from typing import Any


def watch(pipe: Any, **kw: Any) -> Any:
    """A diffusers step-end callback that measures (and with serve=True shows) your pipeline's previews."""
    from .callback import Watch

    return Watch(pipe, **kw)


__all__ = ["watch"]

"""What a run's pipeline call is given beyond the prompt: its task's pipeline (image to image) and arguments,
and only the keywords its __call__ takes."""
from __future__ import annotations

import inspect
import weakref
from typing import Any

from previewlab.preview.models import Model
from previewlab.preview.settings import RunSettings


def takes(pipe: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments the pipeline's __call__ takes (HunyuanVideo 1.5 takes no guidance_scale: its guider
    holds it); all of them where it takes **kwargs."""
    params = inspect.signature(type(pipe).__call__).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return kwargs
    return {k: v for k, v in kwargs.items() if k in params}


def clip_args(model: Model, settings: RunSettings) -> dict[str, Any]:
    """A video pipeline's clip length for its call (num_frames, which every video pipeline takes); {} for images."""
    return {"num_frames": settings.num_frames} if model.space.video else {}


_IMG2IMG: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


class TaskError(ValueError):
    """A task the loaded model cannot run (img2img without an image-to-image pipeline); one line."""


def img2img_pipe(model: Model) -> Any:
    """The image-to-image pipeline of the loaded one, made once: AutoPipelineForImage2Image.from_pipe shares
    every loaded component (no weights are loaded or copied). Raises TaskError."""
    if model.pipe not in _IMG2IMG:
        from diffusers import AutoPipelineForImage2Image

        try:
            pipe = AutoPipelineForImage2Image.from_pipe(model.pipe)
        except Exception as e:  # diffusers raises ValueError or KeyError for a class with no img2img twin
            raise TaskError(f"init: {type(model.pipe).__name__} has no image-to-image pipeline in diffusers "
                            f"({type(e).__name__}); use text-to-image (init null)") from None
        pipe.set_progress_bar_config(disable=True)
        _IMG2IMG[model.pipe] = pipe
    return _IMG2IMG[model.pipe]

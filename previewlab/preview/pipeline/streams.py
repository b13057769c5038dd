"""The process's device streams: one of each kind per device, made on first use and kept for every run.

The caching allocator reuses a block only on the stream it was allocated on, and each torch.cuda.Stream()
takes the next of the device's pool streams. A new side stream per run would start every run with an empty
cache: cudaMalloc for the whole decode working set, and reserved memory growing by that much each time.
"""
from __future__ import annotations

import threading
import weakref
from typing import Any

from previewlab.preview.timing.stopwatch import Device

_lock = threading.Lock()
_streams: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()


def _kept(dev: Device, kind: str) -> Any:
    with _lock:
        mine = _streams.setdefault(dev, {})
        if kind not in mine:
            mine[kind] = dev.stream()
        return mine[kind]


def side_stream(dev: Device) -> Any:
    """Where overlap mode decodes, resizes and copies previews, beside the denoising on the main stream."""
    return _kept(dev, "side")


def jpeg_stream(dev: Device) -> Any:
    """Where every on-device JPEG encode and the copy of its bytes to the host run. torchvision's nvJPEG
    encoder keeps the stream current when it is first built and synchronises only that one on each call
    (pytorch/vision#8929): under any other stream its output is read unordered, and under the side or the
    main stream each encode would wait for the next decode or for the queued steps."""
    return _kept(dev, "jpeg")

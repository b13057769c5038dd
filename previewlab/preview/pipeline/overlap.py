"""Overlap mode: preview work leaves the denoising thread, with at most K frames in flight. It is one of the two
strategies over a preview's stages (stages.py); sync.py is the other, with the same submit().

On a device (CUDA, MPS, XPU: stopwatch.Accelerator): the decode runs on the device's side stream (one per
process, preview/pipeline/streams.py), which waits on an
event recorded after the step's latents are ready;
the latents are first cloned on the main stream, so the next step can never change them under the decode.
Conversion to uint8 and any downscale happen on the device; the copy goes to pinned host memory without
blocking; an encode thread waits for the copy's event (that wait is its sync_ms) and encodes.

CPU: there is no device to overlap with, so the decode stays on the denoising thread (torch already uses
every core for it); the JPEG encode and the frame hand-off move to the encode thread.
"""
from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

import numpy as np
import torch

from previewlab.preview.pipeline.row_ledger import Marks
from previewlab.preview.pipeline.stages import decode_resize
from previewlab.preview.pipeline.streams import side_stream
from previewlab.preview.timing.ranges import Ranges
from previewlab.preview.timing.stopwatch import Mark, Stopwatch


class InFlight:
    """At most `limit` previews between submit and done. full() is checked before starting one: a preview
    due while the pipeline is full is skipped and counted, never queued."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"inflight={limit}: must be at least 1")
        self.limit = limit
        self.count = 0
        self.peak = 0
        self._lock = threading.Lock()

    def full(self) -> bool:
        with self._lock:
            return self.count >= self.limit

    def enter(self) -> None:
        with self._lock:
            if self.count >= self.limit:
                raise RuntimeError("in-flight limit exceeded")
            self.count += 1
            self.peak = max(self.peak, self.count)

    def leave(self) -> None:
        with self._lock:
            self.count -= 1


class Overlap:
    def __init__(self, sw: Stopwatch, limit: int, ranges: Ranges | None = None) -> None:
        self.sw, self.dev = sw, sw.dev
        self.ranges = ranges or Ranges(False)
        self.cuda = self.dev is not None
        self.flight = InFlight(limit)
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="previewlab-encode")
        self.stream = side_stream(self.dev) if self.dev is not None else None
        self.last_copied: Mark | None = None  # the latest preview's copy event: the run's end depends on it

    def submit(self, latents: torch.Tensor, decode: Callable[[torch.Tensor], torch.Tensor],
               to_u8: Callable[[torch.Tensor], torch.Tensor], finish: Callable[[np.ndarray, float], None],
               marks: Marks, on_device: bool = False) -> Future[None]:
        """Start one preview; finish(host uint8 array, sync_ms) runs on the encode thread. latents: what the
        preview decodes (one image's, or a batch's for a grid); decode gives the frames (F, 3, H, W) to show (one
        for an image, a clip's picked frames).
        sync_ms is the part of the encode thread's wait for the copy that no event times (see Stopwatch.wait).
        on_device (CUDA, an encoder like nvjpeg): no pixel copy; the encode thread gets the device tensor once
        the resize has passed, and finish encodes it on the encoder's own stream."""
        self.flight.enter()
        host: Any
        try:
            if self.cuda:
                host, copied = self._device_part(latents, decode, to_u8, marks, on_device)
            else:  # no device to overlap with: the stages stay here, only the encode leaves
                host, copied = decode_resize(self.sw, self.ranges, marks, latents, decode, to_u8).numpy(), None
        except BaseException:
            self.flight.leave()
            raise
        return self.pool.submit(self._host_part, host, copied, finish, on_device)

    def _device_part(self, latents: torch.Tensor, decode: Callable[[torch.Tensor], torch.Tensor],
                     to_u8: Callable[[torch.Tensor], torch.Tensor], marks: Marks,
                     on_device: bool) -> tuple[torch.Tensor, Mark | None]:
        dev, stream = self.dev, self.stream
        assert dev is not None
        lat = latents.clone()  # on the main stream, ordered before the next step can touch `latents`
        ready = dev.event()
        with dev.use(stream):
            dev.after(stream, ready)
            dev.keep(lat, stream)  # the allocator must not hand lat's memory to the main stream early
            u8 = decode_resize(self.sw, self.ranges, marks, lat, decode, to_u8)
            if on_device:  # the encode thread reads u8 once its wait has seen res1 pass
                dev.keep(u8, stream)
                self.last_copied = marks.res1
                return u8, marks.res1
            host = dev.to_host(u8)
            copied = self.sw.mark()
        marks.copied = self.last_copied = copied
        return host, copied

    def _host_part(self, host: Any, copied: Mark | None, finish: Callable[[np.ndarray, float], None],
                   on_device: bool) -> None:
        try:
            # the copy must have landed before a byte of `host` is read; for an on-device encoder this wait
            # is what orders the frame conversion before the encoder's own stream reads it
            waited = self.sw.wait(copied)
            arr = host if on_device or not isinstance(host, torch.Tensor) else host.numpy()
            finish(arr, waited.uncounted_ms)
        finally:
            self.flight.leave()

    def drain(self) -> None:
        """Wait for every preview in flight. The main thread then waits on the last copy too: the encode
        thread has already passed it, so this costs nothing on a GPU, but it says what the run's end depends
        on (and moves a fake device's clock in tests)."""
        self.pool.shutdown(wait=True)
        self.sw.wait(self.last_copied)

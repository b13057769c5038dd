"""Reading runs from disk never runs on the event loop: the routes' listings, images and exports, and retention."""
from __future__ import annotations

import asyncio
from concurrent.futures import Future
from typing import Any, Callable, TypeVar

from previewlab.server.data.serial import SerialThread

T = TypeVar("T")


class DiskReads:
    """One thread: 16 listings at once queue behind each other instead of taking turns with the loop for the
    interpreter lock. A daemon (serial.py): a read stuck on a stalled disk never holds the process's exit."""

    def __init__(self) -> None:
        self._thread = SerialThread("previewlab-disk")

    def submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        return self._thread.submit(fn, *args)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.wrap_future(self.submit(fn, *args))

    def close(self) -> None:
        """Reads queued still run; a read asked after this gets a thread of its own."""
        self._thread.stop(0)
        self._thread = SerialThread("previewlab-disk")

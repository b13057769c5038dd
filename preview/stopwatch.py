"""Marks on the host clock (CPU) or CUDA events (GPU), read without adding a device synchronisation."""
from __future__ import annotations

from typing import Any, Callable

import torch


class Stopwatch:
    """mark() returns a handle; ms(a, b) is the time between two handles once ready() says both have passed.

    On CUDA a mark is an event recorded on the current stream, so ms() is device time; ready() asks the event
    (query, never a wait), and wait() is the one place the host blocks for the device.
    """

    def __init__(self, device: torch.device, clock: Callable[[], float]) -> None:
        self.cuda = device.type == "cuda"
        self.clock = clock

    def mark(self) -> Any:
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return self.clock()

    def ms(self, a: Any, b: Any) -> float:
        if a is None or b is None:
            return 0.0
        if self.cuda:
            if not b.query():
                b.synchronize()  # only on a forced read (a run that failed mid-step); normal reads are ready
            return float(a.elapsed_time(b))
        return (b - a) * 1e3

    def ready(self, h: Any) -> bool:
        return not self.cuda or h is None or bool(h.query())

    def wait(self, h: Any) -> None:
        if self.cuda and h is not None:
            h.synchronize()

"""A fake asynchronous device, so the CUDA accounting runs on the CPU with a known lag.

The host does its real work (the real tiny pipeline runs on the CPU, its time is real); each model call
also queues `ms` of device work on the current fake stream, which runs behind the host exactly as a GPU
would: an event is passed when its stream's earlier work is done, a wait blocks the host (moves its clock)
until then, and streams run side by side. The host clock is the real one plus the time this thread spent
blocked on the fake device, so a wait on the encode thread never moves the denoising thread's clock.
"""
from __future__ import annotations

import contextlib
import threading
import time
from typing import Any, Iterator

import torch


class FakeClock:
    def __init__(self) -> None:
        self._local = threading.local()
        self.base = 0.0  # where threads other than the first one start (the encode thread starts caught up)

    def skew(self) -> float:
        return getattr(self._local, "skew", self.base)

    def __call__(self) -> float:
        return time.perf_counter() + self.skew()

    def block_until(self, t: float) -> None:
        now = self()
        if t > now:
            self._local.skew = self.skew() + (t - now)
            if threading.current_thread() is threading.main_thread():
                self.base = self._local.skew


class FakeStream:
    def __init__(self) -> None:
        self.busy_until = 0.0  # host-clock time when the work queued so far is done


class FakeEvent:
    def __init__(self, dev: FakeDevice, t: float) -> None:
        self.dev, self.t = dev, t

    def query(self) -> bool:
        return self.dev.clock() >= self.t

    def synchronize(self) -> None:
        self.dev.waits += 1
        self.dev.clock.block_until(self.t)

    def elapsed_time(self, other: FakeEvent) -> float:
        return (other.t - self.t) * 1e3


class FakeDevice:
    def __init__(self, clock: FakeClock, copy_ms: float = 1.0) -> None:
        self.clock, self.copy_ms = clock, copy_ms
        self.main = FakeStream()
        self._cur = threading.local()
        self.queued_ms = 0.0  # all device work queued, for the tests' bounds
        self.waits = 0

    def current(self) -> FakeStream:
        return getattr(self._cur, "stream", self.main)

    def work(self, ms: float) -> None:
        """Queue ms of device work on the current stream, as a kernel launch does."""
        s = self.current()
        s.busy_until = max(s.busy_until, self.clock()) + ms / 1e3
        self.queued_ms += ms

    def event(self) -> FakeEvent:
        s = self.current()
        s.busy_until = max(s.busy_until, self.clock())
        return FakeEvent(self, s.busy_until)

    def stream(self) -> FakeStream:
        return FakeStream()

    @contextlib.contextmanager
    def use(self, stream: FakeStream) -> Iterator[FakeStream]:
        prev = self.current()
        self._cur.stream = stream
        try:
            yield stream
        finally:
            self._cur.stream = prev

    def after(self, stream: FakeStream, event: FakeEvent) -> None:
        stream.busy_until = max(stream.busy_until, event.t)

    def keep(self, tensor: torch.Tensor, stream: Any) -> None:
        pass

    def to_host(self, tensor: torch.Tensor) -> torch.Tensor:
        self.work(self.copy_ms)
        return tensor.clone()

    def on(self, module: torch.nn.Module, ms: float) -> Any:
        """Every forward of `module` also queues ms of device work; returns the hook handle."""
        return module.register_forward_hook(lambda *a: self.work(ms))

"""Marks on the host clock (CPU) or on a device's timeline (CUDA events), read without adding a device sync.

Wall time is host time, stages on CUDA are device time; each millisecond of a run must land in exactly one of
them. The device timeline of the main stream is contiguous (every gap between two events is either device work
or the device idle while the host works), so a host wait on an event adds wall time only where the device had
already passed the event: the driver's wake-up, nothing else. `wait` returns that part alone (see `Waited`).

The device is injected: `CudaDevice` on a GPU, a fake one in tests (tests/fake_device.py) whose work runs
behind the host with a known lag, so the accounting is tested without a GPU.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Protocol

import torch

Clock = Callable[[], float]


class Device(Protocol):
    """What the meter needs from an asynchronous device: events, streams, pinned copies. The streams it uses
    are made once per device (preview/streams.py); one backend per device keeps them."""

    def event(self) -> Any: ...                         # recorded now on the current stream; query/synchronize/elapsed_time
    def stream(self) -> Any: ...                        # a new stream (preview/streams.py keeps the ones in use)
    def use(self, stream: Any) -> ContextManager[Any]: ...  # make `stream` current
    def after(self, stream: Any, event: Any) -> None: ...   # `stream` waits for `event` (no host wait)
    def keep(self, tensor: torch.Tensor, stream: Any) -> None: ...  # the allocator must not reuse it early
    def to_host(self, tensor: torch.Tensor) -> torch.Tensor: ...    # a non-blocking copy into pinned memory


class CudaDevice:
    def __init__(self, device: torch.device) -> None:
        self.device = device

    @staticmethod
    def of(device: torch.device) -> CudaDevice:
        """The process's one backend for a CUDA device ("cuda" is the current one), so runs share its streams."""
        index = device.index if device.index is not None else torch.cuda.current_device()
        with _backends_lock:
            if index not in _backends:
                _backends[index] = CudaDevice(torch.device("cuda", index))
            return _backends[index]

    def event(self) -> Any:
        ev = torch.cuda.Event(enable_timing=True)
        ev.record()
        return ev

    def stream(self) -> Any:
        return torch.cuda.Stream(self.device)

    def use(self, stream: Any) -> ContextManager[Any]:
        return torch.cuda.stream(stream)

    def after(self, stream: Any, event: Any) -> None:
        stream.wait_event(event)

    def keep(self, tensor: torch.Tensor, stream: Any) -> None:
        tensor.record_stream(stream)

    def to_host(self, tensor: torch.Tensor) -> torch.Tensor:
        host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
        host.copy_(tensor, non_blocking=True)
        return host


_backends: dict[int, CudaDevice] = {}
_backends_lock = threading.Lock()


@dataclass(frozen=True)
class Waited:
    """One host wait on a device event, in milliseconds.

    wait_ms: the host was blocked this long. uncounted_ms: the part of it after the device had passed the
    event, which no event times (the device's time up to the event is already in denoise/decode/resize).
    """
    wait_ms: float
    uncounted_ms: float


class Stopwatch:
    """mark() returns a handle; ms(a, b) is the time between two handles once ready() says both have passed.

    With a device, a mark is an event recorded on the current stream, so ms() is device time; ready() asks the
    event (query, never a wait), and wait() is the one place the host blocks for the device.
    """

    def __init__(self, device: torch.device | None = None, clock: Clock = time.perf_counter,
                 backend: Device | None = None) -> None:
        if backend is None and device is not None and device.type == "cuda":
            backend = CudaDevice.of(device)
        self.dev = backend
        self.cuda = backend is not None
        self.clock = clock
        # (event, host time): the latest point where host and device clocks met; maps device time to host time
        self._anchor: tuple[Any, float] | None = None

    def mark(self) -> Any:
        return self.dev.event() if self.dev is not None else self.clock()

    def anchor(self, mark: Any, host_time: float) -> None:
        """`mark` was recorded at `host_time` (a run's first mark). The clocks meet there only if the device has
        already passed it: behind work still queued (a user's own, before the pipeline call) the device reaches
        it later, by an unknown amount. Then the first wait that sees the device pass an event anchors them."""
        if self.cuda and mark.query():
            self._anchor = (mark, host_time)

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

    def host_time(self, h: Any) -> float | None:
        """When the device passed `h`, on the host clock; None without a device or an anchor. Reading it
        waits for `h` (call it after the measured work, never inside it)."""
        if not self.cuda or self._anchor is None or h is None:
            return None if self.cuda else h
        ev, t = self._anchor
        return t + self.ms(ev, h) / 1e3

    def wait(self, h: Any) -> Waited:
        """Block until the device has passed `h` (the wait a host copy needs anyway)."""
        if not self.cuda or h is None:
            return Waited(0.0, 0.0)
        pending = not h.query()
        t0 = self.clock()
        h.synchronize()
        t1 = self.clock()
        wait = (t1 - t0) * 1e3
        passed = self.host_time(h) if pending else None
        if not pending:  # passed before the wait began: all of the (tiny) wait is the host's own
            uncounted = wait
        elif passed is None:  # no anchor yet: the device time up to h is timed by events, the rest unknown
            uncounted = 0.0
        else:
            uncounted = min(wait, max(0.0, (t1 - max(t0, passed)) * 1e3))
        if pending:  # the device reached h during the wait: the clocks met again, at t1 less the wake-up
            self._anchor = (h, t1)
        return Waited(wait, uncounted)


"""Marks on the host clock (CPU) or on a device's timeline (events), read without adding a device sync.

Wall time is host time, stages on a device are device time; each millisecond of a run must land in exactly one
of them. The device timeline of the main stream is contiguous (every gap between two events is either device
work or the device idle while the host works), so a host wait on an event adds wall time only where the device
had already passed the event: the driver's wake-up, nothing else. `wait` returns that part alone (see `Waited`).

The device is injected. On an accelerator (CUDA, MPS, XPU) it is `Accelerator` over torch's device-generic
events and streams (`TorchApi`); in tests, a fake device (tests/fake_device.py) whose work runs behind the host
with a known lag, either as a whole `Device` or as the `Api` under `Accelerator`, so both paths are tested
without a device.

How stages are timed (`Stopwatch.timing`, a run's `timing` column):
  host    no device: the host clock.
  events  device time between timing events: no wait is added anywhere.
  waits   a device whose events cannot time (elapsed_time fails on this torch build, found by trying it once
          when the backend is made): every mark first waits for the device, so the host clock measures the
          device work between marks. The marks are the edges of each step and of each preview stage, so these
          runs, their baselines too, pay a device wait at each: never silently host times of queued work.
"""
from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Iterator, Literal, Protocol, Self, TypeAlias, cast

import torch

Clock = Callable[[], float]


class Event(Protocol):
    """A recorded timing event on a device's stream, as torch.Event has it (a fake device's in tests): whether the
    device has passed it (query, never a wait), a host wait for it (synchronize), and the device time in ms from
    it to a later event that has passed too (elapsed_time)."""

    def query(self) -> bool: ...
    def synchronize(self) -> None: ...
    def elapsed_time(self, end: Self, /) -> float: ...


class NewEvent(Event, Protocol):
    """A timing event not yet recorded, as an Api makes it: record(stream) puts it on that stream's timeline."""

    def record(self, stream: Any, /) -> None: ...


# What Stopwatch.mark() returns and ms(a, b) reads: a host time in s (no device, or a device timed by waits) or
# an event on the device's timeline (timed by events); which one is the stopwatch's `timing`, fixed per run.
Mark: TypeAlias = float | Event


def host_clock() -> Clock:
    """A run's host clock: the process's performance counter (a server asks for one per run; tests give theirs)."""
    return time.perf_counter
Timing = Literal["host", "events", "waits"]


class Device(Protocol):
    """What the meter needs from an asynchronous device: events, streams, pinned copies. The streams it uses
    are made once per device (preview/pipeline/streams.py); one backend per device keeps them."""

    timing: Timing  # events, or waits where the device's events cannot time

    def event(self) -> Event: ...                       # recorded now on the current stream
    def stream(self) -> Any: ...                        # a new stream (preview/pipeline/streams.py keeps the ones in use)
    def use(self, stream: Any) -> ContextManager[Any]: ...  # make `stream` current
    def after(self, stream: Any, event: Event) -> None: ...  # `stream` waits for `event` (no host wait)
    def keep(self, tensor: torch.Tensor, stream: Any) -> None: ...  # the allocator must not reuse it early
    def to_host(self, tensor: torch.Tensor) -> torch.Tensor: ...    # a non-blocking copy into pinned memory


class Api(Protocol):
    """The device-generic calls `Accelerator` is built on: torch's (`TorchApi`), or a fake device's in tests.
    Events have torch.Event's methods (record, query, synchronize, elapsed_time); streams have wait_event."""

    def event(self) -> NewEvent: ...             # a new timing event, not yet recorded
    def stream(self) -> Any: ...                 # a new stream
    def current(self) -> Any: ...                # this thread's current stream on the device
    def set(self, stream: Any) -> None: ...      # make `stream` this thread's current stream on the device
    def keep(self, tensor: torch.Tensor, stream: Any) -> None: ...  # the allocator must not reuse it early
    def to_host(self, tensor: torch.Tensor) -> torch.Tensor: ...    # a non-blocking copy into host memory


class TorchApi:
    """torch's device-generic events and streams for one accelerator device (torch.Event, torch.Stream,
    torch.accelerator). On CUDA these are the same calls torch.cuda.Event/Stream make.

    Streams are switched with torch.accelerator.set_stream, not `with stream:`: torch.Stream.__enter__ keeps its
    saved context on the stream object and refuses a second entry, and the process's side and JPEG streams are
    entered from several threads and runs. A device whose allocator cannot record a stream's use of a tensor
    (no record_stream kernel: MPS, which has one stream anyway) works on its current stream only."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        key = {"cuda": "CUDA", "xpu": "XPU", "mps": "MPS"}.get(device.type, device.type.upper())
        self.streams = torch._C._dispatch_has_kernel_for_dispatch_key("aten::record_stream", key)
        self._pinned = True

    def event(self) -> NewEvent:
        return torch.Event(self.device, enable_timing=True)

    def stream(self) -> Any:
        return torch.Stream(self.device) if self.streams else self.current()

    def current(self) -> Any:
        return torch.accelerator.current_stream(self.device)

    def set(self, stream: Any) -> None:
        # set_stream also makes the stream's device current: keep the caller's (torch.cuda.stream restores it too)
        index = torch.accelerator.current_device_index()
        torch.accelerator.set_stream(stream)
        if stream.device_index != index:
            torch.accelerator.set_device_index(index)

    def keep(self, tensor: torch.Tensor, stream: Any) -> None:
        if self.streams:
            tensor.record_stream(stream)

    def to_host(self, tensor: torch.Tensor) -> torch.Tensor:
        host = None
        if self._pinned:
            try:
                host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
            except RuntimeError:  # a build with no pinned host memory for this device: a plain copy, ordered the same
                self._pinned = False
        if host is None:
            host = torch.empty(tensor.shape, dtype=tensor.dtype)
        host.copy_(tensor, non_blocking=True)
        return host


class Accelerator:
    """One asynchronous device through device-generic events and streams: CUDA, MPS and XPU take this one path,
    and tests drive it with a fake device's `Api`. timing: events, or waits where elapsed_time fails."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.timing: Timing = "events" if _times_events(api) else "waits"

    @staticmethod
    def of(device: torch.device) -> Accelerator:
        """The process's one backend for an accelerator device (no index: the current one), so runs share its
        streams."""
        index = device.index if device.index is not None else torch.accelerator.current_device_index()
        key = (device.type, index)
        with _backends_lock:
            if key not in _backends:
                _backends[key] = Accelerator(TorchApi(torch.device(device.type, index)))
            return _backends[key]

    def event(self) -> Event:
        ev = self.api.event()
        ev.record(self.api.current())
        return ev

    def stream(self) -> Any:
        return self.api.stream()

    @contextlib.contextmanager
    def use(self, stream: Any) -> Iterator[Any]:
        prev = self.api.current()
        self.api.set(stream)
        try:
            yield stream
        finally:
            self.api.set(prev)

    def after(self, stream: Any, event: Event) -> None:
        stream.wait_event(event)

    def keep(self, tensor: torch.Tensor, stream: Any) -> None:
        self.api.keep(tensor, stream)

    def to_host(self, tensor: torch.Tensor) -> torch.Tensor:
        return self.api.to_host(tensor)


def _times_events(api: Api) -> bool:
    """Whether the device's events can time: two events recorded on the current stream, the later one waited
    for (once per device and process, when its backend is made, never inside a run), then elapsed_time."""
    a, b = api.event(), api.event()
    stream = api.current()
    a.record(stream)
    b.record(stream)
    try:
        b.synchronize()
        a.elapsed_time(b)
    except (RuntimeError, NotImplementedError):  # e.g. "backend doesn't support elapsedTime"
        return False
    return True


_backends: dict[tuple[str, int], Accelerator] = {}
_backends_lock = threading.Lock()


@dataclass(frozen=True)
class Waited:
    """One host wait on a device event, in milliseconds.

    wait_ms: the host was blocked this long. uncounted_ms: the part of it after the device had passed the
    event, which no event times (the device's time up to the event is already in denoise/decode/resize).
    """
    wait_ms: float
    uncounted_ms: float


ACCELERATORS = ("cuda", "mps", "xpu")  # the device types Stopwatch times through Accelerator


class Stopwatch:
    """mark() returns a Mark; ms(a, b) is the time between two marks once ready() says both have passed (None: a
    mark not made, which times as 0).

    With a device timed by events, a mark is an event recorded on the current stream, so ms() is device time;
    ready() asks the event (query, never a wait), and wait() is the one place the host blocks for the device.
    Timed by waits, a mark waits for the device and is a host time (see the module's docstring).
    """

    def __init__(self, device: torch.device | None = None, clock: Clock = time.perf_counter,
                 backend: Device | None = None) -> None:
        if backend is None and device is not None and device.type in ACCELERATORS:
            backend = Accelerator.of(device)
        self.dev = backend
        self.cuda = backend is not None  # an asynchronous device (any accelerator, or a fake one): its paths run
        self.timing: Timing = "host" if backend is None else backend.timing
        self._events = self.timing == "events"
        self.clock = clock
        # (event, host time): the latest point where host and device clocks met; maps device time to host time
        self._anchor: tuple[Event, float] | None = None

    def mark(self) -> Mark:
        if self.dev is None:
            return self.clock()
        ev = self.dev.event()
        if self._events:
            return ev
        ev.synchronize()  # timed by waits: the device has done the work queued so far, so the host clock times it
        return self.clock()

    def anchor(self, mark: Mark, host_time: float) -> None:
        """`mark` was recorded at `host_time` (a run's first mark). The clocks meet there only if the device has
        already passed it: behind work still queued (a user's own, before the pipeline call) the device reaches
        it later, by an unknown amount. Then the first wait that sees the device pass an event anchors them."""
        if self._events and cast(Event, mark).query():
            self._anchor = (cast(Event, mark), host_time)

    def ms(self, a: Mark | None, b: Mark | None) -> float:
        if a is None or b is None:
            return 0.0
        if self._events:  # both are events (the casts only tell the type checker which half of Mark they are)
            end = cast(Event, b)
            if not end.query():
                end.synchronize()  # only on a forced read (a run that failed mid-step); normal reads are ready
            return float(cast(Event, a).elapsed_time(end))
        return (cast(float, b) - cast(float, a)) * 1e3

    def ready(self, h: Mark | None) -> bool:
        return not self._events or h is None or bool(cast(Event, h).query())

    def host_time(self, h: Mark | None) -> float | None:
        """When the device passed `h`, on the host clock; None without an anchor. Reading it waits for `h`
        (call it after the measured work, never inside it). Host and waits marks are host times already."""
        if not self._events:
            return cast(float | None, h)
        if self._anchor is None or h is None:
            return None
        ev, t = self._anchor
        return t + self.ms(ev, h) / 1e3

    def wait(self, h: Mark | None) -> Waited:
        """Block until the device has passed `h` (the wait a host copy needs anyway). A waits mark has been
        passed when it was made: nothing to wait for."""
        if not self._events or h is None:
            return Waited(0.0, 0.0)
        ev = cast(Event, h)
        pending = not ev.query()
        t0 = self.clock()
        ev.synchronize()
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
            self._anchor = (ev, t1)
        return Waited(wait, uncounted)

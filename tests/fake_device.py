"""A fake asynchronous device, so the CUDA accounting runs on the CPU with a known lag.

The host does its real work (the real tiny pipeline runs on the CPU, its time is real); each model call
also queues `ms` of device work on the current fake stream, which runs behind the host exactly as a GPU
would: an event is passed when its stream's earlier work is done, a wait blocks the host (moves its clock)
until then, and streams run side by side. The host clock is the real one plus the time this thread spent
blocked on the fake device, so a wait on the encode thread never moves the denoising thread's clock.

What CUDA does that the accounting must survive, each off unless a test asks for it:
- elapsed_time raises on an event the device has not passed yet;
- a new stream starts with an empty allocator pool: its first work pays `malloc_ms` (cudaMalloc of the
  working set) and reserves another pool (`pools`);
- ops outside modules (clone, contiguous, einsum, interpolate, the copy to the host) take device time under
  `ops()`, and every tensor remembers when its stream will have written it, so a stream that reads it
  earlier is a race (`races`);
- a module can cost host time too (`on(..., host_ms=)`), so the device waits for the host (host-bound);
- third-party streams: `FakeJpeg` keeps the stream current when it is first built, as torchvision's nvJPEG
  encoder does.

`FakeApi` is the same device as torch's device-generic API (events made unrecorded and recorded on a stream,
streams switched by current/set), so `preview.stopwatch.Accelerator`, the one path CUDA, MPS and XPU take, runs
over it; `FakeApi(dev, timing=False)` is a device whose events cannot time (elapsed_time raises).
"""
from __future__ import annotations

import contextlib
import threading
import time
import weakref
from typing import Any, Iterator

import numpy as np
import torch
from torch.overrides import TorchFunctionMode


class FakeClock:
    """The host's real clock plus what each thread has waited for the fake device. host_stands: the host's own
    work takes no time on it (only the device's does), so a figure that holds no device work is exactly 0 on
    any machine, however loaded."""

    def __init__(self, host_stands: bool = False) -> None:
        self._local = threading.local()
        self.base = 0.0  # where threads other than the first one start (the encode thread starts caught up)
        self._host = (lambda: 1000.0) if host_stands else time.perf_counter

    def skew(self) -> float:
        return getattr(self._local, "skew", self.base)

    def __call__(self) -> float:
        return self._host() + self.skew()

    def block_until(self, t: float) -> None:
        now = self()
        if t > now:
            self._local.skew = self.skew() + (t - now)
            if threading.current_thread() is threading.main_thread():
                self.base = self._local.skew


class FakeStream:
    def __init__(self, warm: bool = False) -> None:
        self.busy_until = 0.0  # host-clock time when the work queued so far is done
        self.warm = warm       # its allocator pool holds the working set already

    def wait_event(self, event: FakeEvent) -> None:
        self.busy_until = max(self.busy_until, event.t)


class FakeEvent:
    def __init__(self, dev: FakeDevice, t: float) -> None:
        self.dev, self.t = dev, t

    def query(self) -> bool:
        return self.dev.clock() >= self.t

    def synchronize(self) -> None:
        self.dev.waits += 1
        self.dev.clock.block_until(self.t)

    def elapsed_time(self, other: FakeEvent) -> float:
        if not (self.query() and other.query()):  # CUDA: "device not ready" (cudaErrorNotReady)
            raise RuntimeError("CUDA error: device not ready (elapsed_time on an event not yet completed)")
        return (other.t - self.t) * 1e3


# ops that take device time under FakeDevice.ops(); every other op is free but still ordered on its stream
TIMED_OPS = ("clone", "contiguous", "einsum", "interpolate", "cpu")


class _Ops(TorchFunctionMode):
    """Each torch op is a launch on the current fake stream: it reads its tensor inputs, which must have been
    written by then (else a race), and writes its outputs when its stream reaches its end."""

    def __init__(self, dev: FakeDevice) -> None:
        super().__init__()
        self.dev = dev

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        out = func(*args, **kwargs)
        if name in ("__get__", "__set__") or name.startswith("_"):  # attribute reads are no launches
            return out
        dev = self.dev
        dev.read([*args, *kwargs.values()], name)
        dev.work(dev.op_ms.get(name, 0.0))
        dev.written(out)
        if name == "cpu":  # a plain copy to the host returns once its stream has done it
            dev.clock.block_until(dev.current().busy_until)
        return out


class FakeDevice:
    timing = "events"

    def __init__(self, clock: FakeClock, copy_ms: float = 1.0, malloc_ms: float = 0.0) -> None:
        self.clock, self.copy_ms, self.malloc_ms = clock, copy_ms, malloc_ms
        self.main = FakeStream(warm=True)
        self._cur = threading.local()
        self.queued_ms = 0.0  # all device work queued, for the tests' bounds
        self.waits = 0
        self.pools = 1        # allocator pools reserved: one per stream that ran work
        self.op_ms: dict[str, float] = {}
        self.races: list[str] = []
        self._written: dict[int, tuple[Any, float]] = {}  # id(tensor) -> (weakref, when its stream wrote it)
        self._lock = threading.Lock()

    def current(self) -> FakeStream:
        return getattr(self._cur, "stream", self.main)

    def work(self, ms: float) -> None:
        """Queue ms of device work on the current stream, as a kernel launch does."""
        s = self.current()
        if not s.warm and ms > 0:  # the first allocation on a new stream's empty pool: cudaMalloc
            s.warm = True
            self.pools += 1
            ms += self.malloc_ms
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
            with self._ops_here():
                yield stream
        finally:
            self._cur.stream = prev

    def after(self, stream: FakeStream, event: FakeEvent) -> None:
        stream.busy_until = max(stream.busy_until, event.t)

    def keep(self, tensor: torch.Tensor, stream: Any) -> None:
        pass

    def to_host(self, tensor: torch.Tensor) -> torch.Tensor:
        self.read([tensor], "to_host")
        self.work(self.copy_ms)
        with torch._C.DisableTorchFunction():
            return tensor.clone()

    def on(self, module: torch.nn.Module, ms: float, host_ms: float = 0.0) -> Any:
        """Every forward of `module` also queues ms of device work, after host_ms of the host's own time
        (launching it: a host-bound device waits for that); returns the hook handle."""
        def hook(mod: Any, args: Any, out: Any) -> None:
            if host_ms:
                self.clock.block_until(self.clock() + host_ms / 1e3)
            self.read(list(args), type(mod).__name__)
            self.work(ms)
            self.written(out)
        return module.register_forward_hook(hook)

    # -- ops outside modules, and the data they read ----------------------------------------------------------
    @contextlib.contextmanager
    def ops(self, **op_ms: float) -> Iterator[None]:
        """Time ops outside modules on this thread (and on any thread inside use()): op name -> ms each."""
        self.op_ms = {**{k: 0.0 for k in TIMED_OPS}, **op_ms}
        try:
            with self._ops_here():
                yield
        finally:
            self.op_ms = {}

    @contextlib.contextmanager
    def _ops_here(self) -> Iterator[None]:
        if not self.op_ms or getattr(self._cur, "ops", False):
            yield
            return
        self._cur.ops = True
        try:
            with _Ops(self):
                yield
        finally:
            self._cur.ops = False

    def _tensors(self, values: Any) -> Iterator[torch.Tensor]:
        for v in values:
            if isinstance(v, torch.Tensor):
                yield v
                if v._base is not None:  # a view reads its base's memory
                    yield v._base
            elif isinstance(v, (list, tuple)):
                yield from self._tensors(v)
            elif hasattr(v, "sample") and isinstance(v.sample, torch.Tensor):  # a diffusers decoder output
                yield v.sample

    def written(self, out: Any) -> None:
        """`out` is written when the current stream reaches the end of its queue."""
        t = self.current().busy_until
        with self._lock:
            for x in self._tensors([out]):
                self._written[id(x)] = (weakref.ref(x), t)

    def read(self, values: Any, what: str) -> None:
        """A launch on the current stream reads `values`: each must be written by the time the stream starts it."""
        start = max(self.current().busy_until, self.clock())
        with self._lock:
            for x in self._tensors(values):
                ref, t = self._written.get(id(x), (None, 0.0))
                if ref is not None and ref() is x and t > start + 1e-9:
                    self.races.append(f"{what} read a tensor {1e3 * (t - start):.1f} ms before it was written")


class FakeTorchEvent(FakeEvent):
    """torch.Event as the generic API makes it: unrecorded (passed, as torch says) until record(stream)."""

    def __init__(self, dev: FakeDevice, timing: bool = True) -> None:
        super().__init__(dev, 0.0)
        self.timing = timing

    def record(self, stream: FakeStream) -> None:
        stream.busy_until = max(stream.busy_until, self.dev.clock())
        self.t = stream.busy_until

    def elapsed_time(self, other: FakeEvent) -> float:
        if not self.timing:  # what torch says where a backend's events cannot time
            raise RuntimeError("Backend doesn't support elapsedTime")
        return super().elapsed_time(other)


class FakeApi:
    """The fake device through torch's device-generic calls (preview.stopwatch.Api). Ops outside modules are
    timed on the thread that called dev.ops() only: set() switches the stream, not the ops mode."""

    def __init__(self, dev: FakeDevice, timing: bool = True) -> None:
        self.dev, self.timing = dev, timing

    def event(self) -> FakeTorchEvent:
        return FakeTorchEvent(self.dev, self.timing)

    def stream(self) -> FakeStream:
        return FakeStream()

    def current(self) -> FakeStream:
        return self.dev.current()

    def set(self, stream: FakeStream) -> None:
        self.dev._cur.stream = stream

    def keep(self, tensor: torch.Tensor, stream: Any) -> None:
        pass

    def to_host(self, tensor: torch.Tensor) -> torch.Tensor:
        return self.dev.to_host(tensor)


class FakeJpeg:
    """torchvision 0.26's CUDA encode_jpeg as it treats streams (pytorch/vision#8929): the encoder, built on the
    first call, keeps the stream current then; every call synchronises that saved stream (the host waits),
    encodes on the encoder's own stream, and at its end makes only the saved stream wait for that work. It
    never looks at the caller's current stream again. Takes uint8 (3, H, W); returns the JPEG bytes as a
    uint8 tensor, written when the encoder's own stream gets there."""

    def __init__(self, dev: FakeDevice, ms: float = 5.0) -> None:
        self.dev, self.ms = dev, ms
        self.saved: FakeStream | None = None
        self.own = FakeStream(warm=True)

    def __call__(self, chw: torch.Tensor, quality: int = 75) -> torch.Tensor:
        from PIL import Image
        import io

        dev = self.dev
        if self.saved is None:
            self.saved = dev.current()
        FakeEvent(dev, self.saved.busy_until).synchronize()
        with dev.use(self.own):
            dev.read([chw], "nvjpeg")
            dev.work(self.ms)
            with torch._C.DisableTorchFunction():
                assert chw.dtype == torch.uint8 and chw.dim() == 3 and chw.shape[0] == 3, chw.shape
                buf = io.BytesIO()
                Image.fromarray(np.ascontiguousarray(chw.permute(1, 2, 0).numpy()), "RGB").save(buf, "JPEG",
                                                                                                 quality=quality)
                out = torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)
            dev.written(out)
        self.saved.busy_until = max(self.saved.busy_until, self.own.busy_until)
        return out

"""How busy the device was while a run denoised: the figure that shows overlap mode keeping it at work.

  nvml  NVIDIA: NVML's utilisation (the share of time a kernel ran, over its own sample period), sampled from a
        thread every `period_s` while the denoising runs; the figure is the samples' mean. nvidia-ml-py is an
        optional extra (`pip install previewlab[nvml]`); without it, or on another device, nothing is read.
  cpu   a CPU: the process's CPU time over the wall time of the denoising, as a share of the cores it may use.
        A preview encoded on the denoising thread leaves the other cores idle; overlap mode keeps them at work.

Nothing here touches the device's queue: no sync, no event. The NVML module is injected, so tests give a fake.
"""
from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable, Protocol

import torch


def usable_cores() -> int:
    """The cores this process may run on: its affinity where the OS keeps one (Linux), else every core (Windows
    and macOS have no sched_getaffinity)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


class Busy(Protocol):
    source: str

    def start(self) -> None: ...
    def stop(self) -> float | None: ...  # percent busy since start(); None where nothing was read


class CpuTime:
    """Process CPU time over wall time, over the cores this process may run on."""
    source = "cpu"

    def __init__(self, cpu: Callable[[], float] = time.process_time, wall: Callable[[], float] = time.perf_counter,
                 cores: int | None = None) -> None:
        self.cpu, self.wall = cpu, wall
        self.cores = cores or usable_cores()
        self._t: tuple[float, float] | None = None

    def start(self) -> None:
        self._t = (self.cpu(), self.wall())

    def stop(self) -> float | None:
        if self._t is None:
            return None
        c0, w0 = self._t
        wall = self.wall() - w0
        self._t = None
        return None if wall <= 0 else 100.0 * (self.cpu() - c0) / (wall * self.cores)


class Nvml:
    """NVML's GPU utilisation, sampled from a daemon thread while a run denoises."""
    source = "nvml"

    def __init__(self, nvml: Any, handle: Any, period_s: float = 0.05) -> None:
        self.nvml, self.handle, self.period_s = nvml, handle, period_s
        self._samples: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        while True:
            self._samples.append(float(self.nvml.nvmlDeviceGetUtilizationRates(self.handle).gpu))
            if self._stop.wait(self.period_s):
                return

    def start(self) -> None:
        self._samples, self._stop = [], threading.Event()
        self._thread = threading.Thread(target=self._sample, name="previewlab-nvml", daemon=True)
        self._thread.start()

    def stop(self) -> float | None:
        if self._thread is None:
            return None
        self._stop.set()
        self._thread.join()
        self._thread = None
        return sum(self._samples) / len(self._samples) if self._samples else None


class Unread:
    source = ""

    def start(self) -> None:
        pass

    def stop(self) -> float | None:
        return None


def nvml_handle(nvml: Any, device: torch.device) -> Any:
    """NVML's handle of a CUDA device, found by its PCI address (CUDA's and NVML's indices may differ)."""
    nvml.nvmlInit()
    index = device.index if device.index is not None else torch.cuda.current_device()
    p = torch.cuda.get_device_properties(index)
    domain, bus, dev = (getattr(p, k, None) for k in ("pci_domain_id", "pci_bus_id", "pci_device_id"))
    if domain is None or bus is None or dev is None:
        return nvml.nvmlDeviceGetHandleByIndex(index)
    return nvml.nvmlDeviceGetHandleByPciBusId(f"{domain:08x}:{bus:02x}:{dev:02x}.0")


def busy_for(device: torch.device) -> Busy:
    """The reading for a run's device: NVML on NVIDIA when installed, CPU time on a CPU, else nothing."""
    if device.type == "cpu":
        return CpuTime()
    if device.type == "cuda":
        try:
            import pynvml  # type: ignore[import-not-found, import-untyped, unused-ignore]
            return Nvml(pynvml, nvml_handle(pynvml, device))
        except Exception:  # not installed, no driver library, an unknown device: nothing is read, nothing fails
            return Unread()
    return Unread()

"""How much memory a run and each of its previews hold, read without a device sync.

A reading gives the level (bytes held now) and the peak (the most held since its last reset), and resets the
peak. The device
allocators count an allocation when it is queued, on the host, so a preview's peak is known the moment its
work is queued: no wait for the device. Where they come from:

  cuda, xpu  the caching allocator's counters (torch.accelerator.memory_allocated / max_memory_allocated /
             reset_peak_memory_stats): host-side numbers, no synchronisation.
  mps        the allocator's level only (torch.mps.current_allocated_memory); it keeps no peak, so the peak is
             the highest level read, a lower bound, and the source says "mps-level".
  rss        a CPU on Linux: the process's resident set (VmRSS) and its high-water mark (VmHWM), reset by
             writing 5 to /proc/self/clear_refs, which resets the mark and walks no page. Before a run, glibc's
             malloc_trim hands back the pages earlier runs freed, so a run's peak is its own.
  ""         nothing to read (another OS): every figure stays 0.

A preview's memory is its peak over the level before it, so it says how far the preview raised the memory the
step already held; the run's peak folds every reading in, so resetting for a preview never loses it. The device
counters are the process's: a watch() in a user's script resets their peak too (docs/watch.md).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
from typing import Any, Protocol

import torch

MIB = 1 << 20


def _glibc() -> Any:
    try:
        lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return lib if hasattr(lib, "malloc_trim") else None
    except OSError:
        return None


_libc = _glibc()


class Reading(Protocol):
    source: str

    def read(self) -> tuple[int, int]: ...  # (bytes held now, the most bytes held since the last reset)
    def reset(self) -> None: ...            # the peak starts again from the level now
    def release(self) -> None: ...          # before a run: memory freed but still held goes back where it can


class Allocator:
    """A device's caching allocator (cuda, xpu), through torch's device-generic calls."""

    def __init__(self, device: torch.device) -> None:
        self.device, self.source = device, device.type

    def read(self) -> tuple[int, int]:
        return (int(torch.accelerator.memory_allocated(self.device)),
                int(torch.accelerator.max_memory_allocated(self.device)))

    def reset(self) -> None:
        torch.accelerator.reset_peak_memory_stats(self.device)

    def release(self) -> None:
        pass  # the cache is the allocator's own: the counters read what tensors hold, not what it keeps


class MpsLevel:
    """Apple's allocator keeps no peak: the highest level read since the reset stands in for it."""
    source = "mps-level"

    def __init__(self) -> None:
        self._high = 0

    def read(self) -> tuple[int, int]:
        x = int(torch.mps.current_allocated_memory())
        self._high = max(self._high, x)
        return x, self._high

    def reset(self) -> None:
        self._high = 0
        self.read()

    def release(self) -> None:
        pass


class Rss:
    """The process's resident set on Linux: /proc/self/status, its high-water mark reset through clear_refs."""
    source = "rss"
    STATUS, CLEAR = "/proc/self/status", "/proc/self/clear_refs"

    @classmethod
    def works(cls) -> bool:
        return os.access(cls.STATUS, os.R_OK) and os.access(cls.CLEAR, os.W_OK)

    def read(self) -> tuple[int, int]:
        with open(self.STATUS, "rb") as f:
            kib = {k: v for k, _, v in (line.partition(b":") for line in f) if k in (b"VmRSS", b"VmHWM")}
        return int(kib[b"VmRSS"].split()[0]) << 10, int(kib[b"VmHWM"].split()[0]) << 10

    def reset(self) -> None:
        with open(self.CLEAR, "wb", buffering=0) as f:
            f.write(b"5")

    def release(self) -> None:
        """Hand the heap's free pages back (glibc's malloc_trim), so a run's peak holds no earlier run's garbage."""
        if _libc is not None:
            _libc.malloc_trim(0)


class Nothing:
    source = ""

    def release(self) -> None:
        pass

    def read(self) -> tuple[int, int]:
        return 0, 0

    def reset(self) -> None:
        pass


def reading_for(device: torch.device) -> Reading:
    """The reading for the device a run's tensors live on."""
    if device.type in ("cuda", "xpu"):
        return Allocator(device)
    if device.type == "mps":
        return MpsLevel()
    return Rss() if device.type == "cpu" and Rss.works() else Nothing()


class Memory:
    """One run's memory: its peak, and each preview's rise over the level before it.

    start() at the run's start; around each preview, before() and after(); peak_mb() at the end. Every reading
    is folded into the run's peak before a reset, so the per-preview resets never hide the run's peak.
    """

    def __init__(self, reading: Reading) -> None:
        self.reading = reading
        self.source = reading.source
        self._peak = 0

    def start(self) -> None:
        self.reading.release()
        self.reading.reset()
        self._peak = self.reading.read()[0]

    def before(self) -> int:
        """Before a preview: the level it starts from (the step's own peak folded into the run's first)."""
        level, peak = self.reading.read()
        self._peak = max(self._peak, peak)
        self.reading.reset()
        return level

    def after(self, level: int) -> float:
        """After a preview: its peak over `level`, MiB."""
        peak = self.reading.read()[1]
        self._peak = max(self._peak, peak)
        return max(0, peak - level) / MIB

    def peak_mb(self) -> float:
        self._peak = max(self._peak, self.reading.read()[1])
        return self._peak / MIB

"""What a run held and how busy it kept the device: the run-level readings around its steps (memory.py, busy.py)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from previewlab.preview.timing.busy import busy_for
from previewlab.preview.timing.memory import Memory, reading_for


@dataclass(frozen=True)
class Usage:
    """What a run held and how busy it kept the device (memory.py, busy.py), for its record."""
    peak_mem_mb: float = 0.0
    mem_source: str = ""
    busy_pct: float | None = None
    busy_source: str = ""


class RunUsage:
    """One run's readings: its memory from start() (else from begin()), with each preview's rise over the step's
    level (memory.before/after), and the device's busy share from begin() to denoised()."""

    def __init__(self, device: torch.device) -> None:
        self.memory = Memory(reading_for(device))
        self.busy = busy_for(device)
        self._memory_started = False
        self._busy_pct: float | None = None

    def start(self) -> None:
        """The run starts now: its memory is read from here."""
        self.memory.start()
        self._memory_started = True

    def begin(self) -> None:
        """The denoising starts now."""
        if not self._memory_started:
            self.start()
        self.busy.start()

    def denoised(self) -> None:
        """The denoising loop has ended: how busy it kept the device is known."""
        if self._busy_pct is None:
            self._busy_pct = self.busy.stop()

    def usage(self) -> Usage:
        """The run's peak memory and the device's busy share while it denoised (call at the run's end)."""
        self.denoised()
        busy = self._busy_pct
        return Usage(self.memory.peak_mb(), self.memory.source, busy, self.busy.source if busy is not None else "")

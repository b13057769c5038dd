"""A run's rows, per-step stage accounting: each step's stopwatch marks, turned into milliseconds and handed over
in step order once the device has passed them (asked without waiting; on a CPU at once)."""
from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass

from previewlab.preview.pipeline.meter_parts import MeterParts
from previewlab.preview.record.records import StepCells, StepRow, on_path_ms
from previewlab.preview.timing.stopwatch import Mark


@dataclass
class Marks:
    """One step while its row is made: the row as scheduled, the cells its preview fills in, and the stopwatch
    handles, turned into milliseconds once the device has passed them."""
    row: StepRow
    cells: StepCells
    start: Mark                      # where the step's denoising began (the previous step's end)
    cb: Mark                         # where it ended: the step callback
    dec0: Mark | None = None         # the preview's decode began (None: no preview, or it failed)
    dec1: Mark | None = None         # the decode ended, the resize began
    res1: Mark | None = None         # the resize ended
    copied: Mark | None = None       # CUDA overlap: the event after the device -> host copy
    future: Future[None] | None = None  # overlap: the encode thread's work for this row
    end: Mark | None = None          # CUDA overlap: the mark where the callback returned (the next row's start)
    touched: bool = False  # preview work ran in this step, or a preview was in flight while it denoised


class Ledger:
    """The rows of one run: pending ones (their marks not yet passed by the device), then handed-over ones in
    step order, each told to `events` and observed by the planner (the autopilot's step times)."""

    def __init__(self, parts: MeterParts) -> None:
        self.sw, self.plan, self.events = parts.sw, parts.plan, parts.events
        self.rows: list[StepRow] = []
        self.pending: list[Marks] = []

    @property
    def count(self) -> int:
        """The steps recorded so far, handed over or not."""
        return len(self.rows) + len(self.pending)

    def add(self, marks: Marks) -> None:
        self.pending.append(marks)

    def _ready(self, m: Marks) -> bool:
        if self.sw.cuda and m.row.mode == "overlap" and (m.end is None or not self.sw.ready(m.end)):
            return False
        return (m.future is None or m.future.done()) and self.sw.ready(m.copied or m.res1 or m.cb)

    def emit(self, force: bool) -> None:
        """Hand over the rows whose marks the device has passed, in step order; force: all of them (waits)."""
        sw = self.sw
        while self.pending and (force or self._ready(self.pending[0])):
            m = self.pending.pop(0)
            if m.future is not None:
                m.future.result()  # errors inside were already turned into an event on the row
            c = m.cells  # the encode thread is done with them (the future above): folded in once, here
            c.denoise_ms = sw.ms(m.start, m.cb)
            if m.dec0 is not None and c.preview:
                c.decode_ms, c.resize_ms = sw.ms(m.dec0, m.dec1), sw.ms(m.dec1, m.res1)
                c.decode_ms_per_frame = c.decode_ms / max(1, c.frames)
                if m.copied is not None:
                    c.transfer_ms = sw.ms(m.res1, m.copied)
            if sw.cuda and m.row.mode == "overlap":  # the callback's own span of the main stream: no stage holds it
                c.on_path_ms = sw.ms(m.cb, m.end)
            c.on_path_ms = on_path_ms(m.row.mode, c, sw.cuda)
            self.plan.observe(c.denoise_ms + c.on_path_ms, m.touched)
            row = c.into(m.row)
            self.rows.append(row)
            if self.events is not None:
                self.events.row(row)

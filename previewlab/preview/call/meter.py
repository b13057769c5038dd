"""The step callback: what previewlab adds to the denoising loop, and everything it measures per step.

With decoder `none` it reads a clock, fills one row and returns the pipeline's dict untouched. It never waits
on a socket: frames and rows go to RunEvents that must return at once (the server hands them to its loop).
The meter wires its parts once (meter_parts.py): the previews (pipeline/preview_maker.py), the rows (row_ledger.py) and the run's
memory and busy readings (usage.py).
"""
from __future__ import annotations

from typing import Callable

import torch

from previewlab.preview.controls import Controls
from previewlab.preview.pipeline.row_ledger import Ledger, Marks
from previewlab.preview.pipeline.preview_maker import PreviewMaker
from previewlab.preview.pipeline.meter_parts import MeterParts
from previewlab.preview.models import Model
from previewlab.preview.budget.planner import Planner
from previewlab.preview.decoding.previewer import Previewer
from previewlab.preview.timing.ranges import Ranges
from previewlab.preview.record.records import StepCells, StepRow
from previewlab.preview.record.run import Asked, RunEvents
from previewlab.preview.settings import PreviewSettings
from previewlab.preview.source.steps import Step
from previewlab.preview.timing.stopwatch import Mark, Stopwatch
from previewlab.preview.source.targets import X0Tap
from previewlab.preview.timing.usage import RunUsage, Usage


class StepMeter:
    """The step callback and everything it measures: one per run (generate) or per pipeline call (watch).

    Rows reach events.row in step order as soon as their times are known (on CUDA: once the device has passed
    their events, asked without waiting). asked: what the call was asked (its size, steps, task, strength and
    a clip's rate); timesteps: the schedule's values ([]: unknown, rows say -1); should_stop is asked after
    every step.
    """

    def __init__(self, model: Model, run_id: str, asked: Asked, controls: Controls, *, sw: Stopwatch,
                 timesteps: list[float] | None = None, previewer: Previewer | None = None,
                 events: RunEvents | None = None, should_stop: Callable[[], bool] | None = None,
                 inflight: int = 2, ranges: bool = False, tap: X0Tap | None = None) -> None:
        self.run_id, self.controls, self.should_stop = run_id, controls, should_stop
        self.task = asked.task
        self.strength = asked.strength if asked.task == "img2img" else None
        self.width, self.height, self.steps = asked.width, asked.height, asked.steps
        self.timesteps = timesteps or []
        self.batch = 1          # images in the call: read from the first step's latents
        self._first = True
        prev = previewer or Previewer(model)
        self.plan = Planner(model, controls, prev, self.width, self.height, self.steps)
        self.sw, self.ranges, self.readings = sw, Ranges(ranges), RunUsage(model.device)
        self.parts = MeterParts(model=model, run_id=run_id, width=self.width, height=self.height, fps=asked.fps,
                                controls=controls, previewer=prev, plan=self.plan, sw=sw, ranges=self.ranges,
                                readings=self.readings, events=events, tap=tap, inflight=inflight)
        self.ledger = Ledger(self.parts)
        self.maker = PreviewMaker(self.parts)
        self.last: Mark | None = None  # the mark where the current step's denoising began
        self.in_flight = False  # a preview may still be running beside the next step

    @property
    def rows(self) -> list[StepRow]:
        """The rows handed over so far, in step order."""
        return self.ledger.rows

    def start(self) -> None:
        """The run starts now: its memory is read from here (else from begin())."""
        self.readings.start()

    def begin(self, mark: Mark | None = None) -> None:
        """The denoising starts now (or at an earlier mark)."""
        self.readings.begin()
        self.last = mark if mark is not None else self.sw.mark()
        self.ranges.begin("denoise")

    def denoised(self) -> None:
        """The denoising loop has ended: how busy it kept the device is known."""
        self.readings.denoised()

    def usage(self) -> Usage:
        """The run's peak memory and the device's busy share while it denoised (call at the run's end)."""
        return self.readings.usage()

    def step(self, step: Step) -> bool:
        """The end of a step, from whichever source (steps.py): schedule the step, preview it when due, hand over
        the rows whose times are known; True when the run should stop. Its first mark is where the step's
        denoising ended, its last where the next step's begins: everything between them is on the denoising
        path."""
        cb = self.sw.mark()
        self.ranges.end("denoise")
        if self._first:
            self._read_call(step)
        s = self.controls.get()
        row = self._scheduled_row(step.index, s)
        assert self.last is not None, "a step ended before the denoising began (begin() not called)"
        marks = Marks(row, StepCells(event=row.event), self.last, cb, touched=self.in_flight)
        if self.plan.due(row.step, row.decoder, row.every):
            self.maker.make(marks, s, step.latents)
        # the next step is touched when a preview may still be running beside it
        self.in_flight = s.mode == "overlap" and (marks.touched and marks.cells.preview == 1 or self.maker.in_flight)
        self.ledger.add(marks)
        self.ledger.emit(False)
        stop = bool(self.should_stop and self.should_stop())
        self.ranges.begin("denoise")
        self.last = marks.end = self.sw.mark()
        return stop

    def _read_call(self, step: Step) -> None:
        """At the first step: the batch (from the latents' shape, no device read) and the steps the pipeline
        really runs (img2img below strength 1 runs fewer than asked), which the autopilot plans for."""
        self._first = False
        latents = step.latents
        if isinstance(latents, torch.Tensor) and latents.dim() >= 3:
            self.batch = self.plan.batch = int(latents.shape[0])
        n = getattr(step.pipe, "_num_timesteps", None)
        if not isinstance(n, int) and 0 < step.total:
            n = step.total
        if isinstance(n, int) and 0 < n < self.steps:
            self.steps = self.plan.steps = n
            self.timesteps = self.timesteps[-n:]  # the schedule's tail: img2img starts part-way down

    def _scheduled_row(self, i: int, s: PreviewSettings) -> StepRow:
        """Step i's row as the planner schedules it: its decoder, interval and event."""
        decoder, every, event = self.plan.plan(s)
        ts = self.timesteps[i] if i < len(self.timesteps) else -1.0
        return StepRow(self.run_id, i + 1, ts, decoder=decoder, every=every, encoder="", quality=s.quality,
                       width=self.width, height=self.height, mode=s.mode, event=event, batch=self.batch,
                       task=self.task, strength=self.strength, decode_at=s.decode_at)

    def finish_previews(self) -> int:
        """Wait for the previews in flight (overlap); returns the most that were in flight at once."""
        return self.maker.finish()

    def drain(self) -> None:
        """Wait for previews in flight, then hand over every row left."""
        self.finish_previews()
        self.ranges.end_all()
        self.ledger.emit(True)

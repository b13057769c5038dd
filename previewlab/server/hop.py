"""The hop from a run's own thread to the event loop, written once: the worker's model thread and a watched
script's thread tell a run's events (preview/record/run.py's RunEvents) where they happen, and the server's
relay hears them on its loop. Each is handed over with call_soon_threadsafe, in the order told, and never
waited for: the denoising thread never blocks on the loop."""
from __future__ import annotations

import asyncio
from typing import Callable, TypeVarTuple, Unpack

from previewlab.preview.frames import Frame
from previewlab.preview.record.records import StepRow
from previewlab.preview.record.run import RunEnd, RunEvents, RunMeta

Ts = TypeVarTuple("Ts")


class ToLoop:
    """RunEvents for a run's own thread: each event handed to `loop`, where `events` hear it. Muted (shutdown
    gave up on the run), it hands nothing more over: the run's late rows and end would follow the end shutdown
    recorded."""

    def __init__(self, loop: asyncio.AbstractEventLoop, events: RunEvents) -> None:
        self.loop, self.events = loop, events
        self.muted = False

    def call(self, fn: Callable[[Unpack[Ts]], object], *args: Unpack[Ts]) -> None:
        """fn(*args) on the loop, after what was handed over before it; never waited for."""
        if not self.muted:
            self.loop.call_soon_threadsafe(fn, *args)

    def mute(self) -> None:
        self.muted = True

    def started(self, meta: RunMeta) -> None:
        self.call(self.events.started, meta)

    def row(self, row: StepRow) -> None:
        self.call(self.events.row, row)

    def frame(self, frame: Frame) -> None:
        self.call(self.events.frame, frame)

    def error(self, run_id: str, message: str) -> None:
        self.call(self.events.error, run_id, message)

    def ended(self, end: RunEnd) -> None:
        self.call(self.events.ended, end)

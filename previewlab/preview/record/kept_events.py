"""RunEvents that keep what a run tells them, in order: for a script, the bench or a test that reads a run's
frames and rows once it has returned, rather than showing them live. Subclass it to act on one as it comes
(a live change after some step), calling the method it overrides."""
from __future__ import annotations

from typing import TYPE_CHECKING

from previewlab.preview.record.records import StepRow
from previewlab.preview.record.run import RunEnd, RunMeta

if TYPE_CHECKING:
    from previewlab.preview.frames import Frame


class Gathered:
    """Every event, kept: frames arrive from the encode thread in overlap mode (list.append is atomic)."""

    def __init__(self) -> None:
        self.metas: list[RunMeta] = []
        self.rows: list[StepRow] = []
        self.frames: list[Frame] = []
        self.errors: list[tuple[str, str]] = []  # (run id, one-line message)
        self.ends: list[RunEnd] = []

    def started(self, meta: RunMeta) -> None:
        self.metas.append(meta)

    def row(self, row: StepRow) -> None:
        self.rows.append(row)

    def frame(self, frame: Frame) -> None:
        self.frames.append(frame)

    def error(self, run_id: str, message: str) -> None:
        self.errors.append((run_id, message))

    def ended(self, end: RunEnd) -> None:
        self.ends.append(end)

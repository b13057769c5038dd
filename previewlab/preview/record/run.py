"""A run's life as one contract: what it is (RunMeta), how it ended (RunEnd), and the events between (RunEvents).

The engine's runs (through the server's worker) and a watch's runs (a user's own pipeline call) make the same
records and tell the same events, so the server's store, metrics and page read one shape. No torch here: the
wire protocol builds its messages from these records without loading the model stack.
"""
from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any, Literal, Protocol

from previewlab.preview.record.history import history
from previewlab.preview.record.cells import from_cells, json_cells
from previewlab.preview.record.records import TOTALS_COLUMNS, StepRow, Totals
from previewlab.preview.settings import PreviewSettings, Purpose, RunSettings

if TYPE_CHECKING:
    from previewlab.preview.frames import Frame
    from previewlab.preview.models import Model

Status = Literal["done", "stopped", "failed", "interrupted"]  # interrupted: the server ended before the run did


@dataclass(frozen=True)
class ScriptCall:
    """What a user's own pipeline call asked for, as far as a watch sees it: no prompt (the script holds it);
    its seed and guidance scale where the call shows them (callback.call_inputs), the size from the latents,
    the preview settings at its first step."""
    steps: int
    width: int
    height: int
    preview: PreviewSettings
    prompt: str = "(your script)"
    seed: int = -1
    guidance: float | None = None
    batch: int = 1            # from the latents
    task: str = "script"
    strength: float | None = None
    num_frames: int = 1       # a clip's frames, from its latents
    fps: float = 0.0


Asked = RunSettings | ScriptCall  # what a run was asked to do: the server's settings, or a script's call


def dtype_name(dtype: Any) -> str:
    """torch.float16 -> "float16"."""
    return str(dtype).removeprefix("torch.")


@dataclass(frozen=True, slots=True)
class RunMeta:
    """A run's identity and what it was asked: its `run` message, its meta.json and the first half of its
    runs.csv line (RunRecord). None is left out of to_json (a script's guidance scale: unknown)."""
    run_id: str
    started_at: str   # local time, ISO 8601 with its offset
    model: str
    synthetic: bool
    model_note: str
    family: str       # the latent space's known family, or "unnamed"
    space: str        # the latent space as read from the VAE (latent_spaces.LatentSpace.describe)
    device: str       # cpu | cuda | mps
    dtype: str
    prompt: str
    steps: int
    width: int        # pixels
    height: int
    seed: int         # -1: a script's own call
    guidance: float | None
    preview: PreviewSettings | None  # at the start of the run (live changes show in the rows); None: the bench's
                                     # bare diffusers call, with no step callback (its row says decoder "direct")
    batch: int = 1
    task: str = "txt2img"     # txt2img | img2img | script
    init: str | None = None   # img2img: the run whose final image was the input
    strength: float | None = None
    num_frames: int = 1       # a clip's length in frames (1: an image)
    fps: float = 0.0          # a clip's playback rate (0: an image)
    purpose: Purpose = ""     # "": the user's run; "baseline" or "measured": the page's measure series made it

    @classmethod
    def of(cls, model: Model, run_id: str, asked: Asked) -> RunMeta:
        """The one constructor: the model's description, and what the run was asked."""
        return cls(run_id=run_id, started_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"), model=model.name,
                   synthetic=model.synthetic, model_note=model.note, family=model.space.name,
                   space=model.space.describe(), device=model.device.type, dtype=dtype_name(model.dtype),
                   prompt=asked.prompt, steps=asked.steps, width=asked.width, height=asked.height, seed=asked.seed,
                   guidance=asked.guidance, preview=asked.preview, batch=asked.batch, task=asked.task,
                   init=getattr(asked, "init", None), strength=asked.strength if asked.task == "img2img" else None,
                   num_frames=asked.num_frames, fps=asked.fps, purpose=getattr(asked, "purpose", ""))

    def to_json(self) -> dict[str, Any]:
        """Flat, as on the wire and on disk: the run's fields, then the preview settings'."""
        return {k: v for k, v in self._flat().items() if v is not None}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> RunMeta:
        """to_json's object read back (a `run` message, a meta.json: keys that are not the meta's are left out),
        each value parsed and checked as its runs.csv cell is (from_row). Raises ValueError naming a value that
        does not parse."""
        return cls.from_row(json_cells(d))

    def _flat(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "preview"}
        out.update(asdict(self.preview) if self.preview is not None else DIRECT)
        return out

    def to_row(self) -> dict[str, Any]:
        """The first half of a runs.csv line (META_COLUMNS): synthetic as 0/1, None as an empty cell."""
        return {**self._flat(), "synthetic": int(self.synthetic)}

    @classmethod
    def from_row(cls, row: Mapping[str, str]) -> RunMeta:
        """A runs.csv line's meta (cells.from_cells; decoder "direct": no preview settings). Raises ValueError
        (SettingsError among them) naming a cell that does not parse."""
        preview = None if row.get("decoder") == "direct" else from_cells(PreviewSettings, row)
        return from_cells(cls, row, preview=preview)


# a direct call's preview columns (RunMeta.preview None): no decoder, no interval, no encoder
DIRECT: dict[str, Any] = dict(decoder="direct", every=0, preview_max=0, encoder="", quality=0, mode="direct",
                              budget=0.0, target="", batch_preview="", frames="", decode_at="")
META_COLUMNS = tuple(f.name for f in fields(RunMeta) if f.name != "preview") + tuple(
    f.name for f in fields(PreviewSettings))


@dataclass(frozen=True, slots=True)
class RunRecord:
    """A finished run: what it was (its meta) and what it cost (its totals); runs.csv holds one a line, the
    meta's columns then the totals'."""
    meta: RunMeta
    totals: Totals

    @property
    def run_id(self) -> str:
        return self.meta.run_id

    def to_row(self) -> dict[str, Any]:
        """A runs.csv line's cells by column (RUN_COLUMNS; csv_writer formats them)."""
        return {**self.meta.to_row(), **self.totals.to_json()}

    @classmethod
    def from_row(cls, row: Mapping[str, str]) -> RunRecord:
        """A runs.csv line read back. Raises ValueError naming a cell that does not parse."""
        return cls(RunMeta.from_row(row), from_cells(Totals, row))

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> RunRecord:
        """A finished run's meta.json (RunEnd.to_json: the flat meta, its totals nested) read back as its record.
        Raises ValueError naming a value that does not parse, or where the run has no totals (running, failed,
        interrupted)."""
        totals = d.get("totals")
        if not isinstance(totals, Mapping):
            raise ValueError(f"totals={totals!r:.40}: a run that did not finish has none")
        return cls(RunMeta.from_json(d), Totals.from_json(totals))


RUN_COLUMNS = META_COLUMNS + TOTALS_COLUMNS


@dataclass(frozen=True)
class RunEnd:
    """How a run ended: its record (totals) when it finished, its one-line error when it failed. A run that
    lost rows to the disk keeps its totals and fails with the error saying so. changes: its live changes in a
    few words (history.py), "" when none or unknown. has_final: its final image is kept beside its rows (a
    server's finished run; a script's once watch.save() handed it over), so the page can show and reuse it."""
    meta: RunMeta
    status: Status
    totals: Totals | None = None
    error: str | None = None
    changes: str = ""
    has_final: bool = False

    @classmethod
    def of(cls, meta: RunMeta, totals: Totals, rows: Sequence[StepRow] = (), has_final: bool = False) -> RunEnd:
        """A finished run's end, told with meta (its record's, or the meta its start was told with). rows: the
        run's step rows, read once here for its changes."""
        p = meta.preview or PreviewSettings()
        return cls(meta, "stopped" if totals.status == "stopped" else "done", totals,
                   changes=history(rows, p.budget, p.preview_max), has_final=has_final)

    @classmethod
    def failed(cls, meta: RunMeta, e: BaseException | str) -> RunEnd:
        """A failed run's end: its exception's type and message, or a line saying why."""
        return cls(meta, "failed", error=e[:300] if isinstance(e, str) else f"{type(e).__name__}: {str(e)[:200]}")

    def to_json(self) -> dict[str, Any]:
        """The run's meta, status, changes and has_final, then totals and error (each only when the run has one)."""
        out: dict[str, Any] = {**self.meta.to_json(), "status": self.status, "changes": self.changes,
                               "has_final": self.has_final}
        if self.totals is not None:
            out["totals"] = self.totals.to_json()
        if self.error is not None:
            out["error"] = self.error
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> RunEnd:
        """to_json's object read back (an ended run's meta.json, a `done` message): its meta, status (one of
        Status: a meta.json that says running is no end), totals where it has them, error, changes and has_final.
        Raises ValueError naming a value that does not parse."""
        totals = d.get("totals")
        return from_cells(cls, json_cells(d), meta=RunMeta.from_json(d),
                          totals=Totals.from_json(totals) if isinstance(totals, Mapping) else None)


class RunEvents(Protocol):
    """What a run tells whoever shows it, in this order: started, then rows, frames and errors as they come,
    then ended. Which thread calls them is the implementation's to say; none may wait."""

    def started(self, meta: RunMeta) -> None: ...
    def row(self, row: StepRow) -> None: ...
    def frame(self, frame: Frame) -> None: ...
    def error(self, run_id: str, message: str) -> None: ...
    def ended(self, end: RunEnd) -> None: ...

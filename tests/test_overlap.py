"""Overlap mode: the same pictures as sync mode, at most K frames in flight, skips counted, never queued."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from previewlab.preview.decoding import encoders
from previewlab.preview.names import DecoderName, Mode
from previewlab.preview.frames import Frame
from previewlab.preview.call.engine import Run, RunContext, generate
from previewlab.preview.record.kept_events import Gathered
from previewlab.preview.settings import PreviewSettings, RunSettings


def frames_of(model, mode: Mode, decoder: DecoderName, steps: int = 6, **kw) -> tuple[list[Frame], Run]:
    told = Gathered()
    s = RunSettings(steps=steps, width=64, height=64, preview=PreviewSettings(decoder=decoder, mode=mode, **kw))
    run = generate(RunContext(model, s, mode), told)
    return told.frames, run


@pytest.mark.slow
@pytest.mark.parametrize("decoder", ["latent2rgb", "taesd", "vae"])
def test_overlap_frames_are_sync_frames(tiny, decoder):
    sync, rs = frames_of(tiny, "sync", decoder)
    over, ro = frames_of(tiny, "overlap", decoder, )
    assert [f.step for f in sync] == [f.step for f in over] == [1, 2, 3, 4, 5, 6]
    for a, b in zip(sync, over):
        assert a.data == b.data  # same pixels, same encoder: the same bytes
    assert rs.image is not None and ro.image is not None and np.array_equal(rs.image, ro.image)
    assert all(r.mode == "overlap" for r in ro.rows)
    assert ro.record.meta.preview is not None and ro.record.meta.preview.mode == "overlap"


def test_inflight_bound_skips_and_counts(tiny, monkeypatch):
    gate = threading.Event()
    started = []

    inner = encoders.get("pillow")

    def gated() -> encoders.Encoder:
        def encode(rgb: np.ndarray, quality: int) -> bytes:
            started.append(1)
            assert gate.wait(60), "gate never opened"
            return inner.encode(rgb, quality)

        return encoders.Encoder("gated", "jpeg", encode)

    monkeypatch.setitem(encoders.ENCODERS, "pillow", gated)  # pillow's slot, for this test
    steps, k = 8, 2
    calls = {"n": 0}

    def should_stop() -> bool:  # called once per step by the denoising thread: open the gate after the last
        calls["n"] += 1
        if calls["n"] == steps:
            gate.set()
        return False

    told = Gathered()
    s = RunSettings(steps=steps, width=64, height=64,
                    preview=PreviewSettings(decoder="latent2rgb", mode="overlap", encoder="pillow"))
    run = generate(RunContext(tiny, s, "k", should_stop=should_stop, inflight=k), told)
    frames = told.frames
    # the encoder held every frame until the last step: the first K got in, every later one was skipped
    assert [r.preview for r in run.rows] == [1, 1] + [0] * (steps - k)
    assert [r.skipped for r in run.rows] == [0, 0] + [1] * (steps - k)
    assert run.record.totals.skipped == steps - k and run.record.totals.inflight_peak == k
    assert [f.step for f in frames] == [1, 2] and len(started) == k


def test_a_row_is_whole_when_handed_over_and_never_changes_after(tiny):
    """Issue 36: rows are frozen once emitted. In overlap mode the encode thread fills a preview's encode time,
    bytes and size after the step has moved on; the ledger folds them in only once that thread is done, so the
    row a RunEvents receives already holds them, and the run's rows are those very rows, unchanged."""
    import dataclasses

    from previewlab.preview.record.records import StepRow

    seen: list[tuple[StepRow, dict]] = []

    class Watching(Gathered):
        def row(self, row: StepRow) -> None:  # what the row says the moment it is handed over
            seen.append((row, dataclasses.asdict(row)))
            super().row(row)

    s = RunSettings(steps=4, width=64, height=64, preview=PreviewSettings(decoder="taesd", mode="overlap"))
    run = generate(RunContext(tiny, s, "frozen"), Watching())
    made = [(r, cells) for r, cells in seen if cells["preview"]]
    assert made and all(c["bytes"] > 0 and c["encode_ms"] > 0 and c["preview_width"] > 0 for _, c in made)
    assert [r for r, _ in seen] == run.rows and all(r is q for (r, _), q in zip(seen, run.rows))
    assert all(dataclasses.asdict(r) == cells for r, cells in seen)  # nothing wrote to a row after it was handed over
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.rows[0].bytes = 0  # type: ignore[misc]


def test_the_cells_a_step_fills_are_its_rows_measured_columns():
    """StepCells is made from StepRow's fields marked measured(): the same names, types and starting values, so a
    new measured column is one field of StepRow. None of the planner's or the server's columns is among them (the
    fold would overwrite the scheduled value), a name that is none of them is refused when they are folded in (it
    would be lost), and folding them in (into) gives the row that replace() gives, frozen."""
    import dataclasses
    from typing import Any

    from previewlab.preview.record.records import PREVIEW_STAGES, StepCells, StepRow

    row = {f.name: f for f in dataclasses.fields(StepRow)}
    cells = {f.name: f for f in dataclasses.fields(StepCells)}
    assert list(cells) == [name for name, f in row.items() if f.metadata.get("measured")]
    assert {"preview", "denoise_ms", *PREVIEW_STAGES, "on_path_ms", "bytes", "event", "mem_mb"} <= set(cells)
    assert not {"run_id", "step", "timestep", "decoder", "every", "quality", "width", "height", "mode", "batch",
                "task", "strength", "decode_at", "send_ms", "ack_rtt_ms", "dropped"} & set(cells)
    for name, f in cells.items():
        assert (f.type, f.default) == (row[name].type, row[name].default), name

    scheduled = StepRow("r", 3, 981.0, decoder="taesd", every=2, quality=80, width=64, height=64, mode="overlap",
                        event="taesd from latent2rgb", task="img2img", strength=0.5, decode_at="full")
    filled = StepCells(event=scheduled.event)
    assert all(getattr(filled, name) == (scheduled.event if name == "event" else f.default)
               for name, f in cells.items())
    measured: dict[str, Any] = {name: {"int": i + 1, "float": i + 0.25, "str": f"cell {i}"}[str(f.type)]
                for i, (name, f) in enumerate(cells.items())}
    for name, value in measured.items():
        setattr(filled, name, value)
    out = filled.into(scheduled)
    assert type(out) is StepRow and out == dataclasses.replace(scheduled, **measured)
    assert vars(out) == vars(dataclasses.replace(scheduled, **measured))  # every column, none beside them
    with pytest.raises(dataclasses.FrozenInstanceError):
        out.bytes = 0  # type: ignore[misc]
    filled.decod_ms = 1.0  # a misspelt cell
    with pytest.raises(AttributeError, match="StepCells: decod_ms: not one of StepRow's measured fields"):
        filled.into(scheduled)

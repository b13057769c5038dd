"""A run's life (preview/record/run.py): the server's runs and a watch's make the same records, and the wire and the
disk keep the keys the page and older runs' folders read."""
from __future__ import annotations

import csv
import io
import json
from dataclasses import fields, replace

import pytest
import torch
from starlette.testclient import TestClient

from previewlab import watch as preview_watch
from previewlab.preview.frames import Frame
from previewlab.preview.models import synthetic_pipeline
from previewlab.preview.record.csv_writer import to_csv_text
from previewlab.preview.record.records import TOTALS_COLUMNS, StepRow, Totals
from previewlab.preview.record.run import META_COLUMNS, RUN_COLUMNS, RunEnd, RunEvents, RunMeta, RunRecord
from tests.conftest import SAME_ORIGIN, recv_until

# the keys of a txt2img run's `run` message as the page (web/app.js) and meta.json have them, in order (init and
# strength appear for img2img only)
META_KEYS = ["run_id", "started_at", "model", "synthetic", "model_note", "family", "space", "device", "dtype",
             "prompt", "steps", "width", "height", "seed", "guidance", "batch", "task", "num_frames", "fps",
             "purpose", "decoder", "every", "preview_max", "encoder", "quality", "mode", "budget", "target", "batch_preview",
             "frames", "decode_at"]


@pytest.mark.slow
def test_a_server_runs_messages_and_meta_json_keep_their_keys(make_app, tmp_path):
    srv, app = make_app(tmp_path / "runs")
    with TestClient(app) as client, client.websocket_connect("/ws", headers=SAME_ORIGIN) as ws:
        recv_until(ws, "hello")
        ws.send_text(json.dumps({"type": "start", "steps": 2, "seed": 5, "every": 2}))
        run = recv_until(ws, "run")
        done = recv_until(ws, "done")
        ws.send_text(json.dumps({"type": "start", "steps": 500}))
        again = recv_until(ws, "run")
        with client.websocket_connect("/ws", headers=SAME_ORIGIN) as late:  # joins while a run goes on
            hello = recv_until(late, "hello")
        ws.send_text(json.dumps({"type": "stop"}))
        assert recv_until(ws, "done")["status"] == "stopped"
    assert list(run) == ["type", *META_KEYS] and run["seed"] == 5 and run["every"] == 2
    assert list(done) == ["type", *META_KEYS, "status", "changes", "has_final", "totals", "figures", "analysis"]
    assert done["status"] == "done" and done["has_final"] is True
    assert {k: done[k] for k in META_KEYS} == {k: run[k] for k in META_KEYS}  # the end carries the start's meta
    assert list(done["totals"]) == list(TOTALS_COLUMNS) and done["seed"] == 5
    on_disk = json.loads((tmp_path / "runs" / run["run_id"] / "meta.json").read_text())
    # the figures and the analysis are the server's judgement of the runs so far, not the run's record
    assert on_disk == {k: v for k, v in done.items() if k not in ("type", "figures", "analysis")}
    assert hello["running"] == {k: again[k] for k in META_KEYS}


class Recorder:
    """A RunEvents that keeps what it was told, in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []

    def started(self, meta: RunMeta) -> None:
        self.events.append(("started", meta))

    def row(self, row: StepRow) -> None:
        self.events.append(("row", row.step))

    def frame(self, frame: Frame) -> None:
        self.events.append(("frame", frame.step))

    def error(self, run_id: str, message: str) -> None:
        self.events.append(("error", run_id))

    def ended(self, end: RunEnd) -> None:
        self.events.append(("ended", end))


def test_a_watch_tells_the_same_events_with_one_meta_from_start_to_end():
    """Before, a watch's end rebuilt its meta after the call's marks were cleared: its `done` and its
    meta.json said steps 0, width 0 and height 0."""
    pipe = synthetic_pipeline("synthetic:tiny")
    w = preview_watch(pipe, decoder="latent2rgb", every=2)
    rec = Recorder()
    events: RunEvents = rec
    w.attach(events)
    pipe("a cat", num_inference_steps=4, height=64, width=64, output_type="latent",
         generator=torch.Generator().manual_seed(3), callback_on_step_end=w,
         callback_on_step_end_tensor_inputs=w.tensor_inputs)
    record = w.finish()
    w.remove()
    kinds = [k for k, _ in rec.events]
    assert kinds[0] == "started" and kinds[-1] == "ended" and "error" not in kinds
    assert [s for k, s in rec.events if k == "row"] == [1, 2, 3, 4]
    assert [s for k, s in rec.events if k == "frame"] == [2, 4]
    meta, end = rec.events[0][1], rec.events[-1][1]
    assert isinstance(meta, RunMeta) and isinstance(end, RunEnd)
    assert record is not None and end.meta is meta is record.meta and end.totals is record.totals
    assert end.status == "done"
    # the seed of the call's generator and the pipeline's guidance scale (its default, 7.5) are read from the call
    assert (meta.steps, meta.width, meta.height, meta.seed, meta.prompt) == (4, 64, 64, 3, "(your script)")
    assert meta.guidance == 7.5 and list(meta.to_json()) == list(META_KEYS)
    assert list(end.to_json()) == [*meta.to_json(), "status", "changes", "has_final", "totals"]
    assert end.has_final is False  # finish(), not save(): and no server to keep an image anyway


def _read_back(record: RunRecord, drop: tuple[str, ...] = ()) -> RunRecord:
    """The record as runs.csv holds it (csv_writer's cells, a line read with csv), less the columns in drop."""
    text = to_csv_text([record], RUN_COLUMNS)
    (line,) = list(csv.DictReader(io.StringIO(text)))
    return RunRecord.from_row({k: v for k, v in line.items() if k not in drop})


def _same_totals(a: Totals, b: Totals) -> None:
    for f in fields(Totals):
        x, y = getattr(a, f.name), getattr(b, f.name)
        # runs.csv keeps 3 decimals: half a unit of the last (1067.1875 is written 1067.188), and a float's ulp
        assert x == pytest.approx(y, abs=5e-4 * (1 + 1e-9)) if isinstance(x, float) else x == y, (f.name, x, y)


def test_a_run_record_is_its_meta_and_its_totals_and_reads_back_whole(tiny):
    """Issue 36: RunRecord is the run's RunMeta and its totals, with no second copy of what the meta says; a
    runs.csv line reads back into the same meta (bool, None and the preview settings typed) and totals."""
    from previewlab.preview.call.engine import RunContext, generate
    from previewlab.preview.settings import PreviewSettings, RunSettings

    assert not set(META_COLUMNS) & set(TOTALS_COLUMNS) and len(set(RUN_COLUMNS)) == len(RUN_COLUMNS)
    settings = RunSettings(prompt='a "quoted", two-line\nprompt', steps=2, width=64, height=64, seed=4, guidance=3.0,
                           preview=PreviewSettings(decoder="latent2rgb", every=2, mode="sync", frames=8))
    record = generate(RunContext(tiny, settings, "rt")).record
    assert record.meta.preview == settings.preview and record.meta.synthetic is True and record.meta.seed == 4
    back = _read_back(record)
    assert back.meta == record.meta  # every field, typed: synthetic a bool, guidance a float, strength None
    _same_totals(back.totals, record.totals)
    # a bench's direct call: no step callback, no preview settings; its line says decoder "direct"
    direct = RunRecord(replace(record.meta, preview=None), record.totals)
    assert direct.to_row()["decoder"] == "direct" and _read_back(direct).meta == direct.meta
    # an older line, without the columns this version added, reads with their defaults
    old = _read_back(record, drop=("started_at", "prompt", "init", "batch_preview", "scheduler", "vae"))
    assert (old.meta.prompt, old.meta.started_at, old.meta.preview) == ("", "", settings.preview)
    assert (old.totals.scheduler, old.totals.vae) == ("", "")
    with pytest.raises(ValueError, match="synthetic='yes': not bool"):
        RunRecord.from_row({**record.to_row(), "synthetic": "yes"})


def test_meta_json_reads_back_as_the_run_that_wrote_it(tiny):
    """Issue 44: meta.json (RunEnd.to_json) has its reader beside its writer: through JSON and back, an ended
    run is the same RunEnd, its record the same RunRecord (typed as runs.csv reads them); a failed run has no
    record, and a meta.json that says running is no end."""
    from previewlab.preview.call.engine import RunContext, generate
    from previewlab.preview.settings import PreviewSettings, RunSettings

    settings = RunSettings(steps=2, width=64, height=64, seed=4, guidance=3.0,
                           preview=PreviewSettings(decoder="latent2rgb", every=2, mode="sync", frames=8))
    record = generate(RunContext(tiny, settings, "mj")).record
    end = RunEnd(record.meta, "stopped", record.totals, changes="latent2rgb \u2192 taesd @2", has_final=True)
    on_disk = json.loads(json.dumps(end.to_json(), indent=1))
    assert RunEnd.from_json(on_disk) == end and RunRecord.from_json(on_disk) == record
    assert RunMeta.from_json(on_disk) == record.meta and RunMeta.from_json(record.meta.to_json()) == record.meta
    script = replace(record.meta, guidance=None, seed=-1, task="script", preview=None)  # None is left out of it
    failed = RunEnd.failed(script, RuntimeError("out of memory"))
    back = RunEnd.from_json(json.loads(json.dumps(failed.to_json())))
    assert back == failed and back.totals is None and back.meta.guidance is None and back.meta.preview is None
    with pytest.raises(ValueError, match="totals=None: a run that did not finish has none"):
        RunRecord.from_json(failed.to_json())
    with pytest.raises(ValueError, match="status='running': allowed are done, stopped, failed, interrupted"):
        RunEnd.from_json({**record.meta.to_json(), "status": "running"})  # store.begin()'s meta.json
    with pytest.raises(ValueError, match="steps='2.5': not int"):
        RunMeta.from_json({**on_disk, "steps": 2.5})


def test_a_name_outside_its_literal_is_refused_naming_the_cell(tiny):
    """Issue 44: a record's Literal fields are checked when it is read, as its numbers are: a runs.csv line whose
    status or mode, a steps.csv line whose mode, is none of the names allowed is refused in one line naming the
    cell and the names; an empty cell is no value, as a number's is (the field's default)."""
    from previewlab.preview.call.engine import RunContext, generate
    from previewlab.preview.settings import PreviewSettings, RunSettings

    settings = RunSettings(steps=2, width=64, height=64, preview=PreviewSettings(decoder="latent2rgb", mode="sync"))
    run = generate(RunContext(tiny, settings, "lit"))
    line = {k: "" if v is None else str(v) for k, v in run.record.to_row().items()}
    assert RunRecord.from_row(line).totals.status == "done"
    with pytest.raises(ValueError, match=r"^status='finished': allowed are done, stopped$"):
        RunRecord.from_row({**line, "status": "finished"})
    with pytest.raises(ValueError, match=r"^mode='fast': allowed are sync, overlap$"):
        RunRecord.from_row({**line, "mode": "fast"})
    step = {k: "" if v is None else str(v) for k, v in run.rows[0].to_row().items()}
    assert StepRow.from_row(step) == run.rows[0]
    with pytest.raises(ValueError, match=r"^mode='async': allowed are sync, overlap$"):
        StepRow.from_row({**step, "mode": "async"})
    with pytest.raises(ValueError, match=r"^mode='SYNC': allowed are sync, overlap$"):
        StepRow.from_row({**step, "mode": "SYNC"})
    assert StepRow.from_row({**step, "mode": ""}).mode == "sync"  # no value: the field's default
    with pytest.raises(ValueError, match=r"^status='interrupted': allowed are done, stopped$"):
        Totals.from_json({**run.record.totals.to_json(), "status": "interrupted"})

"""Issue 55, part 2: how much the picture still changes. Every run's previews against its final image and against
each other (SSIM at 64 px), read after the run has ended: in steps.csv (the server's, its export, the bench's, a
watch's), in the run's record (the settle step) and as one line on the page and in watch.summary()."""
from __future__ import annotations

import csv
import io
import json
import threading
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest
import torch
from PIL import Image
from starlette.testclient import TestClient

from previewlab.preview.judging import progress
from previewlab.preview.judging.progress import SETTLE_CHANGE, settle, settle_line
from previewlab.preview.frames import Frame, KeptFrames
from previewlab.preview.record.cells import from_cells
from previewlab.preview.record.records import STEP_COLUMNS, TOTALS_COLUMNS, StepRow, Totals
from previewlab.preview.record.run import RunMeta, RunRecord
from tests.conftest import SAME_ORIGIN, acks_not_awaited, recv_until

PROMPT = "a red circle on the left and a blue square on the right, on a yellow background"


# -- the rule, on figures given --------------------------------------------------------------------------------

def test_the_picture_settles_after_the_last_change_over_the_limit_never_by_its_distance_to_the_final():
    big, small = SETTLE_CHANGE * 3, SETTLE_CHANGE / 2
    # (step, final_ssim, change): far from the final image throughout (a TAESD preview), yet settled from step 4
    steps = [(2, 0.40, None), (4, 0.55, big), (6, 0.60, small), (8, 0.62, small), (10, 0.63, small)]
    assert settle(steps) == 4
    # a change over the limit late on moves it; one at the last preview means it has not settled
    assert settle(steps[:3] + [(8, 0.62, big), (10, 0.63, small)]) == 8
    assert settle(steps[:4] + [(10, 0.63, big)]) is None
    assert settle(steps[:1]) is None and settle([]) is None  # one preview: no change to read


def meta(steps: int = 20) -> RunMeta:
    return RunMeta.from_row({"run_id": "r", "steps": str(steps), "decoder": "taesd", "every": "1"})


def totals(**cells: object) -> Totals:
    return from_cells(Totals, {"status": "done", **{k: str(v) for k, v in cells.items()}})


def test_the_line_says_where_it_settles_or_why_nothing_does_and_that_a_stopped_run_stopped():
    m = meta(20)
    assert settle_line(m, totals(steps_run=20, previews=20, compared=20, settle_step=14, last_final_ssim=0.66)) == (
        "the picture settles at step 14 of 20 (no preview after it changes by more than 6 %); the last preview's "
        "SSIM to the final image 0.66")
    assert settle_line(m, totals(steps_run=20, previews=0)) == "no previews: nothing settles"
    assert settle_line(m, totals(steps_run=20, previews=1, compared=1, last_final_ssim=0.5)).startswith(
        "one preview: no change to read")
    assert settle_line(m, totals(steps_run=20, previews=20, compared=20, last_final_ssim=0.9)).startswith(
        "the picture still changes at its last preview (by more than 6 %)")
    stopped = settle_line(m, totals(status="stopped", steps_run=7, previews=7, compared=7, settle_step=5,
                                    last_final_ssim=1.0))
    assert stopped.startswith("stopped at step 7 of 20: its final image is where it stopped; the picture settles "
                              "at step 5 of 7")
    assert settle_line(m, totals(status="stopped", steps_run=3, previews=0)).startswith("stopped at step 3 of 20")
    assert settle_line(m, totals(steps_run=20, previews=20)) == ""  # not read (an older record): nothing said
    clip = RunMeta.from_row({"run_id": "r", "steps": "20", "decoder": "taesd", "every": "1", "num_frames": "9",
                             "frames": "middle"})
    assert settle_line(clip, totals(steps_run=20, previews=20)).endswith("a clip previewing its middle frame has "
                                                                         "no final frame to match")


def test_older_records_without_the_columns_still_read():
    row = StepRow.from_row({"run_id": "r", "step": "3", "timestep": "1.0", "preview": "1"})
    assert row.final_ssim is None and row.change is None
    t = Totals.from_json({"status": "done", "previews": 4})
    assert (t.compared, t.settle_step, t.last_final_ssim) == (0, None, None)
    assert {"compared", "settle_step", "last_final_ssim"} <= set(TOTALS_COLUMNS)
    assert STEP_COLUMNS[-2:] == ("final_ssim", "change")


def png(rgb: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, "PNG")
    return buf.getvalue()


def test_a_batch_previewed_first_is_read_against_the_final_grids_first_image():
    rng = np.random.default_rng(0)
    a, b = (rng.integers(0, 256, (64, 64, 3), dtype=np.uint8) for _ in range(2))
    final = np.concatenate([a, b], axis=1)  # a batch of two: one row of two cells
    f = Frame("r", 1, "vae", "png", 64, 64, png(a))
    p = progress.read([f], final, batch=2)
    assert p.steps[0][1] == pytest.approx(1.0)


# -- the measured path holds no progress work -------------------------------------------------------------------

@pytest.fixture
def where(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The threads that decoded a kept frame or compared two pictures: the progress's work, counted where it ran."""
    names: list[str] = []
    real_ssim, real_pixels = progress.ssim, progress.pixels

    def ssim(a: Any, b: Any) -> Any:
        names.append(threading.current_thread().name)
        return real_ssim(a, b)

    def pixels(data: bytes) -> Any:
        names.append(threading.current_thread().name)
        return real_pixels(data)

    monkeypatch.setattr(progress, "ssim", ssim)
    monkeypatch.setattr(progress, "pixels", pixels)
    return names


def step_rows(root: Path, rid: str) -> list[dict[str, str]]:
    with open(root / rid / "steps.csv", newline="") as f:
        return list(csv.DictReader(f))


def start(ws: Any, **fields: Any) -> dict[str, Any]:
    ws.send_text(json.dumps({"type": "start", **fields}))
    return recv_until(ws, "run")


@pytest.mark.slow  # three runs through the server: about 10 s
def test_a_server_run_reads_its_progress_on_the_writer_only_into_steps_csv_its_record_and_done(make_app, where):
    """Overlap mode on a CPU encodes on previewlab-encode, sync mode in previewlab-model's step: neither holds any
    decode or SSIM of the progress, which runs on the writer thread once the run has ended."""
    srv, app = make_app(limits=acks_not_awaited())
    with TestClient(app) as client, client.websocket_connect("/ws", headers=SAME_ORIGIN) as ws:
        recv_until(ws, "hello")
        ids = []
        for mode in ("overlap", "sync"):
            run = start(ws, steps=4, decoder="latent2rgb", every=1, mode=mode)
            done = recv_until(ws, "done")
            ids.append(run["run_id"])
            assert done["totals"]["compared"] == 4 and done["figures"]["settle_line"]
        none = start(ws, steps=3, decoder="none")
        done = recv_until(ws, "done")
        assert done["figures"]["settle_line"] == "no previews: nothing settles"
        assert done["totals"]["settle_step"] is None and done["totals"]["compared"] == 0
        export = list(csv.DictReader(io.StringIO(client.get("/runs/steps.csv").text)))
    assert where and set(where) == {"previewlab-writer"}
    root = srv.store.root
    for rid in ids:
        rows = step_rows(root, rid)
        assert all(r["final_ssim"] for r in rows) and [r["change"] == "" for r in rows] == [True, False, False, False]
        record = RunRecord.from_json(json.loads((root / rid / "meta.json").read_text()))
        assert record.totals.compared == 4 and record.totals.last_final_ssim == pytest.approx(float(rows[-1]["final_ssim"]), abs=5e-4)
    assert all(r["final_ssim"] == "" and r["change"] == "" for r in step_rows(root, none["run_id"]))
    by_run = {r["run_id"]: r for r in export if r["step"] == "4"}
    assert by_run[ids[1]]["final_ssim"] == step_rows(root, ids[1])[-1]["final_ssim"]


# -- the demo model: real pictures -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def demo() -> Any:
    from previewlab.preview.models import load

    return load("demo", device="cpu")


@pytest.fixture
def demo_ws(make_app, demo) -> Iterator[tuple[Any, Any]]:
    srv, app = make_app(model=demo, limits=acks_not_awaited())
    with TestClient(app) as client, client.websocket_connect("/ws", headers=SAME_ORIGIN) as ws:
        recv_until(ws, "hello")
        yield srv, ws


def demo_run(ws: Any, decoder: str, steps: int = 10, **fields: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    run = start(ws, prompt=PROMPT, steps=steps, width=128, height=128, seed=0, guidance=3.0, decoder=decoder,
                every=1, mode="sync", encoder="png", **fields)
    return run, recv_until(ws, "done")


def ssims(srv: Any, rid: str) -> list[float]:
    return [float(r["final_ssim"]) for r in step_rows(srv.store.root, rid)]


@pytest.mark.slow  # the demo model: about 8 s to load, then 10 steps of 128 px each run
def test_on_the_demo_model_the_vae_reaches_the_final_image_and_taesd_its_own_fidelity(demo_ws):
    """PNG previews: the VAE's preview of the last step is the final image, SSIM 1 (a JPEG at quality 80 would
    read 0.94 at this size: JPEG's own loss, 64 px of a 128 px picture). TAESD's rises and ends near its own
    fidelity against the VAE (about 0.66), never 1: a threshold on the distance to the final would never be met."""
    srv, ws = demo_ws
    run, done = demo_run(ws, "vae")
    vae = ssims(srv, run["run_id"])
    assert vae[-1] >= 0.999 and done["totals"]["last_final_ssim"] >= 0.999
    assert "SSIM to the final image 1.00" in done["figures"]["settle_line"]
    run, done = demo_run(ws, "taesd")
    taesd = ssims(srv, run["run_id"])
    assert 0.55 <= taesd[-1] <= 0.75 and taesd[-1] > taesd[0]
    assert done["totals"]["settle_step"] is not None and done["totals"]["settle_step"] < 10
    assert done["figures"]["settle_line"].startswith(f"the picture settles at step {done['totals']['settle_step']} "
                                                     "of 10")


@pytest.mark.slow
def test_a_stopped_run_reads_as_stopped_its_final_image_where_it_stopped(demo_ws):
    """Stopped at step k of 20: its final image is the decode of step k's latents, so the last preview of the
    latents, by the same VAE, is that image (SSIM 1), and its line says where it stopped."""
    srv, ws = demo_ws
    run = start(ws, prompt=PROMPT, steps=20, width=128, height=128, seed=0, guidance=3.0, decoder="vae", every=1,
                mode="sync", encoder="png", target="latents")
    recv_until(ws, "step")
    ws.send_text(json.dumps({"type": "stop"}))
    done = recv_until(ws, "done")
    k = done["totals"]["steps_run"]
    assert done["status"] == "stopped" and k < 20
    assert done["figures"]["settle_line"].startswith(f"stopped at step {k} of 20: its final image is where it "
                                                     "stopped")
    assert ssims(srv, run["run_id"])[-1] >= 0.999


# -- the bench and a watch ---------------------------------------------------------------------------------------

def test_the_bench_writes_the_columns_into_steps_csv_and_runs_csv(tiny, tmp_path, where, monkeypatch):
    """The bench reads a run's progress on its own thread, between runs: none of it inside a timed run."""
    from previewlab.bench import sweep
    from previewlab.bench.rows import read
    from previewlab.bench.plan import Plan
    from previewlab.bench.sweep import run_sweep
    from previewlab.preview.settings import PreviewSettings, RunSettings

    inside: list[int] = []  # progress work counted while a timed run went on

    def timed(*args: Any, **kw: Any) -> Any:
        before = len(where)
        try:
            return real(*args, **kw)
        finally:
            inside.append(len(where) - before)

    real = sweep.generate
    monkeypatch.setattr(sweep, "generate", timed)
    settings = RunSettings(prompt="a red circle", steps=3, width=64, height=64, seed=7,
                           preview=PreviewSettings(decoder="none", mode="sync"))
    run_sweep(tiny, Plan(settings, ("none", "latent2rgb"), (1,), repeats=1, warmup=0, modes=("sync",)), tmp_path)
    assert where and inside and not any(inside)  # read, and never while a run was timed
    with open(tmp_path / "steps.csv", newline="") as f:
        steps = list(csv.DictReader(f))
    with open(tmp_path / "runs.csv", newline="") as f:
        runs = {r["decoder"]: r for r in csv.DictReader(f)}
    previewed = [s for s in steps if s["decoder"] == "latent2rgb"]
    assert len(previewed) == 3 and all(s["final_ssim"] for s in previewed)
    assert all(s["final_ssim"] == s["change"] == "" for s in steps if s["decoder"] == "none")
    assert runs["latent2rgb"]["compared"] == "3" and runs["none"]["compared"] == "0"
    assert runs["none"]["settle_step"] == ""
    assert {r.record.totals.compared for r in read(tmp_path).runs} == {0, 3}  # and it reads back


@pytest.mark.slow  # a watched call: about 5 s
def test_a_watch_reads_its_progress_where_its_call_closes_with_save(tmp_path):
    from previewlab import watch as preview_watch
    from previewlab.preview.models.loader import synthetic_pipeline

    pipe = synthetic_pipeline("synthetic:tiny")
    w = preview_watch(pipe, decoder="latent2rgb", every=1, mode="sync")
    image = pipe("a cat", num_inference_steps=4, height=64, width=64, output_type="np", callback_on_step_end=w,
                 callback_on_step_end_tensor_inputs=w.tensor_inputs, generator=torch.Generator().manual_seed(3)
                 ).images[0]
    w.save((image * 255).round().astype(np.uint8), tmp_path / "out.png")
    w.to_csv(tmp_path / "costs.csv")
    w.remove()
    with open(tmp_path / "costs.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert all(r["final_ssim"] for r in rows) and rows[0]["change"] == "" and all(r["change"] for r in rows[1:])
    assert w.records[-1].totals.compared == 4
    said = [line for line in w.summary().splitlines() if line.startswith("progress: ")]
    assert said == [f"progress: {settle_line(w.records[-1].meta, w.records[-1].totals)}"] and said[0] != "progress: "


def test_kept_frames_stay_under_their_bound_newest_first():
    kept = KeptFrames(max_bytes=10)
    for step in range(1, 6):
        kept.keep(Frame("r", step, "vae", "jpeg", 1, 1, b"1234"))
    assert [f.step for f in kept.frames()] == [4, 5] and kept.dropped == 3

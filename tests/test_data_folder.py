"""Issue 33: the data folder has one owner, one id scheme, and ignores what was placed in it by hand.

Items 1 (two servers on one folder; a failed begin's cleanup), 2 (a script's watch names its runs by the store's
scheme), 10 (hand-placed folders: names that are not ids, links out of the folder) and 12 (an empty final.png).
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from starlette.testclient import TestClient

from previewlab import watch as preview_watch
from previewlab.preview.models import synthetic_pipeline
from previewlab.preview.record.run_ids import valid
from previewlab.server.embedded import serve
from previewlab.server.data.owner import InUse
from previewlab.server.data.store import Store
from tests.conftest import GOOD, SAME_ORIGIN, make_run
from tests.test_full_disk import meta_of

ROOT = Path(__file__).resolve().parents[1]


def test_a_second_server_on_a_data_folder_is_refused_in_one_line(tmp_path):
    """Item 1: B's start marked A's live run interrupted and its retention removed it. Now B is refused before
    it loads a model, in one line naming A's pid; once A has gone, the folder is B's."""
    store = Store(tmp_path / "runs")
    live = store.new_id()
    store.begin(meta_of(live))
    cli = subprocess.run([sys.executable, "-m", "previewlab", "serve", "--model", "synthetic:tiny", "--port", "0",
                          "--data-dir", str(tmp_path / "runs")], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert cli.returncode == 2, cli.stderr
    lines = cli.stderr.strip().splitlines()
    assert len(lines) == 1 and f"is in use by previewlab pid {os.getpid()}" in lines[0], cli.stderr
    with pytest.raises(InUse, match="one server per data folder"):  # a second server in this process too
        Store(tmp_path / "runs")
    assert store.meta(live)["status"] == "running"  # A's run untouched
    store.close()
    again = Store(tmp_path / "runs")
    assert again.meta(live)["status"] == "interrupted"  # A really ended: the new owner says so
    again.close()


def test_a_failed_begin_never_removes_a_folder_it_did_not_make(tmp_path):
    """Item 1: when two runs got the same id, the loser's cleanup deleted the winner's folder."""
    store = Store(tmp_path)
    rid = store.new_id()
    theirs = make_run(tmp_path, rid)  # another writer made it first
    with pytest.raises(FileExistsError):
        store.begin(meta_of(rid))
    assert sorted(p.name for p in theirs.iterdir()) == ["meta.json", "steps.csv"]
    assert not any(p.name.startswith(".new-") for p in tmp_path.iterdir())
    store.close()


def _call(pipe, w):
    return pipe("a cat", num_inference_steps=2, height=64, width=64, output_type="np",
                generator=torch.Generator().manual_seed(3), callback_on_step_end=w,
                callback_on_step_end_tensor_inputs=w.tensor_inputs).images[0]


def test_a_watch_names_its_runs_by_the_stores_scheme(tmp_path):
    """Item 2: a watch named its runs by local time and a per-process counter, so a run could take the id of
    one the folder holds, and sort before kept runs. Served, its ids come from the store, after the newest
    folder; alone, they are UTC ids in order."""
    pipe = synthetic_pipeline("synthetic:tiny")
    kept = "20991231-235959-000"  # made while a clock read 2099: new runs still sort after it
    make_run(tmp_path, kept)
    w = preview_watch(pipe, decoder="none")
    page = serve(w, port=0, data_dir=tmp_path)
    try:
        _call(pipe, w)
        served = w.run_id
        deadline = time.monotonic() + 10
        while not (tmp_path / served).is_dir() and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        w.remove()
    assert served == "20991231-235959-001" and (tmp_path / served / "meta.json").is_file()
    alone = preview_watch(pipe, decoder="none")
    try:
        before = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
        _call(pipe, alone)
        first = alone.run_id
        _call(pipe, alone)
        second = alone.run_id
    finally:
        alone.remove()
    assert valid(first) and first[:15] >= before and second > first
    assert page.server.store.owner.fd is None  # remove() closed the page, which gave the folder up


def test_hand_placed_folders_and_links_are_ignored(make_app, tmp_path):
    """Item 10: a folder named 99991231-235959-999 (an id with none after it) or 20261202-246060-999 (no such
    time) made every later start fail; a linked run folder or final.png served files from outside the data
    folder. Item 12: an empty final.png was served as 200 image/png."""
    data, outside = tmp_path / "runs", tmp_path / "outside"
    make_run(data, GOOD)
    make_run(data, "99991231-235959-999")
    make_run(data, "20261202-246060-999")
    secret = make_run(outside, "20261130-120000-002")
    (secret / "final.png").write_bytes(b"\x89PNG secret")
    os.symlink(secret, data / "20261130-120000-002")  # a linked run folder
    os.symlink(secret / "final.png", data / GOOD / "final.png")  # a linked image in a real run
    empty = make_run(data, "20261130-120000-003")
    (empty / "final.png").write_bytes(b"")
    srv, app = make_app(data_dir=data)
    with TestClient(app, headers=SAME_ORIGIN) as client:
        listed = [r["run_id"] for r in client.get("/runs").json()]
        linked_csv = client.get("/runs/20261130-120000-002.csv")
        linked_png = client.get(f"/runs/{GOOD}/final.png")
        empty_png = client.get("/runs/20261130-120000-003/final.png")
        rid = srv.store.new_id()
        srv.store.begin(meta_of(rid))
    assert listed == ["99991231-235959-999", "20261130-120000-003", GOOD]
    assert linked_csv.status_code == 404 and b"secret" not in linked_png.content and linked_png.status_code == 404
    assert empty_png.status_code == 404
    assert valid(rid) and (data / rid / "meta.json").is_file()  # starts still work


def test_a_lone_surrogate_is_refused_at_the_door_and_survives_on_disk(make_app, tmp_path):
    """Item 9: a start whose prompt held an unpaired surrogate failed, but its meta.json kept the prompt, and
    every /runs page with the run answered 500 (UnicodeEncodeError) from then on. Now the start is refused in
    one line, and a meta.json that holds one anyway (written before, or by hand) lists as valid JSON."""
    import json

    from tests.conftest import recv_until

    data = tmp_path / "runs"
    make_run(data, "20261130-120000-002", meta={"run_id": "20261130-120000-002", "status": "done",
                                               "prompt": "\ud800\udfff\ud800 x"})
    srv, app = make_app(data_dir=data)
    with TestClient(app) as client:
        with client.websocket_connect("/ws", headers=SAME_ORIGIN) as ws:
            ws.send_text('{"type": "start", "steps": 2, "prompt": "\\ud800\\udfff\\ud800 x"}')
            err = recv_until(ws, "error")["message"]
        listed = client.get("/runs")
    assert "lone surrogate" in err and "\n" not in err
    assert srv.store.ids() == ["20261130-120000-002"]  # no run was made
    assert listed.status_code == 200
    assert json.loads(listed.content)[0]["prompt"] == "\U000103ff\ud800 x"  # the pair joined, the lone one kept


@pytest.mark.slow
def test_set_refuses_taesd_where_start_does(make_app, tiny):
    """Item 12: on a model without TAE weights, `set decoder=taesd` was accepted, and every preview failed (each
    a traceback in an embedded script's terminal); a start with it failed its run with a traceback. Both are now
    refused in the same one line, and the run goes on."""
    import dataclasses
    import json

    from tests.conftest import recv_until

    srv, app = make_app(model=dataclasses.replace(tiny, taesd=None))
    with TestClient(app) as client, client.websocket_connect("/ws", headers=SAME_ORIGIN) as ws:
        ws.send_text(json.dumps({"type": "start", "steps": 2, "decoder": "taesd"}))
        refused_start = recv_until(ws, "error")["message"]
        ws.send_text(json.dumps({"type": "start", "steps": 400, "decoder": "latent2rgb"}))
        recv_until(ws, "step")
        ws.send_text(json.dumps({"type": "set", "decoder": "taesd"}))
        refused_set = recv_until(ws, "error")["message"]
        ws.send_text(json.dumps({"type": "stop"}))
        done = recv_until(ws, "done")
    assert "taesd" in refused_start and refused_set == refused_start
    assert done["status"] == "stopped"


@pytest.mark.slow
def test_a_disk_that_fills_at_the_final_image_names_it_and_leaves_no_empty_file(make_app, monkeypatch):
    """Item 12: a disk that filled mid-run gave a `done` saying only "OSError: [Errno 28]", and left a 0-byte
    final.png that was then served as 200 image/png."""
    import errno
    import json

    from tests.conftest import recv_until

    real = Path.write_bytes

    def full(self: Path, data: bytes) -> int:
        if self.name.startswith("final.png"):
            with open(self, "wb"):  # the file is made, then the disk is full
                pass
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, data)

    srv, app = make_app()
    monkeypatch.setattr(Path, "write_bytes", full)
    with TestClient(app) as client, client.websocket_connect("/ws", headers=SAME_ORIGIN) as ws:
        ws.send_text(json.dumps({"type": "start", "steps": 2, "decoder": "latent2rgb"}))
        done = recv_until(ws, "done")
        rid = done["run_id"]
        image = client.get(f"/runs/{rid}/final.png")
    assert done["status"] == "failed" and done["error"] == f"{rid}/final.png: No space left on device"
    assert sorted(p.name for p in (srv.store.root / rid).iterdir()) == ["deliveries.csv", "meta.json", "steps.csv"]
    assert image.status_code == 404


def test_a_huge_hand_placed_csv_is_read_no_further_than_a_run_can_be(tmp_path):
    """Item 10: a 53 MB steps.csv pushed the server's peak memory to 1.2 GB: every row was read. Now reading
    stops past the most rows a run previewlab wrote can have, and the run is listed as damaged."""
    import csv
    import io

    from previewlab.preview.record.records import STEP_COLUMNS
    from previewlab.server.data.run_files import MAX_STEP_ROWS, Damaged

    rid = "20261130-120000-002"
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(STEP_COLUMNS)
    for step in range(1, MAX_STEP_ROWS + 50):
        w.writerow([rid if c == "run_id" else step if c == "step" else "" for c in STEP_COLUMNS])
    make_run(tmp_path, GOOD)
    make_run(tmp_path, rid, steps=buf.getvalue())
    store = Store(tmp_path)
    with pytest.raises(Damaged, match=f"over {MAX_STEP_ROWS} rows"):
        store.rows(rid)
    exported = store.csv(store.ids())
    assert exported.count("\n") == 1 + 2 and rid not in exported  # the good run alone
    store.close()


def test_a_one_line_csv_is_read_no_further_than_a_line_can_be(tmp_path):
    """Found by this round's own probe: a steps.csv of one 53 MB line of commas took gigabytes (the csv module
    builds the whole row before any check) and the run's export was silently empty."""
    from previewlab.server.data.run_files import MAX_LINE_CHARS, Damaged

    rid = "20261130-120000-002"
    make_run(tmp_path, rid, steps="run_id,step\n1" + "," * (4 * MAX_LINE_CHARS) + "\n")
    store = Store(tmp_path)
    with pytest.raises(Damaged, match=f"a line over {MAX_LINE_CHARS} characters"):
        store.rows(rid)
    assert store.runs()[0]["damaged"].startswith(f"{rid}/steps.csv: a line over")
    store.close()


def test_an_init_image_is_never_read_through_a_link(make_app, tmp_path):
    """Found by this round's own probe: a start naming as `init` a run whose final.png is a link opened the
    file outside the data folder (the image route already answered 404)."""
    import json

    from tests.conftest import recv_until

    data, outside = tmp_path / "runs", tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.png").write_bytes(b"\x89PNG not the run's")
    run = make_run(data, "20261130-120000-002")
    os.symlink(outside / "secret.png", run / "final.png")
    srv, app = make_app(data_dir=data)
    with TestClient(app) as client, client.websocket_connect("/ws", headers=SAME_ORIGIN) as ws:
        ws.send_text(json.dumps({"type": "start", "steps": 2, "init": "20261130-120000-002", "strength": 0.5}))
        err = recv_until(ws, "error")["message"]
    assert err.startswith("init=20261130-120000-002: no past run with that id has a final image")

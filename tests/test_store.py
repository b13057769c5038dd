"""The data folder as a hostile or broken disk leaves it: damaged runs, paths in meta.json, paging, retention.

(Python 3.11's csv module reads NUL bytes, so a NUL is not damage; a row it shortens is dropped as torn.)"""
from __future__ import annotations

import csv
import io
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from previewlab.preview.record.records import STEP_COLUMNS
from previewlab.server.data.columns import EXPORT_COLUMNS, LIST_COLUMNS, export_header
from previewlab.server.data.run_files import Damaged
from previewlab.server.data.store import Store
from tests.conftest import GOOD, make_run



def export(store: Store) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(store.csv(store.ids()))))


def test_damaged_meta_is_listed_as_damaged_named_once_and_never_breaks_the_rest(tmp_path, caplog):
    make_run(tmp_path, GOOD)
    bad = {"20261130-120000-002": None, "20261130-120000-003": [1, 2], "20261130-120000-004": {"status": "done"},
           "20261130-120000-005": b"\xff\xfe not utf-8", "20261130-120000-006": b'{"run_id": "2026113',
           "20261130-120000-007": b'{"run_id": "20261130-120000-007", "wall_s": NaN}',
           "20261130-120000-008": b"[" * 60_000}
    for rid, meta in bad.items():
        make_run(tmp_path, rid, meta=meta if isinstance(meta, bytes) else json.dumps(meta).encode())
    make_run(tmp_path, "20261130-120000-009", meta=None)  # a run folder without its meta.json
    with caplog.at_level(logging.WARNING, logger="previewlab.server"):
        store = Store(tmp_path)  # starting over a damaged folder must not raise
        runs = store.runs()
        runs_again = store.runs()
    assert runs == runs_again
    by_id = {r["run_id"]: r for r in runs}
    assert by_id[GOOD]["status"] == "done" and "damaged" not in by_id[GOOD]
    damaged = sorted(r for r, m in by_id.items() if m["status"] == "damaged")
    assert damaged == sorted([*bad, "20261130-120000-009"])
    assert "a JSON NoneType" in by_id["20261130-120000-002"]["damaged"]
    assert "a JSON list" in by_id["20261130-120000-003"]["damaged"]
    assert "no run_id" in by_id["20261130-120000-004"]["damaged"]
    assert "not UTF-8" in by_id["20261130-120000-005"]["damaged"]
    assert "missing" in by_id["20261130-120000-009"]["damaged"]
    lines = [r.getMessage() for r in caplog.records]
    for rid in damaged:  # one line naming the file, however many times the runs are listed
        assert sum(f"{rid}/meta.json" in line for line in lines) == 1, rid
    assert [r["run_id"] for r in export(store)] == [GOOD, GOOD]


def test_a_bad_cell_torn_header_or_foreign_bytes_skip_only_that_run(tmp_path, caplog):
    make_run(tmp_path, GOOD)
    header = ",".join(STEP_COLUMNS)
    cases: dict[str, Any] = {
        "20261130-120000-002": header + "\n" + "20261130-120000-002,1," + "x" * 471_000 + "\n",  # 471 KB cell
        "20261130-120000-003": "run_id,step,times",                                            # torn header
        "20261130-120000-004": header.encode() + b"\n\xff\xfe\x00garbage\n",                    # not UTF-8
        # a cell its column cannot read (preview is 0 or 1): the rows are records, not text passed through
        "20261130-120000-005": header + "\n" + ",".join("20261130-120000-005" if c == "run_id" else "yes"
                                                      if c == "preview" else "1" for c in STEP_COLUMNS) + "\n",
        # a name its Literal does not allow (mode is sync or overlap): checked as a number's cell is
        "20261130-120000-006": header + "\n" + ",".join("20261130-120000-006" if c == "run_id" else "fast"
                                                      if c == "mode" else "1" for c in STEP_COLUMNS) + "\n",
    }
    for rid, steps in cases.items():
        make_run(tmp_path, rid, steps=steps)
    store = Store(tmp_path)
    with caplog.at_level(logging.WARNING, logger="previewlab.server"):
        assert [r["run_id"] for r in export(store)] == [GOOD, GOOD]
        export(store)
    for rid in cases:
        with pytest.raises(Damaged, match="steps.csv"):
            store.rows(rid)
        assert sum(f"{rid}/steps.csv" in r.getMessage() for r in caplog.records) == 1, rid
    listed = {r["run_id"]: r for r in store.runs()}
    assert listed["20261130-120000-002"]["status"] == "done"  # its meta is fine: the CSV is what is damaged
    assert "a line over 262144 characters" in listed["20261130-120000-002"]["damaged"]  # read no further
    assert "torn" in listed["20261130-120000-003"]["damaged"]
    assert listed["20261130-120000-005"]["damaged"] == "20261130-120000-005/steps.csv: row 1: preview='yes': not int"
    assert listed["20261130-120000-006"]["damaged"] == (
        "20261130-120000-006/steps.csv: row 1: mode='fast': allowed are sync, overlap")
    assert "damaged" not in listed[GOOD]


def test_run_ids_come_from_folder_names_never_from_meta(tmp_path):
    data = tmp_path / "data"
    outside = tmp_path / "secret"
    make_run(outside.parent, "secret", steps="run_id,step\nLEAKED,1\n")
    # a meta.json naming a path outside the data folder, and one naming another run
    make_run(data, "20261130-120000-001", meta={"run_id": "../secret", "status": "done"})
    make_run(data, "20261130-120000-002", meta={"run_id": "20261130-120000-003", "status": "done"})
    make_run(data, "20261130-120000-003")
    (data / "not-a-run").mkdir()
    (data / "not-a-run" / "meta.json").write_text(json.dumps({"run_id": "not-a-run"}))
    store = Store(data)
    assert store.ids() == ["20261130-120000-001", "20261130-120000-002", "20261130-120000-003"]
    text = store.csv(store.ids())
    assert "LEAKED" not in text
    assert [r["run_id"] for r in csv.DictReader(io.StringIO(text))] == ["20261130-120000-003"] * 2
    listed = {r["run_id"]: r for r in store.runs()}
    assert "its run_id is not its folder's name" in listed["20261130-120000-001"]["damaged"]
    assert listed["20261130-120000-002"]["status"] == "damaged"


def test_runs_are_paged_newest_first(tmp_path):
    ids = [f"20261130-1200{i // 60:02d}-{i % 60:03d}" for i in range(120)]
    for rid in ids:
        make_run(tmp_path, rid, steps=None)
    store = Store(tmp_path)
    first = store.runs(limit=50)
    assert [r["run_id"] for r in first] == ids[::-1][:50]
    second = store.runs(limit=50, before=first[-1]["run_id"])
    assert [r["run_id"] for r in second] == ids[::-1][50:100]
    assert [r["run_id"] for r in store.runs(after=ids[-3])] == ids[-2:][::-1]
    assert store.runs(after=ids[-1]) == []


def test_retention_removes_the_oldest_first_and_never_an_open_run(tmp_path, caplog):
    ids = [f"20261130-120000-{i:03d}" for i in range(6)]
    for rid in ids:
        make_run(tmp_path, rid, steps=None)
    (tmp_path / "generations.jsonl").write_text("{}\n")  # not a run: never touched
    with caplog.at_level(logging.INFO, logger="previewlab.server"):
        store = Store(tmp_path, keep_runs=4)
    assert store.ids() == ids[2:] and (tmp_path / "generations.jsonl").is_file()
    assert any("removed 2 old runs" in r.getMessage() for r in caplog.records)
    assert store.prune(keep={ids[2]}) == [] and store.ids() == ids[2:]
    store.retention.keep_runs = 2
    # the protected one stays and is not counted; the newest two stay, whatever that protection costs
    assert store.prune(keep={ids[2]}) == [ids[3]]
    store.close()
    assert Store(tmp_path, keep_runs=0).ids() == [ids[2], ids[4], ids[5]]  # 0 keeps everything


def test_retention_reads_a_status_it_does_not_know_as_not_whole(tmp_path):
    """meta.json's status is read typed (status_of: running, or an end run.Status names); one previewlab never
    writes is not a whole run, so it is counted with the failed and never pushes a good run out."""
    from typing import get_args

    from previewlab.preview.record.run import Status
    from previewlab.server.data.store_reader import STORED

    assert set(STORED) == {"running", *get_args(Status)}
    ids = [f"20261130-120000-{i:03d}" for i in range(3)]
    for rid, status in zip(ids, ("failed", "done", "finished")):
        make_run(tmp_path, rid, meta={"run_id": rid, "status": status}, steps=None)
    assert Store(tmp_path, keep_runs=1).ids() == ids[1:]  # the newest whole run, the newest other


def test_export_carries_guidance_from_the_run(tmp_path):
    make_run(tmp_path, GOOD, guidance=1.0)
    rows = export(Store(tmp_path))
    assert list(rows[0]) == list(EXPORT_COLUMNS) and {float(r["guidance"]) for r in rows} == {1.0}


def test_an_unchanged_run_is_parsed_once_for_any_number_of_exports(tmp_path):
    make_run(tmp_path, GOOD)
    store = Store(tmp_path)
    first = store.csv(store.ids())
    assert store.csv(store.ids()) == first and store.parses == 1 and store.exports.hits == 1
    with open(tmp_path / GOOD / "steps.csv", "a") as f:  # a run still writing: its next export sees the row
        f.write(",".join(GOOD if c == "run_id" else "3" if c == "step" else "" for c in STEP_COLUMNS) + "\n")
    assert len(export(store)) == 3 and store.parses == 2


PROMPT = 'a cat, "Tom"\non a mat'  # a comma, a quote and a newline: one cell all the same


def _context_meta(rid: str, prompt: str = PROMPT, **kw: Any) -> dict[str, Any]:
    return {"run_id": rid, "status": "done", "model": "demo", "model_note": "demo model, small costs",
            "device": "cuda", "dtype": "float16", "prompt": prompt, "seed": -1, "guidance": 3.0, "steps": 2,
            "width": 128, "height": 128, "decoder": "taesd",
            "totals": {"device_name": "NVIDIA H200", "wall_s": 1.25, "status": "done", "steps": 2}, **kw}


def test_a_runs_csv_carries_its_context_on_every_row(tmp_path):
    """Issue 35 item 2: model, model_note, device (and its name), prompt, seed, guidance and steps in columns
    of every row, the prompt safely quoted; a prompt a spreadsheet would run as a formula stays text."""
    make_run(tmp_path, GOOD, meta=_context_meta(GOOD))
    formula = "20261130-120000-002"
    make_run(tmp_path, formula, meta=_context_meta(formula, prompt='=HYPERLINK("http://x.example","y")'))
    store = Store(tmp_path)
    rows = export(store)
    assert list(rows[0]) == list(EXPORT_COLUMNS) and len(rows) == 4
    ours = [r for r in rows if r["run_id"] == GOOD]
    for r in ours:
        assert (r["model"], r["model_note"], r["device"], r["device_name"], r["dtype"]) == (
            "demo", "demo model, small costs", "cuda", "NVIDIA H200", "float16")
        assert r["prompt"] == PROMPT and r["seed"] == "-1" and float(r["guidance"]) == 3.0 and r["steps"] == "2"
    assert {r["prompt"] for r in rows if r["run_id"] == formula} == {"'" + '=HYPERLINK("http://x.example","y")'}
    alone = list(csv.DictReader(io.StringIO(export_header() + store.run_rows_csv(GOOD))))  # /runs/<id>.csv's
    assert alone == ours


def test_the_list_csv_is_a_row_per_run(tmp_path):
    """Issue 35 item 2: the list's CSV has one row per run, its meta and totals, its changes when it has
    them, a damaged run saying so; text stays text for a spreadsheet."""
    make_run(tmp_path, GOOD, meta=_context_meta(GOOD, changes=["latent2rgb", "taesd @53", "every 3 @120"]))
    make_run(tmp_path, "20261130-120000-002", meta=_context_meta("20261130-120000-002", prompt="-1 cats",
                                                                  status="interrupted"))
    make_run(tmp_path, "20261130-120000-003", meta=b"null")
    store = Store(tmp_path)
    text = "".join(store.list_chunks(store.ids()))
    rows = list(csv.DictReader(io.StringIO(text)))
    assert list(rows[0]) == list(LIST_COLUMNS)
    assert [(r["run_id"], r["status"]) for r in rows] == [
        (GOOD, "done"), ("20261130-120000-002", "interrupted"), ("20261130-120000-003", "damaged")]
    first = rows[0]
    assert first["prompt"] == PROMPT and first["model"] == "demo" and first["device_name"] == "NVIDIA H200"
    assert first["changes"] == "latent2rgb \u2192 taesd @53 \u2192 every 3 @120" and first["wall_s"] == "1.250"
    assert rows[1]["changes"] == "" and rows[1]["prompt"] == "'-1 cats" and rows[1]["seed"] == "-1"
    assert "a JSON NoneType" in rows[2]["damaged"]


def test_the_three_csv_routes(make_app, tmp_path):
    """/runs/<id>.csv: a run's steps with its context; /runs.csv: a row per run; /runs/steps.csv: every run's
    steps (what /runs.csv was before issue 35)."""
    from starlette.testclient import TestClient

    data = tmp_path / "data"
    make_run(data, GOOD, meta=_context_meta(GOOD))
    make_run(data, "20261130-120000-002", meta=_context_meta("20261130-120000-002", prompt="another"))
    srv, app = make_app(data_dir=data)
    with TestClient(app) as client:
        one = client.get(f"/runs/{GOOD}.csv")
        listed = client.get("/runs.csv")
        steps = client.get("/runs/steps.csv")
        head = client.head("/runs/steps.csv")
    assert [r["prompt"] for r in csv.DictReader(io.StringIO(one.text))] == [PROMPT, PROMPT]
    assert [r["prompt"] for r in csv.DictReader(io.StringIO(listed.text))] == [PROMPT, "another"]
    assert [(r["run_id"], r["step"]) for r in csv.DictReader(io.StringIO(steps.text))] == [
        (GOOD, "1"), (GOOD, "2"), ("20261130-120000-002", "1"), ("20261130-120000-002", "2")]
    assert 'filename="previewlab-steps.csv"' in steps.headers["content-disposition"]
    assert head.status_code == 200 and srv.exports.busy == 0

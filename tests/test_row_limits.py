"""What the store writes, its reader reads (issue 45, item 6): a 20,001-step script call was written without
complaint, then read as damaged ("not a file previewlab wrote") and its export answered 500; the same past
200,000 delivery rows."""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from previewlab.preview.record.records import StepRow
from previewlab.preview.record.run import RunEnd
from previewlab.server.data.run_files import MAX_STEP_ROWS, RowLimits
from previewlab.server.data.columns import DeliveryRow, export_header
from previewlab.server.data.store import Store
from tests.conftest import SAME_ORIGIN
from tests.test_full_disk import meta_of


def _run(store: Store, steps: int, deliveries: int = 0) -> str:
    rid = store.new_id()
    store.begin(meta_of(rid))
    for step in range(1, steps + 1):
        store.step(StepRow(run_id=rid, step=step, timestep=999.0, preview=1))
    for k in range(deliveries):
        store.delivery(DeliveryRow(rid, 1 + k % steps, k, "c1", "ack", send_ms=1.0))
    return rid


def _end(store: Store, rid: str) -> RunEnd:
    ended = store.finish(RunEnd(meta_of(rid), "done"))
    store.close_run(rid)
    return ended


def _rows(text: str) -> list[dict[str, str]]:
    """An export's rows; a run's own text (run_rows_csv) has no header."""
    return list(csv.DictReader(io.StringIO(text if text.startswith("run_id,") else export_header() + text)))


@pytest.mark.slow
def test_a_call_of_more_steps_than_a_run_keeps_is_recorded_readable_and_says_so(make_app, tmp_path):
    """20,001 steps through a real Store: it keeps 20,000 rows, the run ends failed naming the limit, and the
    run's CSV answers 200 with those rows, never damaged."""
    srv, app = make_app(data_dir=tmp_path)
    rid = _run(srv.store, MAX_STEP_ROWS + 1)
    ended = _end(srv.store, rid)
    assert ended.status == "failed" and ended.error == (
        f"steps.csv keeps at most {MAX_STEP_ROWS} rows, as many as previewlab reads back; rows after that are missing")
    with TestClient(app, headers=SAME_ORIGIN) as client:
        answer = client.get(f"/runs/{rid}.csv")
        listed = client.get("/runs").json()
    assert answer.status_code == 200, answer.text
    assert [int(r["step"]) for r in _rows(answer.text)] == list(range(1, MAX_STEP_ROWS + 1))
    assert listed[0]["status"] == "failed" and "damaged" not in listed[0]
    assert json.loads((tmp_path / rid / "meta.json").read_text())["status"] == "failed"


def test_deliveries_past_the_limit_are_refused_and_a_late_ack_too(tmp_path: Path):
    """The same limits bound the writer and the reader (RowLimits, here small): a run whose deliveries pass
    them keeps as many as are read back, ends failed saying which file, and exports; an ack that comes after
    the run's end is not written past them either."""
    store = Store(tmp_path)
    store.limits = RowLimits(steps=5, deliveries=7)
    full = _run(store, 5, deliveries=9)
    ended = _end(store, full)
    store.delivery(DeliveryRow(full, 5, 99, "c1", "ack", send_ms=1.0))  # late: the run has ended
    assert ended.status == "failed" and ended.error is not None and ended.error.startswith(
        "deliveries.csv keeps at most 7 rows")
    roomy = _run(store, 5, deliveries=6)
    assert _end(store, roomy).status == "done"
    store.delivery(DeliveryRow(roomy, 5, 99, "c1", "ack", send_ms=2.0))  # the 7th: there is room
    for rid in (full, roomy):
        assert sum(1 for _ in open(tmp_path / rid / "deliveries.csv")) == 1 + 7
    exported = _rows(store.csv(store.ids()))
    assert [r["run_id"] for r in exported] == [full] * 5 + [roomy] * 5 and not store.damaged
    store.close()


@pytest.mark.slow
def test_a_run_past_200000_deliveries_exports(tmp_path: Path):
    """The issue's own figure, at full size: 200,001 deliveries (a 1000-step clip preview to 32 watchers
    passes it) were read as damaged. Deliveries are read a row at a time now, kept per step."""
    store = Store(tmp_path)
    rid = _run(store, 1000, deliveries=200_001)
    assert _end(store, rid).status == "done"
    rows = _rows(store.run_rows_csv(rid))
    assert len(rows) == 1000 and not store.damaged and {r["send_ms"] for r in rows} == {"1.000"}
    store.close()

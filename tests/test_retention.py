"""Retention keeps what users care about (issue 45, item 12): --keep-runs counted a one-step run as a whole
run, so about 500 cheap runs pushed out every real one. Quick runs (under retention.CHEAP_S of wall time) go
first now, and a pinned run (a file named `pinned` in its folder) is never removed."""
from __future__ import annotations

import json
from pathlib import Path

from starlette.testclient import TestClient

from previewlab.server.data.retention import CHEAP_S, PIN
from previewlab.server.data.store import Store
from tests.conftest import SAME_ORIGIN, make_run, recv_until, wait_until


def _runs(root: Path, first: int, n: int, wall_s: float | None) -> list[str]:
    """n done runs (interrupted, without totals, where wall_s is None), ids from `first` on."""
    ids = [f"20261130-120000-{k:03d}" for k in range(first, first + n)]
    for rid in ids:
        meta: dict[str, object] = {"run_id": rid, "status": "done" if wall_s is not None else "interrupted"}
        if wall_s is not None:
            meta["totals"] = {"wall_s": wall_s, "status": "done", "steps": 1}
        make_run(root, rid, meta=meta)
    return ids


def test_quick_runs_go_first_and_never_push_out_a_real_one(tmp_path):
    real = _runs(tmp_path, 0, 3, wall_s=30.0)
    quick = _runs(tmp_path, 3, 10, wall_s=CHEAP_S / 20)
    assert Store(tmp_path, keep_runs=5).ids() == real + quick[-2:]


def test_with_no_quick_run_left_the_oldest_go_and_never_the_newest(tmp_path):
    """Past the quick ones, retention is by age as before; an interrupted run (no totals) counts as real; the
    newest run stays even when it is quick, since it carries the ids' order."""
    old_quick = _runs(tmp_path, 0, 1, wall_s=0.01)
    real = _runs(tmp_path, 1, 3, wall_s=5.0) + _runs(tmp_path, 4, 1, wall_s=None)
    newest_quick = _runs(tmp_path, 5, 1, wall_s=0.01)
    store = Store(tmp_path, keep_runs=4)
    assert store.ids() == real[1:] + newest_quick  # the quick one first, then the oldest real one
    store.retention.keep_runs = 1
    assert store.prune() == real[1:] and store.ids() == newest_quick
    store.close()


def test_a_pinned_run_is_never_removed_nor_counted(tmp_path):
    quick = _runs(tmp_path, 0, 6, wall_s=0.01)
    (tmp_path / quick[0] / PIN).touch()
    assert Store(tmp_path, keep_runs=2).ids() == [quick[0]] + quick[-2:]


def test_anyone_who_may_start_cannot_evict_the_history(make_app, tmp_path):
    """Through a real Server: two real runs kept, then one-step starts well past --keep-runs. Each start's end
    prunes (off the loop); the real runs stay, the quick ones replace each other."""
    data = tmp_path / "runs"
    real = _runs(data, 0, 2, wall_s=120.0)
    srv, app = make_app(data_dir=data, keep_runs=3)
    srv.store.retention.cheap_s = 30.0  # a one-step run of synthetic:tiny is quick on any machine, however loaded
    with TestClient(app) as client, client.websocket_connect("/ws", headers=SAME_ORIGIN) as ws:
        ws.receive_text()  # hello
        made = []
        for _ in range(5):
            ws.send_text(json.dumps({"type": "start", "steps": 1, "width": 64, "height": 64, "decoder": "none"}))
            made.append(recv_until(ws, "done")["run_id"])
        wait_until(lambda: srv.store.ids() == real + made[-1:], 30, "retention after the last run")

"""A run's live changes in words (preview/record/history.py): from its step rows, once, at its end."""
from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from starlette.testclient import TestClient

from previewlab.preview.controls import Controls
from previewlab.preview.call.engine import RunContext, generate
from previewlab.preview.record.kept_events import Gathered
from previewlab.preview.record.history import MAX_CHANGES, history
from previewlab.preview.record.records import StepRow
from previewlab.preview.record.run import RunEnd, RunMeta
from previewlab.preview.settings import PreviewSettings, RunSettings
from tests.conftest import SAME_ORIGIN, recv_until


def rows(n: int, **at: dict[str, Any]) -> list[StepRow]:
    """n rows of latent2rgb every 1 (sync, decode_at preview); at={"s53": {...}}: the fields a step and every
    step after it carry (its `event` only on that step)."""
    out, now = [], StepRow("r", 1, 0.0, decoder="latent2rgb", every=1, mode="sync", decode_at="preview")
    for step in range(1, n + 1):
        change = dict(at.get(f"s{step}", {}))
        now = replace(now, step=step, event=change.pop("event", ""), **change)
        out.append(now)
    return out


def test_a_run_without_changes_has_no_history():
    assert history([]) == ""
    assert history(rows(5)) == ""
    assert history(rows(5, s1={"every": 3})) == ""  # its start is in the list's own columns


def test_each_change_is_named_with_its_step():
    r = rows(200, s53={"decoder": "taesd", "event": "set decoder=taesd"},
             s120={"every": 3, "event": "set every=3"})
    assert history(r) == "latent2rgb → taesd @53 → every 3 @120"


def test_changes_at_one_step_are_one_entry_and_the_start_names_its_interval():
    r = rows(10, s1={"every": 2}, s4={"decoder": "taesd", "mode": "overlap", "event": "set decoder=taesd mode=overlap"},
             s6={"decode_at": "full", "event": "set decode_at=full"})
    assert history(r) == "latent2rgb every 2 → taesd, overlap @4 → decode_at full @6"


def test_a_budget_is_named_and_the_autopilots_own_intervals_are_not():
    """The rows carry no budget: the user's `set` event says it. While it holds, the autopilot picks every
    step's interval (not a change); its cheaper decoder is one (the preview changed)."""
    r = rows(12, s3={"event": "set every=1 budget=5.0"}, s4={"every": 2, "event": "autopilot: every 2"},
             s5={"every": 4, "decoder": "taesd", "event": "autopilot: taesd at 40 ms per preview cannot fit; taesd"},
             s8={"every": 3, "event": "autopilot: every 3"}, s10={"every": 5, "event": "set every=5 budget=0.0"})
    assert history(r) == "latent2rgb → auto 5% @3 → taesd @5 → every 5 @10"
    # a run that started with a budget says so, and its size set live too
    r = rows(6, s2={"every": 3}, s4={"event": "set preview_max=128"}, s6={"event": "set preview_max=0"})
    assert history(r, budget=10.0) == "latent2rgb auto 10% → max 128 px @4 → native size @6"


def test_a_fallback_after_a_failed_preview_is_a_change():
    r = rows(4, s1={"decoder": "taesd"},
             s3={"decoder": "latent2rgb", "event": "preview with decoder taesd failed at step 2 (...); continuing "
                                                   "with latent2rgb"})
    assert history(r) == "taesd → latent2rgb @3"


def test_a_long_history_keeps_its_first_changes_and_counts_the_rest():
    every = {f"s{s}": {"every": 2 - s % 2, "event": f"set every={2 - s % 2}"} for s in range(2, 2 + MAX_CHANGES + 3)}
    text = history(rows(40, **every))
    assert text.count("@") == MAX_CHANGES and text.endswith("→ … +3 more")
    assert text.startswith("latent2rgb → every 2 @2 → every 1 @3")


def test_a_real_runs_end_carries_its_live_change(tiny):
    """A live decoder switch made while generate() runs: the rows say where it landed, and RunEnd.of reads
    them into the end's `changes`, which its JSON (the `done` message, meta.json) carries."""
    settings = RunSettings(steps=3, width=64, height=64, preview=PreviewSettings(decoder="latent2rgb", mode="sync"))
    controls = Controls(settings.preview)

    class Switch(Gathered):
        def row(self, row: StepRow) -> None:
            super().row(row)
            if row.step == 1:
                controls.set(decoder="taesd")

    run = generate(RunContext(tiny, settings, "h", controls=controls), Switch())
    landed = next(r.step for r in run.rows if r.decoder == "taesd")
    end = RunEnd.of(RunMeta.of(tiny, "h", settings), run.record.totals, run.rows)
    assert end.changes == f"latent2rgb → taesd @{landed}" and end.to_json()["changes"] == end.changes
    assert RunEnd.of(end.meta, run.record.totals).changes == ""  # no rows given: nothing known


@pytest.mark.slow
def test_the_servers_done_message_and_runs_list_carry_the_changes(make_app, tmp_path):
    """A live change through the socket; the run stopped once a row shows it."""
    srv, app = make_app(tmp_path / "runs")
    with TestClient(app) as client, client.websocket_connect("/ws", headers=SAME_ORIGIN) as ws:
        recv_until(ws, "hello")
        ws.send_text(json.dumps({"type": "start", "steps": 500, "decoder": "latent2rgb", "mode": "sync"}))
        recv_until(ws, "step")
        ws.send_text(json.dumps({"type": "set", "every": 2}))
        while (row := recv_until(ws, "step"))["every"] != 2:
            pass
        ws.send_text(json.dumps({"type": "stop"}))
        done = recv_until(ws, "done")
        listed = client.get("/runs").json()
    assert done["status"] == "stopped" and done["changes"] == f"latent2rgb → every 2 @{row['step']}"
    assert listed[0]["run_id"] == done["run_id"] and listed[0]["changes"] == done["changes"]
    on_disk = json.loads((tmp_path / "runs" / done["run_id"] / "meta.json").read_text())
    assert on_disk["changes"] == done["changes"]

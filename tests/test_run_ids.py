"""Run ids never run out (issue 45, item 7): a data folder whose newest id is near 9999-12-31 made the second
start raise OverflowError, dropped the socket and failed every later start."""
from __future__ import annotations

import asyncio
import json
import time

import pytest
import websockets

from previewlab.preview.record.run_ids import LAST_ID, NoIdLeft, RunIds, valid
from tests.conftest import make_run
from tests.test_page_faults import serving

NEAR_END = "99991231-235959-998"  # one id left after it


def test_a_folder_dated_in_the_year_9999_carries_no_order():
    ids = RunIds(NEAR_END)
    made = [ids.new() for _ in range(3)]
    assert all(valid(rid) and rid < "99990101" for rid in made) and made == sorted(set(made))


def test_a_clock_at_the_last_second_is_refused_in_one_line(monkeypatch):
    monkeypatch.setattr(time, "gmtime", lambda *a: time.struct_time((9999, 12, 31, 23, 59, 59, 4, 365, 0)))
    ids = RunIds()
    assert [ids.new() for _ in range(1000)][-1] == LAST_ID
    with pytest.raises(NoIdLeft) as e:
        ids.new()
    assert isinstance(e.value, OSError)  # refused as a folder that cannot be written is, never a crash
    assert str(e.value) == (f"no run id is left after {LAST_ID} (ids are UTC YYYYMMDD-HHMMSS-NNN and sort after "
                            "the newest run); set the clock right")


async def _starts(port: int, n: int) -> list[dict]:
    """n starts on one socket, each waited to its end: what each was answered (done or error)."""
    answers = []
    async with websockets.connect(f"ws://127.0.0.1:{port}/ws", max_size=None) as ws:
        await ws.recv()  # hello
        for _ in range(n):
            await ws.send(json.dumps({"type": "start", "steps": 2, "width": 64, "height": 64}))
            while True:
                m = await asyncio.wait_for(ws.recv(), 120)
                if isinstance(m, str) and json.loads(m)["type"] in ("done", "error"):
                    answers.append(json.loads(m))
                    break
    return answers


@pytest.mark.slow
def test_starts_go_on_after_a_run_folder_near_the_end_of_ids(tmp_path):
    """A real `previewlab serve`: three starts on one socket, each recorded; the year-9999 folder is kept."""
    make_run(tmp_path, NEAR_END)
    with serving(tmp_path) as (p, port):
        answers = asyncio.run(_starts(port, 3))
        assert p.poll() is None
    assert [a["type"] for a in answers] == ["done"] * 3, answers
    made = sorted(a["run_id"] for a in answers)
    assert all(valid(rid) and rid < NEAR_END for rid in made)
    assert sorted(d.name for d in tmp_path.iterdir() if valid(d.name)) == made + [NEAR_END]

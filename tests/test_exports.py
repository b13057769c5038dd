"""Exports cost a running model nothing measurable (issue 45, item 9): with 150 runs of 1000 steps, four
/runs/steps.csv exports took a running model's denoise from 47-103 ms a step to 553 ms, because every export
re-parsed every row (the kept texts, 16 M characters at most, never held a whole export). Here the mechanism:
a finished run is parsed once, kept, streamed in pieces; a parse yields, and takes a small share of the time
while a run is written. The effect is measured by bench/export_cost.py (docs/tables.md), never timed here."""
from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import pytest

from previewlab.preview.record.records import STEP_COLUMNS, StepRow
from previewlab.server.data.pacer import LIVE_SHARE, Pacer
from previewlab.server.data.store import Store
from previewlab.server.data.store_reader import EXPORT_CHUNK
from tests.conftest import make_run
from tests.test_full_disk import meta_of


def _runs(root: Path, runs: int, steps: int, prompt: str = "a cat", status: str = "done") -> list[str]:
    ids = []
    for k in range(runs):
        rid = f"20261130-120000-{k:03d}"
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(STEP_COLUMNS)
        for step in range(1, steps + 1):
            w.writerow([rid if c == "run_id" else step if c == "step" else "sync" if c == "mode" else ""
                        for c in STEP_COLUMNS])
        make_run(root, rid, meta={"run_id": rid, "status": status, "prompt": prompt, "steps": steps},
                 steps=buf.getvalue())
        ids.append(rid)
    return ids


@pytest.fixture
def parsed(monkeypatch) -> list[int]:
    """Step rows parsed from a file, counted where every reader of steps.csv parses one (StepRow.from_row)."""
    count = [0]
    real = StepRow.from_row.__func__  # type: ignore[attr-defined]

    def counted(cls: type[StepRow], row: Any) -> StepRow:
        count[0] += 1
        return real(cls, row)
    monkeypatch.setattr(StepRow, "from_row", classmethod(counted))
    return count


def test_an_export_of_every_run_parses_each_finished_run_once(tmp_path, parsed):
    """8 runs whose export text is 18 M characters (their 2,000-character prompt on every row): the second
    export of every run parsed every row again; now it parses none and streams what it kept."""
    ids = _runs(tmp_path, 8, 1000, prompt="p" * 2000)
    store = Store(tmp_path)
    first = store.csv(ids)
    assert len(first) > 16 << 20 and parsed[0] == 8000
    pieces = list(store.csv_chunks(ids))
    assert parsed[0] == 8000 and store.exports.hits == 8 and "".join(pieces) == first
    assert max(len(p) for p in pieces) <= EXPORT_CHUNK and len(pieces) > 8 * 2_000_000 // EXPORT_CHUNK
    assert store.exports.bytes < len(first) // 100  # kept compressed: the context repeats on every row
    store.close()


def test_a_run_still_running_is_parsed_at_each_export(tmp_path, parsed):
    """Kept only once finished: a run whose meta.json says running may grow, and is read again each time."""
    _runs(tmp_path, 1, 10, status="running")
    store = Store(tmp_path, keep_runs=0)  # Store() marks a run left running interrupted; here it is a live one
    (rid,) = store.ids()
    (tmp_path / rid / "meta.json").write_text(f'{{"run_id": "{rid}", "status": "running"}}')
    store.csv([rid])
    store.csv([rid])
    assert parsed[0] == 20 and store.exports.hits == 0
    store.close()


class FakeTime:
    """A clock that moves 0.1 ms at each reading and by the whole of each sleep."""

    def __init__(self) -> None:
        self.now, self.slept = 0.0, 0.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        self.now += 1e-4
        return self.now

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s
        self.slept += s


@pytest.mark.parametrize("live", [True, False], ids=["a run being written", "no run"])
def test_a_parse_rests_between_slices_and_takes_its_share_while_a_run_is_written(tmp_path, live):
    """A cold export (nothing kept) parses in slices: between them it hands the interpreter back, for at least
    1 - LIVE_SHARE of the time while a run is being written (by a fake clock), else for a yield (sleep 0)."""
    ids = _runs(tmp_path, 2, 1000)
    store = Store(tmp_path)
    fake = FakeTime()
    store.pacer = Pacer(clock=fake.clock, sleep=fake.sleep)
    if live:
        open_rid = store.new_id()
        store.begin(meta_of(open_rid))
    text = store.csv(ids)
    assert text.count("\n") == 1 + 2000 and store.pacer.rests == len(fake.sleeps) > 100
    if live:
        assert min(fake.sleeps) > 0 and fake.slept / fake.now >= 1 - LIVE_SHARE - 0.01
    else:
        assert set(fake.sleeps) == {0.0}
    store.close()


@pytest.mark.parametrize("live", [True, False], ids=["a run being written", "no run"])
def test_an_export_rests_between_pieces_only_while_a_run_is_written(live):
    """The route's stream (exports.stream, each piece read on the real disk thread): while a run is written,
    each piece after the first waits LIVE_PIECE_REST_S first; with none, it streams at once."""
    import asyncio

    from previewlab.server.data.disk import DiskReads
    from previewlab.server.http.exports import LIVE_PIECE_REST_S, stream

    rests: list[float] = []
    ended: list[bool] = []

    async def rest(s: float) -> None:
        rests.append(s)

    async def read() -> list[bytes]:
        disk = DiskReads()
        try:
            return [p async for p in stream(disk, iter(["a", "b", "c", "d"]), lambda: ended.append(True),
                                            live=lambda: live, rest=rest)]
        finally:
            disk.close()
    assert asyncio.run(read()) == [b"a", b"b", b"c", b"d"] and ended == [True]
    assert rests == ([LIVE_PIECE_REST_S] * 4 if live else [])  # after each piece, the end's read included


def test_a_damaged_run_is_read_once_until_its_files_change(tmp_path, parsed):
    """A run found damaged half-way (row 600 of 1000 does not parse) is left out of each export without being
    read again (a hand-placed file of 2,000,000 deliveries would take the disk thread for seconds at every
    export); once its file changes it is read again, and exports whole."""
    (rid,) = _runs(tmp_path, 1, 1000)
    steps = tmp_path / rid / "steps.csv"
    good = steps.read_text()
    steps.write_text(good.replace(f"{rid},600,", f"{rid},x,", 1))
    store = Store(tmp_path)
    for _ in range(3):
        assert store.csv([rid]).count("\n") == 1  # the header alone
    assert parsed[0] == 600 and store.damaged[rid].startswith(f"{rid}/steps.csv: row 600")
    steps.write_text(good)
    assert store.csv([rid]).count("\n") == 1 + 1000 and rid not in store.damaged
    store.close()


def test_a_damaged_run_put_right_with_its_old_size_and_time_is_read_again(tmp_path):
    """Found by this item's own probe: a damaged verdict kept until the files change must see a change that
    keeps the size and the modification time (a `cp -p` of the good file back, a chmod that makes it readable):
    the file's ctime is in its stamp."""
    import os

    (rid,) = _runs(tmp_path, 1, 10)
    steps = tmp_path / rid / "steps.csv"
    good = steps.read_text()
    st = steps.stat()
    steps.write_text(good.replace(f"{rid},6,", f"{rid},x,", 1))
    os.utime(steps, ns=(st.st_atime_ns, st.st_mtime_ns))
    store = Store(tmp_path)
    assert store.csv([rid]).count("\n") == 1 and rid in store.damaged
    bad_ctime = steps.stat().st_ctime_ns
    while steps.stat().st_ctime_ns == bad_ctime:  # the kernel's clock for ctime ticks every few ms
        steps.write_text(good.replace(f"{rid},6,", f"{rid},7,", 1))  # the same size again
        os.utime(steps, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert store.csv([rid]).count("\n") == 1 + 10 and rid not in store.damaged
    store.close()

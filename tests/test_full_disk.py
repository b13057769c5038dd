"""A full disk, a clock set back and a listing in the middle of a start never cost a kept run (issue 18, 1, 2, 7).

The disk fills two ways here: an OSError injected at each write a start makes, one after another (CI can run
it anywhere), and a real tmpfs of a few hundred KiB that the test fills (where this process may mount one).
"""
from __future__ import annotations

import builtins
import errno
import io
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from starlette.testclient import TestClient

from previewlab.preview.record.run import RunEnd, RunMeta
from previewlab.preview.settings import PreviewSettings
from previewlab.server.data import store as store_module
from previewlab.server.data.store import Store
from tests.conftest import SAME_ORIGIN, acks_not_awaited, make_run, recv_until

GOOD = [f"20261130-120000-{i:03d}" for i in range(3)]


class FullDisk:
    """Counts every write a piece of code makes (mkdir, open for writing, write, flush, rename) and fails the
    `fail_at`-th with ENOSPC, as a disk that fills right there would."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, fail_at: int | None) -> None:
        self.n, self.fail_at = 0, fail_at
        real_open, real_mkdir, real_rename, real_replace = io.open, os.mkdir, os.rename, os.replace
        disk = self

        class File:
            def __init__(self, f: Any) -> None:
                self._f = f

            def write(self, data: Any) -> Any:
                disk.tick()
                return self._f.write(data)

            def flush(self) -> None:
                disk.tick()
                self._f.flush()

            def __getattr__(self, name: str) -> Any:
                return getattr(self._f, name)

            def __enter__(self) -> File:
                return self

            def __exit__(self, *exc: Any) -> None:
                self._f.close()

        def opener(file: Any, mode: str = "r", *args: Any, **kw: Any) -> Any:
            if not any(c in mode for c in "wax+"):
                return real_open(file, mode, *args, **kw)
            self.tick()
            return File(real_open(file, mode, *args, **kw))

        def wrap(real: Callable[..., Any]) -> Callable[..., Any]:
            def fn(*args: Any, **kw: Any) -> Any:
                self.tick()
                return real(*args, **kw)
            return fn

        monkeypatch.setattr(io, "open", opener)
        monkeypatch.setattr(builtins, "open", opener)
        def mkdir(path: Any, *args: Any, **kw: Any) -> None:
            if not os.path.isdir(path):  # an existing folder takes no space (pathlib's exist_ok asks anyway)
                self.tick()
            real_mkdir(path, *args, **kw)

        monkeypatch.setattr(os, "mkdir", mkdir)
        monkeypatch.setattr(os, "rename", wrap(real_rename))
        monkeypatch.setattr(os, "replace", wrap(real_replace))

    def tick(self) -> None:
        self.n += 1
        if self.n == self.fail_at:
            raise OSError(errno.ENOSPC, "No space left on device")


def meta_of(rid: str) -> RunMeta:
    return RunMeta(run_id=rid, started_at="2026-11-30T12:00:00+0000", model="m", synthetic=True, model_note="",
                   family="sd15", space="sd15: ...", device="cpu", dtype="float32", prompt="p", steps=2, width=64, height=64, seed=0,
                   guidance=7.5, preview=PreviewSettings())


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_start_that_fails_at_any_write_leaves_nothing_and_no_good_run_is_lost(tmp_path, monkeypatch):
    """Item 1: before, a failed begin left a folder behind (an empty meta.json.tmp, a meta.json saying running
    for good, or a steps file held open), retention counted it, and the good runs went instead."""
    store = Store(tmp_path / "probe", keep_runs=3)
    with monkeypatch.context() as m:
        counter = FullDisk(m, fail_at=None)
        store.begin(meta_of(GOOD[0]))
        writes = counter.n
    assert writes >= 5  # the folder, meta.json (+ rename), two CSV headers, the folder's rename
    for k in range(1, writes + 1):
        root = tmp_path / f"disk-{k}"
        for rid in GOOD:
            make_run(root, rid)
        store = Store(root, keep_runs=3)
        before, fds = sorted(os.listdir(root)), open_fds()
        with monkeypatch.context() as m:
            FullDisk(m, fail_at=k)
            with pytest.raises(OSError, match="No space left"):
                store.begin(meta_of("20261130-130000-000"))
        assert sorted(os.listdir(root)) == before, f"write {k} of {writes} left something behind"
        assert store.open_runs() == set() and open_fds() == fds
        # the next start, once there is space, is kept, and so are the newest two good runs
        rid = store.new_id()
        store.begin(meta_of(rid))
        store.finish(RunEnd(meta_of(rid), "done"))
        store.close_run(rid)
        assert store.prune() == [GOOD[0]] and store.ids() == GOOD[1:] + [rid]


def test_failed_and_half_made_folders_never_push_a_good_run_out(tmp_path):
    for rid in GOOD:
        make_run(tmp_path, rid)
    # what a full disk used to leave: a running meta, an empty folder, unreadable meta, a failed run
    make_run(tmp_path, "20261130-120001-000", meta={"run_id": "20261130-120001-000", "status": "failed"})
    make_run(tmp_path, "20261130-120001-001", meta=None, steps=None)
    make_run(tmp_path, "20261130-120001-002", meta=b"")
    (tmp_path / ".new-20261130-120001-003").mkdir()  # a start killed half-way
    store = Store(tmp_path, keep_runs=3)
    assert store.ids()[:3] == GOOD and not (tmp_path / ".new-20261130-120001-003").exists()
    store.retention.keep_runs = 1
    # the newest failed or damaged folders are kept apart (one of them here); good runs count alone
    assert store.prune() == GOOD[:2] + ["20261130-120001-000", "20261130-120001-001"]
    assert store.ids() == [GOOD[2], "20261130-120001-002"]


def test_a_run_that_loses_rows_ends_failed_on_disk_too_once_its_end_can_be_written(tmp_path, monkeypatch):
    """Item 1: the disk fills mid-run: the run ends `failed` in meta.json as in its `done`; while meta.json
    cannot be written either, the listing already says failed, and the write is retried at the next start."""
    from previewlab.preview.record.records import StepRow

    store = Store(tmp_path, keep_runs=3)
    rid = store.new_id()
    store.begin(meta_of(rid))
    with monkeypatch.context() as m:
        def full() -> None:  # where a full disk raises: the flush of an open file
            raise OSError(errno.ENOSPC, "No space left on device")
        m.setattr(store._steps[rid], "_flush", full)
        store.step(StepRow(run_id=rid, step=1, timestep=999.0))
        m.setattr(store_module, "_write_json", lambda path, meta: (_ for _ in ()).throw(
            OSError(errno.ENOSPC, "No space left on device")))
        ended = store.finish(RunEnd(meta_of(rid), "done"))
        store.close_run(rid)
    assert ended.status == "failed" and ended.error and "steps.csv" in ended.error and "No space left" in ended.error
    assert json.loads((tmp_path / rid / "meta.json").read_text())["status"] == "running"  # not written yet
    assert store.runs()[0]["status"] == "failed"  # listed as it ended
    nxt = store.new_id()
    store.begin(meta_of(nxt))  # the next start writes what was kept
    assert json.loads((tmp_path / rid / "meta.json").read_text())["status"] == "failed"
    assert store.prune() == [] and rid in store.ids()  # failed, not counted: it pushes no good run out


def test_ids_sort_by_creation_when_the_clock_goes_back(tmp_path, monkeypatch):
    """Item 2: kept runs made while the clock read 2099 (or local time ahead of UTC); the clock now reads
    2026. Before, new ids sorted first, retention removed them and ?after= missed them."""
    future = ["20991231-235959-998", "20991231-235959-999"]
    for rid in future:
        make_run(tmp_path, rid)
    store = Store(tmp_path, keep_runs=2)
    first = store.new_id()
    assert first == "21000101-000000-000"  # the next second, after sequence 999
    store.begin(meta_of(first))
    store.finish(RunEnd(meta_of(first), "done"))
    store.close_run(first)
    assert store.prune() == [future[0]]
    assert [r["run_id"] for r in store.runs(after=future[1])] == [first]
    store.close()  # a restart: the first server has gone
    again = Store(tmp_path, keep_runs=2).new_id()  # across a restart, too
    assert again == "21000101-000000-001"
    monkeypatch.setattr(time, "gmtime", lambda *a: time.struct_time((2101, 1, 1, 0, 0, 0, 5, 1, 0)))
    assert store.new_id() == "21010101-000000-000"  # a clock ahead again: UTC it is


def test_a_listing_during_a_start_never_sees_half_a_run(tmp_path, monkeypatch):
    """Item 7: a listing that landed between a run folder's mkdir and its meta.json marked it damaged for
    good. Here a listing runs at the very moment meta.json is serialised."""
    store = Store(tmp_path)
    seen: list[list[dict[str, Any]]] = []
    real = json.dumps

    def dumps_and_list(obj: Any, *a: Any, **kw: Any) -> str:
        if isinstance(obj, dict) and obj.get("status") == "running":
            seen.append(store.runs())
        return real(obj, *a, **kw)

    monkeypatch.setattr(json, "dumps", dumps_and_list)
    rid = store.new_id()
    store.begin(meta_of(rid))
    monkeypatch.setattr(json, "dumps", real)
    assert seen == [[]]
    assert store.runs()[0]["status"] == "running" and "damaged" not in store.runs()[0]


def test_a_damaged_mark_goes_once_the_folder_is_whole(tmp_path):
    rid = GOOD[0]
    d = make_run(tmp_path, rid, meta=None)
    store = Store(tmp_path)
    assert store.runs()[0]["status"] == "damaged"
    (d / "meta.json").write_text(json.dumps({"run_id": rid, "status": "done"}))
    listed = store.runs()[0]
    assert listed["status"] == "done" and "damaged" not in listed and store.damaged == {}


def three_good_runs(ws) -> list[str]:
    """After the hello: three finished runs, the ones a full disk must never delete; their ids, oldest first."""
    ws.receive_text()
    good = []
    for _ in range(3):
        ws.send_text(json.dumps({"type": "start", "steps": 2, "decoder": "latent2rgb"}))
        good.append(recv_until(ws, "done")["run_id"])
    return good


def test_a_start_the_disk_refuses_is_one_line_and_keeps_the_good_runs(make_app, tmp_path, monkeypatch):
    """The server's side of the real-disk test below, with the disk failing at the start's first write, so it
    runs wherever a tmpfs cannot be mounted."""
    data = tmp_path / "runs"
    srv, app = make_app(data_dir=data, keep_runs=3, limits=acks_not_awaited())
    with TestClient(app) as client, client.websocket_connect("/ws", headers=SAME_ORIGIN) as ws:
        good = three_good_runs(ws)
        with monkeypatch.context() as m:
            FullDisk(m, fail_at=1)
            ws.send_text(json.dumps({"type": "start", "steps": 2}))
            refused = recv_until(ws, "error")["message"]
        assert refused == "could not write the run's folder: [Errno 28] No space left on device"
        assert sorted(p.name for p in data.iterdir() if p.is_dir()) == good
        ws.send_text(json.dumps({"type": "start", "steps": 2, "decoder": "latent2rgb"}))
        new = recv_until(ws, "done")
        listed = client.get("/runs").json()
    assert [r["run_id"] for r in listed] == [new["run_id"]] + good[:0:-1]


# -- a real full disk ----------------------------------------------------------------------------------------

@pytest.fixture
def small_disk(tmp_path) -> Iterator[Path]:
    """A 4 MiB tmpfs. Mounting needs root (CI's containers run as root); elsewhere the injected failures
    above cover the same writes."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], capture_output=True)
    if r.returncode != 0:
        if os.environ.get("PREVIEWLAB_CI"):  # .ci/run runs as root: there a failed mount is a failure, not a skip
            pytest.fail(f"cannot mount a tmpfs ({r.stderr.decode().strip()[:80]}): the real full-disk tests need root")
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.decode().strip()[:80]}); the injected tests cover it")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(path: Path) -> Path:
    filler = path / "filler"
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
                f.flush()
        except OSError as e:
            assert e.errno == errno.ENOSPC
    return filler


def test_a_really_full_disk_refuses_the_start_and_keeps_the_good_runs(make_app, small_disk):
    data = small_disk / "runs"
    srv, app = make_app(data_dir=data, keep_runs=3, limits=acks_not_awaited())
    with TestClient(app) as client, client.websocket_connect("/ws", headers=SAME_ORIGIN) as ws:
        good = three_good_runs(ws)
        filler = fill(small_disk)
        ws.send_text(json.dumps({"type": "start", "steps": 2}))
        refused = recv_until(ws, "error")["message"]
        assert "could not write the run's folder" in refused and "No space left" in refused
        assert sorted(p.name for p in data.iterdir() if not p.is_file()) == good
        filler.unlink()
        ws.send_text(json.dumps({"type": "start", "steps": 2, "decoder": "latent2rgb"}))
        new = recv_until(ws, "done")
        assert new["status"] == "done"
        listed = client.get("/runs").json()
    assert [r["run_id"] for r in listed] == [new["run_id"]] + good[:0:-1]  # the newest three, newest first
    assert all(r["status"] == "done" and "damaged" not in r for r in listed)
    shutil.rmtree(data)


@pytest.mark.slow
def test_a_disk_that_fills_mid_run_ends_it_failed_in_done_list_and_meta(make_app, small_disk):
    data = small_disk / "runs"
    srv, app = make_app(data_dir=data, keep_runs=3, limits=acks_not_awaited())
    with TestClient(app) as client, client.websocket_connect("/ws", headers=SAME_ORIGIN) as ws:
        ws.receive_text()
        ws.send_text(json.dumps({"type": "start", "steps": 30, "decoder": "latent2rgb"}))
        rid = recv_until(ws, "step")["run_id"]  # its first row is on disk
        filler = fill(small_disk)
        done = recv_until(ws, "done")
        assert done["status"] == "failed" and "No space left" in done["error"]
        assert client.get("/runs").json()[0]["status"] == "failed"
        assert json.loads((data / rid / "meta.json").read_text())["status"] == "running"  # could not be written
        filler.unlink()
        ws.send_text(json.dumps({"type": "start", "steps": 2, "decoder": "latent2rgb"}))
        recv_until(ws, "done")
    on_disk = json.loads((data / rid / "meta.json").read_text())
    assert on_disk["status"] == "failed" and on_disk["error"] == done["error"]
    shutil.rmtree(data)

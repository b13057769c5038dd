"""Issue 45, items 3, 4 and 8: the data folder's life under a running server. Deleted under it (and taken by a
second server), read-only at its start and writable later, read-only at a restart, and frozen (a stalled disk).

The real parts: real servers (in-process over Starlette's test client, and a `previewlab serve` subprocess for
the frozen disk), a real tmpfs and a real loop-mounted ext4 that fsfreeze stops. Mounting needs root, which
.ci/run has: there a mount that fails is a failure, elsewhere a skip.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest
import websockets
from starlette.testclient import TestClient

from previewlab.server.data.owner import InUse
from previewlab.server.data.store import Store
from tests.conftest import SAME_ORIGIN, acks_not_awaited
from tests.test_full_disk import meta_of
from tests.test_resilience import free_port, start_server


def _mount(args: list[str], what: str) -> None:
    r = subprocess.run(args, capture_output=True)
    if r.returncode != 0:
        why = r.stderr.decode().strip()[:100]
        if os.environ.get("PREVIEWLAB_CI"):  # .ci/run runs as root: there this is a failure, never a skip
            pytest.fail(f"cannot mount {what} ({why}): these tests need root")
        pytest.skip(f"cannot mount {what} here ({why})")


@pytest.fixture
def tmpfs(tmp_path) -> Iterator[Path]:
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    _mount(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)], "a tmpfs")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def remount(mnt: Path, mode: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{mode}", str(mnt)], check=True)


def start(ws, steps: int = 2) -> dict:
    """A start's answer: its run's `done`, or the `error` that refused it."""
    ws.send_text(json.dumps({"type": "start", "steps": steps}))
    while True:
        m = ws.receive()
        msg = json.loads(m["text"]) if m.get("text") is not None else {}
        if msg.get("type") in ("done", "error"):
            return msg


def test_a_folder_deleted_under_the_server_is_made_again_and_a_second_owner_is_never_shared(make_app, tmp_path):
    """Item 3: rm -rf of server A's folder. A's next start makes it again, locked again. Deleted again and taken
    by server B, A refuses its starts in one line: no run of A's lands in B's folder, no id collides, and B's
    retention never meets a run of A's."""
    data = tmp_path / "runs"
    srv_a, app_a = make_app(data_dir=data, limits=acks_not_awaited())
    with TestClient(app_a) as a, a.websocket_connect("/ws", headers=SAME_ORIGIN) as ws_a:
        first = start(ws_a)
        assert first["type"] == "done"
        shutil.rmtree(data)
        again = start(ws_a)
        assert again["type"] == "done" and (data / again["run_id"] / "meta.json").is_file()
        with pytest.raises(InUse):  # A holds the folder it made again
            Store(data)
        shutil.rmtree(data)
        b = Store(data)  # server B's store: it owns the new folder
        try:
            refused = start(ws_a)
            assert refused["type"] == "error" and "changed owner under this server" in refused["message"]
            assert "\n" not in refused["message"]
            assert [p.name for p in data.iterdir() if not p.name.startswith(".")] == []  # nothing of A's in B's
        finally:
            b.close()


def test_a_server_started_on_a_read_only_folder_locks_it_once_it_is_writable(make_app, tmpfs):
    """Item 3, its variant: a read-only folder takes no lock (nothing can be written). Once it is writable, the
    server's first start takes the lock, so a second server is refused there."""
    data = tmpfs / "runs"
    data.mkdir()
    remount(tmpfs, "ro")
    srv, app = make_app(data_dir=data, limits=acks_not_awaited())
    with TestClient(app) as client, client.websocket_connect("/ws", headers=SAME_ORIGIN) as ws:
        assert srv.store.owner.fd is None
        refused = start(ws)
        assert refused["type"] == "error" and "Read-only file system" in refused["message"]
        remount(tmpfs, "rw")
        done = start(ws)
        assert done["type"] == "done"
        with pytest.raises(InUse):
            Store(data)


def test_a_run_left_running_on_a_read_only_folder_is_listed_interrupted_after_a_restart(tmpfs):
    """Item 4: the interrupted mark cannot be written on a read-only folder; the restarted server applies it in
    memory, so the run is never listed running (nothing is running it)."""
    data = tmpfs / "runs"
    s = Store(data)
    s.begin(meta_of(s.new_id()))  # the process dies mid-run: meta.json says running
    s.close()
    remount(tmpfs, "ro")
    again = Store(data)
    try:
        (run,) = again.runs()
        assert run["status"] == "interrupted"
    finally:
        again.close()


# -- a frozen disk ------------------------------------------------------------------------------------------

@pytest.fixture
def frozen_disk(tmp_path) -> Iterator[Path]:
    """A 32 MiB ext4 image, loop-mounted: fsfreeze stops its writes (tmpfs cannot be frozen)."""
    image, mnt = tmp_path / "disk.img", tmp_path / "ext4"
    mnt.mkdir()
    with open(image, "wb") as f:
        f.truncate(32 << 20)
    subprocess.run(["mkfs.ext4", "-q", str(image)], check=True)
    _mount(["mount", "-o", "loop", str(image), str(mnt)], "a loop device")
    try:
        yield mnt
    finally:
        subprocess.run(["fsfreeze", "-u", str(mnt)], capture_output=True)
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _get(url: str) -> int:
    with urllib.request.urlopen(url, timeout=5) as r:  # the loop answers in milliseconds; 5 s is a hang
        return r.status


async def _refused_start(url: str, page: str) -> tuple[str, list[int]]:
    """A start (on the frozen folder: while it waits, the page, its script and the metrics answer): its error's
    line, or "done"."""
    async with websockets.connect(url, max_size=None) as ws:
        await ws.recv()
        await ws.send(json.dumps({"type": "start", "steps": 2}))
        loop = asyncio.get_running_loop()
        answered = [await loop.run_in_executor(None, _get, page + path) for path in ("", "metrics", "static/app.js")]
        while True:
            m = await asyncio.wait_for(ws.recv(), 60)
            msg = json.loads(m) if isinstance(m, str) else {"type": "frame"}
            if msg["type"] in ("error", "done"):
                return msg.get("message", msg["type"]), answered


async def _start_then_sigterm(url: str, p: subprocess.Popen) -> None:
    """A start whose folder the frozen disk holds, then SIGTERM while it waits."""
    async with websockets.connect(url, max_size=None) as ws:
        await ws.recv()
        await ws.send(json.dumps({"type": "start", "steps": 2}))
        await asyncio.sleep(0.5)
        p.send_signal(signal.SIGTERM)
        with contextlib.suppress(websockets.ConnectionClosed, asyncio.TimeoutError):
            while True:
                await asyncio.wait_for(ws.recv(), 60)


@pytest.mark.slow
def test_a_frozen_disk_never_freezes_the_server_and_sigterm_still_ends_it(frozen_disk):
    """Item 8: with the data folder frozen, a start is refused in one line by the folder's deadline while the
    page, /metrics and the script answer; a folder the disk makes after the refusal (once thawed) is removed,
    and a start then runs. Frozen again, SIGTERM ends the server (its port closes) without waiting for the
    thaw; the process's last thread, inside the kernel's frozen write, ends with the thaw."""
    data, port = frozen_disk / "runs", free_port()
    page, url = f"http://127.0.0.1:{port}/", f"ws://127.0.0.1:{port}/ws"
    p = start_server(data, port)
    try:
        subprocess.run(["fsfreeze", "-f", str(frozen_disk)], check=True)
        message, answered = asyncio.run(_refused_start(url, page))
        assert answered == [200, 200, 200]
        assert "did not answer in 10 s" in message and "the run did not start" in message, message
        subprocess.run(["fsfreeze", "-u", str(frozen_disk)], check=True)
        # the next start's folder is made on the writer after the refused one's (made late, then removed)
        after, _ = asyncio.run(_refused_start(url, page))
        assert after == "done"
        with urllib.request.urlopen(page + "runs", timeout=10) as r:
            listed = json.loads(r.read())
        assert len(listed) == 1 and listed[0]["status"] == "done"
        assert sorted(d.name for d in data.iterdir() if d.name[:1].isdigit()) == [listed[0]["run_id"]]
        subprocess.run(["fsfreeze", "-f", str(frozen_disk)], check=True)
        asyncio.run(_start_then_sigterm(url, p))
        # the writes' deadline (10 s), then uvicorn's end: the port closes while the disk is still frozen. The
        # process itself ends at the thaw: the kernel holds a thread inside a frozen write until then
        deadline = time.monotonic() + 60
        while _listening(port) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _listening(port)
        subprocess.run(["fsfreeze", "-u", str(frozen_disk)], check=True)
        p.wait(30)
    finally:
        subprocess.run(["fsfreeze", "-u", str(frozen_disk)], capture_output=True)
        if p.poll() is None:
            p.kill()
            p.wait()

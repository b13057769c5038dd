"""The data folder's one owner (server/data/owner.py) over the platform's own lock (server/data/file_lock.py).

What runs here is the POSIX side (flock, O_NOFOLLOW); the Windows side (msvcrt.locking, a link refused before the
open) is type-checked as Windows reads it, and its refusal of a link is run here with O_NOFOLLOW taken away.
"""
from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from previewlab.server.data import no_follow
from previewlab.server.data.owner import LOCK, FolderLock, InUse, in_use

ROOT = Path(__file__).resolve().parents[1]
HOLD = """
import sys
from pathlib import Path
from previewlab.server.data.owner import FolderLock
lock = FolderLock(Path(sys.argv[1]))
print("held", flush=True)
sys.stdin.read()  # until the test kills this process
"""


def refusal(root: Path, pid: int) -> str:
    return (f"{root}/ is in use by previewlab pid {pid}: one server per data folder; give this one its own "
            "--data-dir (or data_dir=)")


def test_another_process_is_refused_naming_its_pid_until_it_dies(tmp_path):
    """The refusal names the holder's pid; a killed holder leaves the folder free (the kernel drops the lock)."""
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], cwd=ROOT, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(InUse) as refused:
            FolderLock(tmp_path)
        assert str(refused.value) == refusal(tmp_path, holder.pid)
        assert in_use(tmp_path) == refusal(tmp_path, holder.pid)
    finally:
        holder.send_signal(signal.SIGKILL)  # no release, no exit handler: only the kernel can free it
        holder.wait(10)
    assert in_use(tmp_path) == ""
    mine = FolderLock(tmp_path)
    assert (tmp_path / LOCK).read_text() == f"{os.getpid()}\n"  # the old holder's pid is gone, not appended to
    mine.release()


def test_a_second_lock_in_this_process_is_refused_until_the_first_is_released(tmp_path):
    first = FolderLock(tmp_path)
    with pytest.raises(InUse, match=f"pid {os.getpid()}: one server per data folder"):
        FolderLock(tmp_path)
    assert in_use(tmp_path) == refusal(tmp_path, os.getpid())
    first.release()
    first.release()  # twice is once
    assert first.fd is None and in_use(tmp_path) == ""
    FolderLock(tmp_path).release()


def test_asking_about_a_folder_takes_nothing(tmp_path):
    assert in_use(tmp_path) == "" and not (tmp_path / LOCK).exists()  # not even a lock file


@pytest.mark.parametrize("flag", [no_follow.NO_FOLLOW, 0], ids=["O_NOFOLLOW", "without it, as on Windows"])
def test_a_link_placed_as_the_lock_is_never_followed(tmp_path, monkeypatch, flag):
    outside = tmp_path / "outside.txt"
    outside.write_text("someone else's file\n")
    data = tmp_path / "runs"
    data.mkdir()
    (data / LOCK).symlink_to(outside)
    monkeypatch.setattr(no_follow, "NO_FOLLOW", flag)
    with pytest.raises(OSError) as refused:
        FolderLock(data)
    assert refused.value.errno == errno.ELOOP
    assert outside.read_text() == "someone else's file\n"  # neither truncated nor given a pid


def test_a_folder_nobody_can_write_is_not_locked(tmp_path):
    """A folder without write permission, or on a read-only file system where permissions do not stop this user
    (root: a read-only tmpfs, as tests/test_full_disk.py mounts one)."""
    data = tmp_path / "archive"
    data.mkdir()
    data.chmod(0o555)
    mounted = False
    try:
        if os.access(data, os.W_OK):
            r = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(data)], capture_output=True)
            if r.returncode != 0:
                # .ci/run runs as root: there a failed mount is a failure, as in tests/test_full_disk.py
                assert not os.environ.get("PREVIEWLAB_CI"), r.stderr.decode()
                pytest.skip(f"this user writes read-only folders and cannot mount a read-only tmpfs "
                            f"({r.stderr.decode().strip()[:80]})")
            mounted = True
        lock = FolderLock(data)
        assert lock.fd is None and in_use(data) == "" and not (data / LOCK).exists()
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(data)], check=False)
        data.chmod(0o755)


@pytest.mark.slow
def test_the_server_reads_as_windows_has_it():
    """Everything the server runs uses only what Windows has: mypy with --platform win32 reads the lock's
    msvcrt side and the rest of server/ as Windows' typeshed has them (no fcntl, os.pread, O_NOFOLLOW there). The
    other packages are skipped (read as Any), so this checks platform calls, not the whole program."""
    files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "previewlab" / "server").glob("*.py"))
    out = subprocess.run([sys.executable, "-m", "mypy", "--platform", "win32", "--no-incremental",
                          "--cache-dir", os.devnull, "--follow-imports", "skip", "--disable-error-code", "has-type",
                          "--explicit-package-bases", *files], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


def _nothing() -> None:
    """A forked worker that does nothing and exits (as a DataLoader's or a Pool's may)."""


def test_a_forked_child_that_exits_leaves_its_parents_folder_locked(tmp_path):
    # issue 56, item 1: the child's exit released its copy of the lock, which unlocked the open file the parent
    # shares, and a second server then took the folder while the first still served
    import multiprocessing

    held = FolderLock(tmp_path)
    fork = multiprocessing.get_context("fork")
    child = fork.Process(target=held.release)  # the child's own release: only its copy of the descriptor closes
    child.start()
    child.join(60)
    assert child.exitcode == 0
    with pytest.raises(InUse, match=f"in use by previewlab pid {os.getpid()}"):
        FolderLock(tmp_path)
    assert held.holds()
    held.release()
    FolderLock(tmp_path).release()  # given up by its own process, the folder is free


@pytest.mark.slow
def test_serve_watch_keeps_its_folder_after_a_forked_worker_exits(tmp_path):
    # the probe's case: serve(watch), one call, then a fork child that does nothing runs the page's exit hook
    import multiprocessing

    from previewlab import watch as preview_watch
    from previewlab.preview.models import synthetic_pipeline
    from previewlab.server.embedded import serve

    pipe = synthetic_pipeline("synthetic:tiny")
    w = preview_watch(pipe, decoder="latent2rgb", every=1)
    served = serve(w, port=0, data_dir=tmp_path / "runs")
    try:
        pipe("a cat", num_inference_steps=2, height=64, width=64, callback_on_step_end=w,
             callback_on_step_end_tensor_inputs=w.tensor_inputs)
        w.finish()
        child = multiprocessing.get_context("fork").Process(target=_nothing)
        child.start()
        child.join(60)
        assert child.exitcode == 0
        assert in_use(tmp_path / "runs").startswith(f"{tmp_path / 'runs'}/ is in use by previewlab pid {os.getpid()}")
        assert not served.closed
    finally:
        w.remove()

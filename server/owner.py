"""One owner per data folder: the server (or the embedded one) that holds `<data>/.lock`.

Two servers on one folder lose runs: the second's start marks the first's live run interrupted, and its
retention removes it. The lock is an advisory flock on `.lock`, which holds the owner's pid for the refusal's
line; the kernel releases it when the process ends, however it ends, so a killed server never leaves the folder
locked. A folder that cannot be written (read-only, an unpacked archive) is not locked: no run can be written
there, so there is nothing to lose.
"""
from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

LOCK = ".lock"


class InUse(RuntimeError):
    """The data folder has another owner; str() is the one line that says which and what to do."""


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return "?"
    return text if text.isdigit() else "?"


class FolderLock:
    """Held from construction to release(). Raises InUse when another process, or another server in this one,
    holds the folder."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.fd: int | None = None
        try:  # never through a link someone put there
            fd = os.open(self.root / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as e:
            if e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
                return  # a folder nobody can write: nothing to guard
            raise
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _holder(fd)
            os.close(fd)
            raise InUse(f"{self.root}/ is in use by previewlab pid {pid}: one server per data folder; give this one "
                        "its own --data-dir (or data_dir=)") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the descriptor drops the flock
            self.fd = None

    def __del__(self) -> None:
        self.release()


def in_use(root: Path) -> str:
    """Why `root` cannot be owned now ("" when it can), asked before a slow model load; takes nothing."""
    if not (Path(root) / LOCK).exists():
        return ""
    try:
        FolderLock(root).release()
    except InUse as e:
        return str(e)
    except OSError:
        return ""  # the Store's own open says what is wrong with the folder
    return ""

"""One owner per data folder: the server (or the embedded one) that holds `<data>/.lock`.

Two servers on one folder lose runs: the second's start marks the first's live run interrupted, and its
retention removes it. The lock is the platform's own file lock on `.lock` (file_lock.py: flock on POSIX,
msvcrt.locking on Windows), and the file holds the owner's pid for the refusal's line; the kernel releases the
lock when the process ends, however it ends, so a killed server never leaves the folder locked. A folder that
cannot be written (read-only, an unpacked archive) is not locked: no run can be written there, so there is
nothing to lose.
"""
from __future__ import annotations

import errno
import os
from pathlib import Path

from previewlab.server.data.file_lock import try_lock, unlock
from previewlab.server.data.no_follow import open_no_follow

LOCK = ".lock"
PID_BYTES = 32  # what is read back of the holder's pid line


class InUse(RuntimeError):
    """The data folder has another owner; str() is the one line that says which and what to do."""


def _holder(fd: int) -> str:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        text = os.read(fd, PID_BYTES).decode("ascii", "replace").strip()
    except OSError:
        return "?"
    return text if text.isdigit() else "?"


class FolderLock:
    """Held from construction to release(). Raises InUse when another process, or another server in this one,
    holds the folder."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.fd: int | None = None
        self.pid = os.getpid()  # a forked child shares the lock's open file: only this process may give it up
        try:  # never through a link someone put there (ELOOP, raised)
            fd = open_no_follow(self.root / LOCK, os.O_RDWR | os.O_CREAT)
        except OSError as e:
            if e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
                return  # a folder nobody can write: nothing to guard
            raise
        if not try_lock(fd):
            pid = _holder(fd)
            os.close(fd)
            raise InUse(f"{self.root}/ is in use by previewlab pid {pid}: one server per data folder; give this one "
                        "its own --data-dir (or data_dir=)")
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, f"{os.getpid()}\n".encode())
        self.fd = fd

    def holds(self) -> bool:
        """The lock is held and `.lock` is still the file it is held on: a folder deleted under its server (and
        perhaps made again, by another) has another `.lock`, or none."""
        if self.fd is None:
            return False
        try:
            now, held = os.stat(self.root / LOCK, follow_symlinks=False), os.fstat(self.fd)
        except OSError:
            return False
        return (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino)

    def release(self) -> None:
        """Give the lock up; in a forked child (a DataLoader's or a Pool's worker), only close the child's copy of
        the descriptor: an unlock there would drop the lock of the open file the parent still holds it through."""
        if self.fd is not None:
            fd, self.fd = self.fd, None
            try:
                if os.getpid() == self.pid:
                    unlock(fd)
            finally:
                os.close(fd)

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

"""An exclusive lock on an open file, by the platform's own call: fcntl.flock on POSIX, msvcrt.locking on Windows.

Both are held by the open file (a descriptor, a handle), so a second open of the same file is refused even in the
same process, and both are dropped by the kernel when the process ends, however it ends.

Windows locks bytes, not files, and a locked byte cannot be read by anyone else: the lock sits on one byte at
`LOCKED_BYTE`, past anything the file holds (locking beyond the end of a file is allowed there), so whoever is
refused can still read what the holder wrote at the start.
"""
from __future__ import annotations

import errno
import os
import sys

LOCKED_BYTE = 1024  # Windows only: beyond a pid's few bytes at the start of the file

if sys.platform == "win32":
    import msvcrt

    def try_lock(fd: int) -> bool:
        """Take the lock without waiting: True, or False when another open of the file holds it."""
        os.lseek(fd, LOCKED_BYTE, os.SEEK_SET)  # msvcrt.locking locks from the file's position
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError as e:
            if e.errno in (errno.EACCES, errno.EDEADLK):  # the byte is locked through another handle
                return False
            raise
        return True

    def unlock(fd: int) -> None:
        """Give the lock up (closing the descriptor does too; Windows asks for an explicit unlock first)."""
        os.lseek(fd, LOCKED_BYTE, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)

else:
    import fcntl

    def try_lock(fd: int) -> bool:
        """Take the lock without waiting: True, or False when another open of the file holds it."""
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def unlock(fd: int) -> None:
        """Give the lock up (closing the descriptor does too)."""
        fcntl.flock(fd, fcntl.LOCK_UN)

"""Opening a file never through a symbolic link someone placed there, on every platform.

O_NOFOLLOW refuses a link in the open itself (ELOOP). Windows has no such flag: there a link is refused just
before the open, so one made in between would be followed. os.open makes every descriptor non-inheritable by
itself (O_CLOEXEC where the OS has it, PEP 446), so no flag asks for that.
"""
from __future__ import annotations

import errno
import os
from pathlib import Path

NO_FOLLOW: int = getattr(os, "O_NOFOLLOW", 0)
BINARY: int = getattr(os, "O_BINARY", 0)  # Windows: bytes as they are, no newline translation below Python's own


def open_no_follow(path: Path, flags: int, mode: int = 0o644) -> int:
    """os.open(path, flags) that refuses a link: OSError with errno ELOOP when `path` is one."""
    if not NO_FOLLOW and path.is_symlink():
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(path))
    return os.open(path, flags | NO_FOLLOW | BINARY, mode)

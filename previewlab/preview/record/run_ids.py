"""Run ids, one scheme for every run (the server's, a script's watch, the bench's): UTC to the second, then a
sequence, `YYYYMMDD-HHMMSS-NNN`. They sort in the order runs began, whatever the clock or the time zone does:
a new id is always after the last one handed out or found on disk."""
from __future__ import annotations

import datetime
import re
import threading
import time

RUN_ID = re.compile(r"^[0-9]{8}-[0-9]{6}-[0-9]{3}$")


def valid(name: str) -> bool:
    """A run id: the pattern, and a real date and time (a folder named 20261202-246060-999 is not one)."""
    if not RUN_ID.match(name):
        return False
    try:
        datetime.datetime.strptime(name[:15], "%Y%m%d-%H%M%S")
    except ValueError:
        return False
    return True


LAST_ID = "99991231-235959-999"  # the id space's end: nothing comes after it
ROOM_BEFORE = "99990101-000000-000"  # an id before this leaves a year of seconds (3e10 ids) after it


class NoIdLeft(OSError):
    """No run id sorts after the newest one: the data folder's runs cannot be named, and a start is refused as
    one whose folder cannot be written is (an OSError: the server's one line, the socket kept)."""


def roomy(rid: str) -> bool:
    """An id that may carry the order: one dated before the year 9999. A folder dated in the year 9999 is
    hand-placed or a clock gone wild, and ids after it would run out (99991231-235959-998 left one)."""
    return valid(rid) and rid < ROOM_BEFORE


def after(rid: str) -> str:
    """The id right after `rid`: the next sequence number, or the next second's first. Raises NoIdLeft after
    LAST_ID."""
    if rid >= LAST_ID:
        raise NoIdLeft(f"no run id is left after {rid} (ids are UTC YYYYMMDD-HHMMSS-NNN and sort after the newest "
                       "run); set the clock right")
    stamp, seq = rid.rsplit("-", 1)
    if int(seq) < 999:
        return f"{stamp}-{int(seq) + 1:03d}"
    t = datetime.datetime.strptime(stamp, "%Y%m%d-%H%M%S") + datetime.timedelta(seconds=1)
    return t.strftime("%Y%m%d-%H%M%S") + "-000"


class RunIds:
    """Hands out ids in order, from any thread. last: the newest id already in use (a data folder's)."""

    def __init__(self, last: str = "") -> None:
        self._last = last if roomy(last) else ""  # a folder dated in the year 9999 is no order to keep
        self._lock = threading.Lock()

    def new(self) -> str:
        """The next id. Raises NoIdLeft only where the clock itself reads the last second of the year 9999."""
        with self._lock:
            rid = time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-000"
            if rid <= self._last:
                rid = after(self._last)
            self._last = rid
            return rid


PROCESS_IDS = RunIds()  # runs without a data folder (a watch without a server, the bench): ordered in the process

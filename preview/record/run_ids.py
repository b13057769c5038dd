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


def roomy(rid: str) -> bool:
    """An id that has ids after it (all but the year 9999's last second's last)."""
    return valid(rid) and rid < "99991231-235959-999"


def after(rid: str) -> str:
    """The id right after `rid`: the next sequence number, or the next second's first."""
    stamp, seq = rid.rsplit("-", 1)
    if int(seq) < 999:
        return f"{stamp}-{int(seq) + 1:03d}"
    t = datetime.datetime.strptime(stamp, "%Y%m%d-%H%M%S") + datetime.timedelta(seconds=1)
    return t.strftime("%Y%m%d-%H%M%S") + "-000"


class RunIds:
    """Hands out ids in order, from any thread. last: the newest id already in use (a data folder's)."""

    def __init__(self, last: str = "") -> None:
        self._last = last if roomy(last) else ""  # a hand-placed 99991231-235959-999 is no order to keep
        self._lock = threading.Lock()

    def new(self) -> str:
        with self._lock:
            rid = time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-000"
            if rid <= self._last:
                rid = after(self._last)
            self._last = rid
            return rid


PROCESS_IDS = RunIds()  # runs without a data folder (a watch without a server, the bench): ordered in the process

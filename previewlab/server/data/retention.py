"""Retention: how many runs the data folder keeps, and which go first.

--keep-runs counted every run alike, so 500 one-step runs (a second of anyone's starts) pushed out every run
a user cared about. A run's wall time is what it cost to make, and what it would cost to make again: runs
under CHEAP_S go first, oldest first, and a run that took longer is removed only when no quick run is left to
remove. A user keeps a run for good by pinning it: a file named `pinned` in its folder (touch runs/<id>/pinned)
and retention never removes it, nor counts it.

A measure series holds its runs, and the runs its configuration's figure already stood on, while it runs (hold):
with --keep-runs 4 a series' new runs pushed its own pairs out, and it ran 48 runs to its bound "not steady"
(issue 56). A held run counts but is never removed, so the folder's other runs go first; once the series ends
(release), retention applies to them again.
"""
from __future__ import annotations

import logging
import os
import shutil
import threading
from collections.abc import Iterable, Mapping

from previewlab.preview.record.run import RunEnd

from previewlab.server.data.run_files import OnceLog
from previewlab.server.data.store_reader import RunReader, Stored, status_of

log = logging.getLogger("previewlab.server")
WHOLE: tuple[Stored, ...] = ("done", "stopped", "interrupted")  # runs retention counts: their rows are all there is
CHEAP_S = 1.0    # wall seconds: a run quicker than this (a one-step test, a tiny image) goes before any other
PIN = "pinned"   # a file of this name in a run's folder: the run is never removed


class Retention:
    """Keeps the newest keep_runs whole runs (done, stopped, interrupted) and, apart from them, the newest
    keep_runs others (failed, damaged). Past keep_runs, quick whole runs (under cheap_s of wall time) go first,
    oldest first, then the others, oldest first; the newest whole run is never removed. 0 keeps everything.
    pending: the ends the writer has not written yet; writing: the runs being written (their keys). It holds
    the writer's maps and is handed the folder's reader when it prunes, never holding the store: a Store
    dropped is freed at once, with its folder lock."""

    def __init__(self, keep_runs: int, pending: Mapping[str, RunEnd], writing: Mapping[str, object],
                 log_once: OnceLog, cheap_s: float = CHEAP_S) -> None:
        self.keep_runs = keep_runs
        self.cheap_s = cheap_s
        self._pending = pending
        self._writing = writing
        self._log = log_once
        self._status: dict[str, Stored] = {}  # finished run -> its status, read once
        self._cheap: dict[str, bool] = {}     # finished whole run -> quicker than cheap_s, read once
        self._holds: dict[str, frozenset[str]] = {}  # holder (a measure series' key) -> the runs it holds
        self._hold_lock = threading.Lock()    # held on the loop, released and read on the disk thread

    def hold(self, holder: str, rids: Iterable[str]) -> None:
        """Keep these runs until `holder` releases them: they count towards keep_runs, and are never removed."""
        with self._hold_lock:
            self._holds[holder] = self._holds.get(holder, frozenset()) | frozenset(rids)

    def release(self, holder: str) -> None:
        """The runs `holder` held are retention's again (from the next prune)."""
        with self._hold_lock:
            self._holds.pop(holder, None)

    def held(self) -> frozenset[str]:
        """Every run some holder holds now."""
        with self._hold_lock:
            return frozenset(rid for rids in self._holds.values() for rid in rids)

    def ended(self, rid: str, status: Stored | None) -> None:
        """A run's end, written: its status is known without reading it again."""
        if status is not None:
            self._status[rid] = status
            self._cheap.pop(rid, None)  # read from its meta.json when next needed

    def prune(self, reader: RunReader, keep: Iterable[str] = ()) -> list[str]:
        """Remove the runs past what is kept. Runs in `keep`, open runs and pinned runs are never removed and
        never counted, so a folder that failed can never push a good run out, and the newest runs are never
        removed to make room. Held runs (hold) count, and are never removed: the others go first."""
        if self.keep_runs <= 0:
            return []
        protect = set(keep) | set(self._writing)
        held = self.held()
        whole: list[str] = []
        other: list[str] = []
        for rid in reader.ids():
            status = self._status_of(reader, rid)
            if rid not in protect and status != "running" and not os.path.lexists(reader.root / rid / PIN):
                (whole if status in WHOLE else other).append(rid)  # running: being made, or ended unwritten
        surplus = max(0, len(whole) - self.keep_runs)
        # never the newest whole run: it carries the ids' order across restarts
        candidates = [rid for rid in whole[:-1] if rid not in held]
        cheap = [rid for rid in candidates if self._is_cheap(reader, rid)]
        dear = [rid for rid in candidates if not self._is_cheap(reader, rid)]
        others = [rid for rid in other[:-self.keep_runs] if rid not in held]
        removed = []
        for rid in (cheap + dear)[:surplus] + others:  # oldest first, in each kind
            try:
                shutil.rmtree(reader.root / rid)
            except OSError as e:
                self._log.warn(f"prune {rid}", f"could not remove old run {rid}: {e}")
                continue
            reader.forget(rid)
            self._status.pop(rid, None)
            self._cheap.pop(rid, None)
            removed.append(rid)
        if removed:
            log.info("removed %d old runs (--keep-runs %d: runs quicker than %g s go first, pinned runs stay)",
                     len(removed), self.keep_runs, self.cheap_s)
        return removed

    def _is_cheap(self, reader: RunReader, rid: str) -> bool:
        """A whole run whose totals say it took under cheap_s; one without totals (interrupted) is not."""
        if rid not in self._cheap:
            end = self._pending.get(rid)
            if end is not None:
                wall = end.totals.wall_s if end.totals is not None else None
            else:
                wall = _wall_s(reader.meta_or_none(rid))
            self._cheap[rid] = wall is not None and wall < self.cheap_s
        return self._cheap[rid]

    def _status_of(self, reader: RunReader, rid: str) -> Stored | None:
        """A run's status: what is waiting to be written wins, a finished run's is read once (None: damaged, or
        a status previewlab never writes, counted with the failed)."""
        pending = self._pending.get(rid)
        if pending is not None:
            return pending.status
        if rid not in self._status:
            status = status_of(reader.meta_or_none(rid))
            if status is None or status == "running":
                return status  # it may still end, or be put right: read it again next time
            self._status[rid] = status
        return self._status[rid]


def _wall_s(meta: Mapping[str, object] | None) -> float | None:
    """A meta.json's wall time, seconds, where its totals give one as a number."""
    totals = meta.get("totals") if meta is not None else None
    wall = totals.get("wall_s") if isinstance(totals, dict) else None
    return wall if isinstance(wall, (int, float)) and not isinstance(wall, bool) else None

"""Retention: how many runs the data folder keeps, and which go first."""
from __future__ import annotations

import logging
import shutil
from collections.abc import Iterable, Mapping
from typing import Any

from previewlab.server.data.run_files import OnceLog
from previewlab.server.data.store_reader import RunReader, Stored, status_of

log = logging.getLogger("previewlab.server")
WHOLE: tuple[Stored, ...] = ("done", "stopped", "interrupted")  # runs retention counts: their rows are all there is


class Retention:
    """Keeps the newest keep_runs whole runs (done, stopped, interrupted) and, apart from them, the newest
    keep_runs others (failed, damaged). pending: the ends the writer has not written yet; writing: the runs
    being written (their keys). 0 keeps everything. It holds the writer's maps and is handed the folder's reader
    when it prunes, never holding the store: a Store dropped is freed at once, with its folder lock."""

    def __init__(self, keep_runs: int, pending: Mapping[str, dict[str, Any]], writing: Mapping[str, Any],
                 log_once: OnceLog) -> None:
        self.keep_runs = keep_runs
        self._pending = pending
        self._writing = writing
        self._log = log_once
        self._status: dict[str, Stored] = {}  # finished run -> its status, read once

    def ended(self, rid: str, status: Stored | None) -> None:
        """A run's end, written: its status is known without reading it again."""
        if status is not None:
            self._status[rid] = status

    def prune(self, reader: RunReader, keep: Iterable[str] = ()) -> list[str]:
        """Remove the runs past what is kept, oldest first in each kind. Runs in `keep` and open runs are never
        removed and never counted, so a folder that failed can never push a good run out, and the newest runs
        are never removed to make room."""
        if self.keep_runs <= 0:
            return []
        protect = set(keep) | set(self._writing)
        whole: list[str] = []
        other: list[str] = []
        for rid in reader.ids():
            status = self._status_of(reader, rid)
            if rid not in protect and status != "running":  # running: being made, or ended unwritten
                (whole if status in WHOLE else other).append(rid)
        removed = []
        for rid in whole[:-self.keep_runs] + other[:-self.keep_runs]:  # oldest first, in each kind
            try:
                shutil.rmtree(reader.root / rid)
            except OSError as e:
                self._log.warn(f"prune {rid}", f"could not remove old run {rid}: {e}")
                continue
            reader.forget(rid)
            self._status.pop(rid, None)
            removed.append(rid)
        if removed:
            log.info("removed %d old runs (keeping the newest %d whole runs, --keep-runs)", len(removed),
                     self.keep_runs)
        return removed

    def _status_of(self, reader: RunReader, rid: str) -> Stored | None:
        """A run's status: what is waiting to be written wins, a finished run's is read once (None: damaged, or
        a status previewlab never writes, counted with the failed)."""
        pending = self._pending.get(rid)
        if pending is not None:
            return status_of(pending)
        if rid not in self._status:
            status = status_of(reader.meta_or_none(rid))
            if status is None or status == "running":
                return status  # it may still end, or be put right: read it again next time
            self._status[rid] = status
        return self._status[rid]

"""Retention: how many runs the data folder keeps, and which go first."""
from __future__ import annotations

import logging
import shutil
from collections.abc import Iterable, Mapping
from typing import Any

from .run_files import OnceLog
from .store_reader import RunReader

log = logging.getLogger("previewlab.server")
WHOLE = ("done", "stopped", "interrupted")  # runs retention counts: their rows are all there is of them


class Retention:
    """Keeps the newest keep_runs whole runs (done, stopped, interrupted) and, apart from them, the newest
    keep_runs others (failed, damaged). pending: the ends the writer has not written yet; writing: the runs
    being written (their keys). 0 keeps everything. It holds the writer's maps, never the writer: a Store
    dropped is freed at once, with its folder lock."""

    def __init__(self, reader: RunReader, keep_runs: int, pending: Mapping[str, dict[str, Any]],
                 writing: Mapping[str, Any], log_once: OnceLog) -> None:
        self.keep_runs = keep_runs
        self._reader = reader
        self._pending = pending
        self._writing = writing
        self._log = log_once
        self._status: dict[str, str] = {}  # finished run -> its status, read once

    def ended(self, rid: str, status: str) -> None:
        """A run's end, written: its status is known without reading it again."""
        self._status[rid] = status

    def prune(self, keep: Iterable[str] = ()) -> list[str]:
        """Remove the runs past what is kept, oldest first in each kind. Runs in `keep` and open runs are never
        removed and never counted, so a folder that failed can never push a good run out, and the newest runs
        are never removed to make room."""
        if self.keep_runs <= 0:
            return []
        protect = set(keep) | set(self._writing)
        whole: list[str] = []
        other: list[str] = []
        for rid in self._reader.ids():
            status = self._status_of(rid)
            if rid not in protect and status != "running":  # running: being made, or ended unwritten
                (whole if status in WHOLE else other).append(rid)
        removed = []
        for rid in whole[:-self.keep_runs] + other[:-self.keep_runs]:  # oldest first, in each kind
            try:
                shutil.rmtree(self._reader.root / rid)
            except OSError as e:
                self._log.warn(f"prune {rid}", f"could not remove old run {rid}: {e}")
                continue
            self._reader.forget(rid)
            self._status.pop(rid, None)
            removed.append(rid)
        if removed:
            log.info("removed %d old runs (keeping the newest %d whole runs, --keep-runs)", len(removed),
                     self.keep_runs)
        return removed

    def _status_of(self, rid: str) -> str | None:
        """A run's status: what is waiting to be written wins, a finished run's is read once."""
        pending = self._pending.get(rid)
        if pending is not None:
            return str(pending.get("status", ""))
        if rid not in self._status:
            meta = self._reader.meta_or_none(rid)
            if meta is None:
                return None
            status = str(meta.get("status", ""))
            if status == "running":
                return status  # it may still end: read it again next time
            self._status[rid] = status
        return self._status[rid]

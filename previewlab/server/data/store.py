"""The data folder: one folder per run, append-only files, so a restart (or a kill) keeps every written row.

  <data>/<run_id>/meta.json        settings, model, status (running | done | stopped | failed | interrupted), totals
  <data>/<run_id>/steps.csv        the engine's step rows, one per step as it finishes
  <data>/<run_id>/deliveries.csv   per frame and client: ack (send, round trip, browser decode/paint) or drop
  <data>/<run_id>/final.png        the final image

A run's CSV joins steps and deliveries into the engine's schema (records.STEP_COLUMNS), then the run's context
(RUN_CONTEXT: model, device, prompt, seed, ...) repeated on every row, since a spreadsheet keeps columns, not
comment lines. The list's CSV is one row per run (LIST_COLUMNS: its meta, status, changes and totals). Text a
user wrote never reaches a spreadsheet as a formula (inert()). Run ids come only from folder names that match
RUN_ID: no path is built from a request or from a file's content. A run whose files cannot be read is
"damaged": it is listed as such, left out of the step export, its file named in one log line, and it never
breaks another run.

One object, three parts: the Store is the folder's reader (store_reader.RunReader, its base: the list, a run's
rows, the exports) with the writes here, and its retention (retention.py), handed the store when it prunes;
run_files.py reads and writes a run's files safely, columns.py says what their CSVs' columns are. Reading runs
can be slow (thousands of files): the server calls runs(), rows() and csv() off the event loop, and its writes
(step, delivery, finish, close_run) come from its writer thread (server/data/writes.py); begin() too, in order
ahead of the run's rows, and a start waits for it with a deadline, because a run whose folder cannot be made must
not start (a stalled disk: refused, the folder removed if it comes later, discard()). A folder deleted under the
server, or locked by another, is checked at each begin() (_own()).

A full disk loses no kept run: a run folder appears whole (renamed into place) or not at all; a run whose rows
could not all be written ends `failed`, and an end that cannot be written is kept in memory, listed, and written
again later; retention counts only whole runs and never removes the newest. The store writes no more rows to a
run's files than its reader reads back (run_files.RowLimits): a run that would pass them keeps its rows and ends
`failed`, saying so. Run ids are UTC plus a sequence and always sort after the newest folder (one dated in the
year 9999 aside: run_ids.roomy), whatever the clock does.
"""
from __future__ import annotations

import collections
import contextlib
import errno
import os
import shutil
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterable

from previewlab.preview.record.csv_writer import CsvAppender, to_csv_text
from previewlab.preview.record.records import STEP_COLUMNS, StepRow
from previewlab.preview.record.run import RunEnd, RunMeta
from previewlab.preview.record.run_ids import RUN_ID, RunIds, roomy

from previewlab.server.core.limits import DEFAULT_KEEP_RUNS
from previewlab.server.data.owner import FolderLock, InUse
from previewlab.server.data.retention import Retention
from previewlab.server.data.columns import DELIVERY_COLUMNS, DeliveryRow
from previewlab.server.data.run_files import OnceLog, write_text
from previewlab.server.data.run_files import write_json as _write_json  # a name tests replace to fill the disk at one write
from previewlab.server.data.store_reader import RunReader, status_of

TMP_PREFIX = ".new-"  # a run folder being made; never matches RUN_ID, so no listing sees it


class Store(RunReader):
    """The data folder: what the server reads (RunReader's methods: ids, meta, runs, rows, the exports, the final
    images), what it writes (begin, step, delivery, finish) and its retention (prune)."""

    def __init__(self, root: Path, keep_runs: int = DEFAULT_KEEP_RUNS) -> None:
        root = Path(root)
        root.mkdir(parents=True, exist_ok=True)
        self.owner = FolderLock(root)  # raises InUse: another server writes here (owner.py)
        self._pending: dict[str, RunEnd] = {}  # run -> its end, not yet written to meta.json
        super().__init__(root, self._pending, OnceLog())
        self._steps: dict[str, CsvAppender] = {}
        self._deliveries: dict[str, CsvAppender] = {}
        self._lost: dict[str, str] = {}      # open run -> its first write that failed (the run will end failed)
        self._written: collections.Counter[tuple[str, str]] = collections.Counter()  # (run, file) -> rows
        self._closed: collections.deque[str] = collections.deque(maxlen=4)  # runs that late acks may still reach
        self._lock = threading.Lock()        # ids and pending ends: begin runs on the loop, finish on the writer
        self.retention = Retention(keep_runs, self._pending, self._steps, self._log)
        for e in os.scandir(self.root):      # a process killed inside begin() left a half-made folder
            if e.name.startswith(TMP_PREFIX) and RUN_ID.match(e.name[len(TMP_PREFIX):]):
                shutil.rmtree(e.path, ignore_errors=True)
        ids = [rid for rid in self.ids() if roomy(rid)]
        self._ids = RunIds(ids[-1] if ids else "")
        for rid in ids:
            meta = self.meta_or_none(rid)
            if meta is not None and status_of(meta) == "running":  # the process died mid-run
                ended = {**meta, "status": "interrupted"}
                if not self._best_effort(f"{rid}/meta.json", _write_json, self.root / rid / "meta.json", ended):
                    with contextlib.suppress(ValueError):  # a read-only or full folder: listed so, written when
                        self._pending[rid] = RunEnd.from_json(ended)  # it can be (one that is no run's: as it is)
        self.prune()

    def pending(self, rid: str) -> RunEnd | None:
        """Run rid's end when the writer holds it because meta.json could not take it yet (else None: its
        meta.json says how it ended)."""
        with self._lock:
            return self._pending.get(rid)

    def prune(self, keep: Iterable[str] = ()) -> list[str]:
        """Retention over this folder (retention.Retention.prune): the runs removed."""
        return self.retention.prune(self, keep)

    def _best_effort(self, what: str, fn: Callable[..., object], *args: Any) -> bool:
        """Writes beside the run (meta, rows) must never end the run's delivery: log once, carry on."""
        try:
            fn(*args)
            return True
        except OSError as e:
            self._log.warn(f"write {what}", f"could not write {what}: {e}; carrying on without it")
            return False

    def new_id(self) -> str:
        """UTC to the second plus a sequence, and always after the newest id this folder holds: a clock set
        back (a time-zone change, DST, an NTP step, a restart) never makes a new run sort before a kept one.
        Retention never removes the newest run, so the newest folder carries the order across restarts."""
        return self._ids.new()

    def begin(self, meta: RunMeta) -> None:
        """Make the run's folder whole (meta.json saying running, both CSVs with their headers) under a
        temporary name, then rename it: a listing never sees a half-made run. Raises OSError when it cannot be
        made, and then leaves nothing behind: no folder, no open file, nothing retention would count."""
        rid = meta.run_id
        if not RUN_ID.match(rid):
            raise ValueError(f"run id {rid!r} is not one of the store's (YYYYMMDD-HHMMSS-NNN, from new_id())")
        self._own()
        self.retry_pending()
        tmp, final = self.root / f"{TMP_PREFIX}{rid}", self.root / rid
        opened: list[CsvAppender] = []
        made: list[Path] = []  # what this call created: all a failure removes, never a folder already there
        try:
            if os.path.lexists(final):
                raise FileExistsError(errno.EEXIST, f"run {rid} exists already", str(final))
            tmp.mkdir()
            made.append(tmp)
            _write_json(tmp / "meta.json", {**meta.to_json(), "status": "running"})
            for name, columns in (("steps.csv", STEP_COLUMNS), ("deliveries.csv", DELIVERY_COLUMNS)):
                CsvAppender(tmp / name, columns, fsync=False).close()
            os.rename(tmp, final)  # onto an empty folder made meanwhile it would succeed: that folder was empty
            made[0] = final
            opened.append(CsvAppender(final / "steps.csv", STEP_COLUMNS, fsync=False))
            opened.append(CsvAppender(final / "deliveries.csv", DELIVERY_COLUMNS, fsync=False))
        except OSError:
            for w in opened:
                with contextlib.suppress(OSError):
                    w.close()
            for d in made:
                shutil.rmtree(d, ignore_errors=True)
            raise
        self._steps[rid], self._deliveries[rid] = opened

    def _own(self) -> None:
        """Before a run's folder is made: the folder is still this server's. One deleted under it is made again
        and locked again; one it could not lock at its start (read-only then) is locked now. Raises InUse when
        another server owns it meanwhile: its runs, ids and retention are that server's."""
        if self.owner.holds():
            return
        self.root.mkdir(parents=True, exist_ok=True)
        self.owner.release()
        try:
            self.owner = FolderLock(self.root)
        except InUse as e:
            raise InUse(f"{self.root}/ changed owner under this server (deleted, then taken by another): {e}; this "
                        "server writes no more runs there") from None

    def discard(self, rid: str) -> None:
        """A run whose start was refused after its folder was made (it came too late): its files go."""
        for d in (self._steps, self._deliveries):
            w = d.pop(rid, None)
            if w:
                self._best_effort(f"{rid}/{w.path.name}", w.close)
        shutil.rmtree(self.root / rid, ignore_errors=True)

    def step(self, row: StepRow) -> None:
        w = self._steps.get(row.run_id)
        if w and self._room(row.run_id, "steps.csv"):
            self._run_write(row.run_id, "steps.csv", w.append, [row])

    def _room(self, rid: str, name: str, open_run: bool = True) -> bool:
        """Room for a row in the run's file: the store writes no more rows than it reads back (self.limits);
        past them an open run ends failed, saying so, and keeps the rows it has."""
        limit = self.limits.of(name)
        if self._written[rid, name] >= limit:
            if open_run:
                self._lost.setdefault(rid, f"{name} keeps at most {limit} rows, as many as previewlab reads back")
            self._log.warn(f"full {rid}/{name}", f"{rid}/{name} holds {limit} rows, the most previewlab reads "
                           "back: later rows are not recorded")
            return False
        self._written[rid, name] += 1
        return True

    def rewrite_steps(self, rid: str, rows: list[StepRow]) -> bool:
        """The run's steps.csv again, its rows filled in once it has ended (their progress cells): its appender
        closed first (no row comes after the end), then the file replaced whole, never half of one. Best effort:
        a disk that refuses leaves the rows as they were written, logged once; False then."""
        w = self._steps.pop(rid, None)
        if w is not None:
            self._best_effort(f"{rid}/steps.csv", w.close)
        return self._best_effort(f"{rid}/steps.csv", write_text, self.root / rid / "steps.csv",
                                 to_csv_text(rows, STEP_COLUMNS))

    def delivery(self, row: DeliveryRow) -> None:
        """A delivery of an open run goes to its appender; one that comes after the run's end (the browser acks
        the last frame as `done` goes out) is appended to the closed run's file, so the export joins it."""
        rid = row.run_id
        w = self._deliveries.get(rid)
        if w:
            if self._room(rid, "deliveries.csv"):
                self._run_write(rid, "deliveries.csv", w.append, [row])
        elif rid in self._closed and self.known(rid) and self._room(rid, "deliveries.csv", open_run=False):
            def late() -> None:
                late_w = CsvAppender(self.root / rid / "deliveries.csv", DELIVERY_COLUMNS, fsync=False)
                try:
                    late_w.append([row])
                finally:
                    late_w.close()
            self._best_effort(f"{rid}/deliveries.csv", late)

    def _run_write(self, rid: str, name: str, fn: Callable[..., object], *args: Any) -> None:
        try:
            fn(*args)
        except OSError as e:
            self._lost.setdefault(rid, f"could not write {name}: {e.strerror or e}")
            self._log.warn(f"write {rid}/{name}", f"could not write {rid}/{name}: {e}; the run will end failed")

    def finish(self, end: RunEnd) -> RunEnd:
        """Record the run's end; returns the end recorded. A run that lost rows to the disk ends `failed`,
        saying so (its totals kept). When meta.json cannot be written, the end is kept here, listed as it is,
        and written again at the next run's start or end (retry_pending)."""
        rid = end.meta.run_id
        lost = self._lost.pop(rid, None)
        if lost is not None and end.status != "failed":
            end = replace(end, status="failed", error=f"{lost}; rows after that are missing")
        with self._lock:
            self._pending[rid] = end
        self.retry_pending()
        return end

    def retry_pending(self) -> None:
        with self._lock:
            for rid, end in list(self._pending.items()):
                if not (self.root / rid).is_dir():  # removed meanwhile: nothing left to correct
                    del self._pending[rid]
                elif self._best_effort(f"{rid}/meta.json", _write_json, self.root / rid / "meta.json", end.to_json()):
                    del self._pending[rid]
                    self.retention.ended(rid, end.status)

    def close_run(self, rid: str) -> None:
        self._closed.append(rid)
        for key in [k for k in self._written if k[0] not in self._closed and k[0] not in self._steps]:
            del self._written[key]  # late acks reach only the last few runs
        for d in (self._steps, self._deliveries):
            w = d.pop(rid, None)
            if w:
                self._best_effort(f"{rid}/{w.path.name}", w.close)

    def close(self) -> None:
        """Give the folder up (the server's end): another server may own it from now on."""
        for rid in list(self._steps):
            self.close_run(rid)
        self.owner.release()

    def open_runs(self) -> set[str]:
        return set(self._steps)

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

Reading runs can be slow (thousands of files): the server calls runs(), rows() and csv() off the event loop, and
its writes (step, delivery, finish, close_run) come from its writer thread (server/writes.py); begin() alone runs
on the loop, once per run, because a run whose folder cannot be made must not start.

A full disk loses no kept run: a run folder appears whole (renamed into place) or not at all; a run whose rows
could not all be written ends `failed`, and an end that cannot be written is kept in memory, listed, and written
again later; retention counts only whole runs and never removes the newest. Run ids are UTC plus a sequence and
always sort after the newest folder, whatever the clock does.
"""
from __future__ import annotations

import collections
import contextlib
import csv
import errno
import io
import json
import logging
import os
import shutil
import stat
import threading
from dataclasses import fields, replace
from pathlib import Path
from typing import Any, Iterable, Iterator

from previewlab.preview.csv_writer import CsvAppender, as_csv_row
from previewlab.preview.records import RUN_COLUMNS, STEP_COLUMNS, StepRow
from previewlab.preview.run import RunEnd, RunMeta
from previewlab.preview.settings import PreviewSettings
from previewlab.preview.run_ids import RUN_ID, RunIds, roomy, valid

from .limits import DEFAULT_KEEP_RUNS
from .owner import FolderLock

log = logging.getLogger("previewlab.server")
DELIVERY_COLUMNS = ("run_id", "step", "seq", "client", "kind", "send_ms", "ack_rtt_ms", "client_decode_ms",
                    "client_paint_ms")
ACK_FIELDS = ("send_ms", "ack_rtt_ms", "client_decode_ms", "client_paint_ms")
# a run's context, repeated on each step row of the server's CSVs (device_name comes from the run's totals)
RUN_CONTEXT = ("model", "model_note", "device", "device_name", "dtype", "prompt", "seed", "guidance", "steps")
EXPORT_COLUMNS = STEP_COLUMNS + RUN_CONTEXT
# the list's CSV, a row per run: what it was asked (meta.json's fields), how it ended, then its totals' own fields
LIST_COLUMNS = tuple(dict.fromkeys(
    [f.name for f in fields(RunMeta) if f.name != "preview"] + [f.name for f in fields(PreviewSettings)]
    + ["status", "error", "damaged", "changes"] + list(RUN_COLUMNS)))
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")  # what makes a spreadsheet read a cell as a formula
MAX_META_BYTES = 1 << 20  # a meta.json is about 2 KB; anything near this is not one
WHOLE = ("done", "stopped", "interrupted")  # runs retention counts: their rows are all there is of them
# a run has a row per step (the server allows 1000, a script's call rarely more) and a delivery per frame and
# watcher: files beyond these were not written by previewlab, and are read no further than this
MAX_STEP_ROWS, MAX_DELIVERY_ROWS = 20_000, 200_000
MAX_IMAGE_BYTES = 1 << 30      # a run's final image read back (an img2img start's input)
EXPORT_CHUNK = 64 << 10         # characters per piece of a streamed export
EXPORT_CACHE_CHARS = 16 << 20   # runs' CSV texts kept between exports, newest use last
TMP_PREFIX = ".new-"  # a run folder being made; never matches RUN_ID, so no listing sees it


class Damaged(Exception):
    """A run file that cannot be read; str() names the file and what is wrong with it."""

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(f"{path.parent.name}/{path.name}: {why}")


class Store:
    def __init__(self, root: Path, keep_runs: int = DEFAULT_KEEP_RUNS) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.owner = FolderLock(self.root)  # raises InUse: another server writes here (owner.py)
        self.keep_runs = keep_runs
        self.damaged: dict[str, str] = {}  # run id -> what is wrong, found by a listing or an export
        self._steps: dict[str, CsvAppender] = {}
        self._deliveries: dict[str, CsvAppender] = {}
        self._warned: set[str] = set()
        self._exports: dict[str, tuple[Any, str]] = {}  # run id -> (its files' stamps, its rows as CSV text)
        self._export_chars = 0
        self._cache_lock = threading.Lock()  # exports read on the disk thread, retention prunes on another
        self._lost: dict[str, str] = {}      # open run -> its first write that failed (the run will end failed)
        self._pending: dict[str, dict[str, Any]] = {}  # run -> its end, not yet written to meta.json
        self._status: dict[str, str] = {}    # finished run -> its status, read once (retention)
        self._closed: collections.deque[str] = collections.deque(maxlen=4)  # runs that late acks may still reach
        self._lock = threading.Lock()        # ids and pending ends: begin runs on the loop, finish on the writer
        for e in os.scandir(self.root):      # a process killed inside begin() left a half-made folder
            if e.name.startswith(TMP_PREFIX) and RUN_ID.match(e.name[len(TMP_PREFIX):]):
                shutil.rmtree(e.path, ignore_errors=True)
        ids = [rid for rid in self.ids() if roomy(rid)]
        self._ids = RunIds(ids[-1] if ids else "")
        for rid in ids:
            meta = self._meta_or_none(rid)
            if meta is not None and meta.get("status") == "running":  # the process died mid-run
                self._best_effort(f"{rid}/meta.json", _write_json, self.root / rid / "meta.json",
                                  {**meta, "status": "interrupted"})
        self.prune()

    # -- reading: every failure is a Damaged naming the file ------------------------------------------------
    def ids(self) -> list[str]:
        """Run ids, oldest first: the names of folders that match RUN_ID, never anything read from a file."""
        with os.scandir(self.root) as it:
            return sorted(e.name for e in it if valid(e.name) and e.is_dir(follow_symlinks=False))

    def meta(self, rid: str) -> dict[str, Any]:
        f = self.root / rid / "meta.json"
        try:
            with _open_own(f, "rb") as fh:
                raw = fh.read(MAX_META_BYTES + 1)
        except FileNotFoundError:
            raise Damaged(f, "missing") from None
        except _LINK:
            raise Damaged(f, "a link, not a file: never followed out of the data folder") from None
        except OSError as e:
            raise Damaged(f, e.strerror or type(e).__name__) from None
        if len(raw) > MAX_META_BYTES:
            raise Damaged(f, f"over {MAX_META_BYTES} bytes")
        try:
            meta = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
        except UnicodeDecodeError:
            raise Damaged(f, "not UTF-8") from None
        except (ValueError, RecursionError):
            raise Damaged(f, "not valid JSON") from None
        if not isinstance(meta, dict):
            raise Damaged(f, f"a JSON {type(meta).__name__}, not an object")
        if meta.get("run_id") != rid:
            raise Damaged(f, "no run_id" if "run_id" not in meta else "its run_id is not its folder's name")
        return meta

    def runs(self, limit: int | None = None, before: str | None = None, after: str | None = None
             ) -> list[dict[str, Any]]:
        """Newest first; `before` / `after` are run ids (exclusive bounds). A damaged run is listed as
        {run_id, status: "damaged", damaged: why}; one whose CSVs failed keeps its meta plus `damaged`."""
        ids = [r for r in reversed(self.ids()) if (before is None or r < before) and (after is None or r > after)]
        out = []
        for rid in ids[:limit]:
            try:
                meta = self._pending.get(rid) or self.meta(rid)
            except Damaged as e:
                self._damaged(rid, str(e))
                out.append({"run_id": rid, "status": "damaged", "damaged": self.damaged[rid]})
                continue
            if self.damaged.get(rid, "").startswith(f"{rid}/meta.json:"):
                del self.damaged[rid]  # its meta.json reads now: whatever was wrong has been put right
            out.append({**meta, "damaged": self.damaged[rid]} if rid in self.damaged else meta)
        return out

    def known(self, rid: str) -> bool:
        path = self.root / rid  # a link, even to a run folder, is not one of this folder's runs
        return valid(rid) and path.is_dir() and not path.is_symlink()

    def rows(self, rid: str) -> list[dict[str, Any]]:
        """The run's step rows in the export schema, with the first ack of each frame and its drop count.
        Raises Damaged (and remembers it) when any of the run's files cannot be read."""
        try:
            meta = self.meta(rid)
            d = self.root / rid
            steps = _read(d / "steps.csv", STEP_COLUMNS, MAX_STEP_ROWS)
            deliveries = _read(d / "deliveries.csv", DELIVERY_COLUMNS, MAX_DELIVERY_ROWS)
        except Damaged as e:
            self._damaged(rid, str(e))
            raise
        self.damaged.pop(rid, None)  # every file reads now
        acks: dict[str, dict[str, str]] = {}
        drops: dict[str, int] = {}
        for r in deliveries:
            if r.get("kind") == "ack":
                acks.setdefault(r.get("step", ""), r)
            elif r.get("kind") == "drop":
                drops[r.get("step", "")] = drops.get(r.get("step", ""), 0) + 1
        extra = run_context(meta)
        for s in steps:
            a = acks.get(s["step"])
            for k in ACK_FIELDS:
                s[k] = a.get(k, "") if a else ""
            if s.get("preview") == "1":
                s["dropped"] = drops.get(s["step"], 0)
            s.update(extra)
        return steps

    def list_chunks(self, rids: Iterable[str]) -> Iterator[str]:
        """The list's CSV, a row per run (LIST_COLUMNS), in pieces of about EXPORT_CHUNK characters: only each
        run's meta.json is read (1 MB at most). A damaged run has its row: status `damaged`, and why."""
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(LIST_COLUMNS)
        for rid in rids:
            try:
                meta = self._pending.get(rid) or self.meta(rid)
            except Damaged as e:
                self._damaged(rid, str(e))
                meta = {"run_id": rid, "status": "damaged", "damaged": self.damaged[rid]}
            w.writerow(as_csv_row(list_row(meta), LIST_COLUMNS))
            if buf.tell() >= EXPORT_CHUNK:
                yield buf.getvalue()
                buf.seek(0)
                buf.truncate()
        yield buf.getvalue()

    def csv(self, rids: Iterable[str], skip_damaged: bool = True) -> str:
        """One CSV of the runs' rows; a damaged run is left out (skip_damaged) or raises Damaged."""
        return "".join(self.csv_chunks(rids, skip_damaged))

    def csv_chunks(self, rids: Iterable[str], skip_damaged: bool = True) -> Iterator[str]:
        """The same CSV in pieces of at most EXPORT_CHUNK characters, a run at a time: an export of every run is
        never whole in memory."""
        yield export_header()
        for rid in rids:
            try:
                text = self.run_rows_csv(rid)
            except Damaged:
                if not skip_damaged:
                    raise
                continue
            for i in range(0, len(text), EXPORT_CHUNK):
                yield text[i:i + EXPORT_CHUNK]

    def run_rows_csv(self, rid: str) -> str:
        """The run's rows as CSV text, without the header. Kept until one of its files changes, up to
        EXPORT_CACHE_CHARS of runs (the least recently exported go first): a finished run's files never
        change, so exporting again costs a stat per file, not a parse, and the kept texts stay bounded."""
        d = self.root / rid
        stamps = tuple(_stamp(d / name) for name in ("meta.json", "steps.csv", "deliveries.csv"))
        with self._cache_lock:
            kept = self._forget(rid)
            if kept is not None and kept[0] == stamps:
                self._keep(rid, kept)  # now the most recent
                return kept[1]
        buf = io.StringIO()
        w = csv.writer(buf)
        for r in self.rows(rid):
            w.writerow(as_csv_row(r, EXPORT_COLUMNS))
        text = buf.getvalue()
        with self._cache_lock:
            self._forget(rid)
            self._keep(rid, (stamps, text))
            while self._export_chars > EXPORT_CACHE_CHARS and len(self._exports) > 1:
                self._forget(next(iter(self._exports)))  # the least recently exported
        return text

    def _keep(self, rid: str, kept: tuple[Any, str]) -> None:
        self._exports[rid] = kept
        self._export_chars += len(kept[1])

    def _forget(self, rid: str) -> tuple[Any, str] | None:
        kept = self._exports.pop(rid, None)
        self._export_chars -= len(kept[1]) if kept else 0
        return kept

    def _meta_or_none(self, rid: str) -> dict[str, Any] | None:
        try:
            return self.meta(rid)
        except Damaged as e:
            self._damaged(rid, str(e))
            return None

    def _damaged(self, rid: str, why: str) -> None:
        self.damaged[rid] = why
        self._warn_once(why, f"damaged run {why}; listed as damaged, left out of exports")

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning("%s", message)

    def _best_effort(self, what: str, fn: Any, *args: Any) -> bool:
        """Writes beside the run (meta, rows) must never end the run's delivery: log once, carry on."""
        try:
            fn(*args)
            return True
        except OSError as e:
            self._warn_once(f"write {what}", f"could not write {what}: {e}; carrying on without it")
            return False

    # -- writing: begin on the event loop, the rest on the writer thread --------------------------------------
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

    def step(self, row: StepRow) -> None:
        w = self._steps.get(row.run_id)
        if w:
            self._run_write(row.run_id, "steps.csv", w.append, [row])

    def delivery(self, rid: str, **fields: Any) -> None:
        """A delivery of an open run goes to its appender; one that comes after the run's end (the browser acks
        the last frame as `done` goes out) is appended to the closed run's file, so the export joins it."""
        w = self._deliveries.get(rid)
        if w:
            self._run_write(rid, "deliveries.csv", w.append, [{"run_id": rid, **fields}])
        elif rid in self._closed and self.known(rid):  # a run that just ended: retention never removes it
            def late() -> None:
                late_w = CsvAppender(self.root / rid / "deliveries.csv", DELIVERY_COLUMNS, fsync=False)
                try:
                    late_w.append([{"run_id": rid, **fields}])
                finally:
                    late_w.close()
            self._best_effort(f"{rid}/deliveries.csv", late)

    def _run_write(self, rid: str, name: str, fn: Any, *args: Any) -> None:
        try:
            fn(*args)
        except OSError as e:
            self._lost.setdefault(rid, f"could not write {name}: {e.strerror or e}")
            self._warn_once(f"write {rid}/{name}", f"could not write {rid}/{name}: {e}; the run will end failed")

    def finish(self, end: RunEnd) -> RunEnd:
        """Record the run's end; returns the end recorded. A run that lost rows to the disk ends `failed`,
        saying so (its totals kept). When meta.json cannot be written, the end is kept here, listed as it is,
        and written again at the next run's start or end (retry_pending)."""
        rid = end.meta.run_id
        lost = self._lost.pop(rid, None)
        if lost is not None and end.status != "failed":
            end = replace(end, status="failed", error=f"{lost}; rows after that are missing")
        with self._lock:
            self._pending[rid] = end.to_json()
        self.retry_pending()
        return end

    def retry_pending(self) -> None:
        with self._lock:
            for rid, meta in list(self._pending.items()):
                if not (self.root / rid).is_dir():  # removed meanwhile: nothing left to correct
                    del self._pending[rid]
                elif self._best_effort(f"{rid}/meta.json", _write_json, self.root / rid / "meta.json", meta):
                    del self._pending[rid]
                    self._status[rid] = str(meta.get("status", ""))

    def close_run(self, rid: str) -> None:
        self._closed.append(rid)
        for d in (self._steps, self._deliveries):
            w = d.pop(rid, None)
            if w:
                self._best_effort(f"{rid}/{w.path.name}", w.close)

    def close(self) -> None:
        """Give the folder up (the server's end): another server may own it from now on."""
        for rid in list(self._steps):
            self.close_run(rid)
        self.owner.release()

    def final_image_path(self, rid: str) -> Path:
        return self.root / rid / "final.png"

    def final_image(self, rid: str) -> Path | None:
        """The run's final image when it has one: a regular file, not a link (never followed out of the data
        folder) and not empty (a disk that filled)."""
        if not self.known(rid):
            return None
        path = self.final_image_path(rid)
        try:
            st = path.lstat()
        except OSError:
            return None
        return path if stat.S_ISREG(st.st_mode) and st.st_size > 0 else None

    def read_final_image(self, rid: str) -> bytes:
        """Its bytes, opened without following a link (a link put there after final_image() looked)."""
        with _open_own(self.final_image_path(rid), "rb") as f:
            return bytes(f.read(MAX_IMAGE_BYTES))

    def open_runs(self) -> set[str]:
        return set(self._steps)

    def prune(self, keep: Iterable[str] = ()) -> list[str]:
        """Retention: keep the newest keep_runs whole runs (done, stopped, interrupted) and, apart from them,
        the newest keep_runs others (failed, damaged); remove the older ones. Runs in `keep` and open runs are
        never removed and never counted, so a folder that failed can never push a good run out, and the newest
        runs are never removed to make room. 0 keeps everything."""
        if self.keep_runs <= 0:
            return []
        protect = set(keep) | self.open_runs()
        whole: list[str] = []
        other: list[str] = []
        for rid in self.ids():
            status = self._status_of(rid)
            if rid not in protect and status != "running":  # running: being made, or ended unwritten
                (whole if status in WHOLE else other).append(rid)
        removed = []
        for rid in whole[:-self.keep_runs] + other[:-self.keep_runs]:  # oldest first, in each kind
            try:
                shutil.rmtree(self.root / rid)
            except OSError as e:
                self._warn_once(f"prune {rid}", f"could not remove old run {rid}: {e}")
                continue
            with self._cache_lock:
                self._forget(rid)
            for kept in (self.damaged, self._status):
                kept.pop(rid, None)
            removed.append(rid)
        if removed:
            log.info("removed %d old runs (keeping the newest %d whole runs, --keep-runs)", len(removed),
                     self.keep_runs)
        return removed

    def _status_of(self, rid: str) -> str | None:
        """A run's status for retention: what is waiting to be written wins, a finished run's is read once."""
        pending = self._pending.get(rid)
        if pending is not None:
            return str(pending.get("status", ""))
        if rid not in self._status:
            meta = self._meta_or_none(rid)
            if meta is None:
                return None
            status = str(meta.get("status", ""))
            if status == "running":
                return status  # it may still end: read it again next time
            self._status[rid] = status
        return self._status[rid]


MAX_LINE_CHARS = 256 << 10  # a row previewlab writes is under 2 KB; its longest cell (an event) a few hundred


def _lines(f: Any, path: Path) -> Iterator[str]:
    """A CSV file's lines, none longer than MAX_LINE_CHARS: the csv module builds a whole row before any check,
    so a hand-placed line of 53 MB of commas would take gigabytes. Raises Damaged."""
    while True:
        line = f.readline(MAX_LINE_CHARS + 1)
        if not line:
            return
        if len(line) > MAX_LINE_CHARS:
            raise Damaged(path, f"a line over {MAX_LINE_CHARS} characters: not a file previewlab wrote")
        yield line


def inert(v: Any) -> Any:
    """A text cell a spreadsheet would evaluate (=, +, -, @, a tab or a CR first: "=HYPERLINK(...)" in a prompt)
    gets a leading apostrophe, so it shows as the text it is (OWASP's advice on CSV injection). Numbers pass."""
    return "'" + v if isinstance(v, str) and v.startswith(FORMULA_START) else v


def _cell(v: Any) -> Any:
    """A meta.json value as one cell: a list of texts (a run's changes) joined with arrows, any other list or
    object as compact JSON, text made inert."""
    if isinstance(v, list) and all(isinstance(x, str) for x in v):
        v = " \u2192 ".join(v)
    elif isinstance(v, (list, dict)):
        v = json.dumps(v, ensure_ascii=False, separators=(",", ":"))
    return inert(v)


def run_context(meta: dict[str, Any]) -> dict[str, Any]:
    """The run's context for each of its step rows (RUN_CONTEXT): meta.json's, and device_name from its totals
    (a run that ended without totals, failed or interrupted, has none)."""
    totals = meta.get("totals")
    found = {**(totals if isinstance(totals, dict) else {}), **meta}
    return {k: _cell(found.get(k, "")) for k in RUN_CONTEXT}


def list_row(meta: dict[str, Any]) -> dict[str, Any]:
    """A run's row in the list's CSV: its meta.json's fields, then its totals' (the meta's win where both have
    one: its status says `interrupted`, its totals only how the steps ended)."""
    totals = meta.get("totals")
    found = {**(totals if isinstance(totals, dict) else {}), **meta}
    return {k: _cell(found.get(k)) for k in LIST_COLUMNS}


def export_header() -> str:
    """The exports' header line (EXPORT_COLUMNS), as csv writes it."""
    buf = io.StringIO()
    csv.writer(buf).writerow(EXPORT_COLUMNS)
    return buf.getvalue()


def _write_json(path: Path, meta: dict[str, Any]) -> None:
    """Atomic: a kill or a full disk leaves the old file or the new one, never half of one (nor a .tmp)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(json.dumps(meta, indent=1))
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


class _LINK(OSError):
    """Opening a link where a run's own file should be (O_NOFOLLOW's ELOOP)."""


def _open_own(path: Path, mode: str, **kw: Any) -> Any:
    """Open a run's file, never through a symbolic link (a hand-placed link would serve files from outside)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise _LINK(e.errno, e.strerror, str(path)) from None
        raise
    return os.fdopen(fd, mode, **kw)


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # NaN in a listing would make the whole /runs answer invalid


def _read(path: Path, columns: tuple[str, ...], limit: int) -> list[dict[str, Any]]:
    """Complete rows of one of a run's CSVs. Raises Damaged for a file that is not UTF-8, a header that is
    torn or not ours, or a cell the csv module refuses (over its 128 KiB field limit, a NUL byte)."""
    if path.is_symlink():
        raise Damaged(path, "a link, not a file: never followed out of the data folder")
    if not path.is_file():
        return []
    reader = None
    try:
        with _open_own(path, "r", newline="", encoding="utf-8") as f:
            reader = csv.DictReader(_lines(f, path))
            header = reader.fieldnames
            if header is None:
                return []  # an empty file: the run ended before its first row
            unknown = [h for h in header if h not in columns]
            if unknown or "step" not in header:
                raise Damaged(path, f"torn or foreign header (unexpected column {unknown[0][:40]!r})" if unknown
                              else "torn header (no step column)")
            # a kill can leave the last line half-written: keep only complete rows
            rows = []
            for r in reader:
                if None not in r.values() and None not in r:
                    rows.append(r)
                    if len(rows) > limit:  # read no further: a hand-placed file must not fill memory
                        raise Damaged(path, f"over {limit} rows: not a file previewlab wrote")
            return rows
    except UnicodeDecodeError:
        raise Damaged(path, "not UTF-8") from None
    except csv.Error as e:
        raise Damaged(path, f"line {reader.line_num if reader else 0}: {str(e)[:80]}") from None
    except OSError as e:
        raise Damaged(path, e.strerror or type(e).__name__) from None

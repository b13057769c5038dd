"""Reading the data folder (store.py has the layout): the run list, a run's meta and rows, the CSV exports, the
final images. Every failure is a Damaged naming the file; a damaged run is listed as such and left out of the
exports, and never breaks another run. The server calls these off the event loop (its disk thread).

A meta.json is passed on as it was written where it is shown (the list, /runs, the exports' cells: a guidance
of 7 stays 7, not 7.000). Where it is acted on, it is read typed: its status here (status_of: retention, a
restart), its run by run.RunEnd/RunRecord/RunMeta.from_json. What the exports' columns and cells are is
columns.py's."""
from __future__ import annotations

import csv
import io
import os
import stat
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Literal, TypeVar, get_args

from previewlab.preview.record.csv_writer import as_csv_row
from previewlab.preview.record.records import STEP_COLUMNS, StepRow
from previewlab.preview.record.run import RunEnd
from previewlab.preview.record.run_ids import valid

from previewlab.server.data.columns import (DELIVERY_COLUMNS, EXPORT_COLUMNS, LIST_COLUMNS, DeliveryRow, export_header,
                                            list_row, run_context)
from previewlab.server.data.export_cache import ExportCache, Packer, unpack
from previewlab.server.data.pacer import Pacer, no_pause
from previewlab.server.data.run_files import (MAX_IMAGE_BYTES, Damaged, OnceLog, RowLimits, csv_rows, open_own, read_meta,
                                              stamp)

# a meta.json's status: running from begin() until the run's end (run.Status: the rest) is written
Stored = Literal["running", "done", "stopped", "failed", "interrupted"]
STORED: tuple[Stored, ...] = get_args(Stored)
EXPORT_CHUNK = 64 << 10         # characters per piece of a streamed export
RUN_FILES = ("meta.json", "steps.csv", "deliveries.csv")  # what a run's export is made of


class RunReader:
    """What the server reads of the data folder; the Store is one, with its writes. pending: the ends the writer
    holds but could not write yet (listed as they will be written); log: the store's."""

    def __init__(self, root: Path, pending: Mapping[str, RunEnd], log: OnceLog) -> None:
        self.root = root
        self.damaged: dict[str, str] = {}  # run id -> what is wrong, found by a listing or an export
        self._pending = pending
        self._log = log
        self.limits = RowLimits()      # the most rows a run's files hold, read here and written by the Store
        self.exports = ExportCache()   # finished runs' export rows, compressed (export_cache.py)
        self.pacer = Pacer()           # parsing yields to a running model (pacer.py)
        self.parses = 0                # runs' exports parsed from their files, not found kept
        self._found_damaged: dict[str, tuple[Any, Damaged]] = {}  # run -> (its files' stamps, what was wrong)

    def ids(self) -> list[str]:
        """Run ids, oldest first: the names of folders that match RUN_ID, never anything read from a file."""
        with os.scandir(self.root) as it:
            return sorted(e.name for e in it if valid(e.name) and e.is_dir(follow_symlinks=False))

    def meta(self, rid: str) -> dict[str, Any]:
        return read_meta(self.root, rid)

    def runs(self, limit: int | None = None, before: str | None = None, after: str | None = None
             ) -> list[dict[str, Any]]:
        """Newest first; `before` / `after` are run ids (exclusive bounds). A damaged run is listed as
        {run_id, status: "damaged", damaged: why}; one whose CSVs failed keeps its meta plus `damaged`."""
        ids = [r for r in reversed(self.ids()) if (before is None or r < before) and (after is None or r > after)]
        out = []
        for rid in ids[:limit]:
            try:
                meta = self._listed(rid)
            except Damaged as e:
                self._damaged(rid, str(e))
                out.append({"run_id": rid, "status": "damaged", "damaged": self.damaged[rid]})
                continue
            if self.damaged.get(rid, "").startswith(f"{rid}/meta.json:"):
                del self.damaged[rid]  # its meta.json reads now: whatever was wrong has been put right
            out.append({**meta, "damaged": self.damaged[rid]} if rid in self.damaged else meta)
        return out

    def _listed(self, rid: str) -> dict[str, Any]:
        """Run rid's meta as a listing shows it: its end the writer holds when meta.json could not take it yet,
        as it will be written, else its meta.json. Raises Damaged."""
        end = self._pending.get(rid)
        return end.to_json() if end is not None else self.meta(rid)

    def known(self, rid: str) -> bool:
        path = self.root / rid  # a link, even to a run folder, is not one of this folder's runs
        return valid(rid) and path.is_dir() and not path.is_symlink()

    def open_runs(self) -> set[str]:
        """The runs being written (the Store's); a reader alone writes none."""
        return set()

    def rows(self, rid: str, tick: Callable[[], None] = no_pause) -> list[StepRow]:
        """The run's step rows, each with the first ack of its frame and (a preview) its drop count. Raises
        Damaged (and remembers it) when any of the run's files cannot be read. tick: called after each row read
        (the pacer's, for an export)."""
        d = self.root / rid
        try:
            steps = _records(d / "steps.csv", StepRow, STEP_COLUMNS, self.limits.steps, tick)
            acks, drops = _first_acks(d / "deliveries.csv", {s.step for s in steps}, self.limits.deliveries, tick)
        except Damaged as e:
            self._damaged(rid, str(e))
            raise
        self.damaged.pop(rid, None)  # every file reads now
        out = []
        for s in steps:
            a = acks.get(s.step)
            if a is not None:
                s = replace(s, send_ms=a.send_ms, ack_rtt_ms=a.ack_rtt_ms, client_decode_ms=a.client_decode_ms,
                            client_paint_ms=a.client_paint_ms)
            out.append(replace(s, dropped=drops.get(s.step, 0)) if s.preview == 1 else s)
        return out

    def own_rows(self, rid: str) -> list[StepRow]:
        """The run's steps.csv as the engine's rows were written (no deliveries joined). Raises Damaged."""
        return _records(self.root / rid / "steps.csv", StepRow, STEP_COLUMNS, self.limits.steps)

    def list_chunks(self, rids: Iterable[str]) -> Iterator[str]:
        """The list's CSV, a row per run (LIST_COLUMNS), in pieces of about EXPORT_CHUNK characters: only each
        run's meta.json is read (1 MB at most). A damaged run has its row: status `damaged`, and why."""
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(LIST_COLUMNS)
        for rid in rids:
            try:
                meta = self._listed(rid)
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
        never whole in memory, nor one run whole as text."""
        yield export_header()
        for rid in rids:
            try:
                packed = self.packed_rows(rid)
            except Damaged:
                if not skip_damaged:
                    raise
                continue
            yield from unpack(packed, EXPORT_CHUNK)

    def run_rows_csv(self, rid: str) -> str:
        """The run's rows as CSV text, without the header (packed_rows, unpacked)."""
        return "".join(unpack(self.packed_rows(rid), EXPORT_CHUNK))

    def packed_rows(self, rid: str) -> bytes:
        """The run's rows as compressed CSV text (export_cache.unpack reads it). A finished run's is kept until
        one of its files changes (export_cache.ExportCache): exporting it again costs a stat per file, not a
        parse; so is a run found damaged (its Damaged raised again until a file changes). A parse is made whole
        before any of it is used, so a run found damaged half-way is left out whole; it ticks the pacer after
        each row, so it yields to a running model. Raises Damaged."""
        d = self.root / rid
        stamps = tuple(stamp(d / name) for name in RUN_FILES)
        kept = self.exports.get(rid, stamps)
        if kept is not None:
            return kept
        bad = self._found_damaged.get(rid)
        if bad is not None and bad[0] == stamps:
            raise bad[1]
        try:
            status, packed = self._pack(rid)
        except Damaged as e:
            self._found_damaged[rid] = (stamps, e)
            raise
        self._found_damaged.pop(rid, None)
        if status != "running" and rid not in self.open_runs():
            self.exports.put(rid, stamps, packed)  # finished: its files change no more (a late ack restamps)
        return packed

    def _pack(self, rid: str) -> tuple[Stored | None, bytes]:
        """Parse the run's files into its export rows, compressed: its status, and the rows. Raises Damaged."""
        tick = self.pacer.ticks(lambda: bool(self.open_runs()))
        try:
            meta = self.meta(rid)
        except Damaged as e:
            self._damaged(rid, str(e))
            raise
        extra = run_context(meta)
        packer, buf = Packer(), io.StringIO()
        w = csv.writer(buf)
        for r in self.rows(rid, tick):
            w.writerow(as_csv_row({**r.to_row(), **extra}, EXPORT_COLUMNS))
            tick()
            if buf.tell() >= EXPORT_CHUNK:
                packer.add(buf.getvalue())
                buf.seek(0)
                buf.truncate()
        packer.add(buf.getvalue())
        self.parses += 1
        return status_of(meta), packer.done()

    def meta_or_none(self, rid: str) -> dict[str, Any] | None:
        try:
            return self.meta(rid)
        except Damaged as e:
            self._damaged(rid, str(e))
            return None

    def _damaged(self, rid: str, why: str) -> None:
        self.damaged[rid] = why
        self._log.warn(why, f"damaged run {why}; listed as damaged, left out of exports")

    def forget(self, rid: str) -> None:
        """A run removed (retention): its kept export and what was known of it go."""
        self.exports.forget(rid)
        self._found_damaged.pop(rid, None)
        self.damaged.pop(rid, None)

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
        with open_own(self.final_image_path(rid), "rb") as f:
            return bytes(f.read(MAX_IMAGE_BYTES))


def status_of(meta: Mapping[str, Any] | None) -> Stored | None:
    """A meta.json's status (STORED), read typed; None for no meta or a status previewlab never writes."""
    status = None if meta is None else meta.get("status")
    return next((known for known in STORED if known == status), None)


R = TypeVar("R", StepRow, DeliveryRow)


def _records(path: Path, kind: type[R], columns: tuple[str, ...], limit: int,
             tick: Callable[[], None] = no_pause) -> list[R]:
    """One of a run's CSVs as records (csv_rows' complete lines). Raises Damaged naming the line whose cell
    does not parse (its rows counted from 1)."""
    return list(_each(path, kind, columns, limit, tick))


def _each(path: Path, kind: type[R], columns: tuple[str, ...], limit: int, tick: Callable[[], None]) -> Iterator[R]:
    for i, row in enumerate(csv_rows(path, columns, limit), 1):
        try:
            yield kind.from_row(row)
        except ValueError as e:
            raise Damaged(path, f"row {i}: {e}") from None
        tick()


def _first_acks(path: Path, steps: set[int], limit: int, tick: Callable[[], None]
                ) -> tuple[dict[int, DeliveryRow], dict[int, int]]:
    """deliveries.csv read a row at a time into what the export joins: each step's first ack and its drop count,
    only for the steps the run has (memory bounded by its steps, whatever the file holds). Raises Damaged."""
    acks: dict[int, DeliveryRow] = {}
    drops: dict[int, int] = {}
    for x in _each(path, DeliveryRow, DELIVERY_COLUMNS, limit, tick):
        if x.step not in steps:
            continue
        if x.kind == "ack":
            acks.setdefault(x.step, x)
        elif x.kind == "drop":
            drops[x.step] = drops.get(x.step, 0) + 1
    return acks, drops

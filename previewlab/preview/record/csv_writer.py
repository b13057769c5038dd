"""Writing records as CSV: append-only files that survive a kill, and CSV text for exports.

The records (records.py) are plain data; this module is the one place in the core that writes them.
"""
from __future__ import annotations

import csv
import io
import os
from pathlib import Path
from typing import Any, Iterable


def _cell(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.3f}"
    return v


def as_csv_row(record: Any, columns: Iterable[str], extra: dict[str, Any] | None = None) -> list[Any]:
    """A record's cells (its to_row(), or a dict of them) in the columns' order."""
    d = record if isinstance(record, dict) else record.to_row()
    if extra:
        d = {**d, **extra}
    return [_cell(d.get(c)) for c in columns]


class CsvSchemaError(ValueError):
    """A CSV to append to whose header is not the columns being written (made by another previewlab version)."""


def appendable(path: Path, columns: tuple[str, ...]) -> bool:
    """Whether `path` is new (or empty); raises CsvSchemaError where it holds other columns. Writes nothing, so
    a command can ask before its long part."""
    if not path.exists() or path.stat().st_size == 0:
        return True
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        header = next(csv.reader(f), [])
    if tuple(header) != columns:
        missing = [c for c in columns if c not in header][:3]
        raise CsvSchemaError(f"{path}: its columns differ from this version's (for example "
                             f"{', '.join(missing) or 'their order'}); write to a new folder or move it away")
    return False


class CsvAppender:
    """Appends rows and flushes each batch to disk, so a killed process leaves every written row readable. An
    existing file is appended to only when its header is these columns: rows under another header would be read
    back shifted."""

    def __init__(self, path: Path, columns: Iterable[str], fsync: bool = True) -> None:
        """fsync=False: flush to the OS only, which a killed process cannot lose (a power cut can)."""
        self.path, self.columns, self.fsync = Path(path), tuple(columns), fsync
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fresh = appendable(self.path, self.columns)
        self._f = open(self.path, "a", newline="", encoding="utf-8")
        self._w = csv.writer(self._f)
        if fresh:
            self._w.writerow(self.columns)
            self._flush()

    def append(self, rows: Iterable[Any], extra: dict[str, Any] | None = None) -> None:
        for r in rows:
            self._w.writerow(as_csv_row(r, self.columns, extra))
        self._flush()

    def _flush(self) -> None:
        self._f.flush()
        if self.fsync:
            os.fsync(self._f.fileno())

    def close(self) -> None:
        self._f.close()


def to_csv_text(rows: Iterable[Any], columns: Iterable[str]) -> str:
    cols = tuple(columns)
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(cols)
    for r in rows:
        w.writerow(as_csv_row(r, cols))
    return buf.getvalue()

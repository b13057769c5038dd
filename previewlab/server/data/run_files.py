"""A run folder's files, read and written safely: never through a link, never past a size a run of previewlab
can have, a torn last line left out; a file that cannot be read is Damaged, naming the file and what is wrong."""
from __future__ import annotations

import contextlib
import csv
import errno
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from previewlab.server.data import meta_numbers
from previewlab.server.data.no_follow import open_no_follow

log = logging.getLogger("previewlab.server")
MAX_META_BYTES = 1 << 20  # a meta.json is about 2 KB; anything near this is not one
# a run has a row per step (the server allows 1000, a script's call rarely more) and a delivery per frame and
# watcher (32 watchers of a 16-frame clip preview: 512 a step). The store writes no more than these and reads
# no more (RowLimits): a longer file was not written by previewlab. Deliveries are read a row at a time, kept
# only as each step's first ack and drop count, so their limit bounds the time a read takes, not its memory.
MAX_STEP_ROWS, MAX_DELIVERY_ROWS = 20_000, 2_000_000
MAX_IMAGE_BYTES = 1 << 30      # a run's final image read back (an img2img start's input)


@dataclass(frozen=True)
class RowLimits:
    """The most rows a run's CSVs hold: what the store writes, it reads back (a 20,001-step call was written,
    then read as damaged)."""
    steps: int = MAX_STEP_ROWS
    deliveries: int = MAX_DELIVERY_ROWS

    def of(self, name: str) -> int:
        """name: steps.csv or deliveries.csv."""
        return self.steps if name == "steps.csv" else self.deliveries


class Damaged(Exception):
    """A run file that cannot be read; str() names the file and what is wrong with it."""

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(f"{path.parent.name}/{path.name}: {why}")


class OnceLog:
    """Warnings said once each: a full disk or a damaged file would otherwise log a line per row."""

    def __init__(self) -> None:
        self._said: set[str] = set()

    def warn(self, key: str, message: str) -> None:
        if key not in self._said:
            self._said.add(key)
            log.warning("%s", message)


MAX_LINE_CHARS = 256 << 10  # a row previewlab writes is under 2 KB; its longest cell (an event) a few hundred


def lines(f: Any, path: Path) -> Iterator[str]:
    """A CSV file's lines, none longer than MAX_LINE_CHARS: the csv module builds a whole row before any check,
    so a hand-placed line of 53 MB of commas would take gigabytes. Raises Damaged."""
    while True:
        line = f.readline(MAX_LINE_CHARS + 1)
        if not line:
            return
        if len(line) > MAX_LINE_CHARS:
            raise Damaged(path, f"a line over {MAX_LINE_CHARS} characters: not a file previewlab wrote")
        yield line


def read_meta(folder: Path, rid: str) -> dict[str, Any]:
    """Run rid's meta.json in its data folder, checked to be that run's, its numbers as previewlab writes them
    (meta_numbers.py). Raises Damaged."""
    f = folder / rid / "meta.json"
    try:
        with open_own(f, "rb") as fh:
            raw = fh.read(MAX_META_BYTES + 1)
    except FileNotFoundError:
        raise Damaged(f, "missing") from None
    except Link:
        raise Damaged(f, "a link, not a file: never followed out of the data folder") from None
    except OSError as e:
        raise Damaged(f, e.strerror or type(e).__name__) from None
    if len(raw) > MAX_META_BYTES:
        raise Damaged(f, f"over {MAX_META_BYTES} bytes")
    try:
        meta = meta_numbers.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise Damaged(f, "not UTF-8") from None
    except meta_numbers.OutOfRange as e:  # a 400-digit integer, 1e999: no listing converts it
        raise Damaged(f, str(e)) from None
    except (ValueError, RecursionError):
        raise Damaged(f, "not valid JSON") from None
    if not isinstance(meta, dict):
        raise Damaged(f, f"a JSON {type(meta).__name__}, not an object")
    if meta.get("run_id") != rid:
        raise Damaged(f, "no run_id" if "run_id" not in meta else "its run_id is not its folder's name")
    return meta


def write_json(path: Path, meta: dict[str, Any]) -> None:
    """Atomic: a kill or a full disk leaves the old file or the new one, never half of one (nor a .tmp)."""
    write_text(path, json.dumps(meta, indent=1))


def write_text(path: Path, text: str) -> None:
    """Atomic, as write_json: the old file or the new one, never half of one (nor a .tmp)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(text, encoding="utf-8", newline="")
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


class Link(OSError):
    """Opening a link where a run's own file should be (ELOOP: no_follow.py)."""


def open_own(path: Path, mode: str, **kw: Any) -> Any:
    """Open a run's file, never through a symbolic link (a hand-placed link would serve files from outside)."""
    try:
        fd = open_no_follow(path, os.O_RDONLY)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise Link(e.errno, e.strerror, str(path)) from None
        raise
    return os.fdopen(fd, mode, **kw)


def stamp(path: Path) -> tuple[int, int, int] | None:
    """What changes when a file does: its contents (mtime, size) or its permissions (ctime: a chmod that lets
    an unreadable file be read)."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_ctime_ns, st.st_size



def csv_rows(path: Path, columns: tuple[str, ...], limit: int) -> Iterator[dict[str, Any]]:
    """Complete rows of one of a run's CSVs, one at a time. Raises Damaged for a file that is not UTF-8, a header
    that is torn or not ours, a cell the csv module refuses (over its 128 KiB field limit, a NUL byte) or more
    than `limit` rows."""
    if path.is_symlink():
        raise Damaged(path, "a link, not a file: never followed out of the data folder")
    if not path.is_file():
        return
    reader = None
    try:
        with open_own(path, "r", newline="", encoding="utf-8") as f:
            reader = csv.DictReader(lines(f, path))
            header = reader.fieldnames
            if header is None:
                return  # an empty file: the run ended before its first row
            unknown = [h for h in header if h not in columns]
            if unknown or "step" not in header:
                raise Damaged(path, f"torn or foreign header (unexpected column {unknown[0][:40]!r})" if unknown
                              else "torn header (no step column)")
            # a kill can leave the last line half-written: keep only complete rows
            n = 0
            for r in reader:
                if None not in r.values() and None not in r:
                    n += 1
                    if n > limit:  # read no further: a hand-placed file must not take the disk thread for long
                        raise Damaged(path, f"over {limit} rows: not a file previewlab wrote")
                    yield r
    except UnicodeDecodeError:
        raise Damaged(path, "not UTF-8") from None
    except csv.Error as e:
        raise Damaged(path, f"line {reader.line_num if reader else 0}: {str(e)[:80]}") from None
    except OSError as e:
        raise Damaged(path, e.strerror or type(e).__name__) from None

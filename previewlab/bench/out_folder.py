"""A bench's --out folder: one writer at a time, and what the folder holds already.

The lock is a data folder's (server/data/owner.py's FolderLock on `<out>/.lock`: the platform's file lock, which
the kernel drops however the process ends, and which a forked child never gives up for its parent). A second
bench into the same folder, or a server on it, is refused at once, naming the holder's pid. A folder that holds
a sweep is resumed (--resume: resume.py) or refused in one line; two sweeps in one folder would be judged as one.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from previewlab.bench.rows import RUNS_CSV_COLUMNS, STEPS_CSV_COLUMNS, Judging, NotASweep, SweepRow, read
from previewlab.preview.record.csv_writer import CsvSchemaError, appendable
from previewlab.server.data.no_follow import open_no_follow
from previewlab.server.data.owner import LOCK, PID_BYTES, FolderLock, InUse


class OutError(Exception):
    """The --out folder cannot take this bench; str() is the line after `previewlab bench: `."""


def prepare(args: argparse.Namespace, judging: Judging) -> tuple[FolderLock, tuple[SweepRow, ...]]:
    """Before any model loads: the folder made and locked (held until release(), or the process's end), an
    older previewlab's CSVs refused, what the folder holds read (args.resume), the sweep's judging written and an
    earlier fidelity pass's files removed. The lock and the folder's runs (none for a new sweep). Raises OutError,
    or OSError for a folder that cannot be made or written."""
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    lock = take(out)
    try:
        for name, columns in (("runs.csv", RUNS_CSV_COLUMNS), ("steps.csv", STEPS_CSV_COLUMNS)):
            appendable(out / name, columns)
        runs = held(out, args.resume)
        judging.write(out)  # what report and compare judge the folder against
        stale(out)
    except CsvSchemaError as e:
        lock.release()
        raise OutError(f"--out {out}: {e}") from None
    except BaseException:
        lock.release()
        raise
    return lock, runs


def take(out: Path) -> FolderLock:
    """The folder's lock. Raises OutError naming the process that holds it."""
    try:
        return FolderLock(out)
    except InUse:
        raise OutError(f"--out {out}: previewlab pid {holder(out)} is writing to it; one bench per folder at a "
                       "time: wait for it to end, or give this one another --out") from None


def holder(out: Path) -> str:
    """The pid the lock's holder wrote in `.lock` ("?" where it cannot be read)."""
    try:
        with open(open_no_follow(out / LOCK, 0), "rb") as f:  # O_RDONLY
            text = f.read(PID_BYTES).decode("ascii", "replace").strip()
    except OSError:
        return "?"
    return text if text.isdigit() else "?"


def held(out: Path, resume: bool) -> tuple[SweepRow, ...]:
    """The runs the folder holds (none where it has no runs.csv, or none in it). Raises OutError where it holds
    runs and this is no --resume, or where they cannot be read as a sweep (a run id used twice, among others)."""
    if not (out / "runs.csv").is_file():
        return ()
    try:
        runs = read(out).runs
    except NotASweep as e:
        raise OutError(str(e)) from None
    if runs and not resume:
        raise OutError(f"--out {out} holds a sweep already ({len(runs)} runs, the last {runs[-1].run_id}): add "
                       "--resume (the same flags) to run what it lacks, keeping its runs, or give another --out")
    return runs


def stale(out: Path) -> None:
    """An earlier invocation's fidelity.csv and finals.csv in this folder judge other runs: removed, said."""
    from previewlab.preview.judging.fidelity import FIDELITY_CSV, FINALS_CSV

    for name in (FIDELITY_CSV, FINALS_CSV):
        if (out / name).is_file():
            (out / name).unlink()
            print(f"previewlab bench: removed {out / name}, an earlier sweep's fidelity pass", file=sys.stderr)

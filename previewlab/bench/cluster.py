"""previewlab bench --ray: a sweep's units fanned out over a Ray cluster, into one sweep folder.

The driver (this process) asks every node what it can run (bench/unit.py's look: the devices torch sees, the
model there or not), plans the sweep from one node's load of the model, then hands each unit (one configuration
with its own baselines and warm-up) to a node with a free slot (bench/dispatch.py): one GPU each where the sweep
runs on GPUs, one CPU each otherwise (--threads N: N CPUs). A unit's rows are written only once it has finished,
so a unit lost with its node runs again on another and nothing is counted twice; Ctrl-C cancels what runs and
keeps what finished. The driver chooses the node itself (Ray's node affinity), so it knows what runs where: the
progress line and runs.csv say it.
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import socket
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator

import ray
from ray.exceptions import RayError

from previewlab.bench.board import Board
from previewlab.bench.dispatch import Dispatch, say
from previewlab.bench.finish import finish, meta_line
from previewlab.bench.from_flags import plan_of, prepare, variants
from previewlab.bench.nodes import ClusterError, first_line, on, probe, usable
from previewlab.bench.ray_auth import token_here
from previewlab.bench.resume import held as by_key, unit_held
from previewlab.bench.rows import RUNS_CSV_COLUMNS, STEPS_CSV_COLUMNS, SweepRow, last_run_id
from previewlab.bench.unit import UnitJob, UnitResult
from previewlab.preview.record.csv_writer import CsvAppender, CsvSchemaError, appendable
from previewlab.preview.record.run_ids import RunIds

CONNECT_S = 10.0   # a head that does not take a TCP connection in this long is not there


def sweep_on_ray(args: argparse.Namespace, counts: tuple[int, ...], held: tuple[SweepRow, ...] = ()) -> int:
    """previewlab bench --ray ADDRESS: the whole sweep on the cluster, the summary here. The exit status is the
    local bench's (2: refused, 130: interrupted, 3: noisy with --strict), or 1 where a unit failed. held: the
    folder's runs (--resume): the units it holds whole are not run again."""
    if args.trace is not None or args.cprofile is not None:
        say("previewlab bench: --trace and --cprofile trace one run on this machine; leave them out with --ray")
        return 2
    try:  # before the cluster: a folder of an older previewlab is refused at once, and nothing is written
        for name, columns in (("runs.csv", RUNS_CSV_COLUMNS), ("steps.csv", STEPS_CSV_COLUMNS)):
            appendable(args.out / name, columns)
    except CsvSchemaError as e:
        say(f"previewlab bench: --out {args.out}: {e}")
        return 2
    try:
        _connect(args.ray)
        try:
            return _sweep(args, counts, held)
        finally:
            ray.shutdown()
    except ClusterError as e:
        say(f"previewlab bench: --ray {args.ray}: {e}")
        return 2
    except KeyboardInterrupt:  # while the nodes were asked, the model's first load, or the summary
        say(f"\nbench: interrupted; the units that finished, if any, are in {args.out}/runs.csv")
        return 130


def _answers(address: str) -> None:
    """A HOST:PORT (or ray://HOST:PORT) that nothing answers is refused now: ray.init would wait minutes for it."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        return  # auto, local, or a form ray.init judges itself
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_S).close()
    except OSError as e:
        raise ClusterError(f"nothing answers at {host}:{port} ({e.strerror or type(e).__name__}); give the head's "
                           "address as `ray start --head` printed it, or auto on a machine of the cluster") from None


def _connect(address: str) -> None:
    _answers(address)
    token = token_here()
    quiet: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.ERROR}
    try:
        if address == "local":  # a cluster of this machine alone: its cores and GPUs
            ray.init(include_dashboard=False, **quiet)
        else:
            ray.init(address=address, **quiet)
    except (ConnectionError, RuntimeError, ValueError, RayError) as e:  # RayError: a token refused, among others
        hint = ("start one with `ray start --head` on its head machine, or give --ray local" if address == "auto" else
                "if it was started with token authentication (Ray 2.60's `ray start --head` does), copy its head's "
                "~/.ray/auth_token here" if not token else "check that its head's ~/.ray/auth_token is the one here")
        raise ClusterError(f"cannot join the cluster ({first_line(e)}); {hint}") from None


@contextlib.contextmanager
def _held_interrupt() -> Iterator[None]:
    """Ctrl-C (SIGINT) waits for the block's end, then raises KeyboardInterrupt there (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    heard: list[int] = []
    before = signal.signal(signal.SIGINT, lambda signum, _: heard.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)
    if heard:
        raise KeyboardInterrupt


class Writer:
    """The sweep folder's runs.csv and steps.csv, a finished unit's rows at a time, under this driver's run ids
    (units on several machines each number their own runs), after the folder's newest: ids sort in the order
    units were written."""

    def __init__(self, out: Path) -> None:
        out.mkdir(parents=True, exist_ok=True)
        self.runs_csv = CsvAppender(out / "runs.csv", RUNS_CSV_COLUMNS)  # raises CsvSchemaError
        self.steps_csv = CsvAppender(out / "steps.csv", STEPS_CSV_COLUMNS)
        self.ids = RunIds(last_run_id(out))
        self.units: dict[int, list[SweepRow]] = {}

    def write(self, unit: UnitResult) -> None:
        """A finished unit's rows, whole: a Ctrl-C heard while they are written is raised once they are."""
        with _held_interrupt():
            self._write(unit)

    def _write(self, unit: UnitResult) -> None:
        new = {r.run_id: self.ids.new() for r in unit.runs}
        runs = [replace(r, record=replace(r.record, meta=replace(r.record.meta, run_id=new[r.run_id])))
                for r in unit.runs]
        steps = [replace(s, row=replace(s.row, run_id=new[s.row.run_id])) for s in unit.steps]
        self.steps_csv.append(s.to_row() for s in steps)  # rows first: a run in runs.csv has all its rows
        self.runs_csv.append(r.to_row() for r in runs)
        self.units[unit.index] = runs

    @property
    def runs(self) -> list[SweepRow]:
        """The written runs, unit by unit in the plan's order (the summary's order is a local sweep's)."""
        return [r for i in sorted(self.units) for r in self.units[i]]

    def where(self) -> dict[str, set[str]]:
        """The devices the written runs ran on, each with its nodes."""
        out: dict[str, set[str]] = {}
        for r in self.runs:
            out.setdefault(r.device, set()).add(r.node)
        return out

    def close(self) -> None:
        self.runs_csv.close()
        self.steps_csv.close()


def _sweep(args: argparse.Namespace, counts: tuple[int, ...], held: tuple[SweepRow, ...]) -> int:
    cpus = args.threads or 1  # a unit's torch threads, each a CPU Ray counts
    places, gpu = usable(args.device, probe(args.model, args.taesd), cpus)
    asks: dict[str, float] = {"num_cpus": cpus, "num_gpus": 1} if gpu else {"num_cpus": cpus}
    # the device the units asked Ray for, never auto: a node's GPU Ray was not told of is not taken
    device = "cuda" if gpu else "cpu" if args.device == "auto" else args.device
    vs = [replace(v, load=replace(v.load, device=device)) for v in variants(args)]
    first = places[0][0]
    try:  # the model's first load, on a node that can run it: every flag checked against it, as the local bench does
        ready = ray.get(ray.remote(prepare).options(max_retries=0, scheduling_strategy=on(first.id), **asks)
                        .remote(args, vs[0].load, counts))
    except RayError as e:
        raise ClusterError(f"the model's first load on {first.name} failed ({first_line(e)})") from None
    if isinstance(ready, str):
        raise ClusterError(ready)
    facts, settings = ready
    jobs = [UnitJob(0, v.load, unit, v.label, args.threads, facts.video)
            for v in vs for unit in plan_of(args, settings, facts.video, v.compile == "decoder", counts,
                                          device).units()]
    left = by_key(held)  # --resume: a unit whose runs the folder holds is not run again
    jobs = [j for j in jobs if not unit_held(j.plan, left, facts.name, facts.video, j.label)]
    jobs = [replace(j, index=i) for i, j in enumerate(jobs)]
    try:
        out = Writer(args.out)
    except CsvSchemaError as e:  # another process wrote there since it was checked
        say(f"previewlab bench: --out {args.out}: {e}")
        return 2
    say(f"{'synthetic ' if facts.synthetic else ''}model {facts.name} ({facts.described}); {len(jobs)} unit{'s' * (len(jobs) > 1)} of "
         f"{','.join(map(str, counts))} steps on {len(places)} node{'s' * (len(places) > 1)}, "
         f"{'one GPU' if gpu else f'{cpus} CPU' + 's' * (cpus > 1)} a unit "
         f"-> {args.out}")
    board = Board(len(jobs), len(jobs))
    for n, _ in places:
        board.node(n.name)
    try:
        failed = Dispatch(jobs, places, asks, out.write, board).run()
    except KeyboardInterrupt:
        say(f"\nbench: interrupted; the units that finished ({len(out.units)} of {len(jobs)}) are in "
             f"{args.out}/runs.csv; the running ones were cancelled, the queued ones dropped")
        return 130
    finally:
        out.close()
    runs = list(held) + out.runs
    if not runs:
        say("previewlab bench: no unit finished, so there is nothing to summarize")
        return 1
    where = "; ".join(f"{d} on {', '.join(sorted(ns))}" for d, ns in out.where().items())
    status = finish(args, runs, meta_line(args, facts, settings, runs[0].record, counts, where), [])
    if failed:
        say(f"previewlab bench: {failed} of {len(jobs)} units failed (said above); the summary holds the others")
        return status or 1
    return status

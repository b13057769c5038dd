"""previewlab bench --ray: a sweep's units fanned out over a Ray cluster, into one sweep folder.

The driver (this process) asks every node what it can run (bench/unit.py's look: the devices torch sees, the
model there or not), plans the sweep from one node's load of the model, then hands each unit (one configuration
with its own baselines and warm-up) to a node with a free slot: one GPU each where the sweep runs on GPUs, one
CPU each otherwise. A unit's rows are written only once it has finished, so a unit lost with its node runs again
on another and nothing is counted twice; Ctrl-C cancels what runs and keeps what finished. The driver chooses
the node itself (Ray's node affinity), so it knows what runs where: the progress line and runs.csv say it.
"""
from __future__ import annotations

import argparse
import collections
import logging
import socket
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

import ray
from ray.exceptions import RayError, RayTaskError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from previewlab.bench.board import Board
from previewlab.bench.cli import _meta, _plan, finish, variants
from previewlab.bench.rows import RUNS_CSV_COLUMNS, STEPS_CSV_COLUMNS, SweepRow, SweepStep
from previewlab.bench.unit import NodeReport, UnitJob, UnitResult, look, prepare, run_unit
from previewlab.preview.record.csv_writer import CsvAppender, CsvSchemaError
from previewlab.preview.record.run_ids import RunIds

TRIES = 3          # a unit whose worker or node dies is run again, up to this many tries in all
PROBE_S = 600.0    # a node's first answer imports torch there; the model's load may read many GB
POLL_S = 1.0       # how often the driver looks for lost nodes while units run
CONNECT_S = 10.0   # a head that does not take a TCP connection in this long is not there


class ClusterError(RuntimeError):
    """A cluster that cannot run the sweep; str() is the one line to print."""


@dataclass(frozen=True)
class Node:
    """A live node: Ray's id, its name in runs.csv (its host, then its id's first 8 hex digits), the CPUs and
    GPUs it offers Ray, what previewlab found there, and why it cannot take a unit ('' where it can)."""
    id: str
    name: str
    cpus: int
    gpus: int
    report: NodeReport
    why: str = ""


def usable(device: str, nodes: list[Node]) -> tuple[list[tuple[Node, int]], bool]:
    """The nodes that can run the sweep's units on `device`, each with its slots (units at once), and whether a
    unit asks for a GPU: auto takes the GPUs where any node can run on one, else the CPUs; cuda the GPUs; cpu
    every node's CPUs; mps and xpu one unit at a time where torch sees them. Raises ClusterError naming why no
    node can."""
    gpu = device == "cuda" or (device == "auto" and any(n.gpus and n.report.gpus and not n.why for n in nodes))
    want = "cuda" if gpu else ("cpu" if device == "auto" else device)
    out, whys = [], []
    for n in nodes:
        why = n.why
        slots = min(n.gpus, len(n.report.gpus)) if gpu else n.cpus if want == "cpu" else min(n.cpus, 1)
        if not why and want != "cpu" and want not in n.report.devices:
            why = f"torch sees no {want.upper()} device there"
        elif not why and slots < 1:
            why = f"it offers Ray no {'GPU' if gpu else 'CPU'}"
        if why:
            whys.append(f"{n.name}: {why}")
        else:
            out.append((n, slots))
    if not out:
        raise ClusterError("no node can run a unit (" + "; ".join(whys) + ")")
    return out, gpu


def sweep_on_ray(args: argparse.Namespace, counts: tuple[int, ...]) -> int:
    """previewlab bench --ray ADDRESS: the whole sweep on the cluster, the summary here. The exit status is the
    local bench's (2: refused, 130: interrupted, 3: noisy with --strict), or 1 where a unit failed."""
    if args.trace is not None or args.cprofile is not None:
        _say("previewlab bench: --trace and --cprofile trace one run on this machine; leave them out with --ray")
        return 2
    try:
        _connect(args.ray)
        try:
            return _sweep(args, counts)
        finally:
            ray.shutdown()
    except ClusterError as e:
        _say(f"previewlab bench: --ray {args.ray}: {e}")
        return 2
    except KeyboardInterrupt:  # while the nodes were asked, or the model's first load: nothing ran
        _say("\nbench: interrupted before any unit ran")
        return 130


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


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
    quiet: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.ERROR}
    try:
        if address == "local":  # a cluster of this machine alone: its cores and GPUs
            ray.init(include_dashboard=False, **quiet)
        else:
            ray.init(address=address, **quiet)
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise ClusterError(f"cannot join the cluster ({_first(e)}); start one with `ray start --head` on its head "
                           "machine, or give --ray local") from None


def _first(e: BaseException) -> str:
    """An error's first line, short: a remote error's own cause where Ray wrapped one."""
    cause = getattr(e, "cause", None) if isinstance(e, RayTaskError) else None
    text = str(cause if cause is not None else e).strip()
    return (text.splitlines()[0] if text else type(e).__name__)[:240]


def _on(node: str) -> NodeAffinitySchedulingStrategy:
    return NodeAffinitySchedulingStrategy(node, soft=False)


def probe(model: str, taesd: str | None) -> list[Node]:
    """Every live node, with what previewlab finds there (unit.look, asked on each node at once)."""
    live = [n for n in ray.nodes() if n.get("Alive")]
    if not live:
        raise ClusterError("the cluster has no live node")
    look_there = ray.remote(look)
    asked = {n["NodeID"]: look_there.options(num_cpus=0, max_retries=0, scheduling_strategy=_on(n["NodeID"]))
             .remote(model, taesd) for n in live}
    out = []
    for n in live:
        res = n.get("Resources", {})
        node = Node(n["NodeID"], f"{n.get('NodeManagerHostname') or n.get('NodeManagerAddress')}/{n['NodeID'][:8]}",
                    int(res.get("CPU", 0)), int(res.get("GPU", 0)), NodeReport((), (), "", ""))
        try:
            report: NodeReport = ray.get(asked[n["NodeID"]], timeout=PROBE_S)
            out.append(replace(node, report=report, why=report.missing))
        except RayError as e:  # previewlab not installed there, or another version that cannot read the call
            out.append(replace(node, why=f"previewlab cannot run there ({_first(e)})"))
    return out


class Writer:
    """The sweep folder's runs.csv and steps.csv, a finished unit's rows at a time, under this driver's run ids
    (units on several machines each number their own runs): ids sort in the order units were written."""

    def __init__(self, out: Path) -> None:
        out.mkdir(parents=True, exist_ok=True)
        self.runs_csv = CsvAppender(out / "runs.csv", RUNS_CSV_COLUMNS)  # raises CsvSchemaError
        self.steps_csv = CsvAppender(out / "steps.csv", STEPS_CSV_COLUMNS)
        self.ids = RunIds()
        self.units: dict[int, list[SweepRow]] = {}

    def write(self, unit: UnitResult) -> None:
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


def _sweep(args: argparse.Namespace, counts: tuple[int, ...]) -> int:
    places, gpu = usable(args.device, probe(args.model, args.taesd))
    asks: dict[str, Any] = {"num_cpus": 1, "num_gpus": 1} if gpu else {"num_cpus": 1}
    # the device the units asked Ray for, never auto: a node's GPU Ray was not told of is not taken
    device = "cuda" if gpu else "cpu" if args.device == "auto" else args.device
    vs = [replace(v, load=replace(v.load, device=device)) for v in variants(args)]
    first = places[0][0]
    try:  # the model's first load, on a node that can run it: every flag checked against it, as the local bench does
        ready = ray.get(ray.remote(prepare).options(max_retries=0, scheduling_strategy=_on(first.id), **asks)
                        .remote(args, vs[0].load, counts))
    except RayError as e:
        raise ClusterError(f"the model's first load on {first.name} failed ({_first(e)})") from None
    if isinstance(ready, str):
        raise ClusterError(ready)
    facts, settings = ready
    jobs = [UnitJob(0, v.load, unit, v.label, args.threads, facts.video)
            for v in vs for unit in _plan(args, settings, facts.video, v.compile == "decoder", counts,
                                          device).units()]
    jobs = [replace(j, index=i) for i, j in enumerate(jobs)]
    try:
        out = Writer(args.out)
    except CsvSchemaError as e:
        _say(f"previewlab bench: --out {args.out}: {e}")
        return 2
    _say(f"{'synthetic ' if facts.synthetic else ''}model {facts.name} ({facts.described}); {len(jobs)} unit{'s' * (len(jobs) > 1)} of "
         f"{','.join(map(str, counts))} steps on {len(places)} node{'s' * (len(places) > 1)}, "
         f"{'one GPU' if gpu else 'one CPU'} a unit "
         f"-> {args.out}")
    board = Board(len(jobs), len(jobs))
    for n, _ in places:
        board.node(n.name)
    try:
        failed = dispatch(jobs, places, asks, out.write, board)
    except KeyboardInterrupt:
        _say(f"\nbench: interrupted; the units that finished ({len(out.units)} of {len(jobs)}) are in "
             f"{args.out}/runs.csv; the running ones were cancelled, the queued ones dropped")
        return 130
    finally:
        out.close()
    if not out.runs:
        _say("previewlab bench: no unit finished, so there is nothing to summarize")
        return 1
    runs = out.runs
    where = "; ".join(f"{d} on {', '.join(sorted(ns))}" for d, ns in out.where().items())
    status = finish(args, runs, _meta(args, facts, settings, runs[0].record, counts, where), [])
    if failed:
        _say(f"previewlab bench: {failed} of {len(jobs)} units failed (said above); the summary holds the others")
        return status or 1
    return status


def dispatch(jobs: list[UnitJob], places: list[tuple[Node, int]], asks: dict[str, Any],
             write: Callable[[UnitResult], None], board: Board) -> int:
    """Runs every job on the nodes, at most a node's slots at once, writing each unit as it finishes. A unit
    whose worker or node dies runs again (on a live node, TRIES in all); one that raises is said and counted.
    Returns how many units failed. On KeyboardInterrupt, cancels what runs and re-raises."""
    queue = collections.deque(jobs)
    free = {n.id: slots for n, slots in places}
    nodes = {n.id: n for n, _ in places}
    running: dict[Any, tuple[UnitJob, Node]] = {}
    tries: collections.Counter[int] = collections.Counter()
    failed = 0
    run_there = ray.remote(run_unit)
    try:
        while queue or running:
            for node in list(nodes.values()):
                while queue and free[node.id] > 0:
                    job = queue.popleft()
                    ref = run_there.options(max_retries=0, scheduling_strategy=_on(node.id), **asks).remote(job, node.name)
                    running[ref] = (job, node)
                    free[node.id] -= 1
                    tries[job.index] += 1
                    board.start(node.name)
                    _say(f"  unit {job.index + 1}/{len(jobs)} {job.name}: starts on {node.name}")
            if not running:  # what finished is kept and summarized
                _say(f"  every node that could run a unit was lost; {len(queue)} units not run")
                failed += len(queue)
                queue.clear()
                break
            done, _ = ray.wait(list(running), num_returns=1, timeout=POLL_S)
            for ref in done:
                job, node = running.pop(ref)
                free[node.id] += 1
                try:
                    result: UnitResult = ray.get(ref)
                except RayTaskError as e:  # the unit itself raised: another try would raise again
                    failed += 1
                    board.finish(node.name, ok=False)
                    _say(f"  unit {job.index + 1}/{len(jobs)} {job.name}: failed on {node.name}: {_first(e)}")
                except RayError as e:  # its worker or its node died
                    board.again(node.name)
                    if node.id in nodes and not _alive(node.id):
                        del nodes[node.id]
                        board.lose(node.name)
                        _say(f"  node {node.name} lost")
                    if tries[job.index] >= TRIES:
                        failed += 1
                        board.drop()
                        _say(f"  unit {job.index + 1}/{len(jobs)} {job.name}: gave up after {TRIES} tries "
                             f"({_first(e)})")
                    else:
                        queue.appendleft(job)
                        _say(f"  unit {job.index + 1}/{len(jobs)} {job.name}: did not finish on {node.name} "
                             f"({_first(e)}); runs again")
                else:
                    write(result)
                    board.finish(node.name)
                    _say(f"  unit {job.index + 1}/{len(jobs)} {job.name}: done on {node.name} ({result.device}, "
                         f"its model loaded in {result.load_s:.1f} s)")
                _say("  " + board.line())
    except KeyboardInterrupt:
        for ref in running:
            ray.cancel(ref, force=True)
        raise
    return failed


def _alive(node: str) -> bool:
    return any(n["NodeID"] == node and n.get("Alive") for n in ray.nodes())

"""A Ray cluster's nodes as a sweep sees them: what each can run (asked on the node itself), and which of them,
with how many units at once, take the sweep's units. usable() is pure; probe() asks the live cluster."""
from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass, replace

import ray
from ray.exceptions import RayError, RayTaskError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from previewlab.bench.unit import NodeReport, look

PROBE_S = 600.0    # a node's first answer imports torch there


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


def usable(device: str, nodes: list[Node], cpus: int = 1) -> tuple[list[tuple[Node, int]], bool]:
    """The nodes that can run the sweep's units on `device`, each with its slots (units at once), and whether a
    unit asks for a GPU: auto takes the GPUs where any node can run on one, else the CPUs; cuda the GPUs; cpu
    every node's CPUs, `cpus` a unit (--threads); mps and xpu one unit at a time where torch sees them. Raises
    ClusterError naming each node's reason where none can."""
    gpu = device == "cuda" or (device == "auto" and any(n.gpus and n.report.gpus and not n.why for n in nodes))
    want = "cuda" if gpu else ("cpu" if device == "auto" else device)
    out, whys = [], []
    for n in nodes:
        why = n.why
        slots = min(n.gpus, len(n.report.gpus)) if gpu else n.cpus // cpus if want == "cpu" else min(n.cpus // cpus, 1)
        if not why and want != "cpu" and want not in n.report.devices:
            why = f"torch sees no {want.upper()} device there"
        elif not why and slots < 1:
            why = "it offers Ray no GPU" if gpu else f"it offers Ray fewer CPUs than a unit asks ({cpus})"
        if why:
            whys.append(f"{n.name}: {why}")
        else:
            out.append((n, slots))
    if not out:
        raise ClusterError("no node can run a unit (" + "; ".join(whys) + ")")
    return out, gpu


def on(node: str) -> NodeAffinitySchedulingStrategy:
    """Run there and only there: the driver chooses each unit's node itself."""
    return NodeAffinitySchedulingStrategy(node, soft=False)


def first_line(e: BaseException) -> str:
    """An error's first line, short: a remote error's own cause where Ray wrapped one."""
    cause = getattr(e, "cause", None) if isinstance(e, RayTaskError) else None
    text = str(cause if cause is not None else e).strip()
    return (text.splitlines()[0] if text else type(e).__name__)[:240]


def probe(model: str, taesd: str | None) -> list[Node]:
    """Every live node, with what previewlab finds there (unit.look, asked on each node at once). A node with
    another previewlab than this one is left out: its rows would measure other code."""
    live = [n for n in ray.nodes() if n.get("Alive")]
    if not live:
        raise ClusterError("the cluster has no live node")
    mine = importlib.metadata.version("previewlab")
    look_there = ray.remote(look)
    asked = {n["NodeID"]: look_there.options(num_cpus=0, max_retries=0, scheduling_strategy=on(n["NodeID"]))
             .remote(model, taesd) for n in live}
    out = []
    for n in live:
        res = n.get("Resources", {})
        node = Node(n["NodeID"], f"{n.get('NodeManagerHostname') or n.get('NodeManagerAddress')}/{n['NodeID'][:8]}",
                    int(res.get("CPU", 0)), int(res.get("GPU", 0)), NodeReport((), (), "", ""))
        try:
            report: NodeReport = ray.get(asked[n["NodeID"]], timeout=PROBE_S)
        except RayError as e:  # previewlab not installed there, or a version that cannot read the call
            out.append(replace(node, why=f"previewlab cannot run there ({first_line(e)})"))
            continue
        why = report.missing or (f"previewlab {report.version} there, {mine} here" if report.version != mine else "")
        out.append(replace(node, report=report, why=why))
    return out

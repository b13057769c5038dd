"""Issue 48: `previewlab bench --ray` on a real two-node Ray cluster (ray.cluster_utils.Cluster, both nodes on
this machine), one node removed mid-sweep. Every configuration lands in runs.csv once, each paired with a
baseline from its own node, and the summary has the local bench's names and columns."""
from __future__ import annotations

import csv
import re
from collections import Counter
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from previewlab.bench.cli import main as bench_main
from previewlab.bench.rows import read
from previewlab.preview.judging.analysis import paired

pytestmark = pytest.mark.slow

STORE = 80 * 2**20  # bytes of object store a node: Ray's least; units return rows of a few KiB
REPEATS = 2
FLAGS = ["--model", "synthetic:tiny", "--decoders", "none,latent2rgb,taesd,vae", "--every", "1,2", "--steps", "2",
         "--repeats", str(REPEATS), "--warmup", "1", "--width", "64", "--height", "64"]
UNIT = re.compile(r"unit \d+/\d+ (\S+): (starts|done) on (\S+)")  # the driver's lines, one an event
CONFIGS = {f"{d}/every{e}/sync" for d in ("latent2rgb", "taesd", "vae") for e in (1, 2)}


def _summary(folder: Path) -> tuple[list[str], list[str]]:
    with open(folder / "summary.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return list(rows[0]), [r["config"] for r in rows]


def test_a_sweep_on_two_nodes_survives_losing_one(tmp_path: Path) -> None:
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False,
                                                           "object_store_memory": STORE})
    second = cluster.add_node(num_cpus=1, object_store_memory=STORE)
    assert cluster.head_node is not None
    head, lost = cluster.head_node.node_id[:8], second.node_id[:8]
    said: list[str] = []
    try:
        bench = subprocess.Popen([sys.executable, "-m", "previewlab", "bench", "--ray", cluster.address, *FLAGS,
                                  "--out", str(tmp_path / "cluster")], stderr=subprocess.PIPE,
                                 stdout=open(tmp_path / "stdout.txt", "w"), text=True)
        assert bench.stderr is not None
        watchdog = threading.Timer(300, bench.kill)  # a hung sweep fails the test instead of hanging CI
        watchdog.start()
        starts = 0
        for line in bench.stderr:
            said.append(line)
            # the second unit the second node takes: it has one finished unit in runs.csv, one running now
            if ": starts on " in line and line.rstrip().endswith(lost):
                starts += 1
                if starts == 2:
                    cluster.remove_node(second)
        bench.wait(timeout=300)
        watchdog.cancel()
    finally:
        cluster.shutdown()
    text = "".join(said)
    assert bench.returncode == 0, text
    assert starts == 2, text
    assert f"/{lost} lost" in text, text
    # the unit the lost node was running: said to run again, and its rows are the head's
    name = [m[1] for m in UNIT.finditer(text) if m[2] == "starts" and m[3].endswith(lost)][1]
    assert f"{name}: did not finish on " in text and f"{name}: done on " in text, text

    sweep = read(tmp_path / "cluster")
    configs = [r for r in sweep.runs if r.role == "config"]
    # every configuration once: its repeats, and no row of the try the lost node cut short
    assert Counter(r.name for r in configs) == dict.fromkeys(CONFIGS, REPEATS)
    assert len(sweep.runs) == len(CONFIGS) * (2 + 2 * REPEATS)  # a unit: 2 warm-ups, then baseline, config a repeat
    assert {r.node.rsplit("/", 1)[1] for r in configs if r.name == name} == {head}
    nodes = {r.node.rsplit("/", 1)[1] for r in sweep.runs}
    assert nodes == {head, lost}, nodes  # the second node's finished unit is kept
    pairs = paired(list(sweep.runs))
    assert {n: len(ps) for n, ps in pairs.items()} == dict.fromkeys(CONFIGS, REPEATS)
    for run, base in (p for ps in pairs.values() for p in ps):
        assert run.node == base.node and run.repeat == base.repeat
    assert all(r.device == "cpu" for r in sweep.runs)

    assert bench_main([*FLAGS, "--out", str(tmp_path / "local")]) == 0
    assert _summary(tmp_path / "cluster") == _summary(tmp_path / "local")

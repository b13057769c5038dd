"""Issue 48: `previewlab bench --ray` on a real two-node Ray cluster (ray.cluster_utils.Cluster, both nodes on
this machine), one node removed mid-sweep. Every configuration lands in runs.csv once, each paired with a
baseline from its own node, and the summary has the local bench's names and columns. After it, a cluster that
cannot run a unit is refused in one line, and Ctrl-C keeps the finished units and frees the node."""
from __future__ import annotations

import csv
import logging
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

import pytest

from previewlab.bench.cli import main as bench_main
from previewlab.bench.rows import read
from previewlab.preview.judging.analysis import paired

if TYPE_CHECKING:
    from ray.cluster_utils import Cluster

pytestmark = pytest.mark.slow

STORE = 80 * 2**20  # bytes of object store a node: Ray's least; units return rows of a few KiB
REPEATS = 2
SWEEP = ["--model", "synthetic:tiny", "--decoders", "none,latent2rgb,taesd,vae", "--every", "1,2", "--steps", "2",
         "--warmup", "1", "--width", "64", "--height", "64"]
FLAGS = [*SWEEP, "--repeats", str(REPEATS)]
UNIT = re.compile(r"unit \d+/\d+ (\S+): (starts|done) on (\S+)")  # the driver's lines, one an event
CONFIGS = {f"{d}/every{e}/sync" for d in ("latent2rgb", "taesd", "vae") for e in (1, 2)}


def _summary(folder: Path) -> tuple[list[str], list[str]]:
    with open(folder / "summary.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return list(rows[0]), [r["config"] for r in rows]


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[Cluster, Any]]:
    """A head and a second node of one CPU each; the tests below run in this order: the sweep that loses the
    second node first (its units warm the workers the other two reuse), then on the head alone."""
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False,
                                                     "object_store_memory": STORE})
    second = c.add_node(num_cpus=1, object_store_memory=STORE)
    yield c, second
    c.shutdown()


def _bench(address: str, out: Path, *flags: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "previewlab", "bench", "--ray", address, *FLAGS, *flags,
                             "--out", str(out)], stderr=subprocess.PIPE, stdout=open(out.with_suffix(".out"), "w"),
                            text=True)


def _lines(bench: subprocess.Popen[str]) -> Iterator[str]:
    """The driver's lines as it says them; a sweep hung past 300 s is killed, so the test fails, not CI."""
    watchdog = threading.Timer(300, bench.kill)
    watchdog.start()
    try:
        assert bench.stderr is not None
        yield from bench.stderr
        bench.wait(timeout=60)
    finally:
        watchdog.cancel()


def test_a_sweep_on_two_nodes_survives_losing_one(cluster: tuple[Cluster, Any], tmp_path: Path) -> None:
    c, second = cluster
    assert c.head_node is not None
    head, lost = c.head_node.node_id[:8], second.node_id[:8]
    said: list[str] = []
    bench = _bench(c.address, tmp_path / "cluster")
    starts = 0
    for line in _lines(bench):
        said.append(line)
        # the second unit the second node takes: it has one finished unit in runs.csv, one running now
        if ": starts on " in line and line.rstrip().endswith(lost):
            starts += 1
            if starts == 2:
                c.remove_node(second)
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

    # the same sweep on this machine names the same columns and configurations; one repeat is enough for that
    assert bench_main([*SWEEP, "--repeats", "1", "--out", str(tmp_path / "local")]) == 0
    assert _summary(tmp_path / "cluster") == _summary(tmp_path / "local")


def test_a_cluster_that_cannot_run_a_unit_is_refused_in_one_line_before_any_run(
        cluster: tuple[Cluster, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No GPU where --device cuda asks for one (a model missing on every node takes the same path: each node's
    reason from unit.look, tests/test_units.py). The head is the one live node left."""
    c, _ = cluster
    assert c.head_node is not None
    assert bench_main(["--ray", c.address, *FLAGS, "--device", "cuda", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"previewlab bench: --ray {c.address}: no node can run a unit "
                   f"({socket.gethostname()}/{c.head_node.node_id[:8]}: torch sees no CUDA device there)"], err
    assert not (tmp_path / "runs.csv").exists()


def test_ctrl_c_cancels_what_runs_and_keeps_every_finished_unit(cluster: tuple[Cluster, Any], tmp_path: Path) -> None:
    import ray

    c, _ = cluster
    # six units of under a second each on two nodes: after the first is done, four wait in the queue, so the Ctrl-C
    # lands while units are left even where a loaded machine delivers it late (with three, the other two could
    # both end first, and the bench then ended whole with 0)
    bench = _bench(c.address, tmp_path / "sweep", "--decoders", "latent2rgb,taesd,vae", "--every", "1,2")
    for line in _lines(bench):
        if ": done on " in line:
            bench.send_signal(signal.SIGINT)
    assert bench.returncode == 130
    sweep = read(tmp_path / "sweep")
    units = Counter(r.name for r in sweep.runs if r.role == "config")
    assert len(units) >= 1 and set(units.values()) == {REPEATS}  # whole units only
    assert len(sweep.runs) == len(units) * (2 + 2 * REPEATS)
    ray.init(address=c.address, logging_level=logging.ERROR, log_to_driver=False)
    try:  # the unit that ran was cancelled: every CPU of the cluster is free again
        deadline = time.monotonic() + 30
        while ray.available_resources().get("CPU", 0) < ray.cluster_resources()["CPU"] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert ray.available_resources().get("CPU", 0) == ray.cluster_resources()["CPU"]
    finally:
        ray.shutdown()

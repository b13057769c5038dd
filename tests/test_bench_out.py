"""Issue 56, hole 7: one writer per bench --out. A second bench into a running one's folder is refused at once,
naming the holder; a folder that holds a sweep is refused, or resumed with --resume (its pairs skipped, its runs
kept, no run twice); run ids continue the folder's, the local writer's and the Ray driver's alike; report refuses
a folder whose run ids repeat. Real bench processes and sweeps on synthetic:tiny, the fewest runs that show it."""
from __future__ import annotations

import csv
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from previewlab.bench.rows import read
from tests.conftest import previewlab_here, wait_until

ROOT = Path(__file__).resolve().parents[1]
REPEATS = 4
FLAGS = ("--model", "synthetic:tiny", "--decoders", "none,latent2rgb", "--every", "1", "--steps", "2",
         "--repeats", str(REPEATS), "--threads", "1")
FUTURE = "20991231-235959"  # a folder's ids ahead of this machine's clock (written on a machine whose clock ran on)


def rows(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        return [r for r in csv.DictReader(f) if None not in r.values()]


@pytest.mark.slow  # a bench process and two in this one: about 8 s
def test_a_second_bench_is_refused_and_resume_finishes_the_stopped_one_without_a_run_twice(tmp_path):
    out = tmp_path / "out"
    first = subprocess.Popen([sys.executable, "-m", "previewlab", "bench", *FLAGS, "--out", str(out)], cwd=ROOT,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: len(rows(out / "runs.csv")) >= 5, 120, "the first bench's warm-ups and three runs")
        # held where it is (its runs take a fraction of a second, the second bench's start seconds: left running,
        # the first could end whole before the Ctrl-C): the Ctrl-C waits for it and lands mid-sweep
        first.send_signal(signal.SIGSTOP)
        second = previewlab_here("bench", *FLAGS, "--out", str(out))
        first.send_signal(signal.SIGINT)  # a user's Ctrl-C, mid-sweep
        first.send_signal(signal.SIGCONT)
        first.wait(60)
    finally:
        first.kill()
    assert second.returncode == 2 and not second.stdout
    assert second.stderr == (f"previewlab bench: --out {out}: previewlab pid {first.pid} is writing to it; one bench "
                             "per folder at a time: wait for it to end, or give this one another --out\n")
    assert first.returncode == 130, first.stderr  # stopped part-way
    kept = [r["run_id"] for r in rows(out / "runs.csv")]

    again = previewlab_here("bench", *FLAGS, "--out", str(out))
    assert again.returncode == 2 and again.stderr.count("\n") == 1
    assert f"--out {out} holds a sweep already ({len(kept)} runs" in again.stderr and "--resume" in again.stderr
    assert [r["run_id"] for r in rows(out / "runs.csv")] == kept  # refused before anything was written

    resumed = previewlab_here("bench", *FLAGS, "--out", str(out), "--resume")
    assert resumed.returncode == 0, resumed.stderr
    runs = rows(out / "runs.csv")
    ids = [r["run_id"] for r in runs]
    assert ids[:len(kept)] == kept and len(set(ids)) == len(ids) and ids == sorted(ids)
    # each pair of the sweep answered once: the stopped part's pairs kept, the rest run, none a second time
    pairs = sorted(int(r["repeat"]) for r in runs if r["baseline_run_id"])
    assert pairs == list(range(1, REPEATS + 1))
    measured = [r for r in runs if r["role"] != "warmup"]
    assert len(measured) - len(kept) <= 2 * REPEATS  # never a second full sweep on top
    assert len(read(out).runs) == len(runs)  # report's reader takes the folder


@pytest.fixture(scope="module")
def swept(tmp_path_factory) -> Path:
    """One sweep's folder, written by the bench's own writer: a warm-up, one pair."""
    from previewlab.bench.plan import Plan
    from previewlab.bench.sweep import run_sweep
    from previewlab.preview.models import load
    from previewlab.preview.settings import PreviewSettings, RunSettings

    out = tmp_path_factory.mktemp("swept")
    settings = RunSettings(prompt="a red circle", steps=2, width=64, height=64, seed=7,
                           preview=PreviewSettings(decoder="none", mode="sync"))
    run_sweep(load("synthetic:tiny", device="cpu"), Plan(settings, ("none", "latent2rgb"), (1,), repeats=1,
                                                         warmup=1, modes=("sync",)), out)
    return out


def ahead(src: Path, dst: Path) -> list[str]:
    """A copy of the folder whose runs are named in the year 2099 (the same ids in runs.csv and steps.csv)."""
    shutil.copytree(src, dst)
    ids = [r["run_id"] for r in rows(src / "runs.csv")]
    for name in ("runs.csv", "steps.csv"):
        text = (dst / name).read_text()
        for i, rid in enumerate(ids):
            text = text.replace(rid, f"{FUTURE}-{i:03d}")
        (dst / name).write_text(text)
    return [f"{FUTURE}-{i:03d}" for i in range(len(ids))]


@pytest.mark.slow
def test_a_local_sweep_names_its_runs_after_the_folders_newest(swept, tmp_path):
    """Before: each process numbered from its own clock, so a folder's ids repeated or ran backwards."""
    from previewlab.bench.plan import Plan
    from previewlab.bench.sweep import run_sweep
    from previewlab.preview.models import load
    from previewlab.preview.settings import PreviewSettings, RunSettings

    old = ahead(swept, tmp_path / "out")
    settings = RunSettings(prompt="a red circle", steps=2, width=64, height=64, seed=7,
                           preview=PreviewSettings(decoder="none", mode="sync"))
    plan = Plan(settings, ("none", "latent2rgb"), (1,), repeats=1, warmup=0, modes=("sync",))
    new = run_sweep(load("synthetic:tiny", device="cpu"), plan, tmp_path / "out")
    assert len(new) == 2 and all(r.run_id > old[-1] for r in new)
    ids = [r["run_id"] for r in rows(tmp_path / "out" / "runs.csv")]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)


def test_the_ray_drivers_writer_names_its_units_after_the_folders_newest(swept, tmp_path):
    """Before: the driver began a fresh sequence, from the clock, whatever the folder held."""
    from previewlab.bench.cluster import Writer
    from previewlab.bench.unit import UnitResult

    old = ahead(swept, tmp_path / "out")
    sweep = read(swept)
    writer = Writer(tmp_path / "out")
    try:
        writer.write(UnitResult(0, "node-a", "cpu", sweep.runs, sweep.steps, 0.1))
    finally:
        writer.close()
    ids = [r["run_id"] for r in rows(tmp_path / "out" / "runs.csv")]
    assert ids[:len(old)] == old and all(rid > old[-1] for rid in ids[len(old):]) and len(set(ids)) == len(ids)
    steps = {r["run_id"] for r in rows(tmp_path / "out" / "steps.csv")}
    assert set(ids) == steps


def test_report_refuses_a_folder_whose_run_ids_repeat_in_one_line(swept, tmp_path):
    """Two benches that wrote into one --out at once named runs alike; report took the folder without a word."""
    out = tmp_path / "out"
    shutil.copytree(swept, out)
    with open(out / "runs.csv", "a", newline="") as f:  # the second writer's lines, under the same ids
        f.writelines((swept / "runs.csv").read_text().splitlines(keepends=True)[1:])
    p = previewlab_here("report", str(out))
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and not (out / "report.html").exists()
    n = len(rows(swept / "runs.csv"))  # every one of them twice
    assert p.stderr.startswith(f"previewlab report: {out / 'runs.csv'}: {n} run ids used more than once (")
    assert "run the sweep again into a new --out" in p.stderr

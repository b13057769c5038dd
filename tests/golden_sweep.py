"""A fixed sweep whose every figure is the same from run to run: synthetic:tiny on the CPU, sync mode (one
thread asks the clock), and a fake host clock that advances 1 ms at each reading. What the sweep writes (runs.csv,
steps.csv), what the summary, the advice and the report make of it, less the readings no clock decides (memory,
the CPU's busy share, versions, times of day, ids), as one JSON-able dict. tests/test_golden_sweep.py compares it
with tests/data/golden_sweep.json, written from the code before issue 44's rebuild of the middle: a change that
moves any figure, column or sentence of a sweep shows up there.

    python tests/golden_sweep.py OUT.json    # writes the dict (run from a checkout's root)
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

# readings no fake clock decides, names that change every run or machine (node: the host), and a JPEG's size and
# its SSIMs (progress.py; its pixels come from float math that another CPU may round differently): left out of the
# comparison
VOLATILE = {"run_id", "node", "started_at", "load_s", "device_name", "threads", "torch", "diffusers", "peak_mem_mb", "mem_mb",
            "mem_mb_p50", "mem_mb_max", "mem_over_mb", "busy_pct", "compile_ms", "bytes", "bytes_per_preview",
            "final_ssim", "change", "settle_step", "last_final_ssim"}


class TickClock:
    """A host clock that reads 1 ms later at each reading: walls and stages count the clock's readings."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        self.t += 0.001
        return self.t


def _kept(row: dict[str, Any]) -> dict[str, Any]:
    return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in row.items() if k not in VOLATILE}


def digest() -> dict[str, Any]:
    import csv

    from previewlab.bench.advice import of_sweep
    from previewlab.bench.report_figures import figures
    from previewlab.bench.rows import answer, read
    from previewlab.preview.judging.answers import answers
    from previewlab.bench.summary import summarize
    from previewlab.bench.plan import Plan
    from previewlab.bench.sweep import run_sweep
    from previewlab.preview.models import load
    from previewlab.preview.settings import PreviewSettings, RunSettings

    model = load("synthetic:tiny", device="cpu")
    settings = RunSettings(prompt="a red circle", steps=3, width=64, height=64, seed=7,
                           preview=PreviewSettings(decoder="none", mode="sync"))
    plan = Plan(settings, ("none", "latent2rgb", "taesd", "vae"), (1, 2), repeats=2, warmup=1, modes=("sync",))
    with tempfile.TemporaryDirectory() as d:
        out = Path(d)
        run_sweep(model, plan, out, clock=TickClock())
        analysis = of_sweep(read(out).runs)
        answer(out, answers(read(out).runs, analysis.findings))  # as the bench's finish fills runs.csv
        with open(out / "runs.csv", newline="") as f:
            raw = list(csv.DictReader(f))
        # a baseline's id changes every sweep; its line in runs.csv does not: the pair is kept as that line
        line = {r["run_id"]: str(i) for i, r in enumerate(raw)}
        runs = [_kept({**r, "baseline_run_id": line.get(r["baseline_run_id"], "")}) for r in raw]
        with open(out / "steps.csv", newline="") as f:
            steps = [_kept(r) for r in csv.DictReader(f)]
        sweep = read(out)
        summary = [_kept(r.to_row()) for r in summarize(sweep.runs, sweep.steps, analysis.findings)]
        advice = list(analysis.advice.lines)
        report = figures(sweep)
    overhead = {line: [(every, e.signed()) for every, e in points] for line, points in report.overhead.items()}
    return {"runs.csv": runs, "steps.csv": steps, "summary": summary, "advice": advice,
            "report overhead": overhead, "report intervals": {k: e.signed() for k, e in report.intervals.items()}}


if __name__ == "__main__":
    Path(sys.argv[1]).write_text(json.dumps(digest(), indent=1, sort_keys=True) + "\n")

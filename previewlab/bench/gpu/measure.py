"""The GPU check's measuring: its arms through the bench's engine, read back as summary.txt reads a sweep.

Each arm's overhead is therefore the bench's: the median over its runs of wall time against the no-preview
baseline run beside each (noise.paired), with noise.estimate's interval; the engine row's is the baseline after
each direct call against it (summary's vs_direct).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal

from previewlab.bench.gpu.arms import Setup
from previewlab.preview.judging.estimates import Estimate
from previewlab.bench.rows import SweepRow
from previewlab.bench.summary import steady, summarize
from previewlab.bench.summary_rows import ConfigSummary
from previewlab.bench.plan import Plan
from previewlab.bench.sweep import read_back, run_sweep
from previewlab.preview.models import Model
from previewlab.preview.record.records import StepRow
from previewlab.preview.record.run import RunRecord
from previewlab.preview.settings import PreviewSettings, RunSettings



@dataclass(frozen=True)
class Measured:
    """One sweep of the check's arms, keyed by arm name ('none': the baselines, 'direct': the bare call): the
    summary's row of each (summary.summarize over the CSVs), and each one's steady runs and their step rows as
    runs.csv and steps.csv hold them."""
    summary: dict[str, ConfigSummary]
    runs: dict[str, list[SweepRow]]
    steps: dict[str, list[StepRow]]

    def overhead(self, arm: str, key: Literal["overhead", "vs_direct"] = "overhead") -> Estimate:
        """The arm's overhead in percent as summary.txt states it (key "vs_direct": the baseline's against the
        direct call). Raises ValueError where the sweep has none (no steady run paired with a baseline)."""
        row = self.summary.get(arm)
        e = None if row is None else (row.overhead if key == "overhead" else row.vs_direct)
        if e is None:
            raise ValueError(f"{arm}: no {key} figure in this sweep")
        return e

    def median(self, arm: str, of: Callable[[RunRecord], float]) -> str:
        """The median over the arm's steady runs of a figure of their records (previews, skipped, frames sent)."""
        return f"{statistics.median(of(r.record) for r in self.runs[arm]):g}"

    def preview_steps(self, arm: str, decoder: str) -> list[StepRow]:
        """The arm's steady step rows that made a preview with this decoder (not a fallback's)."""
        return [s for s in self.steps.get(arm, []) if s.preview and s.decoder == decoder]

    @property
    def repeats(self) -> int:
        """The repeats measured: a time bound may have stopped the sweep short of the repeats asked."""
        return max((r.repeat for rs in self.runs.values() for r in rs), default=0)

    def encoders(self) -> list[str]:
        """The JPEG encoders that ran, as the runs recorded them."""
        return sorted({p.encoder for rs in self.runs.values() for r in rs if (p := r.record.meta.preview)})


def measure(model: Model, setup: Setup, base: RunSettings, arms: dict[str, PreviewSettings], out: Path,
            log: Callable[[str], Any], label: str = "", direct: bool = False) -> Measured:
    """Runs the arms (and, with direct, the bare diffusers call) through the bench's engine: one warm-up each,
    then setup.repeats repeats of each beside its own no-preview baseline, even repeats in reverse order, fewer
    when another would likely end past setup.runs_s. Every run goes to out/runs.csv and out/steps.csv, its
    configuration named label + arm, so a row that fails still leaves the rows it ran."""
    plan = Plan(base, (), (), repeats=setup.repeats, warmup=1, direct=direct, arms=tuple(arms.items()),
                alternate=True, runs_s=setup.runs_s)
    sweep = read_back(out, run_sweep(model, plan, out, label=label, log=log))
    kept = steady(sweep.runs)
    ids = {r.run_id for r in kept}

    def arm(config: str) -> str:
        return config.removeprefix(label)
    by_run: dict[str, list[SweepRow]] = {}
    for r in kept:
        by_run.setdefault(arm(r.config.name), []).append(r)
    by_step: dict[str, list[StepRow]] = {}
    for s in sweep.steps:
        if s.row.run_id in ids:
            by_step.setdefault(arm(s.config), []).append(s.row)
    return Measured({arm(r.config): r for r in summarize(sweep.runs, sweep.steps)}, by_run, by_step)

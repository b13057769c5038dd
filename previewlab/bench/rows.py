"""A sweep's rows as records: each run (SweepRow) and each step (SweepStep) with the configuration it ran.

runs.csv and steps.csv hold them; `to_row` writes one line and `from_row` reads one back, the only place a
sweep's cells become numbers. `read` loads a sweep folder for the summary, the report and compare.
"""
from __future__ import annotations

import csv
import json
import os
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, cast

from previewlab.preview.judging.advice import DEFAULT_BUDGET_PCT
from previewlab.preview.judging.answers import ANSWER_COLUMNS, as_text
from previewlab.preview.judging.estimates import NOISE_LIMIT_PCT
from previewlab.preview.judging import fidelity
from previewlab.preview.judging.fidelity import DEFAULT_MIN_SSIM, NONE, Fidelities
from previewlab.preview.record.records import STEP_COLUMNS, StepRow
from previewlab.preview.record.run import RUN_COLUMNS, RunRecord
from previewlab.preview.record.run_ids import valid
from previewlab.preview.settings import PreviewSettings

Role = Literal["warmup", "baseline", "config", "direct"]
SWEEP_COLUMNS = ("config", "role", "repeat")
# node: the machine a run ran on (its host name; on a Ray cluster, the host and the Ray node's id). The answer's
# columns (preview/judging/answers.py: its pair, its configuration's overhead and verdict) are written empty run
# by run and filled once the sweep has ended (answer). A folder of an older previewlab has overhead_pct (against
# the baselines' median), which nothing reads: it is read as it is and never appended to.
RUNS_CSV_COLUMNS = tuple(dict.fromkeys(SWEEP_COLUMNS + RUN_COLUMNS + ANSWER_COLUMNS + ("node",)))
ANSWERED = tuple(c for c in ANSWER_COLUMNS if c not in SWEEP_COLUMNS)  # the cells answer() fills
STEPS_CSV_COLUMNS = SWEEP_COLUMNS + STEP_COLUMNS


class NotASweep(ValueError):
    """A folder that holds no sweep; str() is the line to print after the command's own name."""


@dataclass(frozen=True)
class Config:
    """What a run of a sweep ran: its name in the CSVs and the summary ('[float16] taesd/every5/overlap/euler'),
    and its preview settings at the start of the run, as its record says them (decoder "direct": the bare
    diffusers call)."""
    name: str
    decoder: str = "none"
    every: int = 1
    budget: float = 0.0   # > 0: the autopilot chose the interval
    mode: str = "sync"
    preview_max: int = 0

    @classmethod
    def of(cls, name: str, preview: PreviewSettings | None) -> Config:
        """A configuration from the preview settings its run started with (None: the bare diffusers call)."""
        if preview is None:
            return cls(name, "direct", 0, 0.0, "direct")
        p = preview
        return cls(name, p.decoder, p.every, p.budget, p.mode, p.preview_max)

    @property
    def interval(self) -> int | None:
        """The fixed interval of a configuration that previews; None for none, direct and the autopilot."""
        return self.every if self.decoder not in ("none", "direct") and self.budget == 0 else None

    @property
    def label(self) -> str:
        """The model variant's prefix ('[float16 ...] '), or ''."""
        head, sep, _ = self.name.rpartition("] ")
        return head + sep

    @property
    def axes(self) -> tuple[str, ...]:
        """The name's parts after decoder/interval/mode: the target, frames and decode_at where named, then the
        run setup's axes (scheduler, steps, VAE mode)."""
        return tuple(self.name.removeprefix(self.label).split("/")[3:])


@dataclass(frozen=True)
class SweepRow:
    """One run of a sweep: its configuration, its role in the interleaving, its repeat, its record and the
    machine it ran on. Its overheads are the analysis's, never the row's own (answer() writes them beside it)."""
    config: Config
    role: Role
    repeat: int
    record: RunRecord
    node: str = ""  # the machine it ran on ("" in a sweep written before nodes were named)

    @property
    def run_id(self) -> str:
        return self.record.run_id

    @property
    def device(self) -> str:
        """The device it ran on, as reports name it (the GPU's own name, or cpu)."""
        return self.record.totals.device_name

    @property
    def name(self) -> str:
        """Its configuration's name (analysis.Measured)."""
        return self.config.name

    @property
    def steady(self) -> bool:
        """A run statistics are taken over: neither a warm-up round nor the first run after the model loaded
        (both kept in runs.csv)."""
        return self.role != "warmup" and not self.record.totals.first_run

    def to_row(self) -> dict[str, Any]:
        return {"config": self.config.name, "role": self.role, "repeat": self.repeat, **self.record.to_row(),
                "node": self.node}

    @classmethod
    def from_row(cls, row: Mapping[str, str]) -> SweepRow:
        r = RunRecord.from_row(row)
        return cls(Config.of(row.get("config", ""), r.meta.preview), _role(row.get("role", "")),
                   int(row.get("repeat") or 0), r, row.get("node") or "")


@dataclass(frozen=True)
class SweepStep:
    """One step of a run of a sweep, with its run's configuration name and role."""
    config: str
    role: Role
    repeat: int
    row: StepRow

    def to_row(self) -> dict[str, Any]:
        return {"config": self.config, "role": self.role, "repeat": self.repeat, **self.row.to_row()}

    @classmethod
    def from_row(cls, row: Mapping[str, str]) -> SweepStep:
        return cls(row.get("config", ""), _role(row.get("role", "")), int(row.get("repeat") or 0),
                   StepRow.from_row(row))


SWEEP_JSON = "sweep.json"


@dataclass(frozen=True)
class Judging:
    """What a sweep was judged against, kept in its folder (sweep.json) so that report and compare judge it the
    same: the advice's budget and the noise limit, percent. A folder without one (an older previewlab's): the
    defaults, as its bench then used."""
    budget: float = DEFAULT_BUDGET_PCT
    noise_limit: float = NOISE_LIMIT_PCT
    min_fidelity: float = DEFAULT_MIN_SSIM  # the SSIM a useful preview reaches (--min-fidelity)

    def write(self, folder: Path) -> None:
        (folder / SWEEP_JSON).write_text(json.dumps({"budget_pct": self.budget, "noise_limit_pct": self.noise_limit,
                                                     "min_fidelity_ssim": self.min_fidelity}) + "\n")

    @classmethod
    def read(cls, folder: Path) -> Judging:
        """Raises NotASweep naming sweep.json where it holds no such figures."""
        p = folder / SWEEP_JSON
        if not p.is_file():
            return cls()
        try:
            d = json.loads(p.read_text())
            # an older folder has no min_fidelity_ssim: the default, as that bench had none
            return cls(float(d["budget_pct"]), float(d["noise_limit_pct"]),
                       float(d.get("min_fidelity_ssim", DEFAULT_MIN_SSIM)))
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
            raise NotASweep(f"{p}: not a sweep's budget and noise limit ({type(e).__name__}: {e})") from None


@dataclass(frozen=True)
class Sweep:
    """A sweep folder's runs, in the order they ran, their steps, and what it was judged against."""
    runs: tuple[SweepRow, ...]
    steps: tuple[SweepStep, ...]
    judging: Judging = Judging()
    fidelity: Fidelities = NONE  # the fidelity pass's figures (fidelity.csv); NONE: the sweep had none

    def only(self, ids: Iterable[str]) -> Sweep:
        """The runs (and their steps) whose ids are given, in the order given: one invocation's, in a folder
        several appended to (a cluster's sweep gives its units in the plan's order, each unit's runs together)."""
        order = {rid: i for i, rid in enumerate(dict.fromkeys(ids))}
        runs = sorted((r for r in self.runs if r.run_id in order), key=lambda r: order[r.run_id])
        steps = sorted((s for s in self.steps if s.row.run_id in order), key=lambda s: order[s.row.run_id])
        return Sweep(tuple(runs), tuple(steps), self.judging, self.fidelity)

    def by_device(self) -> Sweep:
        """Where its runs ran on more than one device (a sweep over a mixed cluster), each configuration named
        per device ('[NVIDIA L40S] taesd/every5/overlap'), so every surface that groups by configuration (the
        summary, the baselines' noise, the advice, the report, compare) groups by device too: a
        cross-hardware table, no overhead ever taken across devices. One device: the sweep as it is."""
        devices = {r.run_id: r.device for r in self.runs}
        if len(set(devices.values())) < 2:
            return self
        return Sweep(tuple(replace(r, config=replace(r.config, name=f"[{r.device}] {r.config.name}"))
                           for r in self.runs),
                     tuple(replace(s, config=f"[{devices[s.row.run_id]}] {s.config}") if s.row.run_id in devices else s
                           for s in self.steps), self.judging, self.fidelity)


def read(folder: Path) -> Sweep:
    """runs.csv, steps.csv and sweep.json of a sweep folder, as written (readers that group by configuration take
    Sweep.by_device of the runs they read). A line cut short (a sweep killed while writing) is left out. Raises
    NotASweep, also for a run id used twice (no pair or step row could be told apart)."""
    def lines(name: str) -> list[dict[str, str]]:
        p = folder / name
        if not p.is_file():
            raise NotASweep(f"{p} not found; give a folder written by previewlab bench --out")
        with open(p, newline="") as f:
            return [r for r in csv.DictReader(f) if None not in r.values()]
    runs = tuple(SweepRow.from_row(r) for r in lines("runs.csv"))
    twice = [rid for rid, n in Counter(r.run_id for r in runs).items() if n > 1]
    if twice:
        raise NotASweep(f"{folder / 'runs.csv'}: {len(twice)} run id{'s' * (len(twice) > 1)} used more than once "
                        f"({twice[0]}{', ...' * (len(twice) > 1)}): two benches wrote into this --out at once, so "
                        "its pairs and step rows cannot be told apart; run the sweep again into a new --out")
    judging = Judging.read(folder)
    try:
        fid = fidelity.read(folder, any(r.record.meta.synthetic for r in runs), judging.min_fidelity)
    except ValueError as e:
        raise NotASweep(str(e)) from None
    return Sweep(runs, tuple(SweepStep.from_row(r) for r in lines("steps.csv")), judging, fid)


def last_run_id(folder: Path) -> str:
    """The newest run id in folder/runs.csv ("" where it has none): a writer's ids continue after it."""
    p = folder / "runs.csv"
    if not p.is_file():
        return ""
    with open(p, newline="") as f:
        return max((rid for r in csv.DictReader(f) if valid(rid := r.get("run_id") or "")), default="")


def answer(folder: Path, cells: Mapping[str, Mapping[str, Any]]) -> None:
    """Fills runs.csv's answer cells (ANSWERED) of the runs in `cells` (by run id: answers.answers' cells), the
    other runs' lines as they are; written whole to a new file, then moved over the old, so a killed process
    leaves one or the other."""
    path = folder / "runs.csv"
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        columns = list(reader.fieldnames or RUNS_CSV_COLUMNS)
        lines = list(reader)
    if any(c not in columns for c in ANSWERED):
        return  # a folder of an older previewlab: no column to fill
    tmp = path.with_suffix(".csv.tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, columns, extrasaction="ignore")
        w.writeheader()
        for line in lines:
            got = cells.get(line.get("run_id", ""))
            if got is not None and None not in line.values():
                line.update((c, x) for c, x in zip(ANSWER_COLUMNS, as_text(got)) if c in ANSWERED)
            w.writerow(line)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _role(name: str) -> Role:
    if name not in ("warmup", "baseline", "config", "direct"):
        raise ValueError(f"role {name!r} is not one of warmup, baseline, config, direct")
    return cast(Role, name)

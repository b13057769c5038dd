"""A sweep's end, on this machine or a cluster's driver: its runs read back from the CSVs and analysed once,
runs.csv's answer columns filled from that analysis, summary.txt (meta line, table, ratios, advice, traced runs)
and summary.csv written, the summary printed, and the exit status.
"""
from __future__ import annotations

import argparse
import csv
import sys
from typing import TYPE_CHECKING, Sequence

from previewlab.bench.from_flags import judging, size_text

if TYPE_CHECKING:
    from previewlab.bench.rows import SweepRow
    from previewlab.bench.summary_rows import ConfigSummary
    from previewlab.bench.sweep import Traced
    from previewlab.bench.unit import Facts
    from previewlab.preview.judging.advice import Analysis
    from previewlab.preview.judging.estimates import Noise
    from previewlab.preview.record.run import RunRecord
    from previewlab.preview.settings import RunSettings


def finish(args: argparse.Namespace, runs: Sequence[SweepRow], meta: str, traces: Sequence[Traced]) -> int:
    """Reads the sweep's runs back from the CSVs, as report and compare do (one figure, the same everywhere),
    analyses them once, fills runs.csv's answer columns from that analysis, writes summary.txt and summary.csv,
    prints the summary; the exit status (3: a noisy machine with --strict)."""
    from previewlab.bench.advice import of_sweep
    from previewlab.bench.rows import answer
    from previewlab.bench.summary import noisy_exit, summarize
    from previewlab.bench.sweep import read_back
    from previewlab.preview.judging.answers import answers

    sweep = read_back(args.out, runs)
    j = judging(args)
    a = of_sweep(sweep.runs, j.budget, j.noise_limit, sweep.fidelity)
    answer(args.out, answers(sweep.runs, a.findings))
    rows = summarize(sweep.runs, sweep.steps, a.findings, sweep.fidelity)
    noise = a.noise
    text = summary_text(args, sweep.runs, rows, meta, noise, traces, a)
    (args.out / "summary.txt").write_text(text + "\n")
    lines = [r.to_row() for r in rows]
    with open(args.out / "summary.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(lines[0]) if lines else ["config"])
        w.writeheader()
        w.writerows(lines)
    print(text)
    if noise is not None and noise.noisy:  # the exit line points at the summary's first line, which says it once
        print(f"previewlab bench: {noisy_exit(noise, args.strict)}", file=sys.stderr)
        return 3 if args.strict else 0
    return 0


def meta_line(args: argparse.Namespace, facts: Facts, settings: RunSettings, r0: RunRecord,
              counts: tuple[int, ...], where: str = "") -> str:
    """The summary's line of what ran: model, device (where: the devices and nodes of a cluster's sweep), dtypes,
    size, steps, axes, encoder, versions."""
    return (f"{facts.label} | "
            f"{where or r0.totals.device_name} {', '.join(args.dtype)} threads={r0.totals.threads} | "
            f"{size_text(facts, settings)} "
            f"{','.join(map(str, counts))} steps"
            + (f" | scheduler {','.join(args.scheduler)}" if args.scheduler else "")
            + (f" | VAE {','.join(args.vae_mode)}" if args.vae_mode else "")
            + f" | encoder {args.encoder} q{args.quality}"
            + (f" preview_max {args.preview_max}" if args.preview_max else "") + f" | torch {r0.totals.torch} "
            f"diffusers {r0.totals.diffusers}")


def summary_text(args: argparse.Namespace, runs: Sequence[SweepRow], rows: list[ConfigSummary], meta: str,
                 noise: Noise | None, traces: Sequence[Traced], analysis: Analysis | None = None) -> str:
    """summary.txt: the table, the overlap/sync ratios, the advice (analysis: the sweep's, None: made here from
    runs at the flags' budget and noise limit), and each traced run against its median."""
    from previewlab.bench.advice import of_sweep
    from previewlab.bench.summary import mode_ratios, said_once, table

    text = table(rows, meta, noise)
    if not rows:  # every run was a warm-up or the first after the load: kept, but out of the statistics
        text += ("\nno figures: every run of this sweep was a warm-up or the first run after the model loaded, which "
                 "are kept in runs.csv but left out of the statistics; use --warmup 1 or --repeats 2 or more")
    ratios = mode_ratios(rows)
    if ratios:
        text += "\n" + ratios
    j = judging(args)
    advice = said_once((analysis or of_sweep(runs, j.budget, j.noise_limit)).advice.lines, noise)
    if advice:
        text += "\n" + "\n".join(advice)
    for t in traces:
        base = next((r.wall_s for r in rows if r.config == t.config), None)
        ref = f" (untraced median {base:.2f} s, {100 * (t.wall_s / base - 1):+.1f} %)" if base else ""
        text += f"\n{t.kind}: {t.path}: traced run {t.wall_s:.2f} s{ref}, writing it {t.export_s:.2f} s"
    return text

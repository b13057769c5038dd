"""The results file: a header (the command, the checkout, the versions, what a pass means), the summary per kind,
the cases that did not pass by outcome, the notes, and every case on a line of its own."""
from __future__ import annotations

import shlex
import subprocess
import time
from pathlib import Path
from typing import Sequence

from previewlab.bench.survey.offline import repo
from previewlab.bench.survey.results import NOT_APPLICABLE, Result

KINDS = ("callback", "no callback", "modular")


def _pct(n: int, d: int) -> str:
    return f"{100.0 * n / d:.0f} %" if d else "-"


def summary(results: Sequence[Result]) -> list[str]:
    """The table: per kind, cases, built, passed (of those built), and the other outcomes."""
    kinds = list(KINDS) + sorted({r.kind for r in results} - set(KINDS))
    head = f"{'kind':<12} {'cases':>5} {'built':>5} {'passed':>6} {'of built':>8} {'refused':>7} {'failed':>6} " \
           f"{'nondet.':>7} {'not built':>9}"
    lines = [head, "-" * len(head)]
    for kind in kinds + ["all"]:
        mine = [r for r in results if kind == "all" or r.kind == kind]
        if not mine:
            continue
        built = [r for r in mine if r.built]
        count = {c: sum(r.category == c for r in mine) for c in ("pass", "refused", "failed", "nondeterministic")}
        lines.append(f"{kind:<12} {len(mine):>5} {len(built):>5} {count['pass']:>6} "
                     f"{_pct(count['pass'], len(built)):>8} {count['refused']:>7} {count['failed']:>6} "
                     f"{count['nondeterministic']:>7} {len(mine) - len(built):>9}")
    return lines


def report(results: Sequence[Result], header: Sequence[str]) -> str:
    """The results file's text: `header`'s lines, then the results."""
    width = max([len(r.name) for r in results] + [10])
    order = {k: i for i, k in enumerate(KINDS)}
    ranked = sorted(results, key=lambda r: (order.get(r.kind, 9), r.name))
    lines = list(header) + ["", "## Summary", ""] + summary(results)
    lines += ["", "## Not passed, by outcome (first line)", ""]
    for category in ("refused", "failed", "nondeterministic", "not built"):
        mine = [r for r in ranked if r.category == category]
        if mine:
            lines.append(f"{category} ({len(mine)}):")
            lines += [f"  {r.kind:<11} {r.name}: {r.result.split(': ', 1)[1] if ': ' in r.result else r.result}"
                      for r in mine]
            lines.append("")
    moot = [(r, d, o) for r in ranked for d, o in r.decoders.items() if o.startswith(NOT_APPLICABLE)]
    if moot:
        lines.append(f"passed, with a decoder the pipeline cannot have ({len(moot)}):")
        lines += [f"  {r.kind:<11} {r.name}: [{d}] {o[len(NOT_APPLICABLE):]}" for r, d, o in moot] + [""]
    served: dict[str, int] = {}
    for r in results:
        for note in r.notes:
            served[note] = served.get(note, 0) + 1
    if served:
        lines += ["## Notes (cases)", ""] + [f"  {n} ({k})" for n, k in sorted(served.items())] + [""]
    lines += ["## Every case: kind | class (pipeline) | result | seconds | source | steps", ""]
    for r in ranked:
        extra = f" | {r.source or '-'} | {r.steps if r.steps is not None else '-'}"
        lines.append(f"{r.kind:<11} | {r.name:<{width}} | {r.result} | {r.seconds:.1f}{extra}")
    return "\n".join(lines) + "\n"


def _git(folder: Path) -> str:
    """The checkout's commit, and the files it has changed, or why there is none."""
    try:
        sha = subprocess.run(["git", "-C", str(folder), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(folder), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.split("\n")
    except (OSError, subprocess.CalledProcessError):
        return "not a git checkout"
    changed = [line[3:] for line in dirty if line.strip()]
    return f"git {sha}" + (f", changed: {', '.join(changed)}" if changed else ", clean")


def header(tests: Path, argv: Sequence[str], notes: Sequence[str]) -> list[str]:
    import platform

    import diffusers
    import torch
    import transformers

    return [f"# previewlab pipeline survey (issue 32), {time.strftime('%Y-%m-%d %H:%M')}",
            f"# command: python -m previewlab.bench.survey {shlex.join(argv)}",
            f"# previewlab: {repo()} ({_git(repo())})",
            f"# tests: {tests}"] + [f"# {n}" for n in notes] + [
            f"# diffusers {diffusers.__version__}, transformers {transformers.__version__}, torch {torch.__version__},"
            f" python {platform.python_version()}, one thread per case",
            "# pass: watch() with none, latent2rgb and vae (source auto) leaves the output bit-identical to a plain "
            "call,",
            "# one row per step (the pipeline's own progress bar), a preview at every step (latent2rgb, vae), no "
            "failed event,",
            "# and a plain call after remove() is still identical."]

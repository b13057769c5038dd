"""The survey's command line (see the package's docstring): python -m previewlab.bench.survey --tests FOLDER ...
Every case runs in a worker process of its own (this module with --worker), which prints its Result as one JSON
line after MARK."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Sequence

from previewlab.bench import survey
from previewlab.bench.survey.cases import Case, classic_cases, modular_cases, modular_pipelines
from previewlab.bench.survey.offline import repo
from previewlab.bench.survey.process import OFFLINE
from previewlab.bench.survey.report import header, report, summary
from previewlab.bench.survey.results import Result, first_line
from previewlab.bench.survey.worker import worker

MARK = "@@survey@@ "  # the worker's result line on stdout


def run_case(tests: Path, case: Case, timeout_s: int) -> Result:
    """The case in a process of its own: one thread; killed if it outlives its two time limits (build, calls)
    and an allowance for its imports."""
    env = dict(os.environ, **OFFLINE)
    cmd = [sys.executable, "-m", "previewlab.bench.survey", "--tests", str(tests), "--timeout",
           str(timeout_s), "--worker", json.dumps(asdict(case))]
    start = time.perf_counter()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=2 * timeout_s + 120, env=env,
                              cwd=str(repo()))
        stdout, stderr, rc = done.stdout, done.stderr, done.returncode
    except subprocess.TimeoutExpired as e:
        stdout = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        stderr, rc = "", None
    for line in reversed(stdout.splitlines()):
        if line.startswith(MARK):
            return Result(**json.loads(line[len(MARK):]))
    seconds = round(time.perf_counter() - start, 1)
    kind = "modular" if case.kind == "modular" else "unknown"
    why = (f"killed after {seconds:.0f} s" if rc is None else
           f"the worker exited with {rc}: {first_line(stderr.strip().splitlines()[-1] if stderr.strip() else '')}")
    return Result(kind=kind, name=case.name, test=case.test or case.parts, result=f"failed: {why}", seconds=seconds)


def parser() -> argparse.ArgumentParser:
    """The survey's flags (--worker: the case a worker process runs, as JSON)."""
    p = argparse.ArgumentParser(prog="python -m previewlab.bench.survey",
                                description=(survey.__doc__ or "").split("\n\n")[0],
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--tests", required=True, type=Path, help="diffusers' tests folder (with pipelines/ in it)")
    p.add_argument("--out", type=Path, help="the results file (rewritten after every case)")
    p.add_argument("--json", type=Path, help="also keep the results as JSON lines here; with --only or --again, "
                   "the cases not rerun are kept from it")
    p.add_argument("--again", action="store_true", help="with --json: run only the cases it holds no pass for")
    p.add_argument("--resume", action="store_true", help="with --json: run only the cases it holds no result for")
    p.add_argument("--timeout", type=int, default=120, help="seconds for a case's build, and again for its calls")
    p.add_argument("--only", action="append", default=[], help="cases whose name or file contains this (repeatable)")
    p.add_argument("--list", action="store_true", help="list the cases and stop")
    p.add_argument("--report", action="store_true", help="rewrite --out from --json and stop (the header kept)")
    p.add_argument("--note", action="append", default=[], help="a line for the results file's header (repeatable)")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    tests = args.tests.resolve()
    if (tests / "tests" / "pipelines").is_dir():
        tests = tests / "tests"
    if args.worker:
        res = worker(tests, Case(**json.loads(args.worker)), args.timeout)
        print(MARK + json.dumps(asdict(res)), flush=True)
        return 0
    if not (tests / "pipelines").is_dir():
        p.error(f"{tests} has no pipelines/ folder: pass diffusers' tests folder")
    cases = classic_cases(tests) + modular_cases(tests, modular_pipelines())
    if args.only:
        cases = [c for c in cases if any(o in c.name or o in c.test or o in c.parts for o in args.only)]
    if args.list:
        for c in cases:
            print(f"{c.kind:<8} {c.name}  {c.test or c.parts}")
        return 0
    keys = {c.name + (c.test or c.parts) for c in cases}
    kept: dict[str, Result] = {}
    if args.json is not None and args.json.is_file() and (args.only or args.again or args.resume):
        for line in args.json.read_text().splitlines():
            r = Result(**json.loads(line))
            if r.name + r.test in keys or args.only:
                kept[r.name + r.test] = r
    if args.again or args.resume:
        cases = [c for c in cases if kept.get(c.name + (c.test or c.parts), None) is None
                 or (args.again and kept[c.name + (c.test or c.parts)].result != "pass")]
    head = header(tests, list(argv if argv is not None else sys.argv[1:]), args.note)
    if args.report:
        if args.json is None or args.out is None:
            p.error("--report needs --json and --out")
        if args.out.is_file():
            head = [line for line in args.out.read_text().splitlines() if line.startswith("#")] or head
        stored = [Result(**json.loads(line)) for line in args.json.read_text().splitlines()]
        args.out.write_text(report(stored, head))
        print("\n".join(summary(stored)))
        return 0
    results: dict[str, Result] = dict(kept)
    for i, case in enumerate(cases, 1):
        res = run_case(tests, case, args.timeout)
        results[res.name + res.test] = res
        print(f"[{i}/{len(cases)}] {res.kind:<11} {res.name}: {res.result} ({res.seconds:.1f} s)", flush=True)
        if args.out is not None:
            args.out.write_text(report(list(results.values()), head))
        if args.json is not None:
            args.json.write_text("".join(json.dumps(asdict(r)) + "\n" for r in results.values()))
    print("\n".join(summary(list(results.values()))))
    return 0


if __name__ == "__main__":
    sys.exit(main())

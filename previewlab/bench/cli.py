"""previewlab bench: sweep preview decoders and intervals against no-preview baselines, write CSVs, print a summary.

The flags are flags.py's, read into a sweep by from_flags.py; this module runs a sweep per model variant
(bench/sweep.py), or hands the sweep to a Ray cluster (bench/cluster.py), and ends it (bench/finish.py). The
models and the sweep are imported once the flags are read.
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
from typing import TYPE_CHECKING, Callable, Sequence

from previewlab.bench.finish import finish, meta_line
from previewlab.bench.flags import parser
from previewlab.bench.from_flags import checked, judging, plan_of, size_text, variants
from previewlab.preview.models.devices import device_refusal

if TYPE_CHECKING:
    from previewlab.bench.plan import Plan
    from previewlab.bench.rows import SweepRow
    from previewlab.bench.sweep import Traced
    from previewlab.bench.unit import Facts
    from previewlab.preview.models import Model

__all__ = ["main", "progress_bar"]


def main(argv: Sequence[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    counts: tuple[int, ...] = args.steps or (10,)  # steps per run, an axis from two on
    refusal = device_refusal(args.device) if args.ray is None else None  # on a cluster, each node judges it
    if refusal is not None:
        p.error(f"argument --device: {refusal}")
    if args.fidelity and args.ray is not None:
        p.error("argument --fidelity: the pass runs on this machine, after its own sweep; not with --ray")
    from previewlab.bench.out_folder import OutError, prepare

    try:  # before any model loads: a folder that cannot be made, or is another bench's, is one line now
        lock, held = prepare(args, judging(args))
    except OutError as e:
        print(f"previewlab bench: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"previewlab bench: --out {args.out}: {e.strerror or e}", file=sys.stderr)
        return 2
    try:
        return _on_ray(args, counts, held) if args.ray is not None else _here(args, counts, held)
    finally:
        lock.release()  # one bench per folder, until its summary is written


def _on_ray(args: argparse.Namespace, counts: tuple[int, ...], held: tuple[SweepRow, ...]) -> int:
    """The sweep into the locked --out on a cluster, whose nodes judge --device and --model themselves; held:
    the folder's runs (--resume)."""
    if importlib.util.find_spec("ray") is None:
        print("previewlab bench: --ray needs Ray, which is not installed: pip install 'previewlab[ray]'",
              file=sys.stderr)
        return 2
    if args.warmup < 1:
        print("previewlab bench: --ray needs --warmup 1 or more: each unit loads its model on its node, and its "
              "first run would be a cold one, left out with its pair", file=sys.stderr)
        return 2
    from previewlab.bench.ray_auth import adopt

    adopt(args.ray)  # before Ray is imported: it reads its token mode then
    from previewlab.bench.cluster import sweep_on_ray

    return sweep_on_ray(args, counts, held)


def _here(args: argparse.Namespace, counts: tuple[int, ...], held: tuple[SweepRow, ...]) -> int:
    """The sweep into the locked --out on this machine, a model variant at a time; held: the folder's runs
    (--resume)."""
    import torch

    from previewlab.bench.axes import AxisError
    from previewlab.bench.resume import held as by_key, to_run
    from previewlab.bench.sweep import run_sweep, traced_run
    from previewlab.bench.unit import load_model
    from previewlab.preview.decoding.contract import DecoderError
    from previewlab.preview.models import ModelError
    from previewlab.preview.record.csv_writer import CsvSchemaError
    from previewlab.preview.settings import SettingsError

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    runs: list[SweepRow] = list(held)  # the folder's runs, summarized with this invocation's
    done = by_key(held) if args.resume else None
    traces: list[Traced] = []
    meta = ""
    for v in variants(args):
        try:
            model = load_model(v.load)
            facts, settings = checked(args, model, counts)
        except (ModelError, SettingsError, DecoderError, AxisError) as e:
            print(f"previewlab bench: {e}", file=sys.stderr)
            return 2
        refusal = _refusal(args, facts, held)
        if refusal is not None:  # before any timed run: the refusal costs nothing
            print(f"previewlab bench: {refusal}", file=sys.stderr)
            return 2
        plan = plan_of(args, settings, facts.video, v.compile == "decoder", counts, model.device.type)
        total = len(list(plan.schedule() if done is None else to_run(plan, done, model.name, facts.video, v.label)))
        kept = f" (resumed: its {len(held)} runs kept)" if held else ""
        print(f"{v.label}{_loaded(facts, v.load.dtype)}; {total} runs of {','.join(map(str, counts))} steps at "
              f"{size_text(facts, settings)} -> {args.out}{kept}", file=sys.stderr)
        bar = progress_bar(total)
        try:
            runs += run_sweep(model, plan, args.out, progress=bar, label=v.label, held=done)
        except CsvSchemaError as e:
            print(f"previewlab bench: --out {args.out}: {e}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print(f"\nbench: interrupted; finished runs are in {args.out}/runs.csv (--resume finishes the sweep)",
                  file=sys.stderr)
            return 130
        finally:
            bar(0, close=True)
        for kind, folder in (("trace", args.trace), ("cprofile", args.cprofile)):
            if folder is not None:
                traces.append(traced_run(model, plan, folder, kind, v.label))
        meta = meta_line(args, facts, settings, runs[-1].record, counts)
    if args.fidelity:  # after every timed run: nothing of it is in runs.csv, steps.csv or any pair
        fidelity_pass(args, model, plan)
    return finish(args, runs, meta, traces)


def _refusal(args: argparse.Namespace, facts: Facts, held: tuple[SweepRow, ...]) -> str | None:
    """Why this model's sweep cannot run into --out with these flags (None: it can)."""
    if args.fidelity and facts.video:
        return "--fidelity: a video model's clips are not measured yet (images only)"
    other = next((r.record.meta.model for r in held if r.record.meta.model != facts.name), None)
    if other is not None:  # its pairs would never match: a second sweep, judged with the first
        return (f"--resume: {args.out} holds a sweep of {other}, not {facts.name}; resume it with its own flags, or "
                "give another --out")
    return None


def fidelity_pass(args: argparse.Namespace, model: Model, plan: Plan) -> None:
    """The fidelity pass (bench/fidelity.py) on the last variant's model, into fidelity.csv and finals.csv."""
    from previewlab.bench.fidelity import run_pass
    from previewlab.preview.judging import fidelity

    print(f"fidelity pass: {args.fidelity_seeds} seeds, untimed, not in runs.csv -> {args.out}/{fidelity.FIDELITY_CSV}",
          file=sys.stderr)
    samples, finals = run_pass(model, plan, args.fidelity_seeds, lambda line: print(line, file=sys.stderr))
    fidelity.write(args.out, samples, finals)


def _loaded(facts: Facts, dtype: str) -> str:
    synth = "synthetic " if facts.synthetic else ""
    return f"{synth}model {facts.name} ({facts.described}) on {facts.device} {dtype}, loaded in {facts.load_s:.1f} s"


def progress_bar(total: int) -> Callable[..., None]:
    """tqdm when it is installed (a bare GPU machine may lack it), else a line per tenth of the sweep."""
    try:
        from tqdm import tqdm
    except ImportError:
        done = [0]

        def plain(n: int, close: bool = False) -> None:
            done[0] += n
            if n and (done[0] * 10 // total) != ((done[0] - n) * 10 // total):
                print(f"  {done[0]}/{total} runs", file=sys.stderr, flush=True)
        return plain
    bar = tqdm(total=total, unit="run", file=sys.stderr, mininterval=1.0)

    def update(n: int, close: bool = False) -> None:
        bar.update(n)
        if close:
            bar.close()
    return update

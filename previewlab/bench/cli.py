"""previewlab bench: sweep preview decoders and intervals against no-preview baselines, write CSVs, print a summary.

The flags are flags.py's; this module runs a sweep per model variant (bench/sweep.py) and writes the summary.
The models and the sweep are imported once the flags are read.
"""
from __future__ import annotations

import argparse
import csv
import importlib.util
import itertools
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

from previewlab.bench.flags import parser
from previewlab.preview.models.devices import device_refusal
from previewlab.preview.names import FrameChoice
from previewlab.preview.settings import MAX_NUM_FRAMES, PreviewSettings, RunSettings, SettingsError, default_mode

if TYPE_CHECKING:
    from previewlab.preview.judging.estimates import Noise
    from previewlab.bench.summary_rows import ConfigSummary
    from previewlab.bench.unit import Facts, Load
    from previewlab.bench.sweep import Plan
    from previewlab.preview.models import Model
    from previewlab.bench.rows import Judging, SweepRow
    from previewlab.preview.judging.advice import Analysis
    from previewlab.preview.record.run import RunRecord

__all__ = ["checked", "finish", "main", "meta_line", "parser", "plan_of", "progress_bar", "summary_text", "variants"]


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
        return _run(args, counts, held)
    finally:
        lock.release()  # one bench per folder, until its summary is written


def _run(args: argparse.Namespace, counts: tuple[int, ...], held: tuple[SweepRow, ...]) -> int:
    """The sweep into the locked --out, on this machine or a cluster; held: the folder's runs (--resume)."""
    if args.ray is not None:  # the units run on the cluster's nodes, which judge --device and --model themselves
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
    import torch

    from previewlab.bench.axes import AxisError
    from previewlab.bench.resume import held as by_key, to_run
    from previewlab.bench.sweep import run_sweep, traced_run
    from previewlab.preview.record.csv_writer import CsvSchemaError
    from previewlab.preview.decoding.decoders import DecoderError
    from previewlab.preview.models import ModelError
    from previewlab.bench.unit import load_model

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    runs: list[SweepRow] = list(held)  # the folder's runs, summarized with this invocation's
    done = by_key(held) if args.resume else None
    traces: list[dict] = []
    meta = ""
    for v in variants(args):
        try:
            model = load_model(v.load)
            facts, settings = checked(args, model, counts)
        except (ModelError, SettingsError, DecoderError, AxisError) as e:
            print(f"previewlab bench: {e}", file=sys.stderr)
            return 2
        if args.fidelity and facts.video:  # before any timed run: the refusal costs nothing
            print("previewlab bench: --fidelity: a video model's clips are not measured yet (images only)",
                  file=sys.stderr)
            return 2
        other = next((r.record.meta.model for r in held if r.record.meta.model != model.name), None)
        if other is not None:  # its pairs would never match: a second sweep, judged with the first
            print(f"previewlab bench: --resume: {args.out} holds a sweep of {other}, not {model.name}; resume it with "
                  "its own flags, or give another --out", file=sys.stderr)
            return 2
        plan = plan_of(args, settings, facts.video, v.compile == "decoder", counts, model.device.type)
        total = len(list(plan.schedule() if done is None else to_run(plan, done, model.name, facts.video, v.label)))
        print(f"{v.label}{_loaded(facts, v.load.dtype)}; {total} runs of {','.join(map(str, counts))} steps at "
              f"{_size(facts, settings)} -> {args.out}" + (f" (resumed: its {len(held)} runs kept)" if held else ""),
              file=sys.stderr)
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


def fidelity_pass(args: argparse.Namespace, model: Model, plan: Plan) -> None:
    """The fidelity pass (bench/fidelity.py) on the last variant's model, into fidelity.csv and finals.csv."""
    from previewlab.bench.fidelity import run_pass
    from previewlab.preview.judging import fidelity

    print(f"fidelity pass: {args.fidelity_seeds} seeds, untimed, not in runs.csv -> {args.out}/{fidelity.FIDELITY_CSV}",
          file=sys.stderr)
    samples, finals = run_pass(model, plan, args.fidelity_seeds, lambda line: print(line, file=sys.stderr))
    fidelity.write(args.out, samples, finals)


def judging(args: argparse.Namespace) -> Judging:
    """The sweep's budget (the advice's: --budget, default 5 %) and noise limit (--noise-limit)."""
    from previewlab.bench.rows import Judging
    from previewlab.preview.judging.advice import DEFAULT_BUDGET_PCT

    return Judging(args.budget if args.budget is not None else DEFAULT_BUDGET_PCT, args.noise_limit,
                   args.min_fidelity)


@dataclass(frozen=True)
class Variant:
    """One model variant of a sweep (--dtype x --offload x --compile x --channels-last): how its model loads,
    whether its decoder is compiled, and its configurations' prefix ('' when the sweep has one variant)."""
    label: str
    load: Load
    compile: str


def variants(args: argparse.Namespace) -> list[Variant]:
    from previewlab.bench.unit import Load

    product = list(itertools.product(args.dtype, args.offload, args.compile, args.channels_last))
    return [Variant("" if len(product) == 1 else f"[{dtype} offload={offload} compile={comp} cl={cl}] ",
                    Load(args.model, args.taesd, args.device, dtype, args.seed, offload, cl == "on", args.variant,
                         args.config), comp)
            for dtype, offload, comp, cl in product]


def checked(args: argparse.Namespace, model: Model, counts: tuple[int, ...]) -> tuple[Facts, RunSettings]:
    """The model's facts and the sweep's base run on it, once every flag is known to fit the model. Raises
    SettingsError, DecoderError or AxisError (their str() the one line)."""
    from previewlab.bench.axes import check_vae_modes, schedulers_for
    from previewlab.bench.unit import Facts
    from previewlab.preview.decoding.contract import DecoderError
    from previewlab.preview.decoding.tae_decoder import taesd_refusal

    facts = Facts(model.name, model.label, model.space.describe(), model.synthetic, model.space.video,
                  model.default_size, model.num_frames, model.fps, model.space.temporal, str(model.device),
                  model.load_s)
    preview = PreviewSettings(decoder="none", encoder=args.encoder, quality=args.quality, target=args.target[0],
                              preview_max=args.preview_max)
    settings = _settings(args, facts, preview, counts)
    if "taesd" in args.decoders and model.taesd is None:
        raise DecoderError(taesd_refusal(model))
    schedulers_for(model.pipe, args.scheduler or (), counts)  # refused before any run, in one line
    check_vae_modes(model.pipe, args.vae_mode or ())
    return facts, settings


def _loaded(facts: Facts, dtype: str) -> str:
    synth = "synthetic " if facts.synthetic else ""
    return f"{synth}model {facts.name} ({facts.described}) on {facts.device} {dtype}, loaded in {facts.load_s:.1f} s"


def _size(facts: Facts, settings: RunSettings) -> str:
    return f"{settings.width}x{settings.height}" + (f" x {settings.num_frames} frames" if facts.video else "")


def finish(args: argparse.Namespace, runs: Sequence[SweepRow], meta: str, traces: list[dict]) -> int:
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


def _settings(args: argparse.Namespace, facts: Facts, preview: PreviewSettings, counts: tuple[int, ...]) -> RunSettings:
    """The sweep's base run on this model: the flags, the model's own size and clip where they leave them out.
    Raises SettingsError."""
    video = facts.video
    if not video and (args.frames is not None or (args.num_frames or 1) != 1):
        raise SettingsError(f"--frames and --num-frames are for a video model; {facts.name} makes images")
    return RunSettings(prompt=args.prompt, steps=counts[0], width=args.width or facts.default_size,
                       height=args.height or facts.default_size, seed=args.seed, preview=preview,
                       batch=args.batch, num_frames=args.num_frames or facts.num_frames,
                       fps=facts.fps, max_frames=MAX_NUM_FRAMES if video else 1,
                       frame_step=facts.temporal if video else 1)


def plan_of(args: argparse.Namespace, settings: RunSettings, video: bool, compile_decoder: bool,
            counts: tuple[int, ...], device: str) -> Plan:
    """The flags' sweep: a video model's defaults are every step and the frames axis; the mode's, the device's
    (settings.default_mode)."""
    from previewlab.bench.sweep import Plan

    every = args.every or ((1,) if video else (1, 2, 5, 10))
    frames: tuple[FrameChoice, ...] = (args.frames or ("first", "middle", "all")) if video else ()
    return Plan(settings, args.decoders, every, args.repeats, args.warmup, args.direct,
                args.modes or (default_mode(device),),
                args.budget if args.budget is not None else 10.0, args.inflight, compile_decoder,
                args.target if len(args.target) > 1 else (), frames, args.decode_at or (),
                args.scheduler or (), counts, args.vae_mode or ())


def meta_line(args: argparse.Namespace, facts: Facts, settings: RunSettings, r0: RunRecord,
              counts: tuple[int, ...], where: str = "") -> str:
    """The summary's line of what ran: model, device (where: the devices and nodes of a cluster's sweep), dtypes,
    size, steps, axes, encoder, versions."""
    return (f"{facts.label} | "
            f"{where or r0.totals.device_name} {', '.join(args.dtype)} threads={r0.totals.threads} | "
            f"{_size(facts, settings)} "
            f"{','.join(map(str, counts))} steps"
            + (f" | scheduler {','.join(args.scheduler)}" if args.scheduler else "")
            + (f" | VAE {','.join(args.vae_mode)}" if args.vae_mode else "")
            + f" | encoder {args.encoder} q{args.quality}"
            + (f" preview_max {args.preview_max}" if args.preview_max else "") + f" | torch {r0.totals.torch} "
            f"diffusers {r0.totals.diffusers}")


def summary_text(args: argparse.Namespace, runs: Sequence[SweepRow], rows: list[ConfigSummary], meta: str,
                 noise: Noise | None, traces: list[dict], analysis: Analysis | None = None) -> str:
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
        base = next((r.wall_s for r in rows if r.config == t["config"]), None)
        ref = f" (untraced median {base:.2f} s, {100 * (t['wall_s'] / base - 1):+.1f} %)" if base else ""
        text += f"\n{t['kind']}: {t['path']}: traced run {t['wall_s']:.2f} s{ref}, writing it {t['export_s']:.2f} s"
    return text


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

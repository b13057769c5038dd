"""previewlab bench: sweep preview decoders and intervals against no-preview baselines, write CSVs, print a summary.

The flags are flags.py's; this module runs a sweep per model variant (bench/sweep.py) and writes the summary.
The models and the sweep are imported once the flags are read.
"""
from __future__ import annotations

import argparse
import csv
import itertools
import sys
from typing import TYPE_CHECKING, Callable, Sequence

from previewlab.bench.flags import parser
from previewlab.preview.names import FrameChoice
from previewlab.preview.settings import MAX_NUM_FRAMES, PreviewSettings, RunSettings, SettingsError, default_mode

if TYPE_CHECKING:
    from previewlab.bench.noise import Noise
    from previewlab.bench.summary_rows import ConfigSummary
    from previewlab.bench.sweep import Plan
    from previewlab.preview.models import Model
    from previewlab.bench.rows import SweepRow
    from previewlab.preview.record.run import RunRecord

__all__ = ["main", "parser", "progress_bar", "summary_text"]


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    counts: tuple[int, ...] = args.steps or (10,)  # steps per run, an axis from two on
    try:  # before any model loads: a folder that cannot be made is one line now, not a traceback after the first run
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        print(f"previewlab bench: --out {args.out}: {e.strerror or e}", file=sys.stderr)
        return 2
    import torch

    from previewlab.bench.axes import AxisError, check_vae_modes, schedulers_for
    from previewlab.bench.noise import baseline_noise
    from previewlab.bench.summary import summarize
    from previewlab.bench.sweep import read_back, run_sweep, traced_run
    from previewlab.preview.record.csv_writer import CsvSchemaError
    from previewlab.preview.decoding.decoders import DecoderError, taesd_refusal
    from previewlab.preview.models import ModelError, load

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    variants = list(itertools.product(args.dtype, args.offload, args.compile, args.channels_last))
    runs: list[SweepRow] = []
    traces: list[dict] = []
    meta = ""
    for dtype, offload, comp, cl in variants:
        label = "" if len(variants) == 1 else f"[{dtype} offload={offload} compile={comp} cl={cl}] "
        try:
            preview = PreviewSettings(decoder="none", encoder=args.encoder, quality=args.quality, target=args.target[0],
                                      preview_max=args.preview_max)
            model = load(args.model, taesd=args.taesd, device=args.device, dtype=dtype, seed=args.seed,
                         offload=offload, channels_last=(cl == "on"), variant=args.variant,
                         config=args.config)
            settings = _settings(args, model, preview, counts)
            if "taesd" in args.decoders and model.taesd is None:
                raise DecoderError(taesd_refusal(model))
            schedulers_for(model.pipe, args.scheduler or (), counts)  # refused before any run, in one line
            check_vae_modes(model.pipe, args.vae_mode or ())
        except (ModelError, SettingsError, DecoderError, AxisError) as e:
            print(f"previewlab bench: {e}", file=sys.stderr)
            return 2
        plan = _plan(args, settings, model.space.video, comp == "decoder", counts, model.device.type)
        total = len(list(plan.schedule()))
        synth = "synthetic " if model.synthetic else ""
        print(f"{label}{synth}model {model.name} ({model.space.describe()}) on {model.device} {dtype}, loaded in "
              f"{model.load_s:.1f} s; {total} runs of {','.join(map(str, counts))} steps at {settings.width}x{settings.height}"
              + (f" x {settings.num_frames} frames" if model.space.video else "") + " "
              f"-> {args.out}", file=sys.stderr)
        bar = progress_bar(total)
        try:
            runs += run_sweep(model, plan, args.out, progress=bar, label=label)
        except CsvSchemaError as e:
            print(f"previewlab bench: --out {args.out}: {e}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print(f"\nbench: interrupted; finished runs are in {args.out}/runs.csv", file=sys.stderr)
            return 130
        finally:
            bar(0, close=True)
        for kind, folder in (("trace", args.trace), ("cprofile", args.cprofile)):
            if folder is not None:
                traces.append(traced_run(model, plan, folder, kind, label))
        meta = _meta(args, model, settings, runs[-1].record, counts)
    # the summary reads the CSVs back, as report and compare do: one figure, the same everywhere
    sweep = read_back(args.out, runs)
    rows = summarize(sweep.runs, sweep.steps)
    noise = baseline_noise(sweep.runs, args.noise_limit)
    text = summary_text(args, sweep.runs, rows, meta, noise, traces)
    (args.out / "summary.txt").write_text(text + "\n")
    lines = [r.to_row() for r in rows]
    with open(args.out / "summary.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(lines[0]) if lines else ["config"])
        w.writeheader()
        w.writerows(lines)
    print(text)
    if noise is not None and noise.noisy:  # the exit line: the last thing a user sees says it too
        print(f"previewlab bench: {noise.line()}", file=sys.stderr)
        return 3 if args.strict else 0
    return 0


def _settings(args: argparse.Namespace, model: Model, preview: PreviewSettings, counts: tuple[int, ...]) -> RunSettings:
    """The sweep's base run on this model: the flags, the model's own size and clip where they leave them out.
    Raises SettingsError."""
    video = model.space.video
    if not video and (args.frames is not None or (args.num_frames or 1) != 1):
        raise SettingsError(f"--frames and --num-frames are for a video model; {model.name} makes images")
    return RunSettings(prompt=args.prompt, steps=counts[0], width=args.width or model.default_size,
                       height=args.height or model.default_size, seed=args.seed, preview=preview,
                       batch=args.batch, num_frames=args.num_frames or model.num_frames,
                       fps=model.fps, max_frames=MAX_NUM_FRAMES if video else 1,
                       frame_step=model.space.temporal if video else 1)


def _plan(args: argparse.Namespace, settings: RunSettings, video: bool, compile_decoder: bool,
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


def _meta(args: argparse.Namespace, model: Model, settings: RunSettings, r0: RunRecord,
          counts: tuple[int, ...]) -> str:
    """The summary's line of what ran: model, device, dtypes, size, steps, axes, encoder, versions."""
    return (f"{model.label} | "
            f"{r0.totals.device_name} {', '.join(args.dtype)} threads={r0.totals.threads} | "
            f"{settings.width}x{settings.height}"
            + (f" x {settings.num_frames} frames" if model.space.video else "") + " "
            f"{','.join(map(str, counts))} steps"
            + (f" | scheduler {','.join(args.scheduler)}" if args.scheduler else "")
            + (f" | VAE {','.join(args.vae_mode)}" if args.vae_mode else "")
            + f" | encoder {args.encoder} q{args.quality}"
            + (f" preview_max {args.preview_max}" if args.preview_max else "") + f" | torch {r0.totals.torch} "
            f"diffusers {r0.totals.diffusers}")


def summary_text(args: argparse.Namespace, runs: Sequence[SweepRow], rows: list[ConfigSummary], meta: str,
                 noise: Noise | None, traces: list[dict]) -> str:
    """summary.txt: the table, the overlap/sync ratios, the advice, and each traced run against its median."""
    from previewlab.bench.advice import DEFAULT_BUDGET_PCT
    from previewlab.bench.advice import lines as advice_lines
    from previewlab.bench.summary import mode_ratios, table

    text = table(rows, meta, noise)
    if not rows:  # every run was a warm-up or the first after the load: kept, but out of the statistics
        text += ("\nno figures: every run of this sweep was a warm-up or the first run after the model loaded, which "
                 "are kept in runs.csv but left out of the statistics; use --warmup 1 or --repeats 2 or more")
    ratios = mode_ratios(rows)
    if ratios:
        text += "\n" + ratios
    advice = advice_lines(runs, args.budget if args.budget is not None else DEFAULT_BUDGET_PCT, args.noise_limit)
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

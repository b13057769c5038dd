"""The sweep the bench's flags ask for: its model variants (each a Load), every flag checked against the loaded
model (its Facts and the sweep's base run), the Plan, and the judging (budget, noise limit, fidelity threshold).

The local bench (cli.py) and a cluster's driver (cluster.py, through prepare on a node) read the flags here alike.
"""
from __future__ import annotations

import argparse
import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from previewlab.bench.unit import Facts, Load, load_model
from previewlab.preview.names import FrameChoice
from previewlab.preview.settings import MAX_NUM_FRAMES, PreviewSettings, RunSettings, SettingsError, default_mode

if TYPE_CHECKING:
    from previewlab.bench.plan import Plan
    from previewlab.bench.rows import Judging
    from previewlab.preview.models import Model


@dataclass(frozen=True)
class Variant:
    """One model variant of a sweep (--dtype x --offload x --compile x --channels-last): how its model loads,
    whether its decoder is compiled, and its configurations' prefix ('' when the sweep has one variant)."""
    label: str
    load: Load
    compile: str


def variants(args: argparse.Namespace) -> list[Variant]:
    product = list(itertools.product(args.dtype, args.offload, args.compile, args.channels_last))
    return [Variant("" if len(product) == 1 else f"[{dtype} offload={offload} compile={comp} cl={cl}] ",
                    Load(args.model, taesd=args.taesd, device=args.device, dtype=dtype, seed=args.seed,
                         offload=offload, channels_last=cl == "on", variant=args.variant, config=args.config), comp)
            for dtype, offload, comp, cl in product]


def judging(args: argparse.Namespace) -> Judging:
    """The sweep's budget (the advice's: --budget, default 5 %) and noise limit (--noise-limit)."""
    from previewlab.bench.rows import Judging
    from previewlab.preview.judging.advice import DEFAULT_BUDGET_PCT

    return Judging(args.budget if args.budget is not None else DEFAULT_BUDGET_PCT, args.noise_limit,
                   args.min_fidelity)


def checked(args: argparse.Namespace, model: Model, counts: tuple[int, ...]) -> tuple[Facts, RunSettings]:
    """The model's facts and the sweep's base run on it, once every flag is known to fit the model. Raises
    SettingsError, DecoderError or AxisError (their str() the one line)."""
    from previewlab.bench.axes import check_vae_modes, schedulers_for
    from previewlab.preview.decoding.contract import DecoderError
    from previewlab.preview.decoding.tae_decoder import taesd_refusal

    facts = Facts(model.name, label=model.label, described=model.space.describe(), synthetic=model.synthetic,
                  video=model.space.video, default_size=model.default_size, num_frames=model.num_frames,
                  fps=model.fps, temporal=model.space.temporal, device=str(model.device), load_s=model.load_s)
    preview = PreviewSettings(decoder="none", encoder=args.encoder, quality=args.quality, target=args.target[0],
                              preview_max=args.preview_max)
    settings = _settings(args, facts, preview, counts)
    if "taesd" in args.decoders and model.taesd is None:
        raise DecoderError(taesd_refusal(model))
    schedulers_for(model.pipe, args.scheduler or (), counts)  # refused before any run, in one line
    check_vae_modes(model.pipe, args.vae_mode or ())
    return facts, settings


def prepare(args: argparse.Namespace, load: Load, counts: tuple[int, ...]) -> tuple[Facts, RunSettings] | str:
    """Loads the sweep's model here and checks every flag against it, as `previewlab bench` does before its first
    run: the model's facts and the sweep's base run, or the one line that refuses the sweep (a cluster's driver
    runs this on a node)."""
    from previewlab.bench.axes import AxisError
    from previewlab.preview.decoding.contract import DecoderError
    from previewlab.preview.models import ModelError

    try:
        model = load_model(load)
        return checked(args, model, counts)
    except (ModelError, SettingsError, DecoderError, AxisError) as e:
        return str(e)


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
    from previewlab.bench.plan import Plan

    frames: tuple[FrameChoice, ...] = (args.frames or ("first", "middle", "all")) if video else ()
    return Plan(settings, args.decoders, every=args.every or ((1,) if video else (1, 2, 5, 10)),
                repeats=args.repeats, warmup=args.warmup, direct=args.direct,
                modes=args.modes or (default_mode(device),),
                budget=args.budget if args.budget is not None else 10.0, inflight=args.inflight,
                compile=compile_decoder, targets=args.target if len(args.target) > 1 else (), frames=frames,
                decode_ats=args.decode_at or (), schedulers=args.scheduler or (), steps=counts,
                vaes=args.vae_mode or ())


def size_text(facts: Facts, settings: RunSettings) -> str:
    """The base run's size as the bench's lines say it: WxH, and a clip's frames."""
    return f"{settings.width}x{settings.height}" + (f" x {settings.num_frames} frames" if facts.video else "")

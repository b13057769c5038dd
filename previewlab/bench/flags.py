"""previewlab bench's flags: its parser, and the typed value each flag takes (a range, a closed set of names, a
list), each refusal one line that names the flag's meaning and its limits. clip_decode and quality take them too.
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any, Callable, NoReturn, Sequence, TypeVar

from previewlab.bench.axes import SCHEDULERS, VAE_MODES
from previewlab.preview.judging.estimates import NOISE_LIMIT_PCT
from previewlab.preview.judging.fidelity import DEFAULT_MIN_SSIM
from previewlab.preview.models import DEVICES, SYNTHETIC
from previewlab.preview.names import (DECODE_ATS, DECODER_NAMES, ENCODER_NAMES, MODES, TARGETS, FrameChoice, N, check,
                                     check_frames)
from previewlab.preview.settings import MAX_BATCH, MAX_EVERY, MAX_NUM_FRAMES, MAX_SIDE, MAX_STEPS, MIN_SIDE, RunSettings

T = TypeVar("T")
DESCRIPTION = ("previewlab bench: sweep preview decoders and intervals against no-preview baselines, write CSVs, "
               "print a summary.")


class Parser(argparse.ArgumentParser):
    """A command's parser whose refusals are one line (its name, what was wrong), status 2, no usage dump."""
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message}\n")


def listof(kind: Callable[[str], T], allowed: Sequence[str] | None = None) -> Callable[[str], tuple[T, ...]]:
    def parse(text: str) -> tuple[T, ...]:
        items = [x.strip() for x in text.split(",") if x.strip()]
        if not items:
            raise argparse.ArgumentTypeError("empty list")
        if allowed is not None:
            bad = [x for x in items if x not in allowed]
            if bad:
                raise argparse.ArgumentTypeError(f"unknown {bad[0]!r}; allowed are {', '.join(allowed)}")
        return tuple(kind(x) for x in items)
    return parse


def names(field: str, allowed: tuple[N, ...]) -> Callable[[str], tuple[N, ...]]:
    """A comma-separated list of names from one of preview.names' closed sets."""
    return listof(lambda x: check(field, x, allowed), allowed)


def every_or_auto(text: str) -> int | str:
    return "auto" if text == "auto" else every_value(text)


def percent(what: str, most: float) -> Callable[[str], float]:
    """A percent flag above 0 and at most `most`; the error names the flag's meaning and its limits."""
    def parse(text: str) -> float:
        try:
            x = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not 0 < x <= most:
            raise argparse.ArgumentTypeError(f"{x:g}: {what} is a percent above 0, at most {most:g}")
        return x
    parse.__name__ = what
    return parse


budget_value = percent("budget", 1000)


def ssim_value(text: str) -> float:
    """--min-fidelity: an SSIM above 0, at most 1."""
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < x <= 1:
        raise argparse.ArgumentTypeError(f"{x:g}: min-fidelity is an SSIM above 0, at most 1")
    return x
noise_limit_value = percent("noise-limit", 100)


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def _number(text: str) -> float:
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(x):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return x


def _bounded(what: str, lo: float, hi: float, read: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        x = read(text)
        if not lo <= x <= hi:
            raise argparse.ArgumentTypeError(f"{x:g}: {what} must be from {lo:g} to {hi:g}" if isinstance(x, float)
                                             else f"{x}: {what} must be from {lo} to {hi}")
        return x
    parse.__name__ = what  # argparse names the type in its messages
    return parse


def ranged(what: str, lo: int, hi: int) -> Callable[[str], int]:
    """An integer flag from lo to hi; the error names the flag's own meaning and its limits."""
    return _bounded(what, lo, hi, _integer)


def between(what: str, lo: float, hi: float) -> Callable[[str], float]:
    """A number flag from lo to hi (seconds, a scale); the error names the flag's meaning and its limits."""
    return _bounded(what, lo, hi, _number)


every_value = ranged("every", 1, MAX_EVERY)
steps_value = ranged("steps", 1, MAX_STEPS)
inflight_value = ranged("inflight", 1, 64)
repeats_value = ranged("repeats", 1, 1000)
warmup_value = ranged("warmup", 0, 100)
quality_value = ranged("quality", 1, 100)
preview_max_value = ranged("preview-max (0 = native)", 0, 8192)


def side(text: str) -> int:
    n = _integer(text)
    if n % 8 or not MIN_SIDE <= n <= MAX_SIDE:
        raise argparse.ArgumentTypeError(f"{n}: must be a multiple of 8 from {MIN_SIDE} to {MAX_SIDE}")
    return n


def batch_value(text: str) -> int:
    n = _integer(text)
    if not 1 <= n <= MAX_BATCH:
        raise argparse.ArgumentTypeError(f"{n}: batch must be from 1 to {MAX_BATCH} images")
    return n


def frames_value(text: str) -> FrameChoice:
    try:
        return check_frames("frames", text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("frames=")) from None


def seed_value(text: str) -> int:
    n = _integer(text)
    if not 0 <= n < 2**63:
        raise argparse.ArgumentTypeError(f"{n}: seed must be from 0 to 2**63 - 1")
    return n


def device_named(name: str) -> str:
    """--device as a name; whether torch sees it is judged where the sweep runs (here, or on each node)."""
    if name != "auto" and name not in DEVICES:
        raise argparse.ArgumentTypeError(f"{name!r}: not a device; allowed are auto, {', '.join(DEVICES)}")
    return name


def ray_address(text: str) -> str:
    """--ray: auto, local (a cluster in this process), HOST:PORT or ray://HOST:PORT (Ray Client), the forms
    ray.init takes; the port a number from 1 to 65535."""
    if text in ("auto", "local"):
        return text
    host, sep, port = text.removeprefix("ray://").rpartition(":")
    if not sep or not host.strip("[]") or any(c.isspace() for c in text) or not port.isdigit() \
            or not 1 <= int(port) <= 65535 or "://" in text.removeprefix("ray://"):
        raise argparse.ArgumentTypeError(f"{text!r}: give auto, local, HOST:PORT or ray://HOST:PORT (a port from 1 to "
                                         "65535)")
    return text


def parser() -> Parser:
    """previewlab bench's parser: its flags in the order --help lists them."""
    p = Parser(prog="previewlab bench", description=DESCRIPTION,
               formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    _model_and_axes(p)
    _runs_and_previews(p)
    _output_and_judging(p)
    return p


def _model_and_axes(p: Parser) -> None:
    """The model, the preview axes (decoders, intervals, modes) and the run axes (steps, scheduler, VAE mode),
    and the base run's size, seed, batch, clip and prompt."""
    p.add_argument("--model", default="synthetic:small",
                   help=f"demo | {' | '.join(SYNTHETIC)} | a local diffusers folder | a repo id in the local Hugging Face cache")
    p.add_argument("--taesd", default=None, help="TAESD weights: AutoencoderTiny folder or taesd_decoder.pth/.safetensors")
    p.add_argument("--decoders", type=names("decoder", DECODER_NAMES), default=DECODER_NAMES,
                   help="comma-separated preview decoders")
    p.add_argument("--every", type=listof(every_or_auto), default=None,
                   help="comma-separated preview intervals: a preview after step i when i %% N == 0; "
                        "'auto' lets the autopilot pick the interval to fit --budget (default: 1,2,5,10; 1 for a "
                        "video model, whose sweep is the frames axis)")
    p.add_argument("--budget", type=budget_value, default=None,
                   help="preview overhead budget in percent: the advice's (default 5) and, with --every auto, the "
                        "autopilot's (default 10)")
    p.add_argument("--modes", type=names("mode", MODES), default=None,
                   help="sync: preview work inside the step callback (how popular UIs do it); overlap: off the "
                        "denoising path (side CUDA stream, encode thread). Default: overlap on cuda, xpu and mps, "
                        "sync on a CPU, where overlap has no side stream and takes nothing off the path")
    p.add_argument("--inflight", type=inflight_value, default=2, help="overlap: most previews in flight at once")
    p.add_argument("--steps", type=listof(steps_value), default=None,
                   help="denoising steps per run; several (4,8,30) make an axis, each count with its own baselines "
                        "(default: 10)")
    p.add_argument("--scheduler", type=listof(str, tuple(SCHEDULERS)), default=None,
                   help="an axis of diffusers schedulers, each built from the model's scheduler config: "
                        f"{', '.join(f'{k} ({v[0]})' for k, v in SCHEDULERS.items())} (default: the model's own)")
    p.add_argument("--vae-mode", type=listof(str, VAE_MODES), default=None,
                   help="an axis of the VAE's memory mode for the full-VAE preview and the final decode: none, "
                        "tiling, slicing, tiling+slicing (diffusers' enable_tiling/enable_slicing; default: the VAE "
                        "as loaded)")
    p.add_argument("--width", type=side, default=None, help="image width in pixels (default: the model's)")
    p.add_argument("--height", type=side, default=None, help="image height in pixels (default: the model's)")
    p.add_argument("--seed", type=seed_value, default=0, help="seed of the latents and of synthetic weights")
    p.add_argument("--batch", type=batch_value, default=1, help=f"images per prompt, 1..{MAX_BATCH} (previews: a grid)")
    p.add_argument("--frames", type=listof(frames_value), default=None,
                   help="a video model: the frames a preview shows, an axis of first, middle, all, or a number N "
                        "spread evenly (default: first,middle,all)")
    p.add_argument("--num-frames", type=ranged("--num-frames", 1, MAX_NUM_FRAMES), default=None,
                   help="a video model: the clip's length in frames (default: the model's)")
    p.add_argument("--prompt", default=RunSettings.prompt)


def _runs_and_previews(p: Parser) -> None:
    """Repeats and warm-ups, how the model loads (device, dtype, offload, compile, channels-last, variant,
    config), the tracers, and how previews are made (encoder, target, quality, size, where decoders stop)."""
    p.add_argument("--repeats", type=repeats_value, default=3, help="measured pairs per configuration")
    p.add_argument("--warmup", type=warmup_value, default=1, help="warm-up rounds (kept in runs.csv, out of statistics)")
    p.add_argument("--device", type=device_named, default="auto",
                   help="auto (CUDA when torch sees one, else cpu), cpu, or cuda, mps, xpu where torch sees them "
                        "(with --ray: where the nodes' torch sees them)")
    p.add_argument("--dtype", type=listof(str, ["float32", "float16", "bfloat16"]), default=("float32",),
                   help="comma-separated: float32, float16, bfloat16 (one model load each)")
    p.add_argument("--offload", type=listof(str, ["none", "model", "sequential"]), default=("none",),
                   help="diffusers CPU offload (CUDA only): none, model, sequential")
    p.add_argument("--compile", type=listof(str, ["none", "decoder"]), default=("none",),
                   help="torch.compile the preview decoder; compile time is reported apart (compile_ms)")
    p.add_argument("--channels-last", type=listof(str, ["off", "on"]), default=("off",),
                   help="channels-last memory format for UNet, VAE and TAESD: off, on")
    p.add_argument("--trace", type=Path, default=None,
                   help="also write a torch.profiler Chrome trace of one run (stages as previewlab.* ranges)")
    p.add_argument("--cprofile", type=Path, default=None, help="also write a cProfile dump of one run")
    p.add_argument("--encoder", choices=ENCODER_NAMES, default="turbojpeg")
    p.add_argument("--target", type=names("target", TARGETS), default=("auto",),
                   help="comma-separated: what previews show: x0 (the model's predicted clean image), latents (the "
                        "noisy ones), auto (x0 where the scheduler gives it); several make an axis")
    p.add_argument("--variant", default=None, help="weights variant of a local folder (fp16); found by itself "
                   "when a folder holds only variant files")
    p.add_argument("--config", default=None, help="for a single-file checkpoint: a local diffusers folder (or cached "
                   "repo id) of its family whose configs and tokenizers to use; SD 1.x/2.x/XL have shipped ones")
    p.add_argument("--quality", type=quality_value, default=80, help="JPEG/WebP quality 1..100")
    p.add_argument("--preview-max", type=preview_max_value, default=0, help="downscale previews to this long side (0 = native)")
    p.add_argument("--decode-at", type=names("decode_at", DECODE_ATS), default=None,
                   help="where decoders stop, an axis of preview (a TAE stops at --preview-max), full (the image's size, "
                        "then resized), half_latents (latents halved first); default: preview, not an axis")


def _output_and_judging(p: Parser) -> None:
    """The bare call, the output folder and --resume, threads, the noise limit, --ray, the fidelity pass and
    the advice's threshold, --strict."""
    p.add_argument("--direct", action="store_true",
                   help="also time the bare diffusers call, paired with decoder none (the engine's own cost)")
    p.add_argument("--out", type=Path, default=Path("runs/bench"), help="output folder for runs.csv and steps.csv "
                   "(one bench at a time; a folder that holds a sweep is refused without --resume)")
    p.add_argument("--resume", action="store_true",
                   help="--out holds a stopped sweep: run the pairs it lacks (give the same flags), keeping its runs; "
                        "the summary covers them all")
    p.add_argument("--threads", type=ranged("threads", 1, 1024), default=None,
                   help="torch's CPU threads (default: torch's own choice); fewer threads than cores steady a busy machine")
    p.add_argument("--noise-limit", type=noise_limit_value, default=NOISE_LIMIT_PCT,
                   help="percent: baselines whose IQR over median is above it mark the machine as noisy")
    p.add_argument("--ray", type=ray_address, default=None, metavar="ADDRESS",
                   help="run the sweep's units on a Ray cluster: auto (the cluster `ray start` made here), "
                        "ray://HEAD:10001, HOST:PORT, or local (a cluster started in this process); each unit is one "
                        "configuration with its own baselines and warm-up on one node (needs previewlab[ray])")
    p.add_argument("--fidelity", action="store_true",
                   help="after the timed runs, a separate pass (never timed, never paired, not in runs.csv): per seed, "
                        "one run without previews keeps each step's latents, then every decoder and decode_at of the "
                        "sweep is compared with the full VAE's decode (SSIM, PSNR dB at the preview's size) into "
                        "fidelity.csv; and, with several --steps, the final images of each step count into finals.csv")
    p.add_argument("--fidelity-seeds", type=ranged("fidelity-seeds", 1, 100), default=6,
                   help="seeds of the fidelity pass (default 6: the fewest whose range holds the median at 95 %%)")
    p.add_argument("--min-fidelity", type=ssim_value, default=DEFAULT_MIN_SSIM,
                   help="the SSIM against the VAE's preview a useful preview reaches, for the advice (default "
                        f"{DEFAULT_MIN_SSIM:g}: docs/figures.md says why)")
    p.add_argument("--strict", action="store_true",
                   help="exit 3 when the machine was noisy (the baselines spread past --noise-limit)")

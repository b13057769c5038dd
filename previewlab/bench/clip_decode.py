"""python -m previewlab.bench.clip_decode LATENTS: what one preview of a clip's latents costs with each decoder
and each frames choice, outside any run: decode (what the decoder reads), the frames shown, their JPEG bytes.

LATENTS: a tensor file (B, C, T, h, w) of a Wan 2.1 clip, the model's own latents as its step callback hands
them (tests/data/wan21/wan21_latents.pth: 16 latent frames of a 512x320, 61-frame clip). The decoders are
--model's, by default synthetic:wan21-1.3b's: ComfyUI's Wan21 latent2rgb factors, TAEHV in taew2_1's layout and
Wan 2.1's VAE, both with random weights (real costs, noise pictures); synthetic:tiny-wan21 reads the same latents
with a VAE 1/12 as wide (a quick check, not Wan's costs).
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import NoReturn, Sequence

import torch

from previewlab.preview.decoding import contract, clips, decoders

from previewlab.preview.decoding.encoders import Encoder, get as encoder
from previewlab.preview.frames import tile, to_uint8_hwc
from previewlab.preview.models import ModelError, load
from previewlab.bench.flags import frames_value, listof, names
from previewlab.preview.names import DECODER_NAMES
from previewlab.preview.decoding.previewer import Previewer


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, status 2, no usage dump
        self.exit(2, f"clip_decode: {message}\n")


def main(argv: Sequence[str] | None = None) -> int:
    p = Parser(prog="python -m previewlab.bench.clip_decode", description=__doc__,
               formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("latents", type=Path)
    p.add_argument("--fps", type=float, default=16.0, help="the clip's rate (Wan 2.1: 16)")
    p.add_argument("--frames", type=listof(frames_value), default=("first", "middle", "all"),
                   help="frames choices, comma-separated: first, middle, all, or N")
    p.add_argument("--decoders", type=names("decoder", tuple(d for d in DECODER_NAMES if d != "none")),
                   default=("latent2rgb", "taesd", "vae"))
    p.add_argument("--repeats", type=int, default=3, help="timed decodes per cell after one warm-up")
    p.add_argument("--max-s", type=float, default=60.0, help="a cell whose warm-up took longer is timed once")
    p.add_argument("--model", default="synthetic:wan21-1.3b",
                   help="the video model whose decoders are timed (default: synthetic:wan21-1.3b)")
    args = p.parse_args(argv)
    if not args.latents.is_file():
        p.error(f"{args.latents}: no such file; give a tensor file of a clip's latents (B, C, T, h, w)")
    z = torch.load(args.latents, map_location="cpu", weights_only=True).float()
    try:
        model = load(args.model, device="cpu")
    except ModelError as e:
        p.error(f"--model: {e}")
    if not model.space.video or model.space.frames_first:
        what = "makes images" if not model.space.video else "hands its latents over (B, T, C, h, w)"
        p.error(f"--model {args.model}: {what}; give a video model whose latents are (B, C, T, h, w), such as "
                "synthetic:wan21-1.3b")
    if z.dim() != 5 or z.shape[1] != model.space.channels:
        p.error(f"{args.latents}: latents of shape {tuple(z.shape)}; {model.name} decodes (B, "
                f"{model.space.channels}, T, h, w)")
    b, c, t, h, w = z.shape
    height, width = h * model.space.factor, w * model.space.factor
    prev, jpeg = Previewer(model), encoder("turbojpeg", model.device)
    print(f"{t} latent frames at {w}x{h} -> a {width}x{height} clip of {clips.clip_length(t, model.space.temporal)} "
          f"frames; torch threads {torch.get_num_threads()}; decoders of {model.label}")
    print(f"{'decoder':<11}{'frames':<8}{'shown':>6}{'read':>6}{'ms/preview':>12}{'ms/frame':>10}{'KB/preview':>12}{'n':>3}")
    for name in args.decoders:
        decode = prev.clip(name)
        assert decode is not None
        for choice in args.frames:
            pick = clips.pick(choice, t, model.space.temporal, args.fps, causal=decoders.causal(name, model))
            times, size = _time(decode, z, height, width, pick, args.repeats, args.max_s, jpeg)
            ms = statistics.median(times)
            print(f"{name:<11}{str(choice):<8}{len(pick.shown):>6}{len(pick.reads):>6}{ms:>12.1f}"
                  f"{ms / len(pick.shown):>10.2f}{size / 1024:>12.1f}{len(times):>3}", flush=True)
    return 0


def _time(decode: contract.ClipDecode, z: torch.Tensor, height: int, width: int, pick: clips.Pick, repeats: int,
          max_s: float, jpeg: Encoder) -> tuple[list[float], int]:
    """Decode times in ms (after one warm-up; one timed decode when the warm-up took over max_s) and the JPEG
    bytes of the frames shown."""
    with torch.inference_mode():
        t0 = time.perf_counter()
        frames = tile(decode(z, height, width, pick))
        first = time.perf_counter() - t0
        size = sum(len(jpeg.encode(f, 80)) for f in to_uint8_hwc(frames).numpy())
        times = []
        for _ in range(1 if first > max_s else repeats):
            t0 = time.perf_counter()
            decode(z, height, width, pick)
            times.append((time.perf_counter() - t0) * 1e3)
    return times, size


if __name__ == "__main__":
    raise SystemExit(main())

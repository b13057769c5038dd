"""python -m previewlab.bench.preview_memory: what one preview holds in memory, outside any run.

Each cell decodes one preview and makes its uint8 pixels, as a run's preview does, and reads how far that raised
the process's memory over the level before it (preview/timing/memory.py: the allocator's counters on a GPU, the resident
set on a CPU), twice: the second reading is the figure (the first pays one-time allocations).

  image  SDXL at 1024x1024 with 512 px previews: TAESD's real architecture and SDXL's VAE architecture (both
         random weights: real costs, noise pictures), each whole and stopped at the preview's size.
  clip   Wan 2.1's real latents (tests/data/wan21/wan21_latents.pth, a 61-frame 512x320 clip): TAEHV and Wan's
         VAE (random weights), the first frame against all frames.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Callable, Sequence

import torch

from previewlab.bench.flags import Parser
from previewlab.preview.decoding import clips, decoders
from previewlab.preview.frames import tile, to_uint8_hwc
from previewlab.preview.names import DecoderName, DecodeAt
from previewlab.preview.timing.memory import Memory, reading_for
from previewlab.preview.models import load
from previewlab.preview.decoding.previewer import Previewer
from previewlab.preview.settings import PreviewSettings

SDXL_VAE = dict(block_out_channels=(128, 256, 512, 512), in_channels=3, out_channels=3, latent_channels=4,
                layers_per_block=2, sample_size=1024, scaling_factor=0.13025,
                down_block_types=("DownEncoderBlock2D",) * 4, up_block_types=("UpDecoderBlock2D",) * 4)


def held(fn: Callable[[], torch.Tensor], device: torch.device) -> tuple[float, float, float]:
    """(MiB raised the first time, MiB raised the second time, ms of the second)."""
    memory = Memory(reading_for(device))
    memory.start()
    out = []
    for _ in range(2):
        level = memory.before()
        t0 = time.perf_counter()
        with torch.inference_mode():
            fn()
        ms = (time.perf_counter() - t0) * 1e3
        out.append(memory.after(level))
    return out[0], out[1], ms


def image_rows(side: int, preview: int) -> list[tuple[str, ...]]:
    from diffusers import AutoencoderKL

    model = load("synthetic:tiny-xl-real-taesd", device="cpu")
    model.pipe.vae = AutoencoderKL(**SDXL_VAE)  # SDXL's VAE architecture, random weights
    prev = Previewer(model)
    z = torch.randn(1, 4, side // 8, side // 8)
    rows: list[tuple[str, ...]] = []
    cells: tuple[tuple[DecoderName, tuple[DecodeAt, ...]], ...] = (
        ("taesd", ("full", "preview")), ("vae", ("full", "preview", "half_latents")))
    for name, ats in cells:
        for at in ats:
            cut = prev.cut(name, PreviewSettings(decoder=name, decode_at=at, preview_max=preview), side, side)
            decode = prev.decoder(name, cut)
            assert decode is not None
            first, mib, ms = held(lambda: to_uint8_hwc(decode(z, side, side), preview), model.device)
            rows.append((f"SDXL {side}x{side}", name, f"{at} ({cut.label})", f"{mib:.0f}", f"{first:.0f}",
                         f"{ms:.0f}"))
            print(" | ".join(rows[-1]), flush=True)
    return rows


def clip_rows(latents: Path) -> list[tuple[str, ...]]:
    z = torch.load(latents, map_location="cpu", weights_only=True).float()
    _, _, t, h, w = z.shape
    model = load("synthetic:wan21-1.3b", device="cpu")
    height, width = h * model.space.factor, w * model.space.factor
    prev = Previewer(model)
    rows: list[tuple[str, ...]] = []
    for name in ("taesd", "vae"):
        decode = prev.clip(name)
        assert decode is not None
        for choice in ("first", "all"):
            pick = clips.pick(choice, t, model.space.temporal, 16.0, causal=decoders.causal(name, model))
            first, mib, ms = held(lambda: to_uint8_hwc(tile(decode(z, height, width, pick))), model.device)
            rows.append((f"Wan 2.1 {width}x{height}, {t} latent frames", name, f"{choice} ({len(pick.shown)} shown)",
                         f"{mib:.0f}", f"{first:.0f}", f"{ms:.0f}"))
            print(" | ".join(rows[-1]), flush=True)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    p = Parser(prog="python -m previewlab.bench.preview_memory", description=__doc__,
               formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--what", choices=("image", "clip", "both"), default="both")
    p.add_argument("--latents", type=Path, default=Path("tests/data/wan21/wan21_latents.pth"))
    args = p.parse_args(argv)
    if args.what != "image" and not args.latents.is_file():
        p.error(f"--latents {args.latents}: no such file; give a clip's latents (B, C, T, h, w), or --what image")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; "
          "columns: what | decoder | at | MiB a preview raised memory | the first time | ms")
    if args.what in ("image", "both"):
        image_rows(1024, 512)
    if args.what in ("clip", "both"):
        clip_rows(args.latents)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

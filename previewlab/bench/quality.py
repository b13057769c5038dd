"""python -m previewlab.bench.quality: what a preview decoded short of the image's size costs in pixels and
saves in time, outside any run.

Each decoder runs whole (the image's size, as decode_at=full makes it) and at each cut decode_at offers
(stops.Cut): a TAE with its last 1, 2 or 3 upsampling stages left out (1/2, 1/4, 1/8 of the side), and
any decoder on latents halved per side (half latents). Each reduced image is compared with the same decoder's
whole image resized to its size (bilinear with antialias, as frames.py resizes a preview): PSNR in dB, and
scikit-image's SSIM when it is installed (the bench extra). ms per preview: the median of --repeats decodes after
one warm-up, the cuts interleaved, on this process's torch threads (--threads).

Models:
  taef2  the real TAEF2 weights (tests/data/taef2, madebyollin/taesd, MIT) on grace_hopper.jpg (public domain,
         shipped by matplotlib), encoded by TAEF2's own encoder: its largest centred crop in multiples of 16
         (512x592), or a centred --side x --side crop; and ComfyUI's FLUX.2 latent2rgb factors on those latents
  demo   the demo model (preview/models/demo_model) on the latents of one of its own 128 px pictures (its
         prompt, --steps steps, seed 0), through the product's decoders: its TAESD, its VAE, its latent2rgb
"""
from __future__ import annotations

import argparse
import math
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, NoReturn, Sequence

import torch
import torch.nn.functional as F

if TYPE_CHECKING:
    import numpy as np

from previewlab.bench.flags import listof, ranged
from previewlab.preview.decoding import contract, decoders, stops
from previewlab.preview.decoding.stops import WHOLE, Cut
from previewlab.preview.models.latent_formats import LATENT_RGB, latent2rgb
from previewlab.preview.models.taesd import cut, load_tae, upsample_factors

DATA = Path(__file__).resolve().parents[2] / "tests" / "data" / "taef2"
MODELS = ("taef2", "demo")
Image = Callable[[Cut], torch.Tensor]  # a cut -> the decoder's image (1, 3, H, W) in [0, 1]


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, status 2, no usage dump
        self.exit(2, f"quality: {message}\n")


@dataclass(frozen=True)
class Row:
    """One decoder at one cut: its image's size, its time per preview, and how near it is to its whole image."""
    model: str
    decoder: str
    at: str           # Cut.label: whole, 1/2, 1/4, 1/8, half latents
    width: int        # px of the decoder's image
    height: int
    ms: float         # median ms per preview
    of_whole: float   # ms over the whole decode's ms
    psnr_db: float | None  # against the whole image resized to this size; None for the whole decode itself
    ssim: float | None     # the same pair; None without scikit-image, or for the whole decode


def cuts(factors: tuple[int, ...]) -> list[Cut]:
    """Every cut of a decoder with these upsampling stages: whole, each number of last stages left out, half
    latents."""
    out, scale = [WHOLE], 1
    for k, f in enumerate(reversed(factors), 1):
        scale *= f
        out.append(Cut(k, scale))
    return out + [Cut(half_latents=True)]


def resized(image: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """(1, 3, H, W) -> (1, 3, height, width), as frames.py downscales a preview."""
    if tuple(image.shape[-2:]) == (height, width):
        return image
    return F.interpolate(image.float(), size=(height, width), mode="bilinear", antialias=True, align_corners=False)


def psnr_db(a: torch.Tensor, b: torch.Tensor) -> float:
    """PSNR of two images in [0, 1], in dB (inf for equal images)."""
    mse = float(((a.float() - b.float()) ** 2).mean())
    return float("inf") if mse == 0 else 10 * math.log10(1 / mse)


def ssim(a: torch.Tensor, b: torch.Tensor) -> float | None:
    """scikit-image's SSIM of two (1, 3, H, W) images in [0, 1], or None when it is not installed."""
    try:
        from skimage.metrics import structural_similarity
    except ModuleNotFoundError:
        return None
    x, y = (t[0].permute(1, 2, 0).double().numpy() for t in (a, b))
    side = min(x.shape[0], x.shape[1])
    win = min(7, side if side % 2 else side - 1)  # its window must fit the image and be odd
    return float(structural_similarity(x, y, channel_axis=2, data_range=1.0, win_size=win))


def measure(model: str, decoder: str, image: Image, factors: tuple[int, ...], repeats: int) -> list[Row]:
    """One decoder at each of its cuts, each compared with its whole image resized to the cut's size. Each cut
    is decoded once to warm up (its image is the one compared), then `repeats` times, the cuts interleaved so a
    slow moment of the machine falls on all of them alike; ms is the median."""
    every = cuts(factors)
    times: dict[Cut, list[float]] = {c: [] for c in every}
    with torch.inference_mode():
        images = {c: image(c) for c in every}
        for _ in range(repeats):
            for c in every:
                t0 = time.perf_counter()
                image(c)
                times[c].append((time.perf_counter() - t0) * 1e3)
    whole, whole_ms = images[WHOLE], statistics.median(times[WHOLE])
    rows: list[Row] = []
    for c in every:
        small, ms = images[c], statistics.median(times[c])
        h, w = int(small.shape[-2]), int(small.shape[-1])
        ref = resized(whole, h, w)
        same = c == WHOLE
        rows.append(Row(model, decoder, c.label, width=w, height=h, ms=ms, of_whole=ms / whole_ms,
                        psnr_db=None if same else psnr_db(small, ref), ssim=None if same else ssim(small.float(), ref)))
    return rows


def photo(side: int = 0) -> torch.Tensor:
    """grace_hopper.jpg as (1, 3, H, W) in [0, 1]: its largest centred crop in multiples of 16, or a centred
    side x side crop (side a multiple of 8)."""
    import matplotlib
    import numpy as np
    from PIL import Image as PIL

    im = PIL.open(Path(matplotlib.get_data_path()) / "sample_data" / "grace_hopper.jpg").convert("RGB")
    w, h = im.size
    cw, ch = (side, side) if side else (w // 16 * 16, h // 16 * 16)
    left, top = (w - cw) // 2, (h - ch) // 2
    return torch.from_numpy(np.array(im.crop((left, top, left + cw, top + ch)))).permute(2, 0, 1)[None].float() / 255


def taef2_rows(side: int, repeats: int) -> list[Row]:
    """The real TAEF2 decoder at each cut (taesd.cut, as decoders builds it for madebyollin's layout) and FLUX.2's
    latent2rgb factors, on the photo's latents from TAEF2's encoder."""
    encoder, _ = load_tae(DATA / "taef2_encoder.pth", "encoder")
    decoder, _ = load_tae(DATA / "taef2_decoder.pth")
    with torch.inference_mode():
        z = encoder(photo(side))
    rgb = latent2rgb(LATENT_RGB["flux2"], torch.device("cpu"), torch.float32)

    def tae(c: Cut) -> torch.Tensor:
        return cut(decoder, c.stages)(stops.halve(z) if c.half_latents else z).clamp(0, 1)

    return (measure("taef2", "taesd", tae, upsample_factors(decoder), repeats) +
            measure("taef2", "latent2rgb", lambda c: rgb(stops.halve(z) if c.half_latents else z), (), repeats))


def u8(image: torch.Tensor) -> "np.ndarray":
    """(1, 3, H, W) in [0, 1] -> uint8 (H, W, 3), as a preview's pixels."""
    return (image[0].clamp(0, 1) * 255).round().to(torch.uint8).permute(1, 2, 0).numpy()


def taef2_fidelity(side: int) -> list[tuple[str, str, str, float | None, float]]:
    """Fidelity on the real photo, as the bench's --fidelity pass judges a preview (likeness, at the size the page
    shows it: the image's; a smaller decode enlarged to it): each TAEF2 cut and FLUX.2's latent2rgb factors (whole
    and on half latents) against TAEF2's whole decode of its own encoder's latents (no FLUX.2 VAE here: TAEF2 whole
    stands for the full decoder), and against the photo itself. Rows: (decoder, at, against, SSIM, PSNR dB)."""
    from previewlab.preview.judging import likeness

    encoder, _ = load_tae(DATA / "taef2_encoder.pth", "encoder")
    decoder, _ = load_tae(DATA / "taef2_decoder.pth")
    rgb = latent2rgb(LATENT_RGB["flux2"], torch.device("cpu"), torch.float32)
    picture = photo(side)
    with torch.inference_mode():
        z = encoder(picture)
        made = {("taesd", c.label): cut(decoder, c.stages)(stops.halve(z) if c.half_latents else z)
                for c in cuts(upsample_factors(decoder))}
        made.update({("latent2rgb", "whole"): rgb(z), ("latent2rgb", "half latents"): rgb(stops.halve(z))})
    refs = {"TAEF2 whole": u8(made[("taesd", "whole")]), "the photo": u8(picture)}
    out = []
    for (name, at), image in made.items():
        for against, ref in refs.items():
            h, w = ref.shape[:2]
            seen = likeness.fitted(u8(image), w, h)
            out.append((name, at, against, likeness.ssim(seen, ref), likeness.psnr_db(seen, ref)))
    return out


def demo_rows(steps: int, repeats: int) -> list[Row]:
    """The demo model's own decoders (decoders.build at each cut) on the latents of one of its pictures."""
    from previewlab.preview.models import load

    model = load("demo", device="cpu")
    size = model.default_size
    with torch.inference_mode():
        z = model.pipe(prompt=model.prompt, num_inference_steps=steps, guidance_scale=model.guidance, height=size,
                       width=size, output_type="latent", generator=torch.Generator("cpu").manual_seed(0)).images
    rows = []
    for name in ("taesd", "vae", "latent2rgb"):
        built: dict[Cut, contract.Decode] = {}

        def image(c: Cut, name: str = name) -> torch.Tensor:
            if c not in built:
                fn = decoders.build(name, model, cut=c)
                assert fn is not None
                built[c] = fn
            return built[c](z, size, size)

        rows += measure("demo", name, image, stops.upsample_factors(name, model), repeats)
    return rows


def table(rows: Sequence[Row]) -> str:
    """The rows as a fixed-width table, one line each."""
    head = f"{'model':<7}{'decoder':<11}{'at':<13}{'size':>9}{'ms/preview':>12}{'x whole':>9}{'PSNR dB':>9}{'SSIM':>7}"
    lines = [head]
    for r in rows:
        db = "" if r.psnr_db is None else f"{r.psnr_db:.1f}"
        ss = "" if r.ssim is None else f"{r.ssim:.3f}"
        lines.append(f"{r.model:<7}{r.decoder:<11}{r.at:<13}{f'{r.width}x{r.height}':>9}{r.ms:>12.1f}"
                     f"{r.of_whole:>9.2f}{db:>9}{ss:>7}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = Parser(prog="python -m previewlab.bench.quality", description=__doc__,
               formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", type=listof(str, MODELS), default=MODELS, help="comma-separated: taef2, demo")
    p.add_argument("--side", type=ranged("side (0 = the whole photo)", 0, 512), default=0,
                   help="taef2: a centred side x side crop of the photo, a multiple of 8 (0: 512x592)")
    p.add_argument("--steps", type=ranged("steps", 1, 100), default=20, help="demo: steps of its picture")
    p.add_argument("--repeats", type=ranged("repeats", 1, 100), default=3,
                   help="timed decodes of each cut after one warm-up, the cuts interleaved")
    p.add_argument("--threads", type=ranged("threads (0 = torch's default)", 0, 256), default=0,
                   help="torch's intra-op threads (a busy machine times more steadily on fewer)")
    args = p.parse_args(argv)
    if args.side % 8 or 0 < args.side < 64:
        p.error(f"--side {args.side}: must be a multiple of 8 from 64 to 512 (the encoder's 1/8), or 0")
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; PSNR and SSIM against the same decoder's "
          "whole image resized to the size shown", flush=True)
    rows: list[Row] = []
    if "taef2" in args.models:
        rows += taef2_rows(args.side, args.repeats)
        print("fidelity on the photo (likeness: SSIM and PSNR at the image's size, a smaller decode enlarged to it):")
        for name, at, against, ss, db in taef2_fidelity(args.side):
            print(f"  {name:<11}{at:<13}against {against:<12} SSIM {'' if ss is None else f'{ss:.3f}':<6} "
                  f"PSNR {db:.1f} dB")
    if "demo" in args.models:
        rows += demo_rows(args.steps, args.repeats)
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

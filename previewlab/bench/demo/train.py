"""Train previewlab's demo model from scratch on drawn scenes, and check it.

    previewlab train-demo [--quick] [--out DIR] [--seed N] [--threads 2]
    previewlab train-demo --check DIR [--steps 20] [--guidance 7.5] [--grid PNG]

Order: VAE on fresh scenes -> encode a fixed set of scenes -> scaling factor from the latents' std (as SD did)
-> latent2rgb by least squares -> UNet and text encoder together -> TAESD decoder distilled from the VAE
decoder. DIR gets a diffusers folder (safetensors, fp16 but the text encoder; it loads with
StableDiffusionPipeline.from_pretrained(DIR, local_files_only=True)), taesd_decoder.safetensors (madebyollin's
layout, fp16, for --taesd), latent2rgb.json and training.json (plan, seed, seconds and loss curves per part).
The checker (--check) is bench/demo/check.py over bench/demo/checker.py.

Cost of the full plan, measured in the run that made preview/models/demo_model/ (2 threads on this 2-core machine,
2026-11-30/12-01, light jobs beside it part of the time; training.json keeps the seconds and loss curves):

    part                  per step                          steps    seconds
    VAE                   8 scenes at 128 px: 0.45 s        1000      453
    encode                10,000 scenes: 9 ms a scene                  92
    UNet + text encoder   64 latents: 0.86 s                2600     2229
    TAESD                 8 latents and their VAE decode:   240       240
                          1.0 s
    total wall, with loading and saving                              3016 (50 min 16 s)

On a machine shared with other busy processes, 2 torch threads each spin-wait for the other: a VAE step took
9 s instead of 1.2 s with 1 thread. There, use --threads 1 (or wait for a quiet machine).
"""
from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from previewlab.bench.flags import Parser, between, ranged, seed_value, steps_value
from previewlab.preview.settings import MAX_GUIDANCE

from . import parts
from previewlab.preview.models import demo_scenes as sc

Curve = list[float]


@dataclass
class Report:
    plan: dict[str, Any]
    seed: int
    threads: int
    seconds: dict[str, float] = field(default_factory=dict)
    losses: dict[str, Curve] = field(default_factory=dict)
    scaling_factor: float = 0.0
    latent2rgb_r2: list[float] = field(default_factory=list)
    fp16_levels: dict[str, float] = field(default_factory=dict)  # see fp16_effect
    megabytes: float = 0.0

    def windows(self) -> dict[str, tuple[float, float]]:
        """(mean of the first quarter, mean of the last quarter) of every loss curve: batches are small, so
        windows this wide keep one lucky or unlucky batch from deciding whether a loss went down."""
        out = {}
        for name, c in self.losses.items():
            w = max(len(c) // 4, 1)
            out[name] = (sum(c[:w]) / w, sum(c[-w:]) / w)
        return out


def _images(scenes: Sequence[sc.Scene], size: int) -> torch.Tensor:
    """Drawn scenes as (B, 3, size, size) in [-1, 1]."""
    arr = np.stack([sc.draw(s, size) for s in scenes]).astype(np.float32)
    return torch.from_numpy(arr).permute(0, 3, 1, 2) / 127.5 - 1


def _schedule(opt: torch.optim.Optimizer, steps: int, warmup: int) -> torch.optim.lr_scheduler.LambdaLR:
    def scale(step: int) -> float:
        return min(1.0, (step + 1) / warmup) * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * step / steps)))

    return torch.optim.lr_scheduler.LambdaLR(opt, scale)


def _loop(name: str, steps: int, params: Sequence[torch.nn.Parameter], lr: float, warmup: int,
          loss_of: Callable[[int], torch.Tensor]) -> Curve:
    """AdamW with warm-up and cosine decay; gradients clipped at 1 so one bad batch cannot wreck a short run."""
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    sched = _schedule(opt, steps, warmup)
    curve: Curve = []
    bar = tqdm(range(steps), desc=name, unit="step", dynamic_ncols=True)
    for step in bar:
        loss = loss_of(step)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        curve.append(round(loss.item(), 5))
        if step % 10 == 0:
            bar.set_postfix(loss=f"{sum(curve[-10:]) / len(curve[-10:]):.4f}")
    return curve


def edge_weight(x: torch.Tensor, boost: float = 4.0) -> torch.Tensor:
    """(B, 1, H, W): 1 on flat areas, 1 + boost within 2 px of a color edge. Edges are a few percent of the
    pixels but all of the shape: with plain L1, 800 VAE steps gave triangles back as blobs (the checker read
    60 % of shapes from reconstructions of drawn scenes), with this weight 84 %."""
    gy = (x[:, :, 1:] - x[:, :, :-1]).abs().amax(1, keepdim=True)
    gx = (x[:, :, :, 1:] - x[:, :, :, :-1]).abs().amax(1, keepdim=True)
    edge = (F.pad(gy, (0, 0, 0, 1)) + F.pad(gx, (0, 1, 0, 0)) > 0.08).float()
    return 1 + boost * F.max_pool2d(edge, 5, 1, 2)


def train_vae(plan: parts.Plan, seed: int) -> tuple[Any, Curve]:
    torch.manual_seed(seed)
    vae = parts.vae(plan.size)
    rng, gen = random.Random(seed), torch.Generator().manual_seed(seed)

    def loss_of(step: int) -> torch.Tensor:
        x = _images([sc.random_scene(rng) for _ in range(plan.vae_batch)], plan.size)
        post = vae.encode(x).latent_dist
        rec = vae.decode(post.sample(generator=gen)).sample
        # L1 keeps flat colors flat and edges sharper than MSE; kl() sums over latent values, so divide
        w = edge_weight(x)
        kl = post.kl().mean() / post.mean[0].numel()
        return (w * (rec - x).abs()).mean() / w.mean() + plan.kl_weight * kl

    curve = _loop("vae", plan.vae_steps, list(vae.parameters()), plan.vae_lr, plan.warmup, loss_of)
    return vae.eval().requires_grad_(False), curve


@dataclass
class Encoded:
    captions: list[str]
    mean: torch.Tensor   # (N, 4, h, w): the VAE's posterior, unscaled
    std: torch.Tensor
    small: torch.Tensor  # (N, 3, h, w): the scenes averaged down 8x, in [-1, 1], for latent2rgb
    objects: torch.Tensor  # (N, 1, h, w): the share of each latent pixel that objects cover, in [0, 1]


@torch.no_grad()
def encode_scenes(vae: Any, plan: parts.Plan, seed: int, batch: int = 64) -> Encoded:
    rng = random.Random(seed)
    scenes = [sc.random_scene(rng) for _ in range(plan.scenes)]
    means, stds, small, objects = [], [], [], []
    for i in tqdm(range(0, len(scenes), batch), desc="encode", unit="batch", dynamic_ncols=True):
        x = _images(scenes[i:i + batch], plan.size)
        post = vae.encode(x).latent_dist
        means.append(post.mean)
        stds.append(post.std)
        small.append(F.avg_pool2d(x, 8))
        masks = np.stack([sc.object_mask(s, plan.size) for s in scenes[i:i + batch]])
        objects.append(F.avg_pool2d(torch.from_numpy(masks)[:, None], 8))
    return Encoded([s.caption for s in scenes], torch.cat(means), torch.cat(stds), torch.cat(small),
                   torch.cat(objects))


def _sample(enc: Encoded, idx: torch.Tensor, scale: float, gen: torch.Generator) -> torch.Tensor:
    """Latents as the UNet sees them: drawn from the posterior (as SD trains), times the scaling factor."""
    m, s = enc.mean[idx], enc.std[idx]
    return (m + s * torch.randn(m.shape, generator=gen)) * scale


def scaling_factor(enc: Encoded, seed: int) -> float:
    """1 / std of the sampled latents, as SD1.5's 0.18215 was found: the UNet then sees unit variance."""
    z = _sample(enc, torch.arange(len(enc.mean)), 1.0, torch.Generator().manual_seed(seed))
    return float(1.0 / z.std())


def fit_latent2rgb(enc: Encoded, scale: float) -> tuple[torch.Tensor, torch.Tensor, list[float]]:
    """Least squares: rgb = latent . factors + bias per latent pixel, on the scaled posterior means against the
    scenes averaged down 8x, in [-1, 1]. Returns factors (4, 3), bias (3,) and R^2 per channel (R, G, B)."""
    x = (enc.mean * scale).permute(0, 2, 3, 1).reshape(-1, 4).double()
    y = enc.small.permute(0, 2, 3, 1).reshape(-1, 3).double()
    a = torch.cat([x, torch.ones(len(x), 1, dtype=x.dtype)], 1)
    sol = torch.linalg.lstsq(a, y).solution
    resid = y - a @ sol
    r2 = (1 - resid.pow(2).sum(0) / (y - y.mean(0)).pow(2).sum(0)).tolist()
    return sol[:4].float(), sol[4].float(), [round(v, 4) for v in r2]


def train_unet(plan: parts.Plan, enc: Encoded, scale: float, tok: Any, seed: int) -> tuple[Any, Any, Curve]:
    torch.manual_seed(seed)
    unet, te = parts.unet(plan.size), parts.text_encoder(len(tok))
    noise = parts.noise_scheduler()
    ids = tok(enc.captions, padding="max_length", max_length=77, truncation=True, return_tensors="pt").input_ids
    empty = tok([""], padding="max_length", max_length=77, return_tensors="pt").input_ids
    alphas = noise.alphas_cumprod
    gen = torch.Generator().manual_seed(seed)

    def loss_of(step: int) -> torch.Tensor:
        idx = torch.randint(len(ids), (plan.unet_batch,), generator=gen)
        z = _sample(enc, idx, scale, gen)
        eps = torch.randn(z.shape, generator=gen)
        t = torch.randint(0, noise.config.num_train_timesteps, (len(idx),), generator=gen)
        drop = torch.rand(len(idx), generator=gen) < plan.drop_caption
        cond = te(torch.where(drop[:, None], empty, ids[idx]))[0]
        pred = unet(noise.add_noise(z, eps, t), t, cond).sample
        # The v loss is the x0 loss times (snr + 1); capping that factor at 5 + 1 (min-SNR, Hang et al. 2023)
        # stops the nearly clean timesteps from dominating, and trains several times faster.
        snr = alphas[t] / (1 - alphas[t])
        weight = ((snr.clamp(max=5.0) + 1) / (snr + 1)).view(-1, 1, 1, 1)
        # Objects cover 3-10 % of a scene, so plain MSE spends most of its gradient on backgrounds: measured,
        # after 300 steps the backgrounds matched their captions and nearly every object was missing. More
        # weight where objects are changes where capacity goes, not the optimum (the conditional mean per pixel).
        weight = weight * (1 + plan.object_weight * enc.objects[idx])
        v = noise.get_velocity(z, eps, t)
        return (weight * (pred - v).pow(2)).mean() / weight.mean()

    params = list(unet.parameters()) + list(te.parameters())
    curve = _loop("unet+text", plan.unet_steps, params, plan.unet_lr, plan.warmup, loss_of)
    return unet.eval().requires_grad_(False), te.eval().requires_grad_(False), curve


def train_taesd(plan: parts.Plan, vae: Any, enc: Encoded, scale: float, factors: torch.Tensor,
                bias: torch.Tensor, seed: int) -> tuple[torch.nn.Module, Curve]:
    """Distil: TAESD(latents as the UNet sees them) -> what the VAE decodes from them, in [0, 1]."""
    torch.manual_seed(seed)
    dec = parts.taesd_from_latent2rgb(factors, bias)
    gen = torch.Generator().manual_seed(seed)

    def loss_of(step: int) -> torch.Tensor:
        idx = torch.randint(len(enc.mean), (plan.taesd_batch,), generator=gen)
        z = _sample(enc, idx, scale, gen)
        with torch.no_grad():
            target = ((vae.decode(z / scale).sample + 1) / 2).clamp(0, 1)
        return F.l1_loss(dec(z), target)

    curve = _loop("taesd", plan.taesd_steps, list(dec.parameters()), plan.taesd_lr, plan.warmup, loss_of)
    return dec.eval().requires_grad_(False), curve


def train(plan: parts.Plan, out: Path, seed: int = 0, threads: int = 2) -> Report:
    """The whole training; every part seeded from `seed`. Returns the report also written to training.json."""
    torch.set_num_threads(threads)
    report = Report(plan=asdict(plan), seed=seed, threads=threads)
    clock = time.perf_counter

    t = clock()
    vae, report.losses["vae"] = train_vae(plan, seed)
    report.seconds["vae"] = clock() - t
    t = clock()
    enc = encode_scenes(vae, plan, seed + 1)
    scale = report.scaling_factor = scaling_factor(enc, seed + 2)
    vae.register_to_config(scaling_factor=scale)
    factors, bias, report.latent2rgb_r2 = fit_latent2rgb(enc, scale)
    report.seconds["encode"] = clock() - t
    t = clock()
    tok = parts.tokenizer()
    unet, te, report.losses["unet"] = train_unet(plan, enc, scale, tok, seed + 3)
    report.seconds["unet"] = clock() - t
    t = clock()
    dec, report.losses["taesd"] = train_taesd(plan, vae, enc, scale, factors, bias, seed + 4)
    report.seconds["taesd"] = clock() - t
    report.fp16_levels = parts.fp16_effect(vae, dec, enc.mean[:8] * scale)
    report.seconds = {k: round(v, 1) for k, v in report.seconds.items()}
    report.megabytes = parts.save(out, vae, te, tok, unet, dec, factors=factors, bias=bias, r2=report.latent2rgb_r2)
    (out / "training.json").write_text(json.dumps(asdict(report)))
    return report


def main(argv: Sequence[str] | None = None) -> int:
    ap = Parser(prog="previewlab train-demo", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="a throwaway 64 px model in under 2 minutes (for tests)")
    ap.add_argument("--out", type=Path, default=Path("runs/demo-model"), help="the model folder to write")
    ap.add_argument("--seed", type=seed_value, default=0)
    ap.add_argument("--threads", type=ranged("threads", 1, 1024), default=2,
                    help="torch threads (the budget is for 2 cores)")
    ap.add_argument("--check", type=Path, metavar="DIR", help="check a trained model folder instead of training")
    ap.add_argument("--steps", type=steps_value, default=20, help="with --check: steps per image")
    ap.add_argument("--guidance", type=between("guidance", 0, MAX_GUIDANCE), default=7.5,
                    help="with --check: classifier-free guidance scale")
    ap.add_argument("--grid", type=Path, help="with --check: save the 50 images as one PNG, 10 to a row")
    args = ap.parse_args(argv)
    if args.check is not None:
        from .check import check

        torch.set_num_threads(args.threads)
        figs, verdicts = check(args.check, args.steps, args.guidance, args.seed, args.grid)
        for v in verdicts:
            if not (v.color and v.position and v.shape):
                got = "nothing" if v.found is None else f"{v.found.color} {v.found.shape} {v.found.position}"
                print(f"miss: {v.caption!r}: found {got}")
        print(" ".join(f"{k} {v:.0f} %" for k, v in figs.items()),
              f"({len(verdicts)} held-out captions, {args.steps} steps, guidance {args.guidance:g})")
        return 0
    report = train(parts.QUICK if args.quick else parts.Plan(), args.out, args.seed, args.threads)
    for name, (first, last) in report.windows().items():
        print(f"{name}: loss {first:.4f} -> {last:.4f} ({report.seconds.get(name, 0):.0f} s)")
    print(f"encode {report.seconds['encode']:.0f} s, scaling_factor {report.scaling_factor:.4f}, "
          f"latent2rgb R^2 {report.latent2rgb_r2}, {report.megabytes} MB in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

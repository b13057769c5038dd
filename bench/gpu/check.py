"""previewlab gpu-check [--dry-run]: the GPU figures as ratios, each measured within this one run.

Every row sets one configuration (A) against its reference (B) in interleaved repeats (A B, then B A, so drift
cancels), and shows the previews each side made and skipped: overlap may skip previews that sync makes, and a
ratio only compares equal work when those match. Writes runs.csv, steps.csv and summary.txt to --out.
--dry-run: the same steps on the CPU with synthetic:tiny, to prove the script before GPU time is spent on it.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence

import torch

from previewlab.bench.gpu.reference import compare, render, traced
from previewlab.bench.sweep import RUNS_CSV_COLUMNS, STEPS_CSV_COLUMNS, direct_call
from previewlab.bench.gpu.syncs import CLIP_SWITCHES, row as sync_row
from previewlab.preview.engine import Previewer, Run, RunContext, generate
from previewlab.preview import encoders
from previewlab.preview.encoders import ENCODERS
from previewlab.preview.models import Model, load
from previewlab.preview.csv_writer import CsvAppender
from previewlab.preview.records import on_path_ms
from previewlab.preview.settings import MAX_NUM_FRAMES, PreviewSettings, RunSettings

NONE = PreviewSettings(decoder="none", mode="overlap")
ARMS: dict[str, PreviewSettings | None] = {  # None: the bare diffusers call (bench.sweep.direct_call)
    "none": NONE,
    "direct": None,
    "taesd/overlap": PreviewSettings(decoder="taesd", mode="overlap"),
    "vae/sync": PreviewSettings(decoder="vae", mode="sync"),
    "vae/overlap": PreviewSettings(decoder="vae", mode="overlap"),
    "latent2rgb/overlap": PreviewSettings(decoder="latent2rgb", mode="overlap"),
    "autopilot": PreviewSettings(budget=10, decoder="taesd"),  # every=auto within 10 % of denoise time
    # Encoders side by side: sync mode keeps the copy and the encode on the denoising thread, timed alone.
    "turbojpeg/sync": PreviewSettings(decoder="taesd", mode="sync", encoder="turbojpeg"),
    "nvjpeg/sync": PreviewSettings(decoder="taesd", mode="sync", encoder="nvjpeg")
    if "nvjpeg" in ENCODERS else None,
    # nvJPEG on the encode thread, beside the side stream's next decode: its own stream must keep it from
    # waiting for that decode (or for the queued steps) and keep its bytes ordered before their copy
    "nvjpeg/overlap": PreviewSettings(decoder="taesd", mode="overlap", encoder="nvjpeg")
    if "nvjpeg" in ENCODERS else None,
}
NVJPEG_ARMS = ("nvjpeg/sync", "nvjpeg/overlap")
# A clip (issue 22): Wan 2.1's first latent frame against the whole clip, TAEHV and latent2rgb, every step
VIDEO_ARMS: dict[str, PreviewSettings | None] = {
    "none": NONE,
    "taesd/first": PreviewSettings(decoder="taesd", mode="overlap", frames="first"),
    "taesd/all": PreviewSettings(decoder="taesd", mode="overlap", frames="all"),
    "latent2rgb/all": PreviewSettings(decoder="latent2rgb", mode="overlap", frames="all"),
}
VIDEO_GROUPS = (("none", "taesd/first", "taesd/all", "latent2rgb/all"),)
# Each group runs back to back in every repeat; its first arm is the reference of the others.
GROUPS = (("direct", "none"), ("none", "taesd/overlap"), ("none", "vae/sync", "vae/overlap"),
          ("none", "latent2rgb/overlap"), ("none", "autopilot"), ("turbojpeg/sync", "nvjpeg/sync"),
          ("none", "nvjpeg/overlap"))
# Previews priced by pixels (issue 24): TAESD every step on SDXL's architecture, previews preview_max px on the
# long side, decoded at that size (its last upsampling stages left out) against the whole image then resized.
# Sync mode: the whole preview is on the denoising path, so its cost shows in wall time.
XL_GROUPS = (("taesd/at-full", "taesd/at-preview"),)


def xl_arms(preview_max: int) -> dict[str, PreviewSettings | None]:
    return {f"taesd/at-{at}": PreviewSettings(decoder="taesd", mode="sync", preview_max=preview_max, decode_at=at)
            for at in ("full", "preview")}


@dataclass(frozen=True)
class Setup:
    model: str
    device: str
    dtype: str
    size: int     # pixels, square
    steps: int
    repeats: int
    threads: int  # torch CPU threads, 0: torch's default
    runs_s: float  # no repeat starts that would likely end past this many seconds of measuring


# About 13 runs of ~1 s per repeat on an H200: 5 repeats take a minute or two; runs_s keeps these runs inside
# 200 s if the machine is slower than that (the whole check, with the SDXL and clip rows: gpu_check.sh's header).
GPU = Setup("synthetic:sd15", "cuda", "float16", 512, 20, 5, 0, 200.0)
# Wan 2.1 T2V 1.3B (its real transformer and VAE, random weights): 33 frames (9 latent) at 256x256, 10 steps;
# 4 warm-ups and 4 runs a repeat; runs_s keeps the repeats to a minute and a half, and building the model's
# 1.7 B random weights takes about 30 s more (21 s on this 2-core CPU)
VIDEO_GPU = Setup("synthetic:wan21-1.3b", "cuda", "float16", 256, 10, 3, 0, 90.0)
VIDEO_GPU_FRAMES = 33
# One thread: on a small machine shared with other work, two OpenMP threads stall each other (runs measured
# 10x slower and erratic here); one keeps the dry run's time predictable. Its figures prove the script only.
DRY = Setup("synthetic:tiny", "cpu", "float32", 64, 10, 3, 1, 60.0)
VIDEO_DRY = Setup("synthetic:tiny-wan21", "cpu", "float32", 64, 3, 1, 1, 30.0)
VIDEO_DRY_FRAMES = 5
# SDXL base 1.0 (synthetic:sdxl: its real UNet, text encoders and VAE, TAESD's architecture, random weights) at
# 1024x1024, 8 steps: 2 warm-ups of 3 steps, then 2 runs a repeat (estimated about a second each on an H200, not
# yet run there); runs_s keeps the repeats to 30 s. Building its 3.5 B random weights on the CPU took 97 s on a
# shared 2-core CPU (13.4 GiB peak), and they move to the GPU in float16 (7 GB) after
XL_GPU = Setup("synthetic:sdxl", "cuda", "float16", 1024, 8, 3, 0, 30.0)
XL_GPU_PREVIEW_MAX = 512
# The same code path in seconds: tiny-xl's TAESD has one upsampling stage, so a 32 px preview of its 64 px image
# leaves it out, as 512 px previews of a 1024 px image leave out TAESD's last one
XL_DRY = Setup("synthetic:tiny-xl", "cpu", "float32", 64, 3, 1, 1, 20.0)
XL_DRY_PREVIEW_MAX = 32


def nvjpeg_missing(model: Model) -> str:
    """Why the encoder row cannot run here, or "" when it can."""
    if model.device.type != "cuda":
        return "no CUDA device"
    if "nvjpeg" not in ENCODERS:
        return "preview.encoders has no nvjpeg encoder"
    try:  # it needs torchvision built for this torch: built once here, so a missing one is a line, not a crash
        encoders.get("nvjpeg", model.device)
    except Exception as e:
        return f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"
    return ""


def one(model: Model, base: RunSettings, arm: str, run_id: str, prev: Previewer, warm: bool = False,
        arms: dict[str, PreviewSettings | None] = ARMS) -> Run:
    p = arms[arm]
    settings = replace(base, steps=min(base.steps, 3)) if warm else base
    if arm == "direct":
        return direct_call(model, settings, run_id, None)
    assert p is not None
    return generate(RunContext(model, replace(settings, preview=p), run_id, previewer=prev, first_run=False))


def measure(model: Model, base: RunSettings, groups: Sequence[Sequence[str]], repeats: int, out: Path,
            log: Any, runs_s: float = float("inf"), arms: dict[str, PreviewSettings | None] = ARMS,
            tag: str = "") -> dict[str, list[tuple[Run, Run]]]:
    """Runs every group `repeats` times, fewer when another repeat would likely end past runs_s seconds (the
    first always runs); returns per arm its (run, reference run) pairs. Each run goes to runs.csv and
    steps.csv as it ends, so a run killed at the time limit still leaves its rows."""
    prev = Previewer(model)
    runs_csv, steps_csv = CsvAppender(out / "runs.csv", RUNS_CSV_COLUMNS), CsvAppender(out / "steps.csv", STEPS_CSV_COLUMNS)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    pairs: dict[str, list[tuple[Run, Run]]] = {}
    n = 0

    def record(arm: str, role: str, rep: int, run: Run, ref: Run | None) -> None:
        pct = None if ref is None else 100 * (run.record.wall_s / ref.record.wall_s - 1)
        extra = {"config": tag + arm, "role": role, "repeat": rep}
        steps_csv.append(run.rows, extra)  # rows first: a run listed in runs.csv has all its rows
        runs_csv.append([{**run.record.__dict__, **extra, "overhead_pct": pct, "pair_overhead_pct": pct}])

    try:
        for arm in dict.fromkeys(a for g in groups for a in g):  # first calls pay for allocations, autotuning and lazy imports: kept out of the figures
            run = one(model, base, arm, f"{stamp}{tag}-w{n:03d}", prev, warm=True, arms=arms)
            record(arm, "warmup", 0, run, None)
            n += 1
        t0 = time.perf_counter()
        for rep in range(1, repeats + 1):
            elapsed = time.perf_counter() - t0
            if rep > 1 and elapsed * rep / (rep - 1) > runs_s:
                log(f"  stopping after {rep - 1} repeats: another would end past {runs_s:.0f} s")
                break
            for group in groups:
                order = list(group) if rep % 2 else list(reversed(group))
                done: dict[str, Run] = {}
                for arm in order:
                    done[arm] = one(model, base, arm, f"{stamp}{tag}-{n:04d}", prev, arms=arms)
                    n += 1
                ref = group[0]
                for arm in group:
                    role = "direct" if arm == "direct" else "baseline" if arm == "none" else "config"
                    record(arm, role, rep, done[arm], None if arm == ref else done[ref])
                    if arm != ref:
                        pairs.setdefault(arm, []).append((done[arm], done[ref]))
            log(f"  repeat {rep}/{repeats} done")
    finally:
        runs_csv.close()
        steps_csv.close()
    return pairs


def _count(runs: Sequence[Run], field: str) -> str:
    return f"{statistics.median(getattr(r.record, field) for r in runs):g}"


def _wall_row(label: str, ps: Sequence[tuple[Run, Run]]) -> list[str]:
    """Median of the pairwise wall ratios, A over B."""
    a, b = [p[0] for p in ps], [p[1] for p in ps]
    ratio = statistics.median(x.record.wall_s / y.record.wall_s for x, y in zip(a, b))
    return [label, f"{ratio:.3f}", f"overhead {100 * (ratio - 1):+.1f} %",
            f"{_count(a, 'previews')}/{_count(b, 'previews')}", f"{_count(a, 'skipped')}/{_count(b, 'skipped')}"]


def _per_preview(runs: Sequence[Run]) -> tuple[float, float]:
    """Median over runs of (transfer + encode ms per preview, bytes per frame)."""
    ms = statistics.median((r.record.transfer_ms + r.record.encode_ms) / max(1, r.record.previews) for r in runs)
    kb = statistics.median(r.record.bytes / max(1, r.record.previews) for r in runs)
    return ms, kb


def figures(pairs: dict[str, list[tuple[Run, Run]]], nvjpeg_why: str) -> list[list[str]]:
    """The table's rows: label, ratio, figure, previews A/B, skipped A/B."""
    rows = [_wall_row("engine, decoder none / bare diffusers call", pairs["none"]),
            _wall_row("taesd every step, overlap / no previews", pairs["taesd/overlap"])]
    s = [100 * (x.record.wall_s / y.record.wall_s - 1) for x, y in pairs["vae/sync"]]
    o = [100 * (x.record.wall_s / y.record.wall_s - 1) for x, y in pairs["vae/overlap"]]
    s_ov, o_ov = statistics.median(s), statistics.median(o)
    ratio = f"{o_ov / s_ov:.3f}" if s_ov > 0 else "n/a"  # a ratio of overheads means nothing when sync costs nothing
    ov_runs, sy_runs = [p[0] for p in pairs["vae/overlap"]], [p[0] for p in pairs["vae/sync"]]
    rows.append(["vae every step: overlap overhead / sync overhead", ratio, f"overlap {o_ov:+.1f} %, sync {s_ov:+.1f} %",
                 f"{_count(ov_runs, 'previews')}/{_count(sy_runs, 'previews')}",
                 f"{_count(ov_runs, 'skipped')}/{_count(sy_runs, 'skipped')}"])
    rows.append(_wall_row("latent2rgb every step, overlap / no previews", pairs["latent2rgb/overlap"]))
    rows.append(_wall_row("autopilot taesd, budget 10 % / no previews", pairs["autopilot"]))
    label = "nvjpeg / turbojpeg, transfer+encode per preview"
    if nvjpeg_why:
        rows.append([label, "-", f"not run: {nvjpeg_why}", "-", "-"])
    else:
        nv, tj = [p[0] for p in pairs["nvjpeg/sync"]], [p[1] for p in pairs["nvjpeg/sync"]]
        (nv_ms, nv_b), (tj_ms, tj_b) = _per_preview(nv), _per_preview(tj)
        rows.append([label, f"{nv_ms / tj_ms:.3f}", f"{nv_ms:.2f} vs {tj_ms:.2f} ms ({tj[0].record.encoder}), "
                     f"bytes/frame x{nv_b / max(tj_b, 1):.2f}", f"{_count(nv, 'previews')}/{_count(tj, 'previews')}",
                     f"{_count(nv, 'skipped')}/{_count(tj, 'skipped')}"])
    label = "nvjpeg every step, overlap / no previews"
    if nvjpeg_why:
        rows.append([label, "-", f"not run: {nvjpeg_why}", "-", "-"])
    else:
        row = _wall_row(label, pairs["nvjpeg/overlap"])
        ms, _ = _per_preview([p[0] for p in pairs["nvjpeg/overlap"]])
        row[2] += f", transfer+encode {ms:.2f} ms/preview"
        rows.append(row)
    return rows


def _missing(label: str, what: str, e: Exception) -> list[str]:
    """The row of a check that could not be measured here (its model not built, or its runs failed): why."""
    return [f"{label}: {what}", "-", f"{type(e).__name__}: {str(e)[:120]}", "-", "-"]


def _built(setup: Setup, label: str, what: str, log: Any) -> Model | list[str]:
    """The model of a check's own rows, built here and logged with `what` they run, or the row that says why it
    could not be (the other rows stand without it)."""
    try:
        model = load(setup.model, device=setup.device, dtype=setup.dtype)
    except Exception as e:
        return _missing(label, "not run", e)
    log(f"gpu_check: SYNTHETIC {setup.model} {setup.dtype} {setup.size}x{setup.size}{what}, {setup.steps} steps, "
        f"{setup.repeats} repeats; built in {model.load_s:.1f} s")
    return model


def video_rows(setup: Setup, frames: int, out: Path, log: Any) -> list[list[str]]:
    """The clip rows: Wan 2.1's previews of its first latent frame and of the whole clip, each against no
    previews, in the same interleaved pairs. A model that cannot be built here is a row that says why."""
    label = f"wan21 {frames} frames"
    model = _built(setup, label, f" x {frames} frames", log)
    if not isinstance(model, Model):
        return [model]
    base = RunSettings(steps=setup.steps, width=setup.size, height=setup.size, num_frames=frames,
                       fps=model.fps, max_frames=MAX_NUM_FRAMES, frame_step=model.space.temporal,
                       guidance=5.0)
    try:
        pairs = measure(model, base, VIDEO_GROUPS, setup.repeats, out, log, setup.runs_s, VIDEO_ARMS, "wan21-")
    except Exception as e:  # as for the load: the image table and the reference still get written
        return [_missing(label, "failed", e)]
    rows = []
    for arm, what in (("taesd/first", "taesd first frame"), ("taesd/all", "taesd whole clip"),
                      ("latent2rgb/all", "latent2rgb whole clip")):
        row = _wall_row(f"{label}: {what} every step, overlap / no previews", pairs[arm])
        a = [p[0] for p in pairs[arm]]
        ms = statistics.median(r.record.decode_ms / max(1, r.record.previews) for r in a)
        row[2] += f", decode {ms:.1f} ms/preview, {_count(a, 'frames_sent')} frames sent"
        rows.append(row)
    rows.append(sync_row(model, base, f"{label}: hidden syncs (overlap, live frames and decoder switches)",
                         CLIP_SWITCHES))
    return rows


def _per_row(runs: Sequence[Run], cuda: bool) -> tuple[float, float, str]:
    """Medians over the runs' TAESD previews of (decode ms, on-path ms), and the size the decoder made (px)."""
    rows = [r for run in runs for r in run.rows if r.preview and r.decoder == "taesd"]  # not a fallback's
    if not rows:
        raise ValueError("no taesd preview was made")
    sizes = sorted({f"{r.decode_width}x{r.decode_height}" for r in rows})
    return (statistics.median(r.decode_ms for r in rows), statistics.median(on_path_ms(r, cuda) for r in rows),
            "/".join(sizes))


def xl_rows(setup: Setup, preview_max: int, out: Path, log: Any) -> list[list[str]]:
    """The decode_at row: TAESD every step (sync) with previews of preview_max px, decoding at the preview's
    size against the whole image resized, in interleaved pairs; the wall ratio, and per preview the median
    decode ms and on-path ms of each side. A model that cannot be built here is a row that says why."""
    label = f"sdxl {setup.size} px, preview_max {preview_max}: taesd every step, sync, decode_at preview / full"
    model = _built(setup, label, f", preview_max {preview_max}", log)
    if not isinstance(model, Model):
        return [model]
    base = RunSettings(steps=setup.steps, width=setup.size, height=setup.size)
    try:
        pairs = measure(model, base, XL_GROUPS, setup.repeats, out, log, setup.runs_s, xl_arms(preview_max), "xl-")
        ps = pairs["taesd/at-preview"]
        cuda = model.device.type == "cuda"
        (p_dec, p_path, p_px), (f_dec, f_path, f_px) = (_per_row([p[0] for p in ps], cuda),
                                                        _per_row([p[1] for p in ps], cuda))
    except Exception as e:  # as for the load: the other rows and the reference still get written
        return [_missing(label, "failed", e)]
    row = _wall_row(label, ps)
    row[2] = (f"decode {p_dec:.2f} vs {f_dec:.2f} ms/preview at {p_px} vs {f_px} px, on-path {p_path:.2f} vs "
              f"{f_path:.2f} ms/preview")
    return [row]


def table(rows: list[list[str]]) -> str:
    head = ["check (A / B)", "ratio", "figure", "previews A/B", "skipped A/B"]
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]

    def fmt(r: list[str]) -> str:  # text columns left, figures right
        return "  ".join(c.ljust(w) if i in (0, 2) else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
    return "\n".join([fmt(head), "-" * (sum(widths) + 2 * (len(widths) - 1))] + [fmt(r) for r in rows]
                     + ["ratio: median of interleaved pairs (wall time unless said); previews, skipped: median per run"])


def machine(model: Model) -> str:
    import diffusers

    cuda = model.device.type == "cuda"
    dev = f"{torch.cuda.get_device_name(model.device)} (CUDA {torch.version.cuda})" if cuda else \
        f"CPU {platform.processor() or platform.machine()}, {os.cpu_count()} cores, {torch.get_num_threads()} threads"
    return (f"machine: {dev} | python {platform.python_version()} | torch {torch.__version__} | diffusers "
            f"{diffusers.__version__} | {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="previewlab gpu-check", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dry-run", action="store_true", help=f"CPU, {DRY.model}, {DRY.size} px, {DRY.steps} steps")
    p.add_argument("--steps", type=int, default=None, help=f"denoising steps (default {GPU.steps}; dry run {DRY.steps})")
    p.add_argument("--repeats", type=int, default=None,
                   help=f"interleaved pairs per check (default {GPU.repeats}; dry run {DRY.repeats})")
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or "runs/gpu-check"))
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    setup = DRY if args.dry_run else GPU
    setup = replace(setup, steps=args.steps or setup.steps, repeats=args.repeats or setup.repeats)
    t0 = time.perf_counter()
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    if setup.device == "cuda" and not torch.cuda.is_available():
        log(f"previewlab gpu-check: torch {torch.__version__} sees no CUDA device; --dry-run runs on the CPU")
        return 2
    if setup.threads:
        torch.set_num_threads(setup.threads)
    model = load(setup.model, device=setup.device, dtype=setup.dtype)
    info = machine(model)
    log(f"{info}\ngpu_check: {'SYNTHETIC ' if model.synthetic else ''}{setup.model} {setup.dtype} {setup.size}x"
        f"{setup.size}, {setup.steps} steps, {setup.repeats} repeats; model built in {model.load_s:.1f} s")
    base = RunSettings(steps=setup.steps, width=setup.size, height=setup.size)
    why = nvjpeg_missing(model)
    groups = [g for g in GROUPS if not (why and any(a in g for a in NVJPEG_ARMS))]
    args.out.mkdir(parents=True, exist_ok=True)
    pairs = measure(model, base, groups, setup.repeats, args.out, log, setup.runs_s)
    image_rows = figures(pairs, why) + [sync_row(model, base)]
    xl = (XL_DRY, XL_DRY_PREVIEW_MAX) if args.dry_run else (XL_GPU, XL_GPU_PREVIEW_MAX)
    video = (VIDEO_DRY, VIDEO_DRY_FRAMES) if args.dry_run else (VIDEO_GPU, VIDEO_GPU_FRAMES)
    t_measured = time.perf_counter()
    image_rows += xl_rows(xl[0], xl[1], args.out, log)
    t_xl = time.perf_counter()
    text = table(image_rows + video_rows(video[0], video[1], args.out, log))
    t_video = time.perf_counter()
    # Sync mode: each stage has its own range on one thread. 10 steps bound the profiler's parse time.
    ref_settings = replace(base, steps=min(base.steps, 10), preview=PreviewSettings(decoder="taesd", mode="sync"))
    try:
        run, found = traced(model, ref_settings)
        ref = render(compare(run.rows, found, model.device.type == "cuda"), model.device.type == "cuda",
                     "taesd every step, sync")
    except Exception as e:  # the table above stands without the reference; say why it is missing
        ref = f"reference: not run ({type(e).__name__}: {e})"
    encoders = sorted({r.record.encoder for ps in pairs.values() for p in ps for r in p if r.record.encoder})
    took = (f"previewlab gpu-check: {time.perf_counter() - t0:.0f} s (model {model.load_s:.0f} s, runs {t_measured - t0 - model.load_s:.0f} s, "
            f"sdxl {t_xl - t_measured:.0f} s, video {t_video - t_xl:.0f} s, reference {time.perf_counter() - t_video:.0f} s); JPEG encoders that "
            f"ran: {', '.join(encoders)}")
    summary = "\n".join([info, f"{'SYNTHETIC (random weights) ' if model.synthetic else ''}{setup.model} {setup.dtype} "
                         f"{setup.size}x{setup.size} {setup.steps} steps, {len(pairs['taesd/overlap'])} repeats", text, ref, took])
    (args.out / "summary.txt").write_text(summary + "\n")
    print(summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

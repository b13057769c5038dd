"""What the GPU check runs: its setups (model, device, size, steps, repeats, a time bound) and its arms, each a
named preview configuration that the bench's engine runs beside its own no-preview baselines (bench/sweep.py).
"""
from __future__ import annotations

from dataclasses import dataclass

from previewlab.preview.decoding import encoders
from previewlab.preview.decoding.encoders import ENCODERS
from previewlab.preview.models import Model
from previewlab.preview.settings import PreviewSettings, RunSettings

# Every arm runs right after a no-preview baseline in each repeat (the direct call right before one), in
# reverse order on even repeats; the table's rows set arms against their baselines or against each other.
ARMS: dict[str, PreviewSettings] = {
    "taesd/overlap": PreviewSettings(decoder="taesd", mode="overlap"),
    "vae/sync": PreviewSettings(decoder="vae", mode="sync"),
    "vae/overlap": PreviewSettings(decoder="vae", mode="overlap"),
    "latent2rgb/overlap": PreviewSettings(decoder="latent2rgb", mode="overlap"),
    "autopilot": PreviewSettings(budget=10, decoder="taesd"),  # every=auto within 10 % of denoise time
}
# Encoders side by side: sync mode keeps the copy and the encode on the denoising thread, timed alone. nvJPEG in
# overlap mode runs on the encode thread, beside the side stream's next decode: its own stream must keep it from
# waiting for that decode (or for the queued steps) and keep its bytes ordered before their copy.
NVJPEG_ARMS: dict[str, PreviewSettings] = {
    "turbojpeg/sync": PreviewSettings(decoder="taesd", mode="sync", encoder="turbojpeg"),
    "nvjpeg/sync": PreviewSettings(decoder="taesd", mode="sync", encoder="nvjpeg"),
    "nvjpeg/overlap": PreviewSettings(decoder="taesd", mode="overlap", encoder="nvjpeg"),
} if "nvjpeg" in ENCODERS else {}
# A clip (issue 22): Wan 2.1's first latent frame against the whole clip, TAEHV and latent2rgb, every step
VIDEO_ARMS: dict[str, PreviewSettings] = {
    "taesd/first": PreviewSettings(decoder="taesd", mode="overlap", frames="first"),
    "taesd/all": PreviewSettings(decoder="taesd", mode="overlap", frames="all"),
    "latent2rgb/all": PreviewSettings(decoder="latent2rgb", mode="overlap", frames="all"),
}


def xl_arms(preview_max: int) -> dict[str, PreviewSettings]:
    """Previews priced by pixels (issue 24): TAESD every step on SDXL's architecture, previews preview_max px on
    the long side, decoded at that size (its last upsampling stages left out) against the whole image then
    resized. Sync mode: the whole preview is on the denoising path, so its cost shows in wall time."""
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

    def settings(self) -> RunSettings:
        """The base run: its steps, on a square of size px, the rest as RunSettings has it."""
        return RunSettings(steps=self.steps, width=self.size, height=self.size)


# About 18 runs of ~1 s per repeat on an H200 (8 arms beside their baselines, the direct call and its baseline):
# 5 repeats take a minute or two; runs_s keeps these runs inside 200 s if the machine is slower than that (the
# whole check, with the SDXL and clip rows: gpu_check.sh's header).
GPU = Setup("synthetic:sd15", "cuda", "float16", 512, 20, 5, 0, 200.0)
# Wan 2.1 T2V 1.3B (its real transformer and VAE, random weights): 33 frames (9 latent) at 256x256, 10 steps;
# 4 warm-ups and 6 runs a repeat; runs_s keeps the repeats to a minute and a half, and building the model's
# 1.7 B random weights takes about 30 s more (21 s on this 2-core CPU)
VIDEO_GPU = Setup("synthetic:wan21-1.3b", "cuda", "float16", 256, 10, 3, 0, 90.0)
VIDEO_GPU_FRAMES = 33
# One thread: on a small machine shared with other work, two OpenMP threads stall each other (runs measured
# 10x slower and erratic here); one keeps the dry run's time predictable. Its figures prove the script only.
DRY = Setup("synthetic:tiny", "cpu", "float32", 64, 10, 3, 1, 60.0)
VIDEO_DRY = Setup("synthetic:tiny-wan21", "cpu", "float32", 64, 3, 1, 1, 30.0)
VIDEO_DRY_FRAMES = 5
# SDXL base 1.0 (synthetic:sdxl: its real UNet, text encoders and VAE, TAESD's architecture, random weights) at
# 1024x1024, 8 steps: 3 warm-ups of 3 steps, then 4 runs a repeat (estimated about a second each on an H200, not
# yet run there); runs_s keeps the repeats to 30 s. Building its 3.5 B random weights on the CPU took 97 s on a
# shared 2-core CPU (13.4 GiB peak), and they move to the GPU in float16 (7 GB) after
XL_GPU = Setup("synthetic:sdxl", "cuda", "float16", 1024, 8, 3, 0, 30.0)
XL_GPU_PREVIEW_MAX = 512
# The same code path in seconds: tiny-xl's TAESD has one upsampling stage, so a 32 px preview of its 64 px image
# leaves it out, as 512 px previews of a 1024 px image leave out TAESD's last one
XL_DRY = Setup("synthetic:tiny-xl", "cpu", "float32", 64, 3, 1, 1, 20.0)
XL_DRY_PREVIEW_MAX = 32


def nvjpeg_missing(model: Model) -> str:
    """Why the encoder rows cannot run here, or "" when they can."""
    if model.device.type != "cuda":
        return "no CUDA device"
    if "nvjpeg" not in ENCODERS:
        return "preview.encoders has no nvjpeg encoder"
    try:  # it needs torchvision built for this torch: built once here, so a missing one is a line, not a crash
        encoders.get("nvjpeg", model.device)
    except Exception as e:
        return f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"
    return ""

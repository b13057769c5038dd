"""Run and preview settings: frozen, validated in one place, shared by the bench flags and the server messages."""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal

from previewlab.preview.names import (BATCH_PREVIEWS, DECODE_ATS, DECODER_NAMES, ENCODER_NAMES, MODES, TARGETS, BatchPreview, DecodeAt,
                    DecoderName, EncoderName, FrameChoice, Mode, Target, check, check_frames)

MAX_STEPS = 1000
MAX_EVERY = 10_000
MAX_PROMPT = 2000  # characters
MIN_SIDE, MAX_SIDE = 64, 2048  # pixels; MAX_SIDE is the default cap, a server may lower it
MAX_GUIDANCE = 30.0  # classifier-free guidance scale; <= 1 turns CFG off (one UNet pass per step, not two)
MAX_BATCH = 8  # images per run; the server counts them in its work limit
MAX_NUM_FRAMES = 257  # a clip's frames (LTX-Video's longest); an image model allows 1 (RunSettings.max_frames)
MAX_FPS = 240.0
RUN_ID_CHARS = frozenset("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-_")


# devices where overlap mode has a side stream to decode on, beside the denoising; on a CPU it has none, and the
# preview work shares the cores with the denoising whatever the mode (a taesd/overlap run measured 215 % on-path)
SIDE_STREAM_DEVICES = ("cuda", "xpu", "mps")


def default_mode(device: str) -> Mode:
    """The preview mode a run starts in where the user names none: overlap where a side stream exists, sync on a
    CPU, where overlap takes nothing off the denoising path."""
    return "overlap" if device in SIDE_STREAM_DEVICES else "sync"


Purpose = Literal["", "baseline", "measured"]


class SettingsError(ValueError):
    """One line naming the field, the bad value and what is allowed."""


@dataclass(frozen=True)
class PreviewSettings:
    """What a user can change while a run goes on; the next step uses the new values."""
    decoder: DecoderName = "latent2rgb"
    every: int = 1           # preview after step i (1-based) when i % every == 0
    preview_max: int = 0     # long side in pixels, 0 = native
    encoder: EncoderName = "turbojpeg"
    quality: int = 80        # 1..100; PNG ignores it
    mode: Mode = "overlap"    # sync: all preview work inside the step callback; overlap: off the denoising path
    budget: float = 0.0      # percent; > 0 lets the autopilot choose the interval (every = "auto")
    target: Target = "auto"  # x0: the model's predicted clean image; latents: the noisy ones; auto: x0 if it can
    batch_preview: BatchPreview = "grid"  # a batch: every image in one grid frame (decoded all), or the first
    frames: FrameChoice = "first"  # a clip: its first frame, the middle one, all of it, or N spread evenly
    # preview: a TAE stops upsampling at the preview's size (preview_max), the same weights on fewer pixels; it
    # changes nothing where preview_max is 0 or not below the image. full: every decoder makes the image's size.
    # half_latents: the latents 2x smaller per side first (the full VAE's cheap, blurry choice). Recorded per row
    decode_at: DecodeAt = "preview"

    def __post_init__(self) -> None:
        object.__setattr__(self, "frames", check_frames("frames", self.frames, SettingsError))  # "8" -> 8
        check("mode", self.mode, MODES, SettingsError)
        check("target", self.target, TARGETS, SettingsError)
        check("batch_preview", self.batch_preview, BATCH_PREVIEWS, SettingsError)
        check("decode_at", self.decode_at, DECODE_ATS, SettingsError)
        if isinstance(self.budget, bool) or not isinstance(self.budget, (int, float)) or not 0 <= self.budget <= 1000:
            raise SettingsError(f"budget={self.budget!r}: must be a number of percent from 0 (off) to 1000")
        check("decoder", self.decoder, DECODER_NAMES, SettingsError)
        _int("every", self.every, 1, MAX_EVERY)
        _int("preview_max", self.preview_max, 0, 8192)
        if 0 < self.preview_max < 8:
            raise SettingsError(f"preview_max={self.preview_max}: use 0 (native) or at least 8 pixels")
        check("encoder", self.encoder, ENCODER_NAMES, SettingsError)
        _int("quality", self.quality, 1, 100)

    def changed(self, **kw: Any) -> PreviewSettings:
        return replace(self, **kw)


@dataclass(frozen=True)
class RunSettings:
    prompt: str = "a lighthouse on a cliff at dusk"
    steps: int = 20
    width: int = 256
    height: int = 256
    seed: int = 0
    guidance: float = 7.5
    preview: PreviewSettings = field(default_factory=PreviewSettings)
    max_side: int = MAX_SIDE
    batch: int = 1                # images per prompt
    init: str | None = None       # img2img: the id of a past run whose final image is the input; None: txt2img
    strength: float = 0.75        # img2img: how much of the input is noised away, (0, 1]; fewer steps run below 1
    num_frames: int = 1           # a video model's clip length in frames; 1 for an image model
    fps: float = 0.0              # a clip's playback rate (the previews' and the final clip's); 0: an image model
    max_frames: int = 1           # the most num_frames allows: the server's model (1 for an image model)
    frame_step: int = 1           # a clip is 1 + k x frame_step frames: the model's frames per latent frame
    purpose: Purpose = ""         # who asked for the run: "" the user; the page's measure series its "baseline"
                                  # and "measured" runs (server/measure.py); never a client's to set

    @property
    def task(self) -> str:
        return "txt2img" if self.init is None else "img2img"
    def __post_init__(self) -> None:
        if not isinstance(self.prompt, str) or len(self.prompt) > MAX_PROMPT:
            raise SettingsError(f"prompt: a string of at most {MAX_PROMPT} characters is allowed")
        _int("steps", self.steps, 1, MAX_STEPS)
        for name in ("width", "height"):
            v = getattr(self, name)
            _int(name, v, MIN_SIDE, self.max_side)
            if v % 8:
                raise SettingsError(f"{name}={v}: must be a multiple of 8 (64..{self.max_side})")
        _int("seed", self.seed, 0, 2**63 - 1)
        g = self.guidance
        # bool is an int to Python, and 1e308 or NaN would reach the pipeline: only a finite number in range
        if isinstance(g, bool) or not isinstance(g, (int, float)) or not 0 <= g <= MAX_GUIDANCE:
            raise SettingsError(f"guidance={g!r}: must be a number from 0 to {MAX_GUIDANCE:g} "
                                "(<= 1 turns classifier-free guidance off)")
        _int("batch", self.batch, 1, MAX_BATCH)
        if self.max_frames == 1 and self.num_frames != 1:
            raise SettingsError(f"num_frames={self.num_frames!r}: this model makes images; only 1 is allowed")
        _int("num_frames", self.num_frames, 1, self.max_frames)
        if (self.num_frames - 1) % self.frame_step:
            k = (self.num_frames - 1) // self.frame_step
            lo, hi = 1 + k * self.frame_step, 1 + (k + 1) * self.frame_step
            nearest = f"{lo} and {hi}" if hi <= self.max_frames else f"{lo}"
            raise SettingsError(f"num_frames={self.num_frames}: a clip of this model is 1 + k x {self.frame_step} "
                                f"frames (one latent frame, then {self.frame_step} per latent frame); the nearest: "
                                f"{nearest}")
        check_fps(self.fps)
        if self.purpose not in ("", "baseline", "measured"):
            raise SettingsError(f"purpose={self.purpose!r}: must be '', baseline or measured")
        if self.init is not None and (not isinstance(self.init, str) or not 0 < len(self.init) <= 64
                                      or not set(self.init) <= RUN_ID_CHARS):
            raise SettingsError(f"init={self.init!r}: must be the id of a past run (letters, digits, - and _), "
                                "or null for text-to-image")
        st = self.strength
        if isinstance(st, bool) or not isinstance(st, (int, float)) or not 0 < st <= 1:
            raise SettingsError(f"strength={st!r}: must be a number above 0 and at most 1 "
                                "(how much of the input image is noised away)")
        if self.init is not None and int(self.steps * st) < 1:  # img2img runs int(steps x strength) steps
            raise SettingsError(f"strength={st:g} with steps={self.steps} runs no step (img2img runs "
                                f"int(steps x strength)); use strength at least {1 / self.steps:.3g} or more steps")


PREVIEW_FIELDS = tuple(f.name for f in fields(PreviewSettings))
RUN_FIELDS = tuple(f.name for f in fields(RunSettings) if f.name not in ("preview", "max_side", "max_frames",
                                                                          "frame_step", "purpose"))


def check_fps(f: object) -> float:
    """A clip's playback rate: a number of frames per second from 0 (unknown) to MAX_FPS. Raises SettingsError."""
    if isinstance(f, bool) or not isinstance(f, (int, float)) or not 0 <= f <= MAX_FPS:
        raise SettingsError(f"fps={f!r}: must be a number of frames per second from 0 to {MAX_FPS:g}")
    return float(f)


def _int(name: str, v: object, lo: int, hi: int) -> None:
    if isinstance(v, bool) or not isinstance(v, int):
        raise SettingsError(f"{name}={v!r}: must be an integer from {lo} to {hi}")
    if not lo <= v <= hi:
        raise SettingsError(f"{name}={v}: must be from {lo} to {hi}")


def should_preview(step: int, every: int) -> bool:
    """Step is 1-based: with every=5 the previews come after steps 5, 10, 15 ..."""
    return step % every == 0

"""One measured generation: text encode, denoise with previews in the step callback, final decode, encode, write.

The step callback is the only code previewlab adds to the denoising loop. With decoder `none` it reads a clock,
fills one row and returns the pipeline's dict untouched. It never waits on a socket: frames and rows go to
callbacks that must return at once (the server hands them to its event loop).
"""
from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
import torch.nn.functional as F

from . import decoders, encoders
from .models import Model
from .records import PREVIEW_STAGES, RunRecord, StepRow
from .settings import PreviewSettings, RunSettings, should_preview
from .stopwatch import Stopwatch

Clock = Callable[[], float]


@dataclass(frozen=True)
class Frame:
    """One encoded preview, made once and shared by every watcher."""
    run_id: str
    step: int
    decoder: str
    format: str
    width: int
    height: int
    data: bytes


class Controls:
    """Live preview settings: set from any thread, read once per step by the denoising thread.

    Replacing one reference is atomic in CPython, so the reader never sees half a change.
    """

    def __init__(self, preview: PreviewSettings) -> None:
        self._s = preview
        self.notes: list[str] = []  # changes not yet stamped on a step row

    def get(self) -> PreviewSettings:
        return self._s

    def set(self, **changes: Any) -> PreviewSettings:
        new = self._s.changed(**changes)  # validates; raises SettingsError and changes nothing
        diff = [f"{k}={v}" for k, v in changes.items() if getattr(self._s, k) != v]
        self._s = new
        if diff:
            self.notes.append("set " + " ".join(diff))
        return new


@dataclass
class _Marks:
    """Stopwatch handles of one step, turned into milliseconds once the device has passed them."""
    row: StepRow
    start: Any
    cb: Any
    dec0: Any = None
    dec1: Any = None
    res1: Any = None


@dataclass
class Run:
    record: RunRecord
    rows: list[StepRow] = field(default_factory=list)
    image: np.ndarray | None = None  # final image, uint8 (H, W, 3)


def preview_size(width: int, height: int, preview_max: int) -> tuple[int, int]:
    """(w, h) with the long side at most preview_max (0 = native), aspect kept."""
    long = max(width, height)
    if preview_max == 0 or long <= preview_max:
        return width, height
    s = preview_max / long
    return max(1, round(width * s)), max(1, round(height * s))


def to_uint8_hwc(image: torch.Tensor, preview_max: int = 0) -> torch.Tensor:
    """(3, H, W) in [0, 1] -> uint8 (h, w, 3), downscaled on the tensor's device when preview_max asks."""
    _, h, w = image.shape
    pw, ph = preview_size(w, h, preview_max)
    if (pw, ph) != (w, h):
        image = F.interpolate(image[None].float(), size=(ph, pw), mode="bilinear", antialias=True,
                              align_corners=False)[0]
    return (image * 255).round().clamp(0, 255).to(torch.uint8).permute(1, 2, 0).contiguous()


class _Previewer:
    """Builds decoders and encoders on demand and keeps them for the run (a switch back costs nothing)."""

    def __init__(self, model: Model) -> None:
        self.model = model
        self._dec: dict[str, decoders.Decode | None] = {}
        self._enc: dict[str, encoders.Encoder] = {}

    def decoder(self, name: str) -> decoders.Decode | None:
        if name not in self._dec:
            self._dec[name] = decoders.build(name, self.model)
        return self._dec[name]

    def encoder(self, name: str) -> encoders.Encoder:
        if name not in self._enc:
            self._enc[name] = encoders.get(name)
        return self._enc[name]


def _env(model: Model) -> dict[str, Any]:
    import diffusers

    dev = model.device
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    return dict(model=model.name, synthetic=int(model.synthetic), device=dev.type, device_name=name,
                dtype=str(model.dtype).removeprefix("torch."), threads=torch.get_num_threads(),
                torch=torch.__version__, diffusers=diffusers.__version__)


def encode_prompt(model: Model, prompt: str, guidance: float) -> dict[str, Any]:
    """The pipeline's own text encoding, as keyword arguments for its __call__."""
    pipe, cfg = model.pipe, guidance > 1.0
    if model.family == "sdxl":
        pe, npe, ppe, nppe = pipe.encode_prompt(prompt=prompt, device=model.device, num_images_per_prompt=1,
                                                do_classifier_free_guidance=cfg)
        return dict(prompt_embeds=pe, negative_prompt_embeds=npe, pooled_prompt_embeds=ppe,
                    negative_pooled_prompt_embeds=nppe)
    pe, npe = pipe.encode_prompt(prompt, model.device, 1, cfg)
    return dict(prompt_embeds=pe, negative_prompt_embeds=npe)


def final_image(model: Model, latents: torch.Tensor) -> np.ndarray:
    """Latents -> uint8 (H, W, 3) on the host with the pipeline's VAE, as its own final decode does."""
    img = decoders.vae_decode(model.pipe, latents[:1])[0]
    return to_uint8_hwc(((img.float() + 1) / 2).clamp(0, 1)).cpu().numpy()


def save_image(image: np.ndarray) -> bytes:
    """The final image as PNG, the way users keep it."""
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(image, "RGB").save(buf, "PNG")
    return buf.getvalue()


def generate(model: Model, settings: RunSettings, *, run_id: str, controls: Controls | None = None,
             on_row: Callable[[StepRow], None] | None = None, on_frame: Callable[[Frame], None] | None = None,
             on_error: Callable[[str], None] | None = None, should_stop: Callable[[], bool] | None = None,
             image_path: Path | None = None, first_run: bool = False, clock: Clock = time.perf_counter) -> Run:
    """Run one generation and measure it. Rows reach on_row in step order as soon as their times are known."""
    controls = controls or Controls(settings.preview)
    pipe, sw = model.pipe, Stopwatch(model.device, clock)
    prev = _Previewer(model)
    start_settings = controls.get()
    start_encoder = prev.encoder(start_settings.encoder).name
    # Timestep values come from a CPU copy of the schedule, so reading one never waits for the device.
    pipe.scheduler.set_timesteps(settings.steps, device="cpu")
    timesteps = [float(t) for t in pipe.scheduler.timesteps]
    rows: list[StepRow] = []
    pending: list[_Marks] = []
    status = "done"  # a failure raises; the caller records it

    def emit(force: bool) -> None:
        while pending and (force or sw.ready(pending[0].res1 or pending[0].cb)):
            m = pending.pop(0)
            m.row.denoise_ms = sw.ms(m.start, m.cb)
            if m.dec0 is not None:
                m.row.decode_ms, m.row.resize_ms = sw.ms(m.dec0, m.dec1), sw.ms(m.dec1, m.res1)
            rows.append(m.row)
            if on_row:
                on_row(m.row)

    state: dict[str, Any] = {"last": None, "seq": 0}

    def preview(row: StepRow, marks: _Marks, latents: torch.Tensor, s: PreviewSettings) -> None:
        decode = prev.decoder(s.decoder)
        assert decode is not None
        enc = prev.encoder(s.encoder)
        marks.dec0 = sw.mark()
        image = decode(latents[:1])[0]
        marks.dec1 = sw.mark()
        u8 = to_uint8_hwc(image, s.preview_max)
        marks.res1 = sw.mark()
        t0 = clock()
        sw.wait(marks.res1)  # the wait the host copy needs anyway, made visible as sync_ms
        t1 = clock()
        arr = u8.cpu().numpy()
        t2 = clock()
        data = enc.encode(arr, s.quality)
        t3 = clock()
        row.sync_ms, row.transfer_ms, row.encode_ms = (t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3
        row.preview, row.bytes, row.encoder = 1, len(data), enc.name
        row.preview_height, row.preview_width = int(arr.shape[0]), int(arr.shape[1])
        if on_frame:
            on_frame(Frame(run_id, row.step, s.decoder, enc.format, row.preview_width, row.preview_height, data))

    def callback(p: Any, i: int, t: Any, kw: dict[str, Any]) -> dict[str, Any]:
        cb = sw.mark()
        step = i + 1
        s = controls.get()
        row = StepRow(run_id, step, timesteps[i] if i < len(timesteps) else -1.0, decoder=s.decoder, every=s.every,
                      encoder="", quality=s.quality, width=settings.width, height=settings.height)
        if controls.notes:
            row.event, controls.notes[:] = "; ".join(controls.notes), []
        marks = _Marks(row, state["last"], cb)
        if s.decoder != "none" and should_preview(step, s.every):
            try:
                preview(row, marks, kw["latents"], s)
            except Exception as e:  # a preview must never end the run: fall back to a cheaper decoder
                fallback = "latent2rgb" if s.decoder != "latent2rgb" else "none"
                msg = f"preview with decoder {s.decoder} failed at step {step} ({type(e).__name__}: " \
                      f"{str(e).splitlines()[0][:160] if str(e) else ''}); continuing with {fallback}"
                traceback.print_exc(limit=2)
                controls.set(decoder=fallback)
                controls.notes[:] = []
                row.event = (row.event + "; " if row.event else "") + msg
                row.preview, marks.dec0 = 0, None
                if on_error:
                    on_error(msg)
        pending.append(marks)
        emit(False)
        if should_stop and should_stop():
            p._interrupt = True
        state["last"] = sw.mark()
        return kw

    with torch.inference_mode():
        t_start = clock()
        mark0 = sw.mark()
        try:
            embeds = encode_prompt(model, settings.prompt, settings.guidance)
            mark_te = sw.mark()
            state["last"] = mark_te
            gen = torch.Generator("cpu").manual_seed(settings.seed)  # rebuilt for every run
            latents = pipe(num_inference_steps=settings.steps, width=settings.width, height=settings.height,
                           guidance_scale=settings.guidance, generator=gen, output_type="latent",
                           callback_on_step_end=callback, callback_on_step_end_tensor_inputs=["latents"],
                           **embeds).images
            t_dec0 = clock()
            image = final_image(model, latents)  # .cpu() waits for the device: every event before is done
            t_dec1 = clock()
            png = save_image(image)
            t_enc1 = clock()
            if image_path is not None:
                image_path.write_bytes(png)
            t_end = clock()
            if len(rows) + len(pending) < settings.steps:
                status = "stopped"
        except BaseException:
            emit(True)  # every completed step still reaches on_row
            raise
        emit(True)

    totals: dict[str, Any] = {k: sum(getattr(r, k) for r in rows) for k in ("denoise_ms", *PREVIEW_STAGES)}
    wall_ms = (t_end - t_start) * 1e3
    phases: dict[str, Any] = dict(text_encode_ms=sw.ms(mark0, mark_te), final_decode_ms=(t_dec1 - t_dec0) * 1e3,
                  final_encode_ms=(t_enc1 - t_dec1) * 1e3, write_ms=(t_end - t_enc1) * 1e3)
    other = wall_ms - sum(totals.values()) - sum(phases.values())
    record = RunRecord(run_id=run_id, **_env(model), steps=settings.steps, width=settings.width,
                       height=settings.height, seed=settings.seed, decoder=start_settings.decoder,
                       every=start_settings.every, encoder=start_encoder, quality=start_settings.quality,
                       preview_max=start_settings.preview_max, mode="sync", status=status, first_run=int(first_run),
                       load_s=model.load_s, wall_s=wall_ms / 1e3, **totals, **phases, other_ms=other,
                       previews=sum(r.preview for r in rows), skipped=sum(r.skipped for r in rows),
                       bytes=sum(r.bytes for r in rows))
    return Run(record, rows, image)

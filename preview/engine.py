"""One measured generation: text encode, denoise with previews in the step callback, final decode, encode, write."""
from __future__ import annotations

import contextlib
import copy
import inspect
import os
import time
import weakref
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from . import clips, decoders
from .controls import Controls
from .frames import Frame, grid, preview_size, tile, to_uint8_hwc
from .meter import StepMeter, Usage
from . import modular_run
from .previewer import Previewer
from .models import Model, device_name
from .records import PREVIEW_STAGES, RunRecord, StepRow, on_path_ms
from .run import Asked, RunMeta
from .settings import PreviewSettings, RunSettings
from .stopwatch import Clock, Stopwatch
from .steps import StepTap, is_modular, source_of, step_callback
from .targets import X0Tap

__all__ = ["Controls", "Frame", "Phases", "Previewer", "Run", "StepMeter", "TaskError", "final_image", "final_u8",
           "clip_args", "generate", "img2img_pipe", "on_path_ms", "preview_size", "run_record", "save_image",
           "to_uint8_hwc"]


@dataclass
class Run:
    record: RunRecord
    rows: list[StepRow] = field(default_factory=list)
    image: np.ndarray | None = None  # final image, uint8 (H, W, 3)


def _env(model: Model) -> dict[str, Any]:
    import diffusers

    dev = model.device
    name = device_name(dev)
    return dict(model=model.name, synthetic=int(model.synthetic), model_note=model.note, family=model.space.name,
                space=model.space.describe(), device=dev.type, device_name=name,
                dtype=str(model.dtype).removeprefix("torch."), threads=torch.get_num_threads(),
                torch=torch.__version__, diffusers=diffusers.__version__)


@dataclass(frozen=True)
class Phases:
    """A run's time outside its steps, ms: from the request's start to its end (wall), and the phases on the
    denoising path around the steps (drain: previews in flight holding the main stream after the last step)."""
    wall_ms: float
    text_encode_ms: float = 0.0
    final_decode_ms: float = 0.0
    final_encode_ms: float = 0.0
    write_ms: float = 0.0
    drain_ms: float = 0.0


@dataclass(frozen=True)
class _Direct:
    """The preview columns of a call without the step callback (the bench's direct call)."""
    decoder: str = "direct"
    every: int = 0
    preview_max: int = 0
    encoder: str = ""
    quality: int = 0
    mode: str = "direct"
    budget: float = 0.0
    target: str = ""
    frames: str = ""
    decode_at: str = ""


def run_record(model: Model, run_id: str, rows: list[StepRow], asked: Asked | RunMeta, phases: Phases, *,
               status: str, preview: PreviewSettings | None, encoder: str | None = None, first_run: bool = False,
               inflight_peak: int = 0, compiled: bool = False, compile_ms: float = 0.0,
               cuda: bool | None = None, usage: Usage | None = None, timing: str = "host") -> RunRecord:
    """A run's record from what it was asked, its preview settings at the start (None: a direct call), its
    phases and its rows: stage totals from the rows, and other_ms = wall time minus everything measured on the
    denoising path (phases, denoise, the preview stages that ran on it, the final drain). encoder: the one
    that really ran, when it is not the one asked for. cuda: the stages ran on an asynchronous device (any
    accelerator); timing: how the stopwatch timed them (host | events | waits; a direct call's wall: host)."""
    totals: dict[str, Any] = {k: sum(getattr(r, k) for r in rows) for k in ("denoise_ms", *PREVIEW_STAGES)}
    cuda = model.device.type != "cpu" if cuda is None else cuda  # the stopwatch's device (tests: a fake one)
    for r in rows:  # rows from the meter carry it already; the same definition either way
        r.on_path_ms = on_path_ms(r, cuda)
    on_path = sum(r.on_path_ms for r in rows)
    ph = phases
    outside = ph.text_encode_ms + ph.final_decode_ms + ph.final_encode_ms + ph.write_ms
    other = ph.wall_ms - totals["denoise_ms"] - on_path - outside - ph.drain_ms
    p = preview or _Direct()
    return RunRecord(run_id=run_id, **_env(model), load_s=model.load_s, wall_s=ph.wall_ms / 1e3, **totals,
                     text_encode_ms=ph.text_encode_ms, final_decode_ms=ph.final_decode_ms,
                     final_encode_ms=ph.final_encode_ms, write_ms=ph.write_ms, drain_ms=ph.drain_ms,
                     on_path_ms=on_path, other_ms=other, previews=sum(r.preview for r in rows),
                     skipped=sum(r.skipped for r in rows), bytes=sum(r.bytes for r in rows), offload=model.offload,
                     channels_last=int(model.channels_last), steps=asked.steps, width=asked.width,
                     height=asked.height, seed=asked.seed, guidance=asked.guidance, decoder=p.decoder,
                     every=p.every, encoder=encoder or p.encoder, quality=p.quality, preview_max=p.preview_max,
                     mode=p.mode, budget=p.budget, target=p.target, status=status, first_run=int(first_run),
                     inflight_peak=inflight_peak, compile=int(compiled), compile_ms=compile_ms,
                     vae_copy_mb=decoders.copy_mb(model.pipe), task=asked.task,
                     strength=asked.strength if asked.task == "img2img" else None,
                     batch=rows[0].batch if rows else asked.batch, steps_run=len(rows),
                     num_frames=asked.num_frames, fps=asked.fps, frames=str(p.frames),
                     frames_sent=sum(r.frames for r in rows), decode_at=p.decode_at,
                     timing=timing, vae=decoders.vae_memory(model.pipe), **asdict(usage or Usage()),
                     scheduler=type(model.pipe.scheduler).__name__ if getattr(model.pipe, "scheduler", None) is not None
                     else "")


def cpu_schedule(scheduler: Any, steps: int) -> list[float]:
    """The run's timestep values from a CPU copy of the scheduler, so reading one never waits for the device.
    [] when the schedule depends on the call (FLUX's resolution-dependent shift needs `mu`): rows then say -1."""
    sched = copy.deepcopy(scheduler)
    try:
        sched.set_timesteps(steps, device="cpu")
        return [float(t) for t in sched.timesteps][:steps]
    except Exception:
        return []


def _sd15(pipe: Any, prompt: str, dev: Any, cfg: bool) -> dict[str, Any]:
    pe, npe = pipe.encode_prompt(prompt, dev, 1, cfg)
    return dict(prompt_embeds=pe, negative_prompt_embeds=npe)


def _sdxl(pipe: Any, prompt: str, dev: Any, cfg: bool) -> dict[str, Any]:
    pe, npe, ppe, nppe = pipe.encode_prompt(prompt=prompt, device=dev, num_images_per_prompt=1,
                                            do_classifier_free_guidance=cfg)
    return dict(prompt_embeds=pe, negative_prompt_embeds=npe, pooled_prompt_embeds=ppe,
                negative_pooled_prompt_embeds=nppe)


def _sd3(pipe: Any, prompt: str, dev: Any, cfg: bool) -> dict[str, Any]:
    pe, npe, ppe, nppe = pipe.encode_prompt(prompt=prompt, prompt_2=None, prompt_3=None, device=dev,
                                            num_images_per_prompt=1, do_classifier_free_guidance=cfg)
    return dict(prompt_embeds=pe, negative_prompt_embeds=npe, pooled_prompt_embeds=ppe,
                negative_pooled_prompt_embeds=nppe)


def _flux1(pipe: Any, prompt: str, dev: Any, cfg: bool) -> dict[str, Any]:
    pe, ppe, _ = pipe.encode_prompt(prompt=prompt, prompt_2=None, device=dev, num_images_per_prompt=1)
    return dict(prompt_embeds=pe, pooled_prompt_embeds=ppe)  # FLUX.1's guidance is distilled: no negative


def _flux2(pipe: Any, prompt: str, dev: Any, cfg: bool) -> dict[str, Any]:
    pe, _ = pipe.encode_prompt(prompt=prompt, device=dev, num_images_per_prompt=1)
    return dict(prompt_embeds=pe)


# The text encodings previewlab runs ahead of the call, so they are timed apart from step 1: chosen by the
# leading parameters of the pipeline's own encode_prompt (its img2img, inpaint and ControlNet variants share
# them). Any other pipeline encodes its prompt inside the call, in step 1's time.
_ENCODES: tuple[tuple[tuple[str, ...], Callable[[Any, str, Any, bool], dict[str, Any]]], ...] = (
    (("prompt", "prompt_2", "prompt_3", "device", "num_images_per_prompt", "do_classifier_free_guidance"), _sd3),
    (("prompt", "prompt_2", "device", "num_images_per_prompt", "do_classifier_free_guidance"), _sdxl),
    (("prompt", "prompt_2", "device", "num_images_per_prompt", "prompt_embeds", "pooled_prompt_embeds"), _flux1),
    (("prompt", "device", "num_images_per_prompt", "do_classifier_free_guidance"), _sd15),
    (("prompt", "device", "num_images_per_prompt", "prompt_embeds"), _flux2),
)


def encode_prompt(model: Model, prompt: str, guidance: float, pipe: Any = None) -> dict[str, Any]:
    """The pipeline's own text encoding, as keyword arguments for its __call__, when its encode_prompt is one
    of the known signatures; else the prompt itself (the call encodes it)."""
    pipe = pipe if pipe is not None else model.pipe
    own = getattr(pipe, "encode_prompt", None)
    if own is not None and model.family is not None:
        params = tuple(inspect.signature(own).parameters)
        for lead, encode in _ENCODES:
            if params[:len(lead)] == lead:
                return encode(pipe, prompt, model.device, guidance > 1.0)
    return dict(prompt=prompt)


FinalDecode = Callable[[torch.Tensor, int, int], torch.Tensor]  # final latents -> uint8 (H, W, 3) on the device


def final_decoder(model: Model) -> FinalDecode:
    """The final decode, built before the run (its constants then): the pipeline's VAE fed as its own final
    decode feeds it, a batch as one grid image. A clip decodes whole, as the pipeline decodes it (that cost
    is the run's), and its first frame is the run's image."""
    if model.space.video:
        space, clip = model.space, decoders.build_clip("vae", model)
        assert clip is not None
        causal = decoders.causal("vae", model)

        def decode_clip(latents: torch.Tensor, height: int, width: int) -> torch.Tensor:
            whole = clips.pick("all", space.latent_frames(latents, height, width), space.temporal, 0.0,
                               causal=causal)
            return to_uint8_hwc(tile(clip(latents, height, width, whole)[:, :1])[0])  # the first frame's grid

        return decode_clip
    if model.space.pixel:  # the latents are the image in [-1, 1]
        return lambda latents, height, width: to_uint8_hwc(((grid(latents).float() + 1) / 2).clamp(0, 1))
    vae = decoders.vae_decoder(model)
    return lambda latents, height, width: to_uint8_hwc(((grid(vae(latents, height, width)).float() + 1) / 2)
                                                       .clamp(0, 1))


def final_u8(model: Model, latents: torch.Tensor, height: int, width: int,
             decode: FinalDecode | None = None) -> torch.Tensor:
    """Latents -> uint8 (H, W, 3) on the device (final_decoder; decode: one built before the run)."""
    return (decode or final_decoder(model))(latents, height, width)


def takes(pipe: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments the pipeline's __call__ takes (HunyuanVideo 1.5 takes no guidance_scale: its guider
    holds it); all of them where it takes **kwargs."""
    params = inspect.signature(type(pipe).__call__).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return kwargs
    return {k: v for k, v in kwargs.items() if k in params}


def clip_args(model: Model, settings: RunSettings) -> dict[str, Any]:
    """A video pipeline's clip length for its call (num_frames, which every video pipeline takes); {} for images."""
    return {"num_frames": settings.num_frames} if model.space.video else {}


_IMG2IMG: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


class TaskError(ValueError):
    """A task the loaded model cannot run (img2img without an image-to-image pipeline); one line."""


def img2img_pipe(model: Model) -> Any:
    """The image-to-image pipeline of the loaded one, made once: AutoPipelineForImage2Image.from_pipe shares
    every loaded component (no weights are loaded or copied). Raises TaskError."""
    if model.pipe not in _IMG2IMG:
        from diffusers import AutoPipelineForImage2Image

        try:
            pipe = AutoPipelineForImage2Image.from_pipe(model.pipe)
        except Exception as e:  # diffusers raises ValueError or KeyError for a class with no img2img twin
            raise TaskError(f"init: {type(model.pipe).__name__} has no image-to-image pipeline in diffusers "
                            f"({type(e).__name__}); use text-to-image (init null)") from None
        pipe.set_progress_bar_config(disable=True)
        _IMG2IMG[model.pipe] = pipe
    return _IMG2IMG[model.pipe]


def final_image(model: Model, latents: torch.Tensor, height: int, width: int) -> np.ndarray:
    """Latents -> uint8 (H, W, 3) on the host: final_u8, then the copy (which waits for the device)."""
    return final_u8(model, latents, height, width).cpu().numpy()


def write_whole(path: Path, data: bytes) -> None:
    """Write a file whole or not at all: a disk that fills mid-write leaves no empty or torn file behind. The
    OSError raised names the file."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        e.filename = str(path)  # the file the caller asked for, not its temporary name
        raise


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
             image_path: Path | None = None, first_run: bool = False, inflight: int = 2, ranges: bool = False,
             compile_decoder: bool = False, previewer: Previewer | None = None,
             clock: Clock = time.perf_counter, stopwatch: Stopwatch | None = None, init_image: Any = None) -> Run:
    """Run one generation and measure it. Rows reach on_row in step order as soon as their times are known.

    settings.batch images per prompt (the final image is their grid); settings.init with init_image (a PIL
    image, the past run's final image): image-to-image at settings.strength through the model's img2img
    pipeline (img2img_pipe), which runs fewer steps than asked below strength 1.

    Phases mean the same in every mode. On CUDA they are spans of the main stream's timeline (events), so a
    host wait for work still queued is never counted again: drain_ms is how long previews in flight held the
    main stream after the last step, final_decode_ms the VAE decode and the uint8 conversion on the device
    plus the host copy of the image (started once the device has passed the decode)."""
    controls = controls or Controls(settings.preview)
    img2img = settings.init is not None
    if img2img and init_image is None:
        raise TaskError(f"init={settings.init}: img2img needs that run's final image")
    modular = is_modular(model.pipe)
    if modular and (img2img or model.space.video):
        what = "image to image" if img2img else "a clip"
        raise TaskError(f"{type(model.pipe).__name__}: a Modular pipeline runs text to image in the server and the "
                        f"bench, not {what} yet; use watch() in your own script")
    pipe = img2img_pipe(model) if img2img else model.pipe
    prev = previewer or Previewer(model, compile_decoder)
    start_settings = controls.get()
    shown = 1 if start_settings.batch_preview == "first" else settings.batch  # the images its previews show
    compile_ms = prev.warm(start_settings.decoder, settings.height, settings.width,
                           prev.cut(start_settings.decoder, start_settings, settings.width, settings.height, shown))
    if prev.compile and start_settings.budget > 0:  # the smaller cuts the autopilot may trade for, compiled now:
        for side in prev.sides(start_settings.decoder, start_settings, settings.width, settings.height, shown)[1:]:
            at = start_settings.changed(preview_max=side)  # a compile inside a measured preview would skew it
            compile_ms += prev.warm(start_settings.decoder, settings.height, settings.width,
                                    prev.cut(start_settings.decoder, at, settings.width, settings.height, shown))
    final_decode = None if modular else final_decoder(model)  # its constants built before the clock starts
    start_encoder = prev.encoder(start_settings.encoder).name
    # Timestep values come from a CPU copy of the schedule, so reading one never waits for the device.
    timesteps = cpu_schedule(pipe.scheduler, settings.steps)
    tap = X0Tap(pipe.scheduler)  # x0 for previews: references to what each step computed anyway
    meter = StepMeter(model, controls, run_id, width=settings.width, height=settings.height, steps=settings.steps,
                      timesteps=timesteps, previewer=prev, on_row=on_row,
                      on_frame=on_frame, on_error=on_error, should_stop=should_stop, inflight=inflight,
                      ranges=ranges, clock=clock, sw=stopwatch or Stopwatch(model.device, clock), tap=tap,
                      task=settings.task, strength=settings.strength if img2img else None, fps=settings.fps)
    # a pipeline without a step callback: the scheduler's step is the step source (steps.py)
    by_scheduler = not modular and source_of(pipe) == "scheduler"
    step_tap = StepTap(pipe.scheduler, x0=tap, on_step=meter.step if by_scheduler else None, pipe=pipe)
    sw, rng = meter.sw, meter.rng
    status = "done"  # a failure raises; the caller records it

    with torch.inference_mode():
        meter.start()  # the run's memory is read from here (on a CPU, earlier runs' freed pages go back first)
        t_start = clock()
        mark0 = sw.mark()
        sw.anchor(mark0, t_start)  # the device is idle here: the previous run ended with a copy to the host
        try:
            gen = torch.Generator("cpu").manual_seed(settings.seed)  # rebuilt for every run
            if modular:  # one call, as a user makes it: its phases marked by hooks (modular_run.py)
                step_tap.install()
                image, m = modular_run.call(model, settings, gen, meter, sw, clock)
                mark_te, loop_end, dec0, dec1, peak = m.denoise0, m.loop_end, m.decode0, m.decode1, m.peak
                sw.wait(dec1)  # passed already: the pipeline's own postprocess copied the image
                device_end = sw.host_time(dec1)
                t_copy = max(m.t_decode1 or t_start, device_end if device_end is not None else t_start)
                t_dec1 = clock()  # the pipeline's postprocess and copy, after the decode
            else:
                rng.begin("text_encode")
                embeds = encode_prompt(model, settings.prompt, settings.guidance, pipe)
                rng.end("text_encode")
                mark_te = sw.mark()
                meter.begin(mark_te)
                step_tap.install()
                task: dict[str, Any] = dict(image=init_image, strength=settings.strength) if img2img else {}
                if settings.batch > 1:
                    task["num_images_per_prompt"] = settings.batch
                task.update(clip_args(model, settings))
                if not by_scheduler:
                    task.update(callback_on_step_end=step_callback(meter.step),
                                callback_on_step_end_tensor_inputs=["latents"])
                call = dict(num_inference_steps=settings.steps, width=settings.width, height=settings.height,
                            guidance_scale=settings.guidance, generator=gen,
                            output_type="pt" if model.space.pixel else "latent",  # IF's "pt": its raw [-1, 1] image
                            **task, **embeds)
                out = pipe(**takes(pipe, call))
                latents = out.frames if model.space.video else out.images  # a clip's final image: its first frame
                rng.end("denoise")
                loop_end = sw.mark()
                meter.denoised()
                peak = meter.finish_previews()  # previews in flight finish before the final decode uses the VAE
                dec0 = sw.mark()
                rng.begin("final_decode")
                u8 = final_u8(model, latents, settings.height, settings.width, final_decode)
                dec1 = sw.mark()
                sw.wait(dec1)  # the wait the copy below makes anyway, split off so the copy alone is timed
                t_copy = clock()
                image = u8.cpu().numpy()
                rng.end("final_decode")
                t_dec1 = clock()
            rng.begin("final_encode")
            png = save_image(image)
            rng.end("final_encode")
            t_enc1 = clock()
            if image_path is not None:
                write_whole(image_path, png)
            t_end = clock()
            if len(meter.rows) + len(meter.pending) < meter.steps:  # the steps the pipeline runs
                status = "stopped"
        except BaseException:
            meter.drain()  # every completed step still reaches on_row
            raise
        finally:
            step_tap.remove()
        meter.drain()

    phases = Phases(wall_ms=(t_end - t_start) * 1e3, text_encode_ms=sw.ms(mark0, mark_te),
                    final_decode_ms=sw.ms(dec0, dec1) + (t_dec1 - t_copy) * 1e3,
                    final_encode_ms=(t_enc1 - t_dec1) * 1e3, write_ms=(t_end - t_enc1) * 1e3,
                    drain_ms=sw.ms(loop_end, dec0))
    record = run_record(model, run_id, meter.rows, settings, phases, status=status, preview=start_settings,
                        encoder=start_encoder, first_run=first_run, inflight_peak=peak, compiled=prev.compile,
                        compile_ms=compile_ms, cuda=sw.cuda, usage=meter.usage(), timing=sw.timing)
    return Run(record, meter.rows, image)

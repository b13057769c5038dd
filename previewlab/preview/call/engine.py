"""One measured generation: text encode, denoise with previews in the step callback, final decode, encode, write."""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from previewlab.preview.call import modular_run
from previewlab.preview.call.call_args import TaskError, clip_args, img2img_pipe, takes
from previewlab.preview.call.lifecycle import MeasuredCall
from previewlab.preview.controls import Controls
from previewlab.preview.call.final import FinalDecode, final_decoder, final_u8, save_image, write_whole
from previewlab.preview.frames import KeptFrames
from previewlab.preview.call.meter import StepMeter
from previewlab.preview.models import Model
from previewlab.preview.decoding.previewer import Previewer
from previewlab.preview.record.records import StepRow
from previewlab.preview.record.run import RunEvents, RunMeta, RunRecord
from previewlab.preview.settings import PreviewSettings, RunSettings
from previewlab.preview.source.sources import is_modular, source_of
from previewlab.preview.source.steps import StepTap, cpu_schedule, step_callback
from previewlab.preview.timing.stopwatch import Clock, Stopwatch
from previewlab.preview.source.targets import X0Tap
from previewlab.preview.call.png_text import png_text
from previewlab.preview.call.text_encode import encode_prompt


@dataclass
class Run:
    record: RunRecord
    rows: list[StepRow] = field(default_factory=list)
    image: np.ndarray | None = None  # final image, uint8 (H, W, 3)
    kept: KeptFrames | None = None   # the frames it sent, by reference: its progress (judging/progress.py)


@dataclass(frozen=True)
class RunContext:
    """One generation as generate() is asked it: what to run, what may change while it runs, its input and
    output, and how it is measured. The defaults are a plain bench run's: no live change, no file written."""
    # what to run
    model: Model
    settings: RunSettings
    run_id: str
    # while it runs
    controls: Controls | None = None     # live preview changes (the server's `set`); None: settings.preview throughout
    should_stop: Callable[[], bool] | None = None  # asked after every step; True ends the loop there ("stopped")
    # its input and output
    init_image: Any = None               # img2img (settings.init): that run's final image, a PIL image
    image_path: Path | None = None       # the final PNG, written whole or not at all; None: encoded, not written
    # how it is measured
    first_run: bool = False              # recorded: the first run after load pays one-off costs (allocator, caches)
    inflight: int = 2                    # overlap: previews in flight at once at most; one more is skipped
    ranges: bool = False                 # profiler ranges named previewlab.<stage>, for a torch.profiler trace
    previewer: Previewer | None = None   # decoders kept across runs (the worker's); None: built for this run
    compile_decoder: bool = False        # a previewer built here compiles its decoders, before the clock starts
    clock: Clock = time.perf_counter     # the host clock (tests: a fake one); a stopwatch given brings its own
    stopwatch: Stopwatch | None = None   # None: one on the model's device and `clock`


def generate(context: RunContext, events: RunEvents | None = None) -> Run:
    """Run one generation and measure it. `events` hear its rows (in step order, as soon as their times are
    known), frames and preview errors as they come: on the calling thread, or on the encode thread for what an
    overlap preview makes. Its started and ended are the caller's to tell (it holds the run's meta, and reads
    the record returned here).

    settings.batch images per prompt (the final image is their grid); settings.init with init_image (a PIL
    image, the past run's final image): image-to-image at settings.strength through the model's img2img
    pipeline (img2img_pipe), which runs fewer steps than asked below strength 1. Raises TaskError for a task
    the model cannot run.

    Phases mean the same in every mode. On CUDA they are spans of the main stream's timeline (events), so a
    host wait for work still queued is never counted again: drain_ms is how long previews in flight held the
    main stream after the last step, final_decode_ms the VAE decode and the uint8 conversion on the device
    plus the host copy of the image (started once the device has passed the decode)."""
    ctx, model, settings = context, context.model, context.settings
    controls = ctx.controls or Controls(settings.preview)
    modular = _check(ctx)
    pipe = img2img_pipe(model) if settings.init is not None else model.pipe
    prev = ctx.previewer or Previewer(model, ctx.compile_decoder)
    start = controls.get()
    compile_ms = _warm(prev, start, settings)
    final_decode = None if modular else final_decoder(model)  # its constants built before the clock starts
    prev.encoder(start.encoder)  # built before the clock starts
    # Timestep values come from a CPU copy of the schedule, so reading one never waits for the device.
    timesteps = cpu_schedule(pipe.scheduler, settings.steps)
    tap = X0Tap(pipe.scheduler)  # x0 for previews: references to what each step computed anyway
    meter = StepMeter(model, ctx.run_id, settings, controls, sw=ctx.stopwatch or Stopwatch(model.device, ctx.clock),
                      timesteps=timesteps, previewer=prev, events=events, should_stop=ctx.should_stop,
                      inflight=ctx.inflight, ranges=ctx.ranges, tap=tap)
    # a pipeline without a step callback: the scheduler's step is the step source (steps.py)
    by_scheduler = not modular and source_of(pipe) == "scheduler"
    call = MeasuredCall(model, meter.sw)
    step_tap = StepTap(pipe.scheduler, x0=tap, on_step=call.step if by_scheduler else None, pipe=pipe)
    meta = RunMeta.of(model, ctx.run_id, replace(settings, preview=start))  # the record's: its start's settings

    with torch.inference_mode():
        meter.start()  # the run's memory is read from here (on a CPU, earlier runs' freed pages go back first)
        call.text_start()  # the device is idle here: the previous run ended with a copy to the host
        try:
            gen = torch.Generator("cpu").manual_seed(settings.seed)  # rebuilt for every run
            if modular:  # one call, as a user makes it: its phases marked by hooks (modular_run.py)
                step_tap.install()
                image = modular_run.call(model, settings, gen, call, meta, meter)
            else:
                image = _classic(ctx, pipe, gen, call, meta, meter, step_tap=step_tap, by_scheduler=by_scheduler,
                                 final_decode=final_decode)
            _request_end(ctx, call, meter, image, meta, sampler=type(pipe.scheduler).__name__)
        except BaseException:
            call.fail()  # every completed step still reaches events.row; the caller records the failure
            raise
        finally:
            step_tap.remove()
        closed = call.close(first_run=ctx.first_run, compiled=prev.compile, compile_ms=compile_ms)
    assert closed is not None
    return Run(closed.record, closed.rows, image, closed.kept)


def _check(ctx: RunContext) -> bool:
    """Whether the model's pipeline is a Modular one; raises TaskError for a task it cannot run here."""
    img2img, pipe = ctx.settings.init is not None, ctx.model.pipe
    if img2img and ctx.init_image is None:
        raise TaskError(f"init={ctx.settings.init}: img2img needs that run's final image")
    modular = is_modular(pipe)
    if modular and (img2img or ctx.model.space.video):
        what = "image to image" if img2img else "a clip"
        raise TaskError(f"{type(pipe).__name__}: a Modular pipeline runs text to image in the server and the "
                        f"bench, not {what} yet; use watch() in your own script")
    return modular


def _warm(prev: Previewer, start: PreviewSettings, settings: RunSettings) -> float:
    """Build (and with a compiling previewer, compile) the starting decoder at the run's cut before the clock
    starts; ms spent compiling."""
    shown = 1 if start.batch_preview == "first" else settings.batch  # the images its previews show
    w, h = settings.width, settings.height
    compile_ms = prev.warm(start.decoder, h, w, prev.cut(start.decoder, start, w, h, shown))
    if prev.compile and start.budget > 0:  # the smaller cuts the autopilot may trade for, compiled now:
        for side in prev.sides(start.decoder, start, w, h, shown)[1:]:
            at = start.changed(preview_max=side)  # a compile inside a measured preview would skew it
            compile_ms += prev.warm(start.decoder, h, w, prev.cut(start.decoder, at, w, h, shown))
    return compile_ms


def _request_end(ctx: RunContext, call: MeasuredCall, meter: StepMeter, image: np.ndarray, meta: RunMeta, *,
                 sampler: str) -> None:
    """The final image encoded as PNG, with the run's settings and `sampler` (the scheduler's class) in its text
    as A1111 reads them, and written whole where ctx asks: the request ends there. Its encode is timed from where
    the final decode ended."""
    ranges, clock = meter.ranges, meter.sw.clock
    t_dec1 = call.marks.t_decoded
    assert t_dec1 is not None
    ranges.begin("final_encode")
    png = save_image(image, png_text(meta, sampler))
    ranges.end("final_encode")
    t_enc1 = clock()
    if ctx.image_path is not None:
        write_whole(ctx.image_path, png)
    t_end = clock()
    call.request_end((t_enc1 - t_dec1) * 1e3, (t_end - t_enc1) * 1e3, t_end)


def _classic(ctx: RunContext, pipe: Any, gen: torch.Generator, call: MeasuredCall, meta: RunMeta,
             meter: StepMeter, *, step_tap: StepTap, by_scheduler: bool, final_decode: FinalDecode | None
             ) -> np.ndarray:
    """A pipeline with encode_prompt and latent output: the prompt encoded ahead, the call denoising only, the
    final decode ours (previews in flight finish before it uses the VAE). The final image as uint8 (H, W, 3) on
    the host; the call's marks say where its phases passed (the caller marks the start, the encode and the
    write)."""
    model, settings, sw, ranges = ctx.model, ctx.settings, meter.sw, meter.ranges
    ranges.begin("text_encode")
    embeds = encode_prompt(model, settings.prompt, settings.guidance, pipe)
    ranges.end("text_encode")
    call.text_end(denoise_begins=True)
    call.begin(meta, meter)
    step_tap.install()
    task: dict[str, Any] = {}
    if settings.init is not None:
        task.update(image=ctx.init_image, strength=settings.strength)
    if settings.batch > 1:
        task["num_images_per_prompt"] = settings.batch
    task.update(clip_args(model, settings))
    if not by_scheduler:
        task.update(callback_on_step_end=step_callback(call.step), callback_on_step_end_tensor_inputs=["latents"])
    args = dict(num_inference_steps=settings.steps, width=settings.width, height=settings.height,
                guidance_scale=settings.guidance, generator=gen,
                output_type="pt" if model.space.pixel else "latent",  # IF's "pt": its raw [-1, 1] image
                **task, **embeds)
    out = pipe(**takes(pipe, args))
    latents = out.frames if model.space.video else out.images  # a clip's final image: its first frame
    last = call.latest
    if last is not None and last.dim() != latents.dim():
        # its latent output is not in its steps' layout: LTX-2 returns them unpacked and denormalized, which the
        # final decode (fed as a step's latents are) would unscale again; its last step's are what it decoded from
        latents = last
    ranges.end("denoise")
    call.drain_for_decode()  # previews in flight finish before the final decode uses the VAE
    ranges.begin("final_decode")
    u8 = final_u8(model, latents, settings.height, settings.width, final_decode)
    call.decode_queued()  # waits for the device there, so the copy below is timed alone
    t_copy = sw.clock()
    image = u8.cpu().numpy()
    ranges.end("final_decode")
    call.copied(t_copy)
    return image

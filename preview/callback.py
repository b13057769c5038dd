"""A drop-in diffusers step-end callback: measure, watch and export the previews of your own pipeline call.

    from previewlab import serve, watch as preview_watch
    watch = preview_watch(pipe, decoder="taesd", every=2)  # the TAE the pipe's folder ships, or taesd="PATH"
    serve(watch)                                       # optional: the live page
    image = pipe(prompt, callback_on_step_end=watch,
                 callback_on_step_end_tensor_inputs=watch.tensor_inputs).images[0]
    watch.rows; watch.to_csv("costs.csv")

The callback returns the pipeline's kwargs untouched. It never moves, copies or re-wraps the user's models;
the phases of the call (text encoding, denoising, final decode) come from forward hooks on the pipeline's own
text encoders and VAE decoder, and one forward pre-hook on the UNet that removes itself at the first step.
"""
from __future__ import annotations

import math
import sys
import threading
import time
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Callable, Literal

import numpy as np
import torch
from diffusers.callbacks import PipelineCallback

from .decoders import DecoderError, DecoderName, taesd_refusal
from .encoders import EncoderName
from .digest import digest
from .engine import Controls, Phases, Previewer, StepMeter, cpu_schedule, run_record, save_image
from .models.families import Family, FamilyError, vae_of
from .models.reading import latent_space
from .models import Model, default_size, denoiser, previews_of
from .models.video_presets import clip_defaults
from .csv_writer import to_csv_text
from .records import STEP_COLUMNS, RunRecord, StepRow
from .run_ids import SCRIPT_IDS
from .run import RunEnd, RunEvents, RunMeta, ScriptCall
from .clips import clip_length
from .names import BatchPreview, DecodeAt, FrameChoice
from .settings import Mode, PreviewSettings, check_fps
from .stopwatch import Clock, Device, Stopwatch
from .steps import CallbackSteps, Source, Step, StepTap, chunked, source_of
from .targets import Target, X0Tap
from . import modular


def model_of(pipe: Any, taesd: str | None) -> Model:
    """Describe a user's pipeline as the engine's Model, without touching its modules: the TAE `taesd` names,
    else the one its folder ships, and the folder's latent2rgb.json (models.previews_of, as the server loads a
    folder). Raises FamilyError for a pipeline previewlab cannot preview, ModelError for a TAE of another
    family or width or unreadable factors."""
    family: Family | None = latent_space(pipe).family
    device = torch.device(pipe._execution_device)
    dtype = denoiser(pipe).dtype
    tiny, kind, own_rgb = previews_of(pipe, family, taesd)
    if tiny is not None:
        tiny.to(device, dtype).eval().requires_grad_(False)  # a decoder of ours, not the user's: ours to place
    offload = "model" if getattr(pipe, "_offload_gpu_id", None) is not None else "none"
    return Model(name=type(pipe).__name__, pipe=pipe, family=family, synthetic=False, taesd=tiny, taesd_kind=kind,
                 device=device, dtype=dtype, default_size=default_size(pipe, family), load_s=0.0,
                 offload=offload, latent_rgb=own_rgb)


def image_size(model: Model, latents: torch.Tensor, size: tuple[int, int] | None,
               latent_hw: tuple[int, int] | None = None) -> tuple[int, int]:
    """(height, width) in pixels of the call's image, from the callback's latents without a device read:
    spatial latents carry it; FLUX's packed ones only their count of 2x2 patches, so a square is assumed
    unless `size` says otherwise; LTX's tokens not even that, so the latent height and width its transformer
    was called with (latent_hw) say it. Raises FamilyError for LTX latents with neither."""
    if size is not None:
        return size
    vsf = model.vae_scale_factor
    if model.space.packing == "ltx":
        if latent_hw is None:
            raise FamilyError(f"{model.space.pipeline}: its packed clip latents do not say the clip's size; pass "
                              "size=(height, width)")
        return latent_hw[0] * vsf, latent_hw[1] * vsf
    if (latents.dim() == 5 and not model.space.video and latents.shape[1] == 1
            and latents.shape[-1] >= model.space.channels):
        return int(latents.shape[2]) * vsf, int(latents.shape[3]) * vsf  # one frame, channels last (Kandinsky 5)
    if latents.dim() >= 4:  # (B, C, h, w), and clips: (B, C, T, h, w) or (B, T, C, h, w)
        return int(latents.shape[-2]) * vsf, int(latents.shape[-1]) * vsf
    side = int(round(math.sqrt(int(latents.shape[1])))) * 2 * vsf
    return side, side


def call_inputs(pipe: Any) -> tuple[int, float | None]:
    """(seed, guidance scale) of the pipeline's call in progress, for its record, without a device read: the
    guidance scale it was called with (its __call__'s `guidance_scale`, else the `_guidance_scale` diffusers
    pipelines keep for the call), and the seed of the torch.Generator it was given (initial_seed(), a host value;
    a list's first, one per image). (-1, None) where the call does not show them: no generator (a random seed),
    or a pipeline whose __call__ is not on the stack (a Modular one). A generator already drawn from before the
    call still says the seed it was made with: the call did not start from it."""
    found: dict[str, Any] = {}
    frame: Any = sys._getframe(1)
    while frame is not None:  # the callback, or the scheduler's step, runs inside the pipeline's __call__
        if frame.f_code.co_name == "__call__" and frame.f_locals.get("self") is pipe:
            found = frame.f_locals
            break
        frame = frame.f_back
    gen = found.get("generator")
    gen = gen[0] if isinstance(gen, (list, tuple)) and gen else gen
    seed = int(gen.initial_seed()) if isinstance(gen, torch.Generator) else -1
    for guidance in (found.get("guidance_scale"), getattr(pipe, "_guidance_scale", None)):
        if isinstance(guidance, (int, float)) and not isinstance(guidance, bool):
            return seed, float(guidance)
    return seed, None


@dataclass
class _Call:
    """The marks of one pipeline call, set by the hooks as its phases pass. Host times (t_*) are seconds on the
    watch's clock; marks are the stopwatch's (device events on CUDA, host times otherwise); None: not reached."""
    t0: float | None = None          # the call's start: its text encoding, else its first UNet forward
    te0: Any = None                  # text encoding
    te1: Any = None
    denoise0: Any = None             # where step 1 begins
    finished: bool = False           # the last step's callback has run
    t_denoised: float | None = None
    denoised: Any = None
    decode0: Any = None              # the pipeline's own final decode, after the last step
    decode1: Any = None
    t_decoded: float | None = None   # host time at decode1: the device may still be decoding
    final_encode_ms: float = 0.0     # save(): PNG encode and write
    write_ms: float = 0.0
    t_end: float | None = None
    meta: RunMeta | None = None      # set at the first step


class Watch(PipelineCallback):
    tensor_inputs = ["latents"]

    def __init__(self, pipe: Any, *, decoder: DecoderName = "latent2rgb", every: int = 1, taesd: str | None = None,
                 mode: Mode = "overlap", encoder: EncoderName = "turbojpeg", quality: int = 80, preview_max: int = 0,
                 budget: float = 0.0, target: Target = "auto", batch_preview: BatchPreview = "grid",
                 frames: FrameChoice = "first", decode_at: DecodeAt = "preview", fps: float = 0.0, inflight: int = 2,
                 clock: Clock = time.perf_counter, device: Device | None = None,
                 size: tuple[int, int] | None = None, source: Source | Literal["auto"] = "auto") -> None:
        """size: (height, width) of the images, for FLUX pipelines at a non-square size (their packed latents
        do not say it). frames: a clip's preview frames (first, middle, all, or N spread evenly); fps: the
        clip's playback rate, for the page's animated previews (0: its family's). decode_at: where the preview
        decoder stops (settings.PreviewSettings.decode_at). source: where the steps come from (steps.py):
        `callback` (pass the watch as callback_on_step_end), `scheduler` (the scheduler's own step, for the call;
        call the pipeline as it is) or `modular` (a block in a Modular pipeline's denoising loop); `auto` takes
        the callback where the pipeline has one that hands over latents, the block for a Modular pipeline, else
        the scheduler. clock and device are for tests: a fake host clock and a fake asynchronous device."""
        super().__init__()
        self.pipe = pipe
        self.model = model_of(pipe, taesd)
        self.controls = Controls(PreviewSettings(decoder=decoder, every=every, mode=mode, encoder=encoder,
                                                 quality=quality, preview_max=preview_max, budget=budget,
                                                 target=target, batch_preview=batch_preview, frames=frames,
                                                 decode_at=decode_at))
        # a clip's rate: the one given, else its family's (what diffusers' own examples export at)
        self.fps = check_fps(fps) or (clip_defaults(pipe, self.model.family)[1] if self.model.space.video else 0.0)
        if decoder == "taesd" and self.model.taesd is None and not self.model.space.pixel:
            raise DecoderError(taesd_refusal(self.model).replace("--taesd PATH", "taesd=PATH"))
        self.previewer = Previewer(self.model)
        self.inflight, self.size = inflight, size
        self.source: Source = source_of(pipe, source)
        self.tap = X0Tap(getattr(pipe, "scheduler", None))
        self.step_tap = StepTap(getattr(pipe, "scheduler", None), x0=self.tap, pipe=pipe,
                                on_step=self._on_step if self.source == "scheduler" else None, chunked=chunked(pipe))
        # a Modular pipeline's loop block, feeding this watch
        self._block = modular.attach(pipe, self._on_step) if self.source == "modular" else None
        self._callback_steps = CallbackSteps()  # a PNDM or Heun loop calls the callback more often than it steps
        self._rows: list[StepRow] = []         # the rows of the latest call, in step order
        self.clock = clock
        self.sw = Stopwatch(self.model.device, clock, backend=device)
        self.records: list[RunRecord] = []     # one per finished call
        self.meter: StepMeter | None = None
        self._call = _Call()                   # marks of the call in progress
        self._previewing = False
        self._stop = threading.Event()
        self._hooks: list[Any] = []
        self._unet_hook: Any = None
        self._latent_hw: tuple[int, int] | None = None  # LTX: the latent height and width of the call's clip
        # attach(): the live page (previewlab.serve(watch) attaches itself)
        self.events: RunEvents | None = None
        self._close_events: Callable[[], None] | None = None
        self._hook()

    def attach(self, events: RunEvents | None, close: Callable[[], None] | None = None) -> None:
        """Tell `events` of this watch's runs too, from the denoising thread (None detaches); remove() calls
        `close`."""
        self.events, self._close_events = events, close

    @property
    def running(self) -> bool:
        """A pipeline call is between its first step and its last."""
        return self.meter is not None and not self._call.finished

    # -- the call's phases, from hooks on the user's own modules ----------------------------------------------
    def _hook(self) -> None:
        for name in ("text_encoder", "text_encoder_2", "text_encoder_3"):
            te = getattr(self.pipe, name, None)
            if te is not None:
                self._hooks.append(te.register_forward_pre_hook(lambda *a: self._text_start()))
                self._hooks.append(te.register_forward_hook(lambda *a: self._text_end()))
        vae = vae_of(self.pipe)
        if vae is not None:  # pixel space has no final decode
            self._hooks.append(vae.decoder.register_forward_pre_hook(lambda *a: self._decode_start()))
            self._hooks.append(vae.decoder.register_forward_hook(lambda *a: self._decode_end()))
        self._arm()

    def _arm(self) -> None:
        """A one-shot hook: the UNet's first forward of the next call marks where step 1 begins."""
        if self._unet_hook is None:
            self._unet_hook = denoiser(self.pipe).register_forward_pre_hook(self._first_forward, with_kwargs=True)

    def _first_forward(self, module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        """The denoiser's first forward of a call. LTXPipeline calls its transformer with the clip's latent
        height and width, which its packed latents do not say (image_size reads them)."""
        h, w = kwargs.get("height"), kwargs.get("width")
        self._latent_hw = (h, w) if isinstance(h, int) and isinstance(w, int) else None
        self._unet_start()

    def _unet_start(self) -> None:
        if self._call.finished:  # a call without text encoding (prompt_embeds given) follows another
            self._close_call()
        c = self._call
        if c.t0 is None:  # no text encoding in this call: the call's clock starts here
            c.t0, c.denoise0 = self.clock(), self.sw.mark()
            self.sw.anchor(c.denoise0, c.t0)
        if c.denoise0 is None:
            c.denoise0 = self.sw.mark()
        if self._unet_hook is not None:
            self._unet_hook.remove()
            self._unet_hook = None
        if not self.step_tap.installed:  # for this call only: the user's scheduler is left as it was after it
            self.step_tap.install()

    def _text_start(self) -> None:
        if self._call.finished:
            self._close_call()
        c = self._call
        if c.t0 is None:
            c.t0, c.te0 = self.clock(), self.sw.mark()
            self.sw.anchor(c.te0, c.t0)  # only if the device is idle: the user's work may be queued

    def _text_end(self) -> None:
        self._call.te1 = self.sw.mark()

    # the pipeline's own final decode, not a preview's (a preview may run the same VAE)
    def _decode_start(self) -> None:
        if not self._previewing and self.meter is not None and not self._call.finished:
            self._end_denoise()  # a loop that ended before its last step (stopped, or fewer steps than planned)
        if not self._previewing and self._call.finished:
            self._call.decode0 = self.sw.mark()

    def _decode_end(self) -> None:
        if not self._previewing and self._call.finished:
            self._call.decode1, self._call.t_decoded = self.sw.mark(), self.clock()

    # -- the steps, from whichever source ----------------------------------------------------------------------
    def callback_fn(self, pipeline: Any, step_index: int, timestep: Any, callback_kwargs: dict[str, Any]) -> dict[str, Any]:
        """diffusers' step callback: the step source when the watch's source is `callback` (a watch fed by
        another source passed as the callback too sees each step once, from its own source)."""
        if self.source == "callback":
            step = self._callback_steps.step(pipeline, step_index, timestep, callback_kwargs["latents"])
            if step is not None and self._on_step(step):
                pipeline._interrupt = True
        return callback_kwargs

    def _on_step(self, step: Step) -> bool:
        """The end of a step from the watch's source; True when the run should stop."""
        if step.index == 0 or self.meter is None:
            self._begin(step)
        assert self.meter is not None
        self._previewing = True
        try:
            stop = self.meter.step(step)
        finally:
            self._previewing = False
        if step.index + 1 >= (step.total or 10**9) or getattr(step.pipe, "_interrupt", False):
            self._end_denoise()
        return stop

    def _begin(self, step: Step) -> None:
        if self.meter is not None:
            self._close_call()
        # the store's id where a server shows the run (serve(watch)), else the same scheme within the process
        new_id = getattr(self.events, "new_id", None)
        self.run_id = new_id() if callable(new_id) else SCRIPT_IDS.new()
        steps, latents, sched = step.total, step.latents, self.step_tap.sched
        # img2img and inpaint run the tail of the schedule the pipeline set (its length is host metadata)
        set_ts = getattr(sched, "timesteps", None)
        order = max(1, int(getattr(sched, "order", 1) or 1))  # Heun-like: two entries a step
        total = len(set_ts) // order if set_ts is not None else steps
        timesteps = cpu_schedule(sched, max(total, steps))[-steps:] if steps else []
        known = (step.height, step.width) if step.height and step.width else None
        h, w = image_size(self.model, latents, self.size or known, self._latent_hw)
        self._rows = []
        events, rid = self.events, self.run_id
        space = self.model.space
        frames = clip_length(space.latent_frames(latents, h, w), space.temporal) if space.video else 1
        seed, guidance = call_inputs(self.pipe)
        meta = RunMeta.of(self.model, rid, ScriptCall(steps=steps, width=w, height=h, preview=self.controls.get(),
                                                      batch=int(latents.shape[0]), num_frames=frames, fps=self.fps,
                                                      seed=seed, guidance=guidance))
        on_error = (lambda message: events.error(rid, message)) if events else None
        self.meter = StepMeter(self.model, self.controls, rid, width=w, height=h, steps=steps,
                               timesteps=timesteps, previewer=self.previewer, inflight=self.inflight, task="script",
                               on_row=self._row, on_frame=events.frame if events else None, on_error=on_error,
                               should_stop=self._stop.is_set, clock=self.clock, sw=self.sw, tap=self.tap,
                               fps=self.fps)
        c = self._call
        self.meter.begin(c.denoise0)
        c.meta = meta
        if c.t0 is None:
            c.t0 = self.clock()
        self._stop.clear()
        if events:
            events.started(meta)

    @property
    def rows(self) -> list[StepRow]:
        """The latest call's per-step rows (the bench's schema), all of them once the call has returned."""
        if self.meter is not None and self._call.finished:
            self.meter.drain()  # after the call: waiting here costs the user's loop nothing
        return self._rows

    def _row(self, row: StepRow) -> None:
        self._rows.append(row)
        if self.events:
            self.events.row(row)

    def _end_denoise(self) -> None:
        # Rows still waiting on the device or the encode thread are handed over when the call is closed or
        # `rows` is read: waiting for them here would add a device wait inside the user's loop.
        c = self._call
        c.finished, c.t_denoised, c.denoised = True, self.clock(), self.sw.mark()
        if self.meter is not None:
            self.meter.denoised()
        self.step_tap.remove()
        self._arm()

    # -- the end of the request ------------------------------------------------------------------------------
    def save(self, image: Any, path: str | Path) -> Path:
        """Encode the final image as PNG and write it, timed: the request ends here."""
        arr = np.asarray(image.convert("RGB") if hasattr(image, "convert") else image)
        t0 = self.clock()
        png = save_image(arr.astype(np.uint8))
        t1 = self.clock()
        Path(path).write_bytes(png)
        t2 = self.clock()
        c = self._call
        c.final_encode_ms, c.write_ms, c.t_end = (t1 - t0) * 1e3, (t2 - t1) * 1e3, t2
        self._close_call()
        return Path(path)

    def finish(self) -> RunRecord | None:
        """Close the latest call's record without saving an image (save() does this for you)."""
        return self._close_call()

    def _close_call(self) -> RunRecord | None:
        c, meter = self._call, self.meter
        self._call, self.meter = _Call(), None
        if meter is None or c.meta is None:
            return None
        peak = meter.finish_previews()
        meter.drain()
        sw = self.sw
        end = c.t_end or self._device_end(c) or self.clock()
        phases = Phases(wall_ms=(end - (end if c.t0 is None else c.t0)) * 1e3, text_encode_ms=sw.ms(c.te0, c.te1),
                        final_decode_ms=sw.ms(c.decode0, c.decode1), final_encode_ms=c.final_encode_ms,
                        write_ms=c.write_ms)
        meta = c.meta
        status = "done" if len(meter.rows) >= meta.steps else "stopped"
        rec = run_record(self.model, meter.run_id, meter.rows, meta, phases, status=status,
                         preview=meta.preview, inflight_peak=peak, cuda=sw.cuda, usage=meter.usage(),
                         timing=sw.timing)
        self.records.append(rec)
        if self.events:
            self.events.ended(RunEnd.of(meta, rec, meter.rows))
        return rec

    def _device_end(self, c: _Call) -> float | None:
        """Without save(), the call ends where the device finished its last work: the final decode's end
        (or the last step's, for output_type="latent"), mapped onto the host clock. A host timestamp taken
        when the work was queued would end the call before the device did."""
        for mark, host in ((c.decode1, c.t_decoded), (c.denoised, c.t_denoised)):
            if host is not None:
                self.sw.wait(mark)  # after the call, so free; anchors the clocks if none met yet
                device = self.sw.host_time(mark)
                return max(host, device) if device is not None else host
        return None

    def summary(self, budget: float = 5.0) -> str:
        """The latest call in a few lines: its cost, where a preview's time went, its memory, and what to set to
        keep previews under `budget` percent (digest.py). Closes the call if it has finished."""
        rec = self.record
        if rec is None:
            return "no finished call yet"
        return "\n".join(digest(rec, self.rows, budget))

    @property
    def record(self) -> RunRecord | None:
        """The latest call's record, closing it if the call has finished."""
        if self.meter is not None and self._call.finished:
            self._close_call()
        return self.records[-1] if self.records else None

    def to_csv(self, path: str | Path) -> Path:
        Path(path).write_text(to_csv_text(self.rows, STEP_COLUMNS))
        return Path(path)

    # -- what the embedded server may ask ------------------------------------------------------------------------
    def request_stop(self) -> None:
        self._stop.set()

    def remove(self) -> None:
        """Remove the hooks from the user's modules and stop the server, if any."""
        for h in self._hooks:
            h.remove()
        self._hooks.clear()
        if self._unet_hook is not None:
            self._unet_hook.remove()
            self._unet_hook = None
        self.step_tap.remove()
        if self._block is not None:
            modular.detach(self.pipe, self._block)
            self._block = None
        if self._close_events is not None:
            self._close_events()


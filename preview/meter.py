"""The step callback: what previewlab adds to the denoising loop, and everything it measures per step.

With decoder `none` it reads a clock, fills one row and returns the pipeline's dict untouched. It never waits
on a socket: frames and rows go to callbacks that must return at once (the server hands them to its loop).
"""
from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from . import clips, decoders, encoders
from .busy import busy_for
from .controls import Controls
from .frames import Frame, grid, tile, to_uint8_chw, to_uint8_hwc
from .memory import Memory, reading_for
from .models import Model
from .overlap import Overlap
from .previewer import Previewer
from .ranges import Ranges
from .records import StepRow, on_path_ms
from .planner import Planner, also as _also
from .settings import PreviewSettings
from .steps import Step
from .stopwatch import Clock, Stopwatch
from .streams import jpeg_stream
from .targets import X0Tap, choose

log = logging.getLogger("previewlab")




@dataclass
class _Marks:
    """Stopwatch handles of one step, turned into milliseconds once the device has passed them."""
    row: StepRow
    start: Any
    cb: Any
    dec0: Any = None
    dec1: Any = None
    res1: Any = None
    copied: Any = None     # CUDA overlap: the event after the device -> host copy
    future: Any = None     # overlap: the encode thread's work for this row
    end: Any = None        # CUDA overlap: the mark where the callback returned (the next row's start)
    touched: bool = False  # preview work ran in this step, or a preview was in flight while it denoised


@dataclass(frozen=True)
class Usage:
    """What a run held and how busy it kept the device (memory.py, busy.py), for its record."""
    peak_mem_mb: float = 0.0
    mem_source: str = ""
    busy_pct: float | None = None
    busy_source: str = ""


@dataclass(frozen=True)
class _Render:
    """One preview's pixels: latents -> frames (F, 3, H, W) in [0, 1] (an image is one frame, a batch one grid
    per frame), the latent frames it reads, and the rate that plays its frames (0: one frame)."""
    fn: Callable[[torch.Tensor], torch.Tensor]
    latent_frames: int
    fps: float


class StepMeter:
    """The step callback and everything it measures: one per run (generate) or per pipeline call (watch).

    Rows reach on_row in step order as soon as their times are known (on CUDA: once the device has passed
    their events, asked without waiting).
    """

    def __init__(self, model: Model, controls: Controls, run_id: str, *, width: int, height: int,
                 steps: int, timesteps: list[float] | None = None, previewer: Previewer | None = None,
                 on_row: Callable[[StepRow], None] | None = None, on_frame: Callable[[Frame], None] | None = None,
                 on_error: Callable[[str], None] | None = None, should_stop: Callable[[], bool] | None = None,
                 inflight: int = 2, ranges: bool = False, clock: Clock = time.perf_counter,
                 sw: Stopwatch | None = None, tap: X0Tap | None = None, task: str = "txt2img",
                 strength: float | None = None, fps: float = 0.0) -> None:
        self.model, self.controls, self.run_id = model, controls, run_id
        self.fps = fps          # a clip's playback rate: a clip preview plays its frames over the clip's duration
        self.task, self.strength = task, strength
        self.batch = 1          # images in the call: read from the first step's latents
        self._first = True
        self.width, self.height, self.steps, self.timesteps = width, height, steps, timesteps or []
        self.prev = previewer or Previewer(model)
        self.on_row, self.on_frame, self.on_error, self.should_stop = on_row, on_frame, on_error, should_stop
        self.inflight, self.clock = inflight, clock
        self.sw = sw or Stopwatch(model.device, clock)
        self.tap = tap          # the scheduler's x0 of each step, when a preview asks for it
        self._x0_told = False
        self.rng = Ranges(ranges)
        self.overlap: Overlap | None = None  # made on first use: sync-only runs never start its thread
        self.plan = Planner(model, controls, self.prev, width, height, steps)
        self.rows: list[StepRow] = []
        self.pending: list[_Marks] = []
        self.last: Any = None  # the mark where the current step's denoising began
        self.in_flight = False  # a preview may still be running beside the next step
        self.memory = Memory(reading_for(model.device))
        self._memory_started = False
        self.busy = busy_for(model.device)
        self._busy_pct: float | None = None

    def start(self) -> None:
        """The run starts now: its memory is read from here (else from begin())."""
        self.memory.start()
        self._memory_started = True

    def begin(self, mark: Any = None) -> None:
        """The denoising starts now (or at an earlier mark)."""
        if not self._memory_started:
            self.start()
        self.busy.start()
        self.last = mark if mark is not None else self.sw.mark()
        self.rng.begin("denoise")

    def denoised(self) -> None:
        """The denoising loop has ended: how busy it kept the device is known."""
        if self._busy_pct is None:
            self._busy_pct = self.busy.stop()

    def usage(self) -> Usage:
        """The run's peak memory and the device's busy share while it denoised (call at the run's end)."""
        self.denoised()
        busy = self._busy_pct
        return Usage(self.memory.peak_mb(), self.memory.source, busy, self.busy.source if busy is not None else "")

    def step(self, step: Step) -> bool:
        """The end of a step, from whichever source (steps.py): schedule the step, preview it when due, hand over
        the rows whose times are known; True when the run should stop. Its first mark is where the step's
        denoising ended, its last where the next step's begins: everything between them is on the denoising
        path."""
        cb = self.sw.mark()
        self.rng.end("denoise")
        if self._first:
            self._read_call(step)
        s = self.controls.get()
        row = self._scheduled_row(step.index, s)
        marks = _Marks(row, self.last, cb, touched=self.in_flight)
        if self.plan.due(row.step, row.decoder, row.every):
            self._preview(row, marks, s, step.latents)
        # the next step is touched when a preview may still be running beside it
        self.in_flight = s.mode == "overlap" and (marks.touched and row.preview == 1 or
                                                  (self.overlap is not None and self.overlap.flight.count > 0))
        self.pending.append(marks)
        self.emit(False)
        stop = bool(self.should_stop and self.should_stop())
        self.rng.begin("denoise")
        self.last = marks.end = self.sw.mark()
        return stop

    def _read_call(self, step: Step) -> None:
        """At the first step: the batch (from the latents' shape, no device read) and the steps the pipeline
        really runs (img2img below strength 1 runs fewer than asked), which the autopilot plans for."""
        self._first = False
        latents = step.latents
        if isinstance(latents, torch.Tensor) and latents.dim() >= 3:
            self.batch = self.plan.batch = int(latents.shape[0])
        n = getattr(step.pipe, "_num_timesteps", None)
        if not isinstance(n, int) and 0 < step.total:
            n = step.total
        if isinstance(n, int) and 0 < n < self.steps:
            self.steps = self.plan.steps = n
            self.timesteps = self.timesteps[-n:]  # the schedule's tail: img2img starts part-way down

    def _scheduled_row(self, i: int, s: PreviewSettings) -> StepRow:
        """Step i's row as the planner schedules it: its decoder, interval and event."""
        decoder, every, event = self.plan.plan(s)
        ts = self.timesteps[i] if i < len(self.timesteps) else -1.0
        return StepRow(self.run_id, i + 1, ts, decoder=decoder, every=every, encoder="", quality=s.quality,
                       width=self.width, height=self.height, mode=s.mode, event=event, batch=self.batch,
                       task=self.task, strength=self.strength, decode_at=s.decode_at)

    # ---- preview dispatch ----------------------------------------------------------------------------------------

    def _preview(self, row: StepRow, marks: _Marks, s: PreviewSettings, latents: torch.Tensor) -> None:
        """Make this step's preview with row.decoder: in the callback (sync) or handed to the encode thread
        (overlap). Any failure on the way becomes the row's event and a cheaper decoder, never the run's end."""
        decoder, s = row.decoder, self.plan.sized(s)
        ps = s if decoder == s.decoder else s.changed(decoder=decoder)
        level = self.memory.before()  # what the step holds: the preview's memory is its peak over this
        try:
            prev = self.prev
            enc = prev.encoder(s.encoder)
            shown, row.target = choose(s.target, self.tap, latents)
            if s.target == "x0" and row.target != "x0" and not self._x0_told and self.tap is not None:
                self._x0_told = True
                row.event = _also(row.event, _no_x0(self.tap.sched))
            if s.batch_preview == "first":  # a grid decodes the whole batch: the cost of showing it all
                shown = shown[:1]
            # where the decoder stops: the preview's size, for the grid of the images shown (no device read)
            cut = prev.cut(decoder, s, self.width, self.height, int(shown.shape[0]))
            if prev.compile and not prev.compiled(decoder, cut):  # a live switch: compile now, say so
                c = prev.warm(decoder, self.height, self.width, cut)
                row.event = _also(row.event, _compiled(decoder, c, cut))
            render = self._render(decoder, s, shown, cut, row)
            try:
                if s.mode == "sync":
                    self._preview_sync(row, marks, shown, ps, render, enc)
                else:
                    self._preview_overlap(row, marks, shown, ps, render, enc)
            finally:
                for note in prev.take_notes():  # a fit of latent2rgb factors, made inside this decode
                    row.event = _also(row.event, note)
        except Exception as e:
            self._failed(row, ps, e)
            marks.dec0 = None
        row.mem_mb = self.memory.after(level)  # allocations count when queued: known now, no device wait
        if not row.skipped:  # preview work ran (made, or failed on the way)
            marks.touched = True
            self.plan.started()

    def _render(self, decoder: str, s: PreviewSettings, latents: torch.Tensor, cut: decoders.Cut,
                row: StepRow) -> _Render:
        """How this preview's pixels are made: an image's decode, or the frames of a clip that s.frames picks
        (clips.pick), decoding only the latent frames they need; the decoder stopped where `cut` says, and the
        size it made goes on the row. Shapes only, no device read."""
        h, w, prev, space = self.height, self.width, self.prev, self.model.space

        def made(x: torch.Tensor) -> torch.Tensor:
            row.decode_height, row.decode_width = int(x.shape[-2]), int(x.shape[-1])
            return x

        if not space.video:
            decode = prev.decoder(decoder, cut)
            assert decode is not None
            return _Render(lambda z: grid(made(decode(z, h, w)))[None], 1, 0.0)
        clip = prev.clip(decoder, cut)
        assert clip is not None
        pick = clips.pick(s.frames, space.latent_frames(latents, h, w), space.temporal, self.fps,
                          causal=decoders.causal(decoder, self.model), odd=space.family == "cogvideox")
        return _Render(lambda z: tile(made(clip(z, h, w, pick))), len(pick.reads), pick.fps)

    def _preview_sync(self, row: StepRow, marks: _Marks, latents: torch.Tensor, s: PreviewSettings,
                      render: _Render, enc: encoders.Encoder) -> None:
        sw, rng, clock = self.sw, self.rng, self.clock
        rng.begin("decode")
        marks.dec0 = sw.mark()
        image = render.fn(latents)
        marks.dec1 = sw.mark()
        rng.end("decode")
        rng.begin("resize")
        u8 = (to_uint8_chw if enc.on_device else to_uint8_hwc)(image, s.preview_max)
        marks.res1 = sw.mark()
        rng.end("resize")
        rng.begin("sync")
        waited = sw.wait(marks.res1)  # the wait the host copy needs anyway; only its uncounted part is sync_ms
        t1 = clock()
        rng.end("sync")
        arr: Any = u8
        if not enc.on_device:  # an on-device encoder copies only its bytes, timed in _finish
            rng.begin("transfer")
            arr = u8.cpu().numpy()
            row.transfer_ms = (clock() - t1) * 1e3
            rng.end("transfer")
        rng.begin("encode")
        self._finish(row, s, enc, arr, waited.uncounted_ms, render)
        rng.end("encode")

    def _preview_overlap(self, row: StepRow, marks: _Marks, latents: torch.Tensor, s: PreviewSettings,
                         render: _Render, enc: encoders.Encoder) -> None:
        if self.overlap is None:
            self.overlap = Overlap(self.sw, self.inflight)
        if self.overlap.flight.full():
            row.skipped = 1  # the pipeline is full: skip this preview, never queue it
            return

        def done(arr: np.ndarray, sync_ms: float) -> None:
            try:
                self._finish(row, s, enc, arr, sync_ms, render)
            except Exception as e:
                self._failed(row, s, e)

        row.preview = 1  # made, or being made; a failure on the encode thread resets it, so set it first
        self.rng.begin("decode")
        to_u8 = to_uint8_chw if enc.on_device else to_uint8_hwc
        marks.future = self.overlap.submit(latents, render.fn, lambda img: to_u8(img, s.preview_max), done, marks,
                                           on_device=enc.on_device)
        self.rng.end("decode")

    def _finish(self, row: StepRow, s: PreviewSettings, enc: encoders.Encoder, arr: Any, sync_ms: float,
                render: _Render) -> None:
        """Encode and hand off: in the callback (sync) or on the encode thread (overlap). arr holds the frames:
        a host uint8 (F, h, w, 3) array, or for an on-device encoder the uint8 (F, 3, h, w) tensor still on the
        device (only the bytes cross): each frame is encoded and its bytes copied under the device's one JPEG
        stream. The frames go out as one Frame, in order."""
        dev = self.sw.dev
        on_stream = dev.use(jpeg_stream(dev)) if enc.on_device and dev is not None else contextlib.nullcontext()
        with on_stream:
            t0 = self.clock()
            outs = [enc.encode(frame, s.quality) for frame in arr]
            t1 = self.clock()
            if enc.on_device:  # the frames' bytes joined on the device: one copy, whatever their count
                sizes = [int(out.numel()) for out in outs]
                data = (torch.cat(outs) if len(outs) > 1 else outs[0]).cpu().numpy().tobytes()
                row.transfer_ms = (self.clock() - t1) * 1e3
            else:
                sizes, data = [len(out) for out in outs], b"".join(outs)
        row.encode_ms, row.sync_ms = (t1 - t0) * 1e3, sync_ms
        row.preview, row.bytes, row.encoder = 1, len(data), enc.name
        row.frames, row.latent_frames = len(sizes), render.latent_frames
        h_axis = 2 if enc.on_device else 1
        row.preview_height, row.preview_width = int(arr.shape[h_axis]), int(arr.shape[h_axis + 1])
        if self.on_frame:
            self.on_frame(Frame(self.run_id, row.step, row.decoder, enc.format, row.preview_width,
                                row.preview_height, data, tuple(sizes), render.fps))

    def _failed(self, row: StepRow, s: PreviewSettings, e: BaseException) -> None:
        """A preview must never end the run: report, fall back to a cheaper decoder, record it on the row."""
        fallback = decoders.DECODERS[decoders.check_name(s.decoder)].fallback
        detail = str(e).splitlines()[0][:160] if str(e) else ""
        msg = f"preview with decoder {s.decoder} failed at step {row.step} ({type(e).__name__}: {detail}); " \
              f"continuing with {fallback}"
        log.warning("%s: %s", self.run_id, msg)  # one line in the user's terminal; the traceback at debug level
        log.debug("preview failure at step %d", row.step, exc_info=e)
        self.controls.set(decoder=fallback, note=False)
        self.plan.fell_back(fallback)
        row.event = _also(row.event, msg)
        row.preview = 0
        if self.on_error:
            self.on_error(msg)

    # ---- rows: handed over in step order once the device has passed their marks ----------------------------------

    def _ready(self, m: _Marks) -> bool:
        if self.sw.cuda and m.row.mode == "overlap" and (m.end is None or not self.sw.ready(m.end)):
            return False
        return (m.future is None or m.future.done()) and self.sw.ready(m.copied or m.res1 or m.cb)

    def emit(self, force: bool) -> None:
        sw = self.sw
        while self.pending and (force or self._ready(self.pending[0])):
            m = self.pending.pop(0)
            if m.future is not None:
                m.future.result()  # errors inside were already turned into an event on the row
            m.row.denoise_ms = sw.ms(m.start, m.cb)
            if m.dec0 is not None and m.row.preview:
                m.row.decode_ms, m.row.resize_ms = sw.ms(m.dec0, m.dec1), sw.ms(m.dec1, m.res1)
                m.row.decode_ms_per_frame = m.row.decode_ms / max(1, m.row.frames)
                if m.copied is not None:
                    m.row.transfer_ms = sw.ms(m.res1, m.copied)
            if sw.cuda and m.row.mode == "overlap":  # the callback's own span of the main stream: no stage holds it
                m.row.on_path_ms = sw.ms(m.cb, m.end)
            m.row.on_path_ms = on_path_ms(m.row, sw.cuda)
            self.plan.observe(m.row.denoise_ms + m.row.on_path_ms, m.touched)
            self.rows.append(m.row)
            if self.on_row:
                self.on_row(m.row)

    def finish_previews(self) -> int:
        """Wait for the previews in flight (overlap); returns the most that were in flight at once."""
        if self.overlap is None:
            return 0
        self.overlap.drain()
        peak, self.overlap = self.overlap.flight.peak, None
        return peak

    def drain(self) -> None:
        """Wait for previews in flight, then hand over every row left."""
        self.finish_previews()
        self.rng.end_all()
        self.emit(True)

# ---- event texts: what a row's event column says, every note of its step joined by "; " --------------------------

def _compiled(decoder: str, ms: float, cut: decoders.Cut = decoders.WHOLE) -> str:
    at = "" if cut == decoders.WHOLE else f" at {cut.label}"
    return f"compiled {decoder}{at} in {ms:.0f} ms"


def _no_x0(scheduler: Any) -> str:
    return f"x0 is not available with {type(scheduler).__name__}: previews show the latents"

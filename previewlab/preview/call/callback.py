"""A drop-in diffusers step-end callback: measure, watch and export the previews of your own pipeline call.

    from previewlab import serve, watch as preview_watch
    watch = preview_watch(pipe, decoder="taesd", every=2)  # the TAE the pipe's folder ships, or taesd="PATH"
    serve(watch)                                       # optional: the live page
    image = pipe(prompt, callback_on_step_end=watch,
                 callback_on_step_end_tensor_inputs=watch.tensor_inputs).images[0]
    watch.rows; watch.to_csv("costs.csv")

The callback returns the pipeline's kwargs untouched. It never moves, copies or re-wraps the user's models;
the phases of the call (text encoding, denoising, final decode) come from forward hooks on the pipeline's own
text encoders and VAE decoder, and one forward pre-hook on the UNet that removes itself at the first step. A
call that leaves the pipeline by an exception no hook sees (the user's own step callback raising) ends where it
leaves the pipeline's progress bar, or when another thread's call finds its thread gone from it (call_exit.py).
"""
from __future__ import annotations

import inspect
import sys
import threading
import types
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Unpack

import numpy as np
from diffusers.callbacks import PipelineCallback

from previewlab.preview.source import modular
from previewlab.preview.call.call_exit import ExitWatch, in_call, left_call
from previewlab.preview.controls import Controls
from previewlab.preview.record.csv_writer import to_csv_text
from previewlab.preview.decoding.contract import DecoderError
from previewlab.preview.decoding.tae_decoder import taesd_refusal
from previewlab.preview.judging.digest import digest, judged
from previewlab.preview.judging.progress import with_progress
from previewlab.preview.call.final import save_image
from previewlab.preview.call.lifecycle import CallState, MeasuredCall
from previewlab.preview.call.meter import StepMeter
from previewlab.preview.call.phase_hooks import PhaseHooks
from previewlab.preview.models.video_presets import clip_defaults
from previewlab.preview.decoding.previewer import Previewer
from previewlab.preview.decoding.rgb_decoder import has_factors
from previewlab.preview.record.records import STEP_COLUMNS, StepRow
from previewlab.preview.record.run import RunEnd, RunEvents, RunMeta, RunRecord
from previewlab.preview.record.run_ids import PROCESS_IDS
from previewlab.preview.judging.estimates import NOISE_LIMIT_PCT
from previewlab.preview.names import DECODER_NAMES
from previewlab.preview.settings import default_mode
from previewlab.preview.call.script_pipe import call_inputs, model_of, script_call
from previewlab.preview.source.sources import chunked, source_of
from previewlab.preview.models.reading import inner_pipelines
from previewlab.preview.source.steps import CallbackSteps, Source, Step, StepTap, per_chunk
from previewlab.preview.timing.stopwatch import Stopwatch
from previewlab.preview.source.targets import X0Tap
from previewlab.preview.call.watch_settings import WatchKeywords, WatchSettings

__all__ = ["CallState", "Watch", "WatchError", "WatchSettings", "call_inputs", "model_of"]
KeepFinal = Callable[[str, bytes], bool]  # (run id, PNG) -> whether the image is kept as that run's final one


class WatchError(RuntimeError):
    """A watch asked to measure what it cannot: another pipeline's call, or a second call at once."""


class _SameCall:
    """What the watch leaves in the pipeline's `_interrupt` while its call runs: as falsy as the False it
    replaces (the pipeline reads only its truth: nothing it computes changes). A diffusers pipeline sets
    `self._interrupt = False` as each call begins, so finding False there again says a new call began, where a
    call that failed before its first step (after its text encoding) would otherwise lend it its marks."""

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "False"


SAME_CALL = _SameCall()
CALL_DEPTH = 48  # frames looked up for the pipeline call a hook fires in (a module's forward is a few below it)


def call_codes(pipe: Any) -> frozenset[types.CodeType]:
    """The code objects of the pipeline's __call__ along its classes (a user's subclass calls its parent's),
    under diffusers' no_grad wrapper."""
    codes = set()
    for cls in type(pipe).__mro__:
        fn = vars(cls).get("__call__")
        code = getattr(inspect.unwrap(fn), "__code__", None) if callable(fn) else None
        if code is not None:
            codes.add(code)
    return frozenset(codes)


def in_other_pipeline(own: frozenset[types.CodeType], depth: int = CALL_DEPTH) -> bool:
    """The current hook fires in another pipeline class's __call__, not in `own` (modules shared by two
    pipelines, an img2img made from `pipe.components`, fire their hooks for either). Read from the frames' code
    objects only, never their locals (a frame's locals read on Python 3.11 would keep its tensors alive); two
    pipelines of one class are not told apart. Asked at a call's phases, never at a step."""
    f: types.FrameType | None = sys._getframe(1)
    for _ in range(depth):
        if f is None:
            return False
        code = f.f_code
        if code in own:
            return False
        if code.co_name == "__call__" and "pipelines" in code.co_filename.replace("\\", "/").split("/"):
            return True  # a classic diffusers pipeline's __call__ (a Modular one's blocks live in modular_pipelines/)
        f = f.f_back
    return False


class Watch(PipelineCallback):
    tensor_inputs = ["latents"]

    def __init__(self, pipe: Any, settings: WatchSettings | None = None, **keywords: Unpack[WatchKeywords]) -> None:
        """settings: the watch's (WatchSettings); or the keywords watch() takes, which build them: the preview
        settings' (decoder, every, mode, frames, ...: settings.PreviewSettings) and a watch's own (taesd, fps,
        inflight, size, source; clock and device for tests). Raises TypeError for both at once or an unknown
        keyword, SettingsError for a bad value, SourceError, DecoderError or FamilyError for a pipeline that
        cannot be previewed as asked."""
        if settings is not None and keywords:
            raise TypeError("Watch: give settings or keywords, not both")
        super().__init__()
        s = settings if settings is not None else WatchSettings.of(**keywords)
        self.pipe = pipe
        self.model = model_of(pipe, s.taesd)
        if settings is None and "mode" not in keywords:  # overlap where a side stream exists, sync on a CPU
            s = replace(s, preview=replace(s.preview, mode=default_mode(self.model.device.type)))
        self.settings = s
        self.controls = Controls(s.preview)
        # a clip's rate: the one given, else its family's (what diffusers' own examples export at)
        self.fps = s.fps or (clip_defaults(pipe, self.model.family)[1] if self.model.space.video else 0.0)
        if s.preview.decoder == "taesd" and self.model.taesd is None and not self.model.space.pixel:
            raise DecoderError(taesd_refusal(self.model).replace("--taesd PATH", "taesd=PATH"))
        if s.preview.decoder == "latent2rgb" and self.model.space.stage and not has_factors(self.model):
            raise DecoderError(f"decoder latent2rgb: {type(pipe).__name__}'s latents ({self.model.space.describe()}) "
                               "have no known factors and no VAE to fit them against; use taesd")
        if s.preview.decoder == "vae" and self.model.space.stage:
            raise DecoderError(f"decoder vae: {type(pipe).__name__} has no VAE ({self.model.space.stage}); use "
                               "latent2rgb or taesd")
        self.previewer = Previewer(self.model)
        self.source: Source = source_of(pipe, s.source)
        self.tap = X0Tap(getattr(pipe, "scheduler", None))
        self.step_tap = StepTap(getattr(pipe, "scheduler", None), x0=self.tap, pipe=pipe,
                                on_step=self._on_step if self.source == "scheduler" else None,
                                 chunked=chunked(pipe) or per_chunk(pipe))
        # a Modular pipeline's loop block, feeding this watch
        self._block = modular.attach(pipe, self._on_step) if self.source == "modular" else None
        # a PNDM or Heun loop calls the callback more often than it steps; a chunked one numbers each chunk from 0
        self._callback_steps = CallbackSteps(chunked=per_chunk(pipe))
        # the pipelines of its own it hands its step callback to (Stable Cascade's combined pipeline: decoder_pipe)
        self._inner = [inner for _, inner in inner_pipelines(pipe)]
        self._rows: list[StepRow] = []         # the rows of the latest call, in step order
        self.sw = Stopwatch(self.model.device, s.clock, backend=s.device)
        self.records: list[RunRecord] = []     # one per finished call
        self.changed: set[str] = set()         # the calls whose preview settings changed live (never one figure)
        self.call = MeasuredCall(self.model, self.sw)  # the call in progress: its state, marks and meter
        self._stop = threading.Event()
        self._thread: int | None = None        # the thread whose call is in progress (one call at a time)
        self._framed = False                   # that call began inside the pipeline's __call__ (call_exit.py)
        self._cut = False                      # the call was ended early (its page closed from inside it)
        # the pipeline's own __call__ and those of the pipelines it runs inside it, told from another pipeline's
        self._call_code = call_codes(pipe).union(*(call_codes(inner) for inner in self._inner))
        self._latent_hw: tuple[int, int] | None = None  # LTX: the latent height and width of the call's clip
        # attach(): the live page (previewlab.serve(watch) attaches itself)
        self.events: RunEvents | None = None
        self._close_events: Callable[[], None] | None = None
        self._keep_final: KeepFinal | None = None
        self._hook()
        # a call left by an exception through the pipeline's progress bar (the user's step callback raising)
        self._exit = ExitWatch([pipe, *self._inner], self._raised)

    def attach(self, events: RunEvents | None, close: Callable[[], None] | None = None,
               keep_final: KeepFinal | None = None) -> None:
        """Tell `events` of this watch's runs too, from the denoising thread (None detaches); remove() calls
        `close`; save() hands `keep_final` the run's PNG (the server keeps it as the run's final image)."""
        self.events, self._close_events, self._keep_final = events, close, keep_final

    @property
    def state(self) -> CallState:
        """Where the call in progress is (lifecycle.CallState)."""
        return self.call.state

    @property
    def meter(self) -> StepMeter | None:
        """The call's steps: made at its first step, dropped when it closes."""
        return self.call.meter

    @property
    def running(self) -> bool:
        """A pipeline call is between its first step and its last."""
        return self.state == "denoising"

    # -- the call's phases, from hooks on the user's own modules (phase_hooks.py) -----------------------------
    def _hook(self) -> None:
        self.hooks = PhaseHooks(self.pipe, first_forward=self._first_forward, decode_start=self._decode_start,
                                decode_end=self._decode_end, text_start=self._text_start, text_end=self._text_end,
                                on_error=self._raised)

    def _started_here(self) -> bool:
        """A call has started on this thread, not reached its first step, and is still the pipeline's current
        call (it has not set its `_interrupt` to False again: see _SameCall)."""
        return (self.state == "started" and threading.get_ident() == self._thread
                and self.pipe.__dict__.get("_interrupt") is not False)

    def _ours(self) -> bool:
        """The hook fires in this watch's pipeline's call (or in no pipeline call found): not in another
        pipeline's that shares its modules."""
        return not in_other_pipeline(self._call_code)

    def _enter(self) -> None:
        """Where a call may begin (its text encoding, its denoiser's first forward, its first step): one call at a
        time. A call left part-way by the same thread (an exception or a Ctrl-C the hooks did not see) ends here
        as failed, and this call starts clean. Another thread's call is refused in one line (its pipeline call
        raises) while this one runs or its final decode does: the two would share one set of marks and one
        scheduler; one whose thread has left the pipeline call part-way runs nothing, and ends here as failed.
        One that has decoded its image is closed first (that thread's save() then closes nothing)."""
        me = threading.get_ident()
        other = self._thread is not None and me != self._thread
        decoding = self.state == "denoised" and self.call.marks.decode0 is not None and self.call.marks.decode1 is None
        if other and (self.state in ("started", "denoising") or decoding):
            assert self._thread is not None
            if not (self._framed and left_call(self._thread, self._call_code)):
                raise WatchError("watch: a call is already running on another thread; one watch measures one call "
                                 "at a time: make a pipeline and a watch per thread")
            self._fail("the call's thread left the pipeline call part-way, by an error the watch could not see "
                       "(a BaseException such as SystemExit from a step callback): another thread's call began")
        self._cut = False
        if self.state == "denoising":
            self._fail("the call ended before its last step, without an error the watch could see (a Ctrl-C, "
                       "or an exception outside the denoiser): its next call began")
        if self.state == "denoised":
            self._close_call()
        if self.state == "started":  # a call that never reached a step: its marks go, it has no record
            self._fail("")
        self._thread, self._framed = me, in_call(self._call_code)
        if self.pipe.__dict__.get("_interrupt") is False:
            self.pipe._interrupt = SAME_CALL  # the pipeline's next call sets False again (_started_here)

    def _first_forward(self, kwargs: dict[str, Any]) -> None:
        """The denoiser's first forward of a call. LTXPipeline calls its transformer with the clip's latent
        height and width, which its packed latents do not say (image_size reads them)."""
        cut = self._cut and self.pipe.__dict__.get("_interrupt") is not False  # the cut call's own forwards
        if cut or not self._ours():  # (or another pipeline's, sharing this denoiser: its own watch's call)
            self.hooks.arm()
            return
        h, w = kwargs.get("height"), kwargs.get("width")
        self._latent_hw = (h, w) if isinstance(h, int) and isinstance(w, int) else None
        self._unet_start()

    def _unet_start(self) -> None:
        if not self._started_here():  # a call without text encoding (prompt_embeds given)
            self._enter()
        self.call.denoiser_start()
        if not self.step_tap.installed:  # for this call only: the user's scheduler is left as it was after it
            self.step_tap.install()

    def _text_start(self) -> None:
        if not self._ours():
            return
        if not self._started_here() or self.call.marks.denoise0 is not None:  # not a call's second text encoder
            self._enter()
        self.call.text_start()

    def _text_end(self) -> None:
        if self.state == "started" and threading.get_ident() == self._thread and self._ours():
            self.call.text_end()

    # the pipeline's own final decode, never a preview's (the hooks leave out a VAE run inside a step)
    def _decode_start(self) -> None:
        if threading.get_ident() != self._thread or not self._ours():
            return
        if self.state == "denoising":
            self._end_denoise()  # a loop that ended before its last step (stopped, or fewer steps than planned)
        self.call.decode_start()

    def _decode_end(self) -> None:
        if threading.get_ident() == self._thread and self._ours():
            self.call.decode_end()

    # -- the steps, from whichever source ----------------------------------------------------------------------
    def callback_fn(self, pipeline: Any, step_index: int, timestep: Any, callback_kwargs: dict[str, Any]) -> dict[str, Any]:
        """diffusers' step callback: the step source when the watch's source is `callback` (a watch fed by
        another source passed as the callback too sees each step once, from its own source)."""
        if self._cut:  # its page was closed from inside the call: the rest of this call is not measured
            pipeline._interrupt = True
            return callback_kwargs
        if pipeline is not self.pipe and not any(pipeline is inner for inner in self._inner):
            raise WatchError(f"watch: this watch measures its own {type(self.pipe).__name__} ({self.model.family}); "
                             f"it was passed to a {type(pipeline).__name__}: make a watch for each pipeline")
        if self.source == "callback":
            step = self._callback_steps.step(pipeline, step_index, timestep, callback_kwargs["latents"],
                                             fresh=self.state != "denoising")
            if step is not None and self._on_step(step):
                pipeline._interrupt = True
        return callback_kwargs

    def _on_step(self, step: Step) -> bool:
        """The end of a step from the watch's source; True when the run should stop."""
        if step.index == 0 or self.state in ("idle", "started") or threading.get_ident() != self._thread:
            self._begin(step)  # (another thread's step is refused there)
        with self.hooks.step():
            stop = self.call.step(step)
        if stop or step.index + 1 >= (step.total or 10**9) or getattr(step.pipe, "_interrupt", False):
            self._end_denoise()  # a stop ends the loop here: no later hook may come (latent or pixel output)
        return stop

    def _begin(self, step: Step) -> None:
        if not self._started_here():  # step 1 of a call whose start no hook saw: the one before ends here
            self._enter()
        # the store's id where a server shows the run (serve(watch)), else the same scheme within the process
        new_id = getattr(self.events, "new_id", None)
        self.run_id = new_id() if callable(new_id) else PROCESS_IDS.new()
        events, rid = self.events, self.run_id
        asked, timesteps = script_call(self.model, step, self.step_tap.sched, self.controls.get(), self.fps,
                                       self.settings.size, self._latent_hw)
        meta = RunMeta.of(self.model, rid, asked)
        meter = StepMeter(self.model, rid, asked, self.controls, sw=self.sw, timesteps=timesteps,
                          previewer=self.previewer, events=events, should_stop=self._stop.is_set,
                          inflight=self.settings.inflight, tap=self.tap)
        self._rows = meter.rows
        self.call.begin(meta, meter)
        self._stop.clear()
        if events is not None:
            events.started(meta)

    @property
    def rows(self) -> list[StepRow]:
        """The latest call's per-step rows (the bench's schema), all of them once the call has returned."""
        if self.meter is not None and self.state == "denoised":
            self.meter.drain()  # after the call: waiting here costs the user's loop nothing
        return self._rows

    def _end_denoise(self) -> None:
        # Rows still waiting on the device or the encode thread are handed over when the call is closed or
        # `rows` is read: waiting for them here would add a device wait inside the user's loop.
        self.call.last_step()
        self.step_tap.remove()
        self.hooks.arm()

    # -- the end of the request ------------------------------------------------------------------------------
    def save(self, image: Any, path: str | Path) -> Path:
        """Encode the final image as PNG and write it, timed: the request ends here. Served (serve(watch)), the
        same PNG becomes the run's final image on the page, handed over after the timed request; a call already
        closed (finish(), `record`, `summary()`, or the next call) keeps none there."""
        if self._thread is not None and self._thread != threading.get_ident():
            # another thread's call is in progress: this thread's own was closed when that one began
            arr = np.asarray(image.convert("RGB") if hasattr(image, "convert") else image)
            Path(path).write_bytes(save_image(arr.astype(np.uint8)))
            return Path(path)
        arr = np.asarray(image.convert("RGB") if hasattr(image, "convert") else image)
        t0 = self.sw.clock()
        png = save_image(arr.astype(np.uint8))
        t1 = self.sw.clock()
        Path(path).write_bytes(png)
        t2 = self.sw.clock()
        self.call.request_end((t1 - t0) * 1e3, (t2 - t1) * 1e3, t2)
        self._close_call(png, arr.astype(np.uint8))
        return Path(path)

    def _raised(self, e: BaseException) -> None:
        """The pipeline's text encoder, denoiser or final decode raised, or an error left its progress bar (the
        user's own step callback): the call ends now, failed with that error (another thread's call, refused by
        _enter, or another pipeline's, leaves this one alone)."""
        if (self.state != "idle" and threading.get_ident() == self._thread and not isinstance(e, WatchError)
                and self._ours()):
            self._fail(e)

    def _fail(self, e: BaseException | str) -> None:
        """End the call in progress as failed: its rows so far are handed over, its end says why, the scheduler
        is unwrapped and the denoiser's first-forward hook set again, so the next call starts clean."""
        meta = self.call.fail()
        self.step_tap.remove()
        self.hooks.arm()
        self._thread = None
        if meta is not None and self.events is not None:
            self.events.ended(RunEnd.failed(meta, e))

    @property
    def call_thread(self) -> int | None:
        """The thread whose call is in progress (None: none)."""
        return self._thread

    def end_failed(self, why: str) -> None:
        """End a call left part-way as failed, saying why (the page's exit hook: a script that ended mid-call)."""
        if self.state in ("started", "denoising"):
            self._fail(why)

    def finish(self) -> RunRecord | None:
        """Close the latest call's record without saving an image (save() does this for you). From a thread
        other than the one whose call is in progress, nothing is closed."""
        if self._thread is not None and self._thread != threading.get_ident() and self.state != "denoised":
            return None
        return self._close_call()

    def cut_short(self) -> None:
        """End the call in progress now, from inside it (its page closed by the script's own callback): recorded
        stopped with the rows it has, the pipeline asked to stop, and the rest of its steps left unmeasured."""
        if self.state == "denoising":
            self._end_denoise()
        self._close_call()
        self._cut = True
        self.request_stop()
        if "_interrupt" in self.pipe.__dict__:
            self.pipe._interrupt = True  # the loop skips its remaining steps, as after a stop

    def _close_call(self, png: bytes | None = None, final: np.ndarray | None = None) -> RunRecord | None:
        """png: the call's final image as save() wrote it, kept where the run is shown before its end is told;
        final: its pixels, uint8 (H, W, 3), which the call's previews are compared with (its progress)."""
        closed = self.call.close(first_run=not self.records)  # a watch's first call pays the one-off costs: a warm-up
        self._thread = None
        if closed is None:
            return None
        # after the record's clock stopped (t_end): the progress and keeping the image are not the user's request
        rec, self._rows = with_progress(closed.record, closed.rows, closed.kept, final)
        meta = closed.meta
        self.records.append(rec)
        kept = png is not None and self._keep_final is not None and self._keep_final(meta.run_id, png)
        end = RunEnd.of(meta, rec.totals, self._rows, has_final=kept)
        if end.changes:
            self.changed.add(meta.run_id)
        if self.events:
            self.events.ended(end)
        return rec

    def summary(self, budget: float = 5.0, noise_limit: float = NOISE_LIMIT_PCT) -> str:
        """The latest call in a few lines: its cost, where a preview's time went, its memory; then what this
        watch's calls of its settings support within `budget` percent, from the analysis the bench and the page
        render (digest.py), the calls without previews NOISY past `noise_limit` percent of spread (the bench's
        --noise-limit). Closes the call if it has finished. Raises ValueError for a budget or limit out of range."""
        for name, x, hi in (("budget", budget, 1000.0), ("noise_limit", noise_limit, 100.0)):
            if isinstance(x, bool) or not isinstance(x, (int, float)) or not 0 < x <= hi:
                raise ValueError(f"summary: {name}={x!r}: a percent above 0 and at most {hi:g}")
        rec = self.record
        if rec is None:
            return "no finished call yet"
        can = tuple(d for d in DECODER_NAMES if d != "taesd" or self.model.taesd is not None)  # a TAE it lacks
        return "\n".join(digest(rec, self.rows) + judged(self.records, self.controls.get(), budget, self.changed, can,
                                                          noise_limit))

    @property
    def record(self) -> RunRecord | None:
        """The latest call's record, closing it if the call has finished."""
        if self.state == "denoised":
            self._close_call()
        return self.records[-1] if self.records else None

    def to_csv(self, path: str | Path) -> Path:
        Path(path).write_text(to_csv_text(self.rows, STEP_COLUMNS))
        return Path(path)

    # -- what the embedded server may ask ------------------------------------------------------------------------
    def request_stop(self) -> None:
        self._stop.set()

    def remove(self) -> None:
        """Stop the server, if any (a call in progress is stopped and its end written first, while the hooks
        still see its steps), then remove the hooks from the user's modules."""
        if self._close_events is not None:
            self._close_events()
        self.hooks.remove()
        self._exit.remove()
        self.step_tap.remove()
        if self._block is not None:
            modular.detach(self.pipe, self._block)
            self._block = None
        if isinstance(self.pipe.__dict__.get("_interrupt"), _SameCall):
            self.pipe._interrupt = False


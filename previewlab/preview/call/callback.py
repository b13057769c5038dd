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

The watch is the lifecycle's adapter for a user's own call: the user owns the call (its thread, call_owner.py)
and its final decode (read by hooks, watch_phases.py); save() ends the request. What kind of pipeline it is, is
read once (watched_pipe.py); where a call begins and how it ends is watched_call.py's.
"""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Callable, Unpack

import numpy as np
from diffusers.callbacks import PipelineCallback

from previewlab.preview.source import modular
from previewlab.preview.call.call_exit import ExitWatch
from previewlab.preview.call.call_owner import WatchError
from previewlab.preview.controls import Controls
from previewlab.preview.record.csv_writer import to_csv_text
from previewlab.preview.judging.digest import digest, judged
from previewlab.preview.call.final import save_image
from previewlab.preview.call.lifecycle import CallState, MeasuredCall
from previewlab.preview.call.meter import StepMeter
from previewlab.preview.call.watch_phases import WatchPhases
from previewlab.preview.call.watched_call import KeepFinal, WatchedCall
from previewlab.preview.call.watched_pipe import WatchedPipe
from previewlab.preview.decoding.previewer import Previewer
from previewlab.preview.record.records import STEP_COLUMNS, StepRow
from previewlab.preview.record.run import RunEvents, RunMeta, RunRecord
from previewlab.preview.record.run_ids import PROCESS_IDS
from previewlab.preview.judging.estimates import NOISE_LIMIT_PCT
from previewlab.preview.names import DECODER_NAMES
from previewlab.preview.call.script_pipe import script_call
from previewlab.preview.source.steps import CallbackSteps, Source, Step, StepTap
from previewlab.preview.timing.stopwatch import Stopwatch
from previewlab.preview.source.targets import X0Tap
from previewlab.preview.call.watch_settings import WatchKeywords, WatchSettings


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
        read = WatchedPipe.read(pipe, settings if settings is not None else WatchSettings.of(**keywords),
                                mode_asked=settings is not None or "mode" in keywords)
        self.pipe, self.model, self.settings, self.fps = pipe, read.model, read.settings, read.fps
        self.source: Source = read.source
        self.controls = Controls(read.settings.preview)
        self.previewer = Previewer(self.model)
        self.tap = X0Tap(getattr(pipe, "scheduler", None))
        self.step_tap = StepTap(getattr(pipe, "scheduler", None), x0=self.tap, pipe=pipe,
                                on_step=self._on_step if self.source == "scheduler" else None,
                                chunked=read.chunked or read.per_chunk)
        # a Modular pipeline's loop block, feeding this watch
        self._block = modular.attach(pipe, self._on_step) if self.source == "modular" else None
        # a PNDM or Heun loop calls the callback more often than it steps; a chunked one numbers each chunk from 0
        self._callback_steps = CallbackSteps(chunked=read.per_chunk)
        self._inner = read.inner
        self.sw = Stopwatch(self.model.device, read.settings.clock, backend=read.settings.device)
        self.call = MeasuredCall(self.model, self.sw)  # the call in progress: its state, marks and meter
        self.watched = WatchedCall(self.call, pipe, self._inner, unwind=self._unwind)
        self._stop = threading.Event()
        self._close_events: Callable[[], None] | None = None  # attach(): the live page (serve(watch) attaches itself)
        self.phases = WatchPhases(pipe, self.watched, self.step_tap)
        self.hooks = self.phases.hooks
        # a call left by an exception through the pipeline's progress bar (the user's step callback raising)
        self._exit = ExitWatch([pipe, *self._inner], self.watched.raised)

    def attach(self, events: RunEvents | None, close: Callable[[], None] | None = None,
               keep_final: KeepFinal | None = None) -> None:
        """Tell `events` of this watch's runs too, from the denoising thread (None detaches); remove() calls
        `close`; save() hands `keep_final` the run's PNG (the server keeps it as the run's final image)."""
        self._close_events = close
        self.watched.attach(events, keep_final)

    @property
    def events(self) -> RunEvents | None:
        """Who hears this watch's runs (attach())."""
        return self.watched.events

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

    @property
    def call_thread(self) -> int | None:
        """The thread whose call is in progress (None: none)."""
        return self.watched.owner.thread

    @property
    def records(self) -> list[RunRecord]:
        """One per finished call."""
        return self.watched.records

    def _unwind(self) -> None:
        """The call's scheduler unwrapped and the denoiser's first-forward hook set again."""
        self.step_tap.remove()
        self.hooks.arm()

    # -- the steps, from whichever source ----------------------------------------------------------------------
    def callback_fn(self, pipeline: Any, step_index: int, timestep: Any, callback_kwargs: dict[str, Any]) -> dict[str, Any]:
        """diffusers' step callback: the step source when the watch's source is `callback` (a watch fed by
        another source passed as the callback too sees each step once, from its own source)."""
        if self.watched.cut:  # its page was closed from inside the call: the rest of this call is not measured
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
        if step.index == 0 or self.state in ("idle", "started") or not self.watched.owner.here():
            self._begin(step)  # (another thread's step is refused there)
        with self.hooks.step():
            stop = self.call.step(step)
        if stop or step.index + 1 >= (step.total or 10**9) or getattr(step.pipe, "_interrupt", False):
            self.watched.end_denoise()  # a stop ends the loop here: no later hook may come (latent or pixel output)
        return stop

    def _begin(self, step: Step) -> None:
        if not self.watched.started_here():  # step 1 of a call whose start no hook saw: the one before ends here
            self.watched.enter()
        # the store's id where a server shows the run (serve(watch)), else the same scheme within the process
        new_id = getattr(self.events, "new_id", None)
        self.run_id = new_id() if callable(new_id) else PROCESS_IDS.new()
        events, rid = self.events, self.run_id
        asked, timesteps = script_call(self.model, step, self.step_tap.sched, self.controls.get(), self.fps,
                                       self.settings.size, self.phases.latent_hw)
        meta = RunMeta.of(self.model, rid, asked)
        meter = StepMeter(self.model, rid, asked, self.controls, sw=self.sw, timesteps=timesteps,
                          previewer=self.previewer, events=events, should_stop=self._stop.is_set,
                          inflight=self.settings.inflight, tap=self.tap)
        self.watched.begin(meta, meter)
        self._stop.clear()
        if events is not None:
            events.started(meta)

    @property
    def rows(self) -> list[StepRow]:
        """The latest call's per-step rows (the bench's schema), all of them once the call has returned."""
        if self.meter is not None and self.state == "denoised":
            self.meter.drain()  # after the call: waiting here costs the user's loop nothing
        return self.watched.rows

    # -- the end of the request ------------------------------------------------------------------------------
    def save(self, image: Any, path: str | Path) -> Path:
        """Encode the final image as PNG and write it, timed: the request ends here. Served (serve(watch)), the
        same PNG becomes the run's final image on the page, handed over after the timed request; a call already
        closed (finish(), `record`, `summary()`, or the next call) keeps none there."""
        if self.watched.owner.elsewhere():
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
        self.watched.close(png, arr.astype(np.uint8))
        return Path(path)

    def end_failed(self, why: str) -> None:
        """End a call left part-way as failed, saying why (the page's exit hook: a script that ended mid-call)."""
        self.watched.end_failed(why)

    def finish(self) -> RunRecord | None:
        """Close the latest call's record without saving an image (save() does this for you). From a thread
        other than the one whose call is in progress, nothing is closed."""
        if self.watched.owner.elsewhere() and self.state != "denoised":
            return None
        return self.watched.close()

    def cut_short(self) -> None:
        """End the call in progress now, from inside it (its page closed by the script's own callback): recorded
        stopped with the rows it has, the pipeline asked to stop, and the rest of its steps left unmeasured."""
        self.watched.cut_short()
        self.request_stop()
        if "_interrupt" in self.pipe.__dict__:
            self.pipe._interrupt = True  # the loop skips its remaining steps, as after a stop

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
        return "\n".join(digest(rec, self.rows) + judged(self.records, self.controls.get(), budget,
                                                          self.watched.changed, can, noise_limit))

    @property
    def record(self) -> RunRecord | None:
        """The latest call's record, closing it if the call has finished."""
        if self.state == "denoised":
            self.watched.close()
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
        self.watched.owner.restore()

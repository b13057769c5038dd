"""One measured call's lifecycle: where the call is (its state), where its phases passed (CallMarks), the meter
behind its steps, and the record it closes into. The three adapters feed it and say only what differs: the
engine's classic run (engine.py: it encodes the prompt ahead, owns the call, drains the previews and decodes the
final image itself), its Modular run (modular_run.py: the pipeline called whole, its phases read by hooks) and a
user's watched call (callback.py: the user owns the call and its final decode; the watch's hooks feed this).

No method here waits on the device inside the denoising loop: the meter's rows are handed over once the device
has passed them, and close() waits only after the call.
"""
from __future__ import annotations

import torch

from dataclasses import dataclass, field
from typing import Literal

from previewlab.preview.call.call_marks import CallMarks
from previewlab.preview.call.meter import StepMeter
from previewlab.preview.models import Model
from previewlab.preview.frames import KeptFrames
from previewlab.preview.record.records import StepRow
from previewlab.preview.record.run import RunMeta, RunRecord
from previewlab.preview.record.totals import run_record
from previewlab.preview.source.steps import Step
from previewlab.preview.timing.stopwatch import Stopwatch

# Where a call is: idle (none in progress), started (its text encoding or its denoiser's first forward has run),
# denoising (its first step made the meter), denoised (its last step has run: its final decode, the request's
# end or the next call follow). A call closes back to idle from wherever it is.
CallState = Literal["idle", "started", "denoising", "denoised"]
MOVES = {("idle", "started"), ("idle", "denoising"), ("started", "denoising"), ("denoising", "denoised"),
         ("denoised", "denoised"), ("idle", "idle"), ("started", "idle"), ("denoising", "idle"), ("denoised", "idle")}


@dataclass(frozen=True)
class Closed:
    """A call that closed with steps: what it was, its record and its rows (all of them handed over)."""
    meta: RunMeta
    record: RunRecord
    rows: list[StepRow]
    kept: KeptFrames = field(default_factory=KeptFrames)  # its frames, for its progress (judging/progress.py)


class MeasuredCall:
    """One call at a time, measured on `sw`; close() makes its record and readies the next call."""

    def __init__(self, model: Model, sw: Stopwatch) -> None:
        self.model, self.sw = model, sw
        self.state: CallState = "idle"
        self.marks = CallMarks()
        self.meter: StepMeter | None = None  # the call's steps: from begin() until the call closes
        self.meta: RunMeta | None = None
        # the last step's latents as its source handed them (a reference, never a copy): the engine's final decode
        # takes them where the pipeline returns its latents in another layout (LTX-2's, unpacked and denormalized)
        self.latest: torch.Tensor | None = None

    def _to(self, new: CallState) -> None:
        """Change the state; one it cannot reach from where it is raises, naming both (a bug here, never the
        user's pipeline)."""
        if (self.state, new) not in MOVES:
            raise RuntimeError(f"measured call: a call cannot go from {self.state} to {new}")
        self.state = new

    # -- where it starts ---------------------------------------------------------------------------------------
    def text_start(self) -> None:
        """Its text encoding begins; the call's clock starts here unless something started it before. The clocks
        are anchored here only if the device is idle (a user's work may be queued)."""
        c = self.marks
        if c.t0 is None:
            c.t0, c.te0 = self.sw.clock(), self.sw.mark()
            self.sw.anchor(c.te0, c.t0)
        if self.state == "idle":
            self._to("started")

    def text_end(self, denoise_begins: bool = False) -> None:
        """Its text encoding has ended; denoise_begins: the denoising begins at the same mark (the engine's
        classic run calls the pipeline for the denoising right after)."""
        self.marks.te1 = self.sw.mark()
        if denoise_begins:
            self.marks.denoise0 = self.marks.te1

    def denoiser_start(self) -> None:
        """The denoiser's first forward: step 1 begins here (and the call, when nothing encoded text before)."""
        c = self.marks
        if c.t0 is None:
            c.t0, c.denoise0 = self.sw.clock(), self.sw.mark()
            self.sw.anchor(c.denoise0, c.t0)
        if c.denoise0 is None:
            c.denoise0 = self.sw.mark()
        if self.state == "idle":
            self._to("started")

    def begin(self, meta: RunMeta, meter: StepMeter) -> None:
        """The meter takes the call's steps from here, its denoising timed from where step 1 began."""
        self.meta, self.meter = meta, meter
        meter.begin(self.marks.denoise0)
        if self.marks.t0 is None:
            self.marks.t0 = self.sw.clock()
        self._to("denoising")

    # -- its steps ---------------------------------------------------------------------------------------------
    def step(self, step: Step) -> bool:
        """The end of a step; True when the run should stop."""
        assert self.meter is not None, "a step before begin()"
        self.latest = step.latents
        return self.meter.step(step)

    def last_step(self) -> None:
        """Its last step has run (a watch: the user's call decodes next, with previews still in flight). Rows
        still waiting on the device are handed over at close(): waiting here would wait inside the loop."""
        c = self.marks
        c.t_denoised, c.denoised = self.sw.clock(), self.sw.mark()
        self._to("denoised")
        if self.meter is not None:
            self.meter.denoised()

    def drain_for_decode(self) -> None:
        """The denoising has ended and the final decode is next (the engine's runs): the previews in flight
        finish first, so the final decode has the VAE to itself; drain0..decode0 is that wait."""
        assert self.meter is not None
        c = self.marks
        c.drain0 = self.sw.mark()
        self.meter.denoised()
        c.peak = self.meter.finish_previews()
        c.decode0 = self.sw.mark()
        self._to("denoised")

    # -- its end -----------------------------------------------------------------------------------------------
    @property
    def denoiser_started(self) -> bool:
        """Step 1 has begun (a text encoder that runs now is the next call's)."""
        return self.marks.denoise0 is not None

    @property
    def final_decoding(self) -> bool:
        """The pipeline's own final decode has begun and not ended."""
        return self.state == "denoised" and self.marks.decode0 is not None and self.marks.decode1 is None

    def decode_start(self) -> None:
        """The pipeline's own final decode begins (a watch: hooks on the user's VAE). A VAE that decodes in
        slices or frame by frame calls its decoder several times: the final decode runs from the first start."""
        if self.state == "denoising":
            self.last_step()  # a loop that ended before its last step (stopped, or fewer steps than planned)
        if self.state == "denoised" and self.marks.decode0 is None:
            self.marks.decode0 = self.sw.mark()

    def decode_end(self) -> None:
        """A final decode's forward has been queued to its end: the final decode runs to the last one."""
        if self.state == "denoised":
            self.marks.decode1, self.marks.t_decoded = self.sw.mark(), self.sw.clock()

    def decode_queued(self) -> None:
        """The engine's own final decode is queued to its end: waits until the device has passed it, the wait the
        host copy makes anyway, split off so that copied() times the copy alone."""
        c = self.marks
        c.decode1 = self.sw.mark()
        self.sw.wait(c.decode1)

    def copied(self, t_copy: float) -> None:
        """The final image's host copy, begun at t_copy (host seconds), has ended."""
        c = self.marks
        c.t_decoded = self.sw.clock()
        c.copy_ms = (c.t_decoded - t_copy) * 1e3

    def returned(self) -> None:
        """A pipeline called whole has returned its image (the engine's Modular run): its text encoding (and
        whatever prepared its latents) ran to its denoiser's first forward; its postprocess and host copy ran
        from where the device passed its final decode (or the host queued its end, if later) to now."""
        c, sw = self.marks, self.sw
        c.te1 = c.denoise0
        sw.wait(c.decode1)  # passed already: the pipeline's own postprocess copied the image
        device_end = sw.host_time(c.decode1)
        t_start = c.t0 if c.t0 is not None else sw.clock()
        self.copied(max(c.t_decoded or t_start, device_end if device_end is not None else t_start))

    def request_end(self, final_encode_ms: float, write_ms: float, t_end: float) -> None:
        """The request ends at t_end: its image encoded and written (timed by the caller)."""
        c = self.marks
        c.final_encode_ms, c.write_ms, c.t_end = final_encode_ms, write_ms, t_end

    def close(self, *, first_run: bool = False, compiled: bool = False, compile_ms: float = 0.0) -> Closed | None:
        """The call's record, every row handed over (waits for what is in flight: after the call, so free);
        None for a call that never reached a step. It is done when it ran every step the pipeline runs,
        stopped otherwise. The next call starts from idle."""
        c, meter, meta = self.marks, self.meter, self.meta
        self.marks, self.meter, self.meta, self.latest = CallMarks(), None, None, None
        self._to("idle")
        if meter is None or meta is None:
            return None
        peak = max(c.peak, meter.finish_previews())
        meter.drain()
        status = "done" if len(meter.rows) >= meter.steps else "stopped"
        sw = self.sw
        record = run_record(self.model, meta, meter.rows, c.phases(sw), status=status, first_run=first_run,
                            inflight_peak=peak, compiled=compiled, compile_ms=compile_ms, cuda=sw.cuda,
                            usage=meter.usage(), timing=sw.timing)
        return Closed(meta, record, meter.rows, meter.parts.kept)

    def fail(self) -> RunMeta | None:
        """A call that raised, or was left part-way: every completed step still reaches the meter's events (the
        wait is after the call), no record is made, and the next call starts from idle. Its meta, None when it
        never reached a step."""
        meter, meta = self.meter, self.meta
        self.marks, self.meter, self.meta, self.latest = CallMarks(), None, None, None
        self.state = "idle"
        if meter is not None:
            meter.drain()
        return meta

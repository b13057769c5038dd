"""A user's call as its watch measures it, one at a time: where one begins (enter: a call left part-way ends
there, another thread's is refused), where its steps begin (begin), and how it ends: closed into its record
(save(), finish(), `record`, the next call), failed (an error the hooks saw, a call left part-way), or cut short
from inside it. The watch (callback.py) and its phase hooks (watch_phases.py) tell it what passed; the lifecycle
(lifecycle.MeasuredCall) keeps the marks and makes the record.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from previewlab.preview.call.call_owner import CallOwner, WatchError
from previewlab.preview.call.lifecycle import MeasuredCall
from previewlab.preview.call.meter import StepMeter
from previewlab.preview.judging.progress import with_progress
from previewlab.preview.record.records import StepRow
from previewlab.preview.record.run import RunEnd, RunEvents, RunMeta, RunRecord

KeepFinal = Callable[[str, bytes], bool]  # (run id, PNG) -> whether the image is kept as that run's final one


class WatchedCall:
    """unwind: unwraps the call's scheduler and sets the denoiser's first-forward hook again, so the next call
    starts clean (the watch's step tap and phase hooks)."""

    def __init__(self, call: MeasuredCall, pipe: Any, inner: tuple[Any, ...], unwind: Callable[[], None]) -> None:
        self.call = call  # the call in progress: its state, marks and meter
        self.owner = CallOwner(pipe, inner)
        self.unwind = unwind
        self.rows: list[StepRow] = []          # the rows of the latest call, in step order
        self.records: list[RunRecord] = []     # one per finished call
        self.changed: set[str] = set()         # the calls whose preview settings changed live (never one figure)
        self.cut = False                       # the call was ended early (its page closed from inside it)
        self.events: RunEvents | None = None   # the live page's (attach())
        self.keep_final: KeepFinal | None = None

    def attach(self, events: RunEvents | None, keep_final: KeepFinal | None) -> None:
        self.events, self.keep_final = events, keep_final

    def started_here(self) -> bool:
        """A call has started on this thread, not reached its first step, and is still the pipeline's current
        call (call_owner.SameCall)."""
        return self.call.state == "started" and self.owner.here() and self.owner.same_call()

    def enter(self) -> None:
        """Where a call may begin (its text encoding, its denoiser's first forward, its first step): one call at a
        time. A call left part-way by the same thread (an exception or a Ctrl-C the hooks did not see) ends here
        as failed, and this call starts clean. Another thread's call is refused in one line (its pipeline call
        raises) while this one runs or its final decode does: the two would share one set of marks and one
        scheduler; one whose thread has left the pipeline call part-way runs nothing, and ends here as failed.
        One that has decoded its image is closed first (that thread's save() then closes nothing)."""
        state = self.call.state
        if self.owner.elsewhere() and (state in ("started", "denoising") or self.call.final_decoding):
            if not self.owner.left():
                raise WatchError("watch: a call is already running on another thread; one watch measures one call "
                                 "at a time: make a pipeline and a watch per thread")
            self.fail("the call's thread left the pipeline call part-way, by an error the watch could not see "
                      "(a BaseException such as SystemExit from a step callback): another thread's call began")
        self.cut = False
        if self.call.state == "denoising":
            self.fail("the call ended before its last step, without an error the watch could see (a Ctrl-C, "
                      "or an exception outside the denoiser): its next call began")
        if self.call.state == "denoised":
            self.close()
        if self.call.state == "started":  # a call that never reached a step: its marks go, it has no record
            self.fail("")
        self.owner.claim()

    def begin(self, meta: RunMeta, meter: StepMeter) -> None:
        """Its first step: the meter takes its steps from here."""
        self.rows = meter.rows
        self.call.begin(meta, meter)

    def end_denoise(self) -> None:
        # Rows still waiting on the device or the encode thread are handed over when the call is closed or
        # `rows` is read: waiting for them here would add a device wait inside the user's loop.
        self.call.last_step()
        self.unwind()

    def raised(self, e: BaseException) -> None:
        """The pipeline's text encoder, denoiser or final decode raised, or an error left its progress bar (the
        user's own step callback): the call ends now, failed with that error (another thread's call, refused by
        enter, or another pipeline's, leaves this one alone)."""
        if self.call.state != "idle" and self.owner.here() and not isinstance(e, WatchError) and self.owner.ours():
            self.fail(e)

    def fail(self, e: BaseException | str) -> None:
        """End the call in progress as failed: its rows so far are handed over, its end says why, the scheduler
        is unwrapped and the denoiser's first-forward hook set again, so the next call starts clean."""
        meta = self.call.fail()
        self.unwind()
        self.owner.release()
        if meta is not None and self.events is not None:
            self.events.ended(RunEnd.failed(meta, e))

    def end_failed(self, why: str) -> None:
        """End a call left part-way as failed, saying why."""
        if self.call.state in ("started", "denoising"):
            self.fail(why)

    def cut_short(self) -> None:
        """End the call in progress now, from inside it: recorded stopped with the rows it has, and the rest of
        its steps left unmeasured."""
        if self.call.state == "denoising":
            self.end_denoise()
        self.close()
        self.cut = True

    def close(self, png: bytes | None = None, final: np.ndarray | None = None) -> RunRecord | None:
        """png: the call's final image as save() wrote it, kept where the run is shown before its end is told;
        final: its pixels, uint8 (H, W, 3), which the call's previews are compared with (its progress)."""
        closed = self.call.close(first_run=not self.records)  # a watch's first call pays the one-off costs: a warm-up
        self.owner.release()
        if closed is None:
            return None
        # after the record's clock stopped (t_end): the progress and keeping the image are not the user's request
        rec, self.rows = with_progress(closed.record, closed.rows, closed.kept, final)
        meta = closed.meta
        self.records.append(rec)
        kept = png is not None and self.keep_final is not None and self.keep_final(meta.run_id, png)
        end = RunEnd.of(meta, rec.totals, self.rows, has_final=kept)
        if end.changes:
            self.changed.add(meta.run_id)
        if self.events:
            self.events.ended(end)
        return rec

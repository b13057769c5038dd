"""The runs' events, shown to the watchers: on the event loop, in order, each after what it describes is on disk.

A run's owner (the worker, or the embedded server's hop from a watch) tells the Relay of each run: it is the
RunEvents (preview/record/run.py) on the loop. A run's messages (run, step, error, done) go through the ordered writes,
so clients hear of them in order, each after what it describes is written. Frames go straight out: a frame may
reach the page before its step's row (the page keys both by step), never before its run's `run` message
(announce). What the watchers do with the frames comes back here (sent, dropped, acked, gone): into the run's
deliveries, and into its end, which waits for the acks of the previews its watchers still hold.
"""
from __future__ import annotations

import asyncio
import functools
import logging
import time
from dataclasses import dataclass, replace
from typing import Callable

from previewlab.preview.judging import progress
from previewlab.preview.frames import Frame, KeptFrames
from previewlab.preview.record.records import StepRow
from previewlab.preview.record.run import RunEnd, RunMeta, RunRecord

from previewlab.server.ws import binary, outbound, protocol
from previewlab.server.core.run_figures import RunFigures
from previewlab.server.data.columns import DeliveryRow
from previewlab.server.data.disk import DiskReads
from previewlab.server.ws.sender import Client, Hub, Packed
from previewlab.server.core.limits import MAX_EVENT_CHARS, clip, SessionLimits
from previewlab.server.core.metrics import Metrics
from previewlab.server.data.run_files import Damaged
from previewlab.server.data.store import Store
from previewlab.server.data.owner import InUse
from previewlab.server.data.writes import DRAIN_S, OrderedWrites

log = logging.getLogger("previewlab.server")


@dataclass
class Closing:
    """A run that has ended, its rows not closed yet: waiting (up to SessionLimits.ack_wait_s) for the acks of
    the previews its watchers still hold, so that the last frame's ack lands in its rows before `done`."""
    end: RunEnd
    side_logs: Callable[[], None] | None
    timer: asyncio.TimerHandle | None = None


class Relay:
    """Its parts: the watchers (hub, built here with the relay's ears on its frames), the rows' writer (writes,
    built here), the data folder (store) and its reads (disk, for retention), the counters (metrics). Its state:
    the run going on (current), the newest row's (run id, step) (last_row: where a shutdown stopped it), the run
    that ended and waits for acks (closing: at most one), and the frames held until their run is announced."""

    def __init__(self, store: Store, metrics: Metrics, disk: DiskReads, limits: SessionLimits,
                 judge: Callable[[str], RunFigures | None] | None = None) -> None:
        """judge: a run's figures and its settings' analysis, by id, for its `done` (read on the writer thread,
        after its end is written; None: it has none)."""
        self.store, self.metrics, self.disk, self.judge = store, metrics, disk, judge
        self.on_done: Callable[[RunEnd, RunFigures | None], None] | None = None  # after each `done` went out
        self.on_gone: Callable[[], None] | None = None  # after a watcher left (the hub's clients: those left)
        self.ack_wait_s = limits.ack_wait_s
        self.hub = Hub(limits.send_timeout_s, on_sent=self._sent, on_drop=self._dropped, on_gone=self._gone)
        self.writes = OrderedWrites()  # rows, deliveries and a run's end: written off the loop, then announced
        self.current: RunMeta | None = None
        self.last_row: tuple[str, int] = ("", 0)
        self.closing: Closing | None = None  # a run's start closes the one before it first
        self.announced: str | None = None  # the run whose `run` message has gone out; its frames may follow
        self._held: dict[str, Frame] = {}  # per run: its newest frame from before its `run` message went out
        self._kept: dict[str, KeptFrames] = {}  # per open run: its frames by reference, for its progress at its end
        self._seq = 0  # the last frame's number, counted across runs
        self._loop: asyncio.AbstractEventLoop | None = None

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """From now on the writes leave the loop and a run's end may wait for acks (before, both are inline)."""
        self._loop = loop
        self.writes.attach(loop)

    async def begin(self, meta: RunMeta) -> None:
        """Make the run's folder on the writer thread, in order with the writes, within writes.FOLDER_DEADLINE_S
        (writes.Stalled past it; a folder made later is removed)."""
        await self.writes.begin(functools.partial(self.store.begin, meta),
                                functools.partial(self.store.discard, meta.run_id), f"the data folder {self.store.root}/")

    def begin_later(self, meta: RunMeta) -> None:
        """A script's run (the embedded page): its folder made on the writer, ahead of its rows, without waiting
        (the script's call is already running). One that cannot be made is logged; its rows are not kept."""
        def make() -> None:
            try:
                self.store.begin(meta)
            except (OSError, InUse) as e:
                log.warning("run %s: its folder could not be made: %s; its rows are not kept", meta.run_id, e)
        self.writes.submit(make)

    # -- RunEvents -------------------------------------------------------------------------------------------
    def started(self, meta: RunMeta) -> None:
        self.close_ended()  # the run before this one stops waiting for acks: its `done` goes out before this `run`
        self.current = meta
        self._kept = {meta.run_id: KeptFrames()}  # a run that never ended (shut down) leaves its frames here
        self.metrics.run_started()
        self.writes.submit(None, then=lambda: self.announce(meta))

    def announce(self, meta: RunMeta) -> None:
        self.announced = meta.run_id
        self.hub.text(outbound.run(meta))
        held = self._held.pop(meta.run_id, None)
        if held is not None:
            self.frame(held)

    def row(self, row: StepRow) -> None:
        if len(row.event) > MAX_EVENT_CHARS:  # one cell must never outgrow what the CSV reader takes back
            row = replace(row, event=clip(row.event, MAX_EVENT_CHARS))
        self.metrics.step(row)
        self.last_row = (row.run_id, row.step)
        message = outbound.step(row)
        self.writes.submit(functools.partial(self.store.step, row), then=lambda: self.hub.text(message))

    def frame(self, f: Frame) -> None:
        kept = self._kept.get(f.run_id)
        if kept is not None:
            kept.keep(f)  # a reference to the bytes made: compared only at the run's end, on the writer
        if f.run_id != self.announced:
            self._held[f.run_id] = f  # only the newest: previews are latest-wins everywhere
            return
        self._seq += 1
        blob = binary.frame(f, self._seq, sent_at_ms=round(time.time() * 1e3, 3))
        self.hub.frame(Packed(f.run_id, f.step, self._seq, blob, self.hub.clock(), f.width, f.height))

    def error(self, run_id: str, message: str) -> None:
        text = outbound.error(message, run_id)
        self.writes.submit(None, then=lambda: self.hub.text(text))

    def ended(self, end: RunEnd) -> None:
        """The run's end reaches every client whatever the disk does: each write is best effort. Its rows are
        closed once every watcher has acked the previews it holds of the run, or after ack_wait_s: the page acks
        the last frame after the last step's row, often after the run has ended, and that ack belongs in the
        run's rows. The wait is on the loop, after the run: the denoising never waits, and a watcher that never
        acks delays `done` by ack_wait_s at most (a new run's start ends the wait at once)."""
        self.current = None
        rid = end.meta.run_id

        try:  # on the loop, before the next run's start can reset the device's memory figures
            side_logs: Callable[[], None] | None = self.metrics.run_ended(end)
        except Exception:
            side_logs = None
            log.exception("run %s: metrics failed; the run's end is delivered anyway", rid)
        self.close_ended()
        self.closing = Closing(end, side_logs)
        if self._loop is not None and self.hub.unacked(rid):
            self.closing.timer = self._loop.call_later(self.ack_wait_s, self.close_ended)
        else:
            self.close_ended()

    def close_ended(self) -> None:
        """Close the ended run's rows and tell every client its end, now (if a run is waiting to be closed)."""
        closing, self.closing = self.closing, None
        if closing is None:
            return
        if closing.timer is not None:
            closing.timer.cancel()
        end, side_logs, rid = closing.end, closing.side_logs, closing.end.meta.run_id
        kept = self._kept.pop(rid, None)
        recorded = end
        judged: RunFigures | None = None
        message: outbound.Outbound | None = None  # its `done`, made on the writer with its figures

        def write() -> None:
            nonlocal recorded, judged, message
            # `failed` if the disk lost some of its rows; its progress first, off the loop and after the run
            recorded = self.store.finish(self._progressed(end, kept))
            self.store.close_run(rid)
            if side_logs is not None:
                side_logs()
            if self.judge is not None:
                try:
                    judged = self.judge(rid)
                    message = outbound.done(recorded, judged)  # its figures as JSON, here: off the loop
                except Exception:  # the end goes out with its record whatever the analysis does
                    judged = None
                    log.exception("run %s: its figures failed; its end is delivered without them", rid)

        def then() -> None:
            self.hub.text(message if message is not None else outbound.done(recorded))
            self.disk.submit(self.store.prune, self.store.open_runs())  # retention, off the loop
            if self.on_done is not None:
                self.on_done(recorded, judged)

        self.writes.submit(write, then)

    def _progressed(self, end: RunEnd, kept: KeptFrames | None) -> RunEnd:
        """On the writer thread: the ended run's progress (judging/progress.py), its frames against its final
        image, into its steps.csv (rewritten whole) and its totals. A run without totals, frames or a final image
        ends as it came; a failure here is logged and never holds the end back."""
        rid = end.meta.run_id
        if end.totals is None or kept is None or self.store.final_image(rid) is None:
            return end
        try:
            final = progress.pixels(self.store.read_final_image(rid))
            record, rows = progress.with_progress(RunRecord(end.meta, end.totals), self.store.own_rows(rid), kept,
                                                  final)
        except (OSError, ValueError, Damaged) as e:
            log.warning("run %s: its progress was not read: %s", rid, e)
            return end
        if record.totals is end.totals or not self.store.rewrite_steps(rid, rows):
            return end
        return replace(end, totals=record.totals)

    def _settle(self) -> None:
        """An ack came, a frame was dropped or a watcher left: close the ended run once nothing is waiting."""
        if self.closing is not None and not self.hub.unacked(self.closing.end.meta.run_id):
            self.close_ended()

    # -- what the watchers did with the frames ---------------------------------------------------------------
    def acked(self, c: Client, msg: protocol.Ack) -> None:
        """A watcher painted a frame: its delivery goes into the run's rows and back to that watcher. Raises
        ProtocolError for a seq it was never sent (or acked already)."""
        sent = c.sent.pop(msg.seq, None)
        if sent is None:
            raise protocol.ProtocolError(f"ack: seq {msg.seq} was never sent to this client "
                                         "(or was acknowledged already)")
        now = self.hub.clock()
        c.acks = True
        rtt = (now - sent.t0) * 1e3
        if sent.run_id == c.run:
            c.delivered += 1
        page_s = (msg.client_decode_ms + msg.client_paint_ms) / 1e3  # the page's own time: not the link's
        if self.hub.adapt and c.adapt:
            c.link.acked(sent.t0, now, sent.nbytes, sent.level, page_s)
        else:
            c.link.trip(sent.t0, now, sent.nbytes, page_s)  # its rate is measured all the same
        rate = c.link.rate_bps()
        d = outbound.Delivery(sent.run_id, sent.step, msg.seq, send_ms=round(sent.send_ms, 3),
                              ack_rtt_ms=round(rtt, 3), client_decode_ms=msg.client_decode_ms,
                              client_paint_ms=msg.client_paint_ms, nbytes=sent.nbytes,
                              age_ms=round((now - sent.made) * 1e3, 3) if sent.made else None,
                              link_mbps=round(rate / 1e6, 3) if rate is not None else None,
                              made=c.made if sent.run_id == c.run else None,
                              delivered=c.delivered if sent.run_id == c.run else None, adapted=sent.adapted)
        self.writes.submit(functools.partial(self.store.delivery, d.row(str(c.cid))))
        self.hub.text(outbound.delivery(d, c.link.slow_page(sent.adapted)), only=c)  # wakes its sender: the next may go
        self._settle()

    def _sent(self, c: Client, p: Packed) -> None:
        self.metrics.sent(len(p.blob))

    def _dropped(self, c: Client, p: Packed) -> None:
        self.metrics.frames_dropped.inc()
        dropped = DeliveryRow(p.run_id, p.step, p.seq, str(c.cid), "drop")
        self.writes.submit(functools.partial(self.store.delivery, dropped))
        self._settle()

    def _gone(self, c: Client) -> None:
        self._settle()
        if self.on_gone is not None:
            self.on_gone()

    # -- the end ---------------------------------------------------------------------------------------------
    async def flush(self, deadline_s: float | None = None) -> bool:
        """No more waiting for acks: the ended run's rows closed, and every write done and its message queued
        (False: not within deadline_s)."""
        self.close_ended()
        return await self.writes.drain(deadline_s)

    async def close(self) -> bool:
        """flush(), then the writer thread ends (a stopped server loses no row). A disk that stalls past
        DRAIN_S is given up on, logged: the process still exits. False then."""
        drained = await self.flush(DRAIN_S)
        if not drained:
            log.warning("the data folder did not answer in %g s (a stalled disk?); the last writes are left to it",
                        DRAIN_S)
        self.writes.close(wait=drained)
        return drained

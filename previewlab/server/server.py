"""One model served from one data folder: the parts, built once here, and what the watchers' messages do to them."""
from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from previewlab.preview.decoding.tae_decoder import taesd_refusal
from previewlab.preview.judging.advice import DEFAULT_BUDGET_PCT
from previewlab.preview.judging.digest import WATCH
from previewlab.preview.judging.estimates import NOISE_LIMIT_PCT
from previewlab.preview.models import Model
from previewlab.preview.record.run import RunEnd, RunMeta
from previewlab.preview.settings import SIDE_STREAM_DEVICES, RunSettings, SettingsError

from previewlab.server.ws import outbound, protocol
from previewlab.server.data.disk import DiskReads
from previewlab.server.http.exports import Slots
from previewlab.server.figures import PAGE, Figures
from previewlab.server.http.guard import Access
from previewlab.server.ws.sender import Client
from previewlab.server.core.limits import DEFAULT_KEEP_RUNS, SessionLimits
from previewlab.server.core.run_figures import RunFigures
from previewlab.server.measure import Series, refusal, standing
from previewlab.server.core.metrics import Metrics
from previewlab.server.ws.options import Offer, RunOptions
from previewlab.server.ws.relay import Relay
from previewlab.server.data.owner import InUse
from previewlab.server.data.store import Store
from previewlab.server.data.writes import Stalled
from previewlab.server.fidelity_job import FidelityJob
from previewlab.preview.call.call_args import TaskError
from previewlab.server.worker import Busy, RunOwner, Worker

log = logging.getLogger("previewlab.server")


def mode_note(device: str) -> str:
    """Which mode applies on this device and why, for the page's mode select."""
    if device in SIDE_STREAM_DEVICES:
        return (f"overlap by default: on {device} its side stream decodes, resizes and copies previews beside the "
                f"denoising; sync does every preview inside the step")
    return (f"sync by default: on a {device} overlap has no side stream, so the preview work shares the cores with "
            f"the denoising whatever the mode (overlap runs it on a thread beside the step)")


class Server:
    """Its parts: the data folder (store; disk, its reads off the loop; exports, the CSVs streaming now), the
    counters (metrics), the runs shown to the watchers (relay, which holds the hub), the page's fidelity pass
    (fidelity), and the runs' owner (worker: a Worker, or a script's watch given as `source`), built once the loop
    runs (attach). Its settings: who may drive it (access), what each watcher is held to (limits), what a start may
    ask (runs), what it offers (offer). It answers each watcher's messages (handle) and drives the page's measure
    series (series). The runs' owner tells its runs to the relay: the worker, or a watch through the embedded
    page's hop (hop.py). SIGTERM and Ctrl-C: shutdown.py."""

    def __init__(self, model: Model, data_dir: Path, *, access: Access = Access(),
                 limits: SessionLimits = SessionLimits(), runs: RunOptions = RunOptions(),
                 keep_runs: int = DEFAULT_KEEP_RUNS, source: RunOwner | None = None,
                 noise_limit: float = NOISE_LIMIT_PCT) -> None:
        """access: who may drive it (the guard's); limits: what each watcher is held to; runs: what a start may
        ask and how the worker runs it; keep_runs: the data folder's retention; source: a script's watch, which
        owns the runs instead of a worker; noise_limit: the baselines' spread, percent, past which the machine is
        NOISY (serve --noise-limit)."""
        self.model = model
        self.access, self.limits, self.runs = access, limits, runs
        self.offer = Offer.of(model, runs)
        self.store = Store(data_dir, keep_runs=keep_runs)  # never raises for a damaged run: it names it
        self.disk = DiskReads()
        self.exports = Slots()  # CSV exports streaming at once (exports.py)
        self.metrics = Metrics(data_dir, model.device, keep=keep_runs)
        # every figure the page shows; a script's page words its measures as a script takes them (digest.WATCH)
        self.figures = Figures(self.store, has_taesd=model.taesd is not None, noise_limit=noise_limit,
                               surface=WATCH if source is not None else PAGE)
        self.relay = Relay(self.store, self.metrics, self.disk, limits, judge=self.figures.of_run)
        self.relay.on_done = self._measured
        self.relay.on_gone = self._watcher_left
        self.series: Series | None = None  # the page's measure series, while one runs (measure.py)
        self.fidelity = FidelityJob(model, self.store, self.disk, self.relay.hub, self.figures.decoders)
        self.source = source
        self.worker: RunOwner | None = None  # `source`, or a Worker on the running loop (attach)

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """The app starts on `loop`: the writes leave it, and the runs' owner tells the relay on it."""
        self.relay.attach(loop)
        self.worker = self.source if self.source is not None else Worker(
            self.model, self.store, loop, self.relay, self.relay.begin, inflight=self.runs.inflight,
            compile_decoder=self.runs.compile_decoder, clock=self.runs.clock)

    async def close(self) -> None:
        """The app's end: the run stopped (its thread joined off the loop), its rows and end written, the
        folder free for another server."""
        if self.worker is not None:
            self.worker.stop()
            await asyncio.get_running_loop().run_in_executor(None, self.worker.shutdown)
        drained = await self.relay.close()
        self.disk.close()
        if drained:  # a stalled disk would hold the loop here: the process's end releases the lock instead
            self.store.close()

    # -- messages from one client ----------------------------------------------------------------------------
    def hello(self) -> outbound.Outbound:
        live = self.worker.live() if self.worker is not None else None
        if self.series is not None and self.series.state == "running":
            live = self.series.measured.preview  # the user's settings, not those of the baseline running now
        said = self.offer.hello(self.model, live, running=self.relay.current, starts=self.source is None)
        # advice_budget: the budget the advice is judged at until the page's Budget field says another
        return {**said, "measure": self.series.message() if self.series is not None else None,
                "fidelity": self.fidelity.line,
                "mode_note": mode_note(self.model.device.type), "advice_budget": DEFAULT_BUDGET_PCT}

    def _runnable(self, decoder: str | None) -> None:
        """A decoder this model can run, asked the same way by start and set: taesd needs TAE weights (before,
        a start failed its run with a traceback and a set made every preview fail)."""
        if decoder == "taesd" and self.model.taesd is None:
            why = taesd_refusal(self.model)  # a script's page: the watch takes taesd=, not the CLI's flag
            raise protocol.ProtocolError(why.replace("--taesd PATH", "taesd=PATH") if self.source else why)

    async def handle(self, c: Client, msg: protocol.Message) -> None:
        """Act on one valid message. A message that cannot be acted on raises ProtocolError: the session
        answers it with an `error` and counts it as a bad message, so no error reply can be flooded."""
        assert self.worker is not None
        series = self.series
        if isinstance(msg, (protocol.Set, protocol.Start, protocol.Measure, protocol.MeasureFidelity)) and series \
                and series.state == "running":
            raise protocol.ProtocolError(f"a measure series of {series.config} is running: its runs keep the "
                                         "settings it measures; stop it first")
        if isinstance(msg, protocol.MeasureFidelity):
            worker = self.worker if self.source is None and isinstance(self.worker, Worker) else None
            await self.fidelity.start(worker, msg.settings, msg.seeds)
        elif isinstance(msg, protocol.Measure):
            await self._measure(msg.settings)
        elif isinstance(msg, protocol.Start):
            self._runnable(msg.settings.preview.decoder)
            await self._start(msg.settings, "")
        elif isinstance(msg, protocol.Set):
            self._runnable(msg.changes.get("decoder"))
            try:
                self.worker.set(msg)
            except (Busy, SettingsError) as e:
                raise protocol.ProtocolError(str(e)) from None
        elif isinstance(msg, protocol.Stop):
            ended_series = self._end_series("stopped by a watcher")
            if not self.worker.stop() and not ended_series:  # between a series' runs: the series was what ran
                raise protocol.ProtocolError("no generation is running")
        elif isinstance(msg, protocol.Ack):
            self.relay.acked(c, msg)
        elif isinstance(msg, protocol.LinkChoice):
            c.adapt = msg.adapt
            if not msg.adapt:
                c.link.level = 0

    async def _start(self, settings: RunSettings, what: str) -> RunMeta:
        """A run started by a watcher (what: "" for a start, "measure: " for a series' run); each refusal is one
        ProtocolError line."""
        assert self.worker is not None
        try:
            return await self.worker.start(settings)
        except (Busy, TaskError, InUse) as e:
            raise protocol.ProtocolError(f"{what}{e}") from None
        except Stalled as e:
            log.warning("could not start a run: %s", e)
            raise protocol.ProtocolError(f"{what}{e}") from None
        except OSError as e:  # the run's folder could not be written: the run did not start
            log.warning("could not start a run: %s", e)
            raise protocol.ProtocolError(f"{what}could not write the run's folder: {e}") from None

    # -- the measure series (measure.py) ---------------------------------------------------------------------
    def _end_series(self, why: str) -> bool:
        """End the running series, told to every watcher; its run is stopped by the caller (a run still starting
        starts stopped). False: none was running."""
        if self.series is None or not self.series.stop(why):
            return False
        self.relay.hub.text(self.series.message())
        self._release(self.series)
        return True

    def _release(self, series: Series) -> None:
        """The series ended: its runs are retention's again, after the prunes already queued (the last run's)."""
        def release(open_runs: set[str]) -> None:
            self.store.retention.release(series.key)
            self.store.prune(open_runs)
        self.disk.submit(release, self.store.open_runs())

    def _watcher_left(self) -> None:
        """A watcher left: with none left, the series and its run stop (nobody would see what it measures; a
        page that reconnects sees how it ended)."""
        if not self.relay.hub.clients and self._end_series("its page closed and no other tab watched it"):
            assert self.worker is not None
            self.worker.stop()

    async def _measure(self, settings: RunSettings) -> None:
        """Start a series: held from here (a Stop while it counts the pairs its configuration has ends it), its
        first run then started (refused as a start would be). Refused where --keep-runs cannot keep its figure."""
        assert self.worker is not None
        if self.source is not None:
            raise protocol.ProtocolError("measure: a script owns the runs here (serve(watch)); alternate its calls "
                                         "with previews off and on, and watch.summary() measures them")
        self._runnable(settings.preview.decoder)
        if refusal(settings):
            raise protocol.ProtocolError(refusal(settings))
        self.series = series = Series(settings, counted=False)  # a second measure or start is refused from here
        meta = RunMeta.of(self.model, "", settings)
        try:  # off the loop: it stats files
            found, stood_on = await self.disk.run(lambda: standing(self.figures.entries(), meta))
        except BaseException:
            self.series = None
            raise
        if series.state != "running":
            return  # stopped while it counted: every watcher was told
        series.count(found, stood_on)
        too_few = series.room(self.store.retention.keep_runs)
        if too_few:
            self.series = None
            raise protocol.ProtocolError(too_few)
        self.store.retention.hold(series.key, stood_on)
        first = series.next_run()
        try:
            started = await self._start(first, "measure: ")
        except protocol.ProtocolError:
            self.series = None
            self._release(series)
            raise
        self._began(series, started)
        self.relay.hub.text(series.message(_now(first)))

    def _began(self, series: Series, meta: RunMeta) -> None:
        """A run of `series` started, held from retention; a series that ended while the run was starting (its
        run started stopped), or that no tab watches any more, stops it at once."""
        series.runs.add(meta.run_id)
        if not self.relay.hub.clients:  # its tab left while the run started
            self._end_series("its page closed and no other tab watched it")
        if series.state == "running":
            self.store.retention.hold(series.key, [meta.run_id])
        else:
            assert self.worker is not None
            self.worker.stop()

    def _measured(self, end: RunEnd, judged: RunFigures | None) -> None:
        """A run ended and its figures went out: the series goes on, or ends (_next_of)."""
        series = self.series
        if series is None or series.state != "running" or self.worker is None or end.meta.run_id not in series.runs:
            return  # a run from before the series (its end waited for acks), or none of the series'
        asyncio.get_running_loop().create_task(self._next_of(series, end, judged))

    async def _next_of(self, series: Series, end: RunEnd, judged: RunFigures | None) -> None:
        """The series' next run, or its end, told to every watcher; decided once its held runs were looked for
        in the folder (off the loop), started off the callback that heard the last one end."""
        held = series.held
        gone = await self.disk.run(lambda: [rid for rid in held if not self.store.known(rid)])
        if series.state != "running":
            return  # stopped meanwhile
        nxt = series.after(end, judged, gone)
        if nxt is None:
            self.relay.hub.text(series.message(""))
            self._release(series)
            return
        try:
            started = await self._start(nxt, "")
        except protocol.ProtocolError as e:
            if series.state == "running":
                series.state, series.why = "failed", f"its next run could not start: {e}"
                self.relay.hub.text(series.message(""))
                self._release(series)
            return
        self._began(series, started)
        if series.state == "running":
            self.relay.hub.text(series.message(_now(nxt)))


def _now(settings: RunSettings) -> str:
    """A series' run, in its progress line."""
    return "a baseline" if settings.purpose == "baseline" else "a run with previews"

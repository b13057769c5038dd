"""The page's Measure fidelity: the fidelity pass (preview/call/fidelity_pass.py) as one job on the worker's model
thread, untimed, between runs; its samples kept in the data folder (data/fidelity_files.py), where the analysis of
those settings' runs reads them, and its line told to every watcher."""
from __future__ import annotations

import asyncio
import logging
from typing import Callable, Sequence

from previewlab.preview.call import fidelity_pass
from previewlab.preview.judging import fidelity
from previewlab.preview.judging.estimates import SAMPLES_FOR_LEVEL
from previewlab.preview.judging.fidelity import Final, Sample
from previewlab.preview.models import Model
from previewlab.preview.record.run import RunMeta
from previewlab.preview.settings import RunSettings

from previewlab.server.data import fidelity_files
from previewlab.server.data.disk import DiskReads
from previewlab.server.data.store import Store
from previewlab.server.worker import Busy, Worker
from previewlab.server.ws import outbound, protocol
from previewlab.server.ws.sender import Hub

log = logging.getLogger("previewlab.server")
Measured = tuple[list[Sample], list[Final]]  # what the pass returns: each preview's sample, each seed's final


class FidelityJob:
    """One pass at a time, on the worker given to start. `line` is the last pass's line (running, done or
    failed), which `hello` repeats to a page that connects later."""

    def __init__(self, model: Model, store: Store, disk: DiskReads, hub: Hub, decoders: Sequence[str]) -> None:
        """decoders: those this model can run (the figures'); the pass measures each but none."""
        self.model, self.store, self.disk, self.hub = model, store, disk, hub
        self.decoders = [d for d in decoders if d != "none"]
        self.line: outbound.Outbound | None = None
        self._ending: asyncio.Task[None] | None = None  # the task that awaits the pass's end

    async def start(self, worker: Worker | None, settings: RunSettings, seeds: int) -> None:
        """What each decoder shows of `settings`' runs (their size, steps, target, decode_at and preview size)
        against the full VAE, over `seeds` seeds: never beside a run, and no run folder made. worker: None where a
        script owns the runs. Each refusal is one ProtocolError line."""
        if worker is None:
            raise protocol.ProtocolError("fidelity: a script owns the runs here (serve(watch)); measure it with "
                                         "previewlab bench --fidelity")
        if worker.state != "idle":
            what = "the fidelity pass" if worker.state == "judging" else f"run {worker.run_id}"
            raise protocol.ProtocolError(f"fidelity: {what} is running; the pass runs between runs, never beside a "
                                         f"timed one: wait for it to end or stop it")
        if self.model.space.video:
            raise protocol.ProtocolError("fidelity: a video model's clips are not measured yet (images only)")
        decoders, meta, p = self.decoders, RunMeta.of(self.model, "", settings), settings.preview
        what = (f"{', '.join(decoders)} at {p.decode_at}, {settings.width}x{settings.height}, {settings.steps} steps, "
                f"{seeds} seed{'s' * (seeds != 1)}")

        def job(should_stop: Callable[[], bool]) -> Measured:
            return fidelity_pass.measure(self.model, settings, decoders, [p.decode_at], [settings.steps], seeds,
                                         previewer=worker.previewer, should_stop=should_stop)
        try:
            done = worker.job(job)  # the worker is held from here: a start meanwhile is refused
        except Busy as e:
            raise protocol.ProtocolError(f"fidelity: {e}") from None
        self.line = outbound.fidelity("running", f"measuring fidelity of {what}: untimed, no run recorded")
        self.hub.text(self.line)
        # its end is awaited apart: this watcher's next messages (a Stop) are handled meanwhile
        self._ending = asyncio.get_running_loop().create_task(self._ended(done, meta, what, seeds))

    async def _ended(self, done: asyncio.Future[Measured], meta: RunMeta, what: str, seeds: int) -> None:
        """The pass's end: its samples kept (off the loop) and its line told to every watcher."""
        try:
            samples, finals = await done
            got = len({s.seed for s in samples})
            if got < seeds:
                raise fidelity_pass.FidelityError(f"fidelity: stopped after {got} of {seeds} seeds; nothing kept")
            await self.disk.run(lambda: fidelity_files.write(self.store.root, meta, samples, finals))
        except (fidelity_pass.FidelityError, OSError) as e:
            self.line = outbound.fidelity("failed", str(e) if isinstance(e, fidelity_pass.FidelityError) else
                                          f"fidelity: could not keep its samples: {e}")
        except Exception as e:
            log.exception("the fidelity pass failed")
            self.line = outbound.fidelity("failed", f"fidelity: {type(e).__name__}: {str(e)[:200]}")
        else:
            figs = fidelity.figures(samples, finals, synthetic=meta.synthetic)
            short = "" if all(f.ssim.sure for f in figs.figures) else (
                f"; short of the 95 % level ({SAMPLES_FOR_LEVEL} seeds reach it): the advice does not build on it")
            self.line = outbound.fidelity("done", f"measured fidelity of {what}: " +
                                          "; ".join(f"{f.name} {f.said()}" for f in figs.figures) + short)
        self.hub.text(self.line)

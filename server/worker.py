"""The one worker that owns the model: one generation at a time on its own thread.

States: idle -> running -> (stopping ->) idle; a second start while running is refused. The worker thread
hands rows, frames and errors to the event loop with call_soon_threadsafe and never waits for it.
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from typing import Any, Callable, Literal

from previewlab.preview.engine import Controls, Frame, Previewer, generate
from previewlab.preview.models import Model
from previewlab.preview.records import StepRow
from previewlab.preview.settings import RunSettings

from .store import Store

log = logging.getLogger("previewlab.server")
State = Literal["idle", "running", "stopping"]


class Busy(RuntimeError):
    pass


class Listener:
    """What the worker tells the server; every method runs on the event loop."""

    def run_started(self, meta: dict[str, Any]) -> None: ...
    def row(self, row: StepRow) -> None: ...
    def frame(self, frame: Frame) -> None: ...
    def error(self, run_id: str, message: str) -> None: ...
    def run_ended(self, meta: dict[str, Any]) -> None: ...


class Worker:
    def __init__(self, model: Model, store: Store, loop: asyncio.AbstractEventLoop, listener: Listener, *,
                 inflight: int = 2, compile_decoder: bool = False) -> None:
        self.model, self.store, self.loop, self.listener = model, store, loop, listener
        self.previewer = Previewer(model, compile_decoder)  # decoders are built once and kept across runs
        self.inflight = inflight
        self.state: State = "idle"
        self.run_id: str | None = None
        self.controls: Controls | None = None
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="previewlab-model")
        self._first = True
        self.future: Any = None

    def start(self, settings: RunSettings) -> dict[str, Any]:
        if self.state != "idle":
            raise Busy(f"a generation is already running ({self.run_id}); stop it or wait for it to finish")
        rid = self.store.new_id()
        m = self.model
        meta = dict(run_id=rid, started_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"), model=m.name,
                    synthetic=m.synthetic, model_note=m.note, family=m.family, device=m.device.type,
                    dtype=str(m.dtype).removeprefix("torch."), prompt=settings.prompt, steps=settings.steps,
                    width=settings.width, height=settings.height, seed=settings.seed, guidance=settings.guidance,
                    **asdict(settings.preview))
        self.store.begin(meta)
        self.state, self.run_id = "running", rid
        self.controls = Controls(settings.preview)
        self._stop.clear()
        self.listener.run_started(meta)
        self.future = self._pool.submit(self._run, settings, meta)
        return meta

    def set(self, changes: dict[str, Any]) -> None:
        if self.state == "idle" or self.controls is None:
            raise Busy("no generation is running; put preview settings in start")
        self.controls.set(**changes)

    def stop(self) -> bool:
        if self.state != "running":
            return False
        self.state = "stopping"
        self._stop.set()
        return True

    def _call(self, fn: Callable[..., None], *args: Any) -> None:
        self.loop.call_soon_threadsafe(fn, *args)

    def _run(self, settings: RunSettings, meta: dict[str, Any]) -> None:
        rid = meta["run_id"]
        assert self.controls is not None
        try:
            run = generate(self.model, settings, run_id=rid, controls=self.controls,
                           on_row=lambda r: self._call(self.listener.row, r),
                           on_frame=lambda f: self._call(self.listener.frame, f),
                           on_error=lambda msg: self._call(self.listener.error, rid, msg),
                           should_stop=self._stop.is_set, image_path=self.store.final_image_path(rid),
                           first_run=self._first, inflight=self.inflight, previewer=self.previewer)
            self._first = False
            end = {**meta, "status": run.record.status, "totals": asdict(run.record)}
        except OSError as e:  # the disk (the final image): one line, not a traceback
            log.warning("run %s failed: %s", rid, e)
            end = {**meta, "status": "failed", "error": f"{type(e).__name__}: {str(e)[:200]}"}
        except Exception as e:
            log.exception("run %s failed", rid)
            end = {**meta, "status": "failed", "error": f"{type(e).__name__}: {str(e)[:200]}"}
        self._call(self._ended, end)

    def _ended(self, meta: dict[str, Any]) -> None:
        self.state, self.run_id, self.controls = "idle", None, None
        self.listener.run_ended(meta)

    def shutdown(self) -> None:
        self._stop.set()
        self._pool.shutdown(wait=True)

"""The one worker that owns the model: one generation at a time on its own thread.

States: idle -> starting -> running -> (stopping ->) idle, or starting -> stopping when a Stop lands while the
run's folder is made; a second start while one runs or starts is refused. The worker tells its
RunEvents (the relay) of each run on the event loop: `started` from start(), the rest from the model's thread,
through the hop (hop.py's ToLoop); that thread never waits for the loop. A run's end goes through the worker,
which is idle again before the events hear it.
"""
from __future__ import annotations

import asyncio
import io
import logging
import threading
from pathlib import Path
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Literal, Protocol, TypeVar

from previewlab.preview.controls import Controls
from previewlab.preview.decoding.previewer import Previewer
from previewlab.preview.call.engine import RunContext, generate
from previewlab.preview.call.call_args import TaskError, img2img_pipe
from previewlab.preview.models import Model
from previewlab.preview.record.run import RunEnd, RunEvents, RunMeta
from previewlab.preview.settings import PreviewSettings, RunSettings
from previewlab.preview.timing.stopwatch import Clock, host_clock

from previewlab.server.data.store import Store
from previewlab.server.hop import ToLoop
from previewlab.server.ws.protocol import Set

if TYPE_CHECKING:
    import PIL.Image

log = logging.getLogger("previewlab.server")
State = Literal["idle", "starting", "running", "stopping", "judging"]  # starting: its folder is being made;
# judging: an untimed job between runs holds the model (the fidelity pass)
T = TypeVar("T")
Begin = Callable[[RunMeta], Awaitable[None]]  # makes a run's folder off the loop (Relay.begin)


class Busy(RuntimeError):
    pass


class RunOwner(Protocol):
    """What the server's message handler and its shutdown ask of whoever runs the generations: the Worker, or
    a watch's script (server/embedded.py's WatchSource). Called on the event loop."""

    @property
    def state(self) -> str: ...
    async def start(self, settings: RunSettings) -> RunMeta: ...  # raises Busy, TaskError, OSError, InUse
    def set(self, change: Set) -> None: ...                 # raises Busy, SettingsError
    def stop(self) -> bool: ...                             # False: nothing was running
    def live(self) -> PreviewSettings | None: ...           # the preview settings now (None: no run's own)
    async def ended(self, timeout_s: float) -> bool: ...    # the run in progress has ended (False: still going)
    def abandon(self) -> None: ...                          # shutdown gives up on the run: it reports nothing more
    def shutdown(self) -> None: ...                         # blocks: call it off the loop


class Worker:
    def __init__(self, model: Model, store: Store, loop: asyncio.AbstractEventLoop, events: RunEvents, begin: Begin,
                 *, inflight: int = 2, compile_decoder: bool = False,
                 clock: Callable[[], Clock] = host_clock) -> None:
        """begin: makes a run's folder, off the loop; clock: each run's host clock, asked once per run (tests: a
        fake one, a run's walls made noisy)."""
        self.model, self.store, self.loop, self.events, self.begin = model, store, loop, events, begin
        self.told = ToLoop(loop, events)  # the model's thread tells the run's rows, frames and errors through it
        self.clock = clock
        self.previewer = Previewer(model, compile_decoder)  # decoders are built once and kept across runs
        self.inflight = inflight
        self.state: State = "idle"
        self.run_id: str | None = None
        self.controls: Controls | None = None
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="previewlab-model")
        self._first = True
        self.future: Future[None] | None = None  # the run in progress, or the last one

    async def start(self, settings: RunSettings) -> RunMeta:
        """Raises Busy while a run goes on or starts, TaskError for an img2img start this server cannot run (no
        such past run, or no img2img pipeline for the model), OSError when the run's folder cannot be made or
        the disk does not answer by the deadline (writes.Stalled), InUse when another server took the folder
        (nothing started). The folder is made on the writer thread, never on the loop."""
        if self.state == "judging":
            raise Busy("the fidelity pass is running (untimed, between runs); stop it or wait for it to finish")
        if self.state != "idle":
            raise Busy(f"a generation is already running ({self.run_id}); stop it or wait for it to finish")
        if settings.init is not None:
            if self.store.final_image(settings.init) is None:
                raise TaskError(f"init={settings.init}: no past run with that id has a final image; pick one from "
                                "the run list")
            img2img_pipe(self.model)  # made once, sharing the loaded components; refuses a model without one
        meta = RunMeta.of(self.model, self.store.new_id(), settings)
        self.state, self.run_id = "starting", meta.run_id
        self._stop.clear()  # from here a Stop is this run's: one while its folder is made stops it at its first step
        try:
            await self.begin(meta)
        except BaseException:
            self.state, self.run_id = "idle", None
            raise
        self.state = "stopping" if self._stop.is_set() else "running"
        self.controls = Controls(settings.preview)
        self.events.started(meta)
        self.future = self._pool.submit(self._run, settings, meta)
        return meta

    def set(self, change: Set) -> None:
        if self.state == "idle" or self.controls is None:
            raise Busy("no generation is running; put preview settings in start")
        self.controls.set(**change.changes)

    def live(self) -> PreviewSettings | None:
        """The running run's preview settings with its live changes; None when idle (the page shows defaults)."""
        return self.controls.get() if self.controls is not None else None

    def job(self, fn: Callable[[Callable[[], bool]], T]) -> asyncio.Future[T]:
        """Run fn on the model's thread between runs, never beside one: the worker is held from this call until
        fn returns (a start meanwhile is Busy). fn is handed should_stop (Stop asks it to end early). Raises Busy,
        at once, while a run goes on or starts, or another job runs; the future holds what fn returns or raises.
        Call it on the loop."""
        if self.state != "idle":
            what = "an untimed job (the fidelity pass)" if self.state == "judging" else f"a generation ({self.run_id})"
            raise Busy(f"{what} is running; stop it or wait for it to finish")
        self.state = "judging"
        self._stop.clear()
        done = asyncio.wrap_future(self._pool.submit(fn, self._stop.is_set), loop=self.loop)
        done.add_done_callback(self._job_ended)  # before any awaiting task resumes: idle when it does
        return done

    def _job_ended(self, _done: asyncio.Future[Any]) -> None:
        if self.state == "judging":
            self.state = "idle"

    def stop(self) -> bool:
        """Stop the run at its next step (False: none runs or starts). A run still starting (its folder being
        made) starts stopped: it ends at its first step (issue 56: this returned False, and the run ran whole)."""
        if self.state in ("judging", "starting"):
            self._stop.set()
            return True
        if self.state != "running":
            return False
        self.state = "stopping"
        self._stop.set()
        return True

    @property
    def abandoned(self) -> bool:
        """Shutdown gave up on the run in progress (abandon): the hop hands nothing more to the loop."""
        return self.told.muted

    def _run(self, settings: RunSettings, meta: RunMeta) -> None:
        rid = meta.run_id
        assert self.controls is not None
        try:
            init = (self._init_image(settings.init, settings.width, settings.height) if settings.init is not None
                    else None)
            context = RunContext(self.model, settings, rid, controls=self.controls, should_stop=self._stop.is_set,
                                 init_image=init, image_path=self.store.final_image_path(rid), first_run=self._first,
                                 inflight=self.inflight, previewer=self.previewer, clock=self.clock())
            run = generate(context, self.told)
            self._first = False
            if self.abandoned:  # shutdown recorded the run interrupted, without its image: keep disk and record one
                self.store.final_image_path(rid).unlink(missing_ok=True)
            # the engine wrote the image whole or raised; asked of the disk, so the end says what is there
            end = RunEnd.of(meta, run.record.totals, run.rows, has_final=self.store.final_image(rid) is not None)
        except OSError as e:  # the disk (the final image): one line naming the file, not a traceback
            log.warning("run %s failed: %s", rid, e)
            named = f"{Path(e.filename).parent.name}/{Path(e.filename).name}: {e.strerror or e}" if e.filename else None
            end = RunEnd(meta, "failed", error=named) if named else RunEnd.failed(meta, e)
        except Exception as e:
            log.exception("run %s failed", rid)
            end = RunEnd.failed(meta, e)
        self.told.call(self._ended, end)  # idle again before the events hear the end

    def _init_image(self, rid: str, width: int, height: int) -> PIL.Image.Image:
        """A past run's final image at the run's size, read on the model's thread: the input of an img2img run.
        Resized here, because SD's and SDXL's img2img pipelines run at their input image's size (they take no
        height or width): the run's size, its rows and the work limit would not agree otherwise."""
        from PIL import Image

        with Image.open(io.BytesIO(self.store.read_final_image(rid))) as im:
            rgb = im.convert("RGB")
        return rgb if rgb.size == (width, height) else rgb.resize((width, height), Image.Resampling.LANCZOS)

    def _ended(self, end: RunEnd) -> None:
        self.state, self.run_id, self.controls = "idle", None, None
        self.events.ended(end)

    async def ended(self, timeout_s: float) -> bool:
        """Wait for the run in progress to end and its `ended` to have been told, up to timeout_s seconds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.state == "starting":  # its folder is being made: the run it then submits is the one to wait for
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(0.02)
        timeout_s = max(0.0, deadline - loop.time())
        if self.future is None:
            return True
        try:  # the run's last act queues _ended on the loop, before its future completes: that runs first
            await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(self.future)), timeout_s)
        except asyncio.TimeoutError:
            return False
        except Exception:
            pass  # _run records every failure itself; one that escapes it still ends the run
        return self.state == "idle"

    def abandon(self) -> None:
        """Shutdown's grace is over and the run is still inside a step or its final decode: nothing it does from
        now on reaches the events (the server records its end itself), and shutdown no longer waits for it."""
        self.told.mute()
        self._stop.set()

    def shutdown(self) -> None:
        self._stop.set()
        self._pool.shutdown(wait=not self.abandoned, cancel_futures=True)

"""Row appends, delivery records, a run's folder and its end leave the event loop, and nothing is announced before it
is written.

One writer thread takes the jobs in order. Each job is a write and what to tell the clients once it is done
(`then`, posted back to the loop). So clients hear of steps, errors and a run's end in the order they happened,
and a step a client has been told of is already in the run's steps.csv: a SIGKILL right after loses nothing a
client saw. A write that fails is logged; its message is sent anyway (the store's writes are best effort).

A stalled disk (frozen, hung) blocks the writer, never the loop: a run's folder is made on the writer, and its
start is refused when the folder has not answered by a deadline (begin()); the server's end waits for the writes
at most DRAIN_S, and the writer is a daemon (serial.py), so the process still exits.
"""
from __future__ import annotations

import asyncio
import logging
import threading
from concurrent.futures import Future
from typing import Callable

from previewlab.server.data.serial import SerialThread

log = logging.getLogger("previewlab.server")
Job = Callable[[], None]
FOLDER_DEADLINE_S = 10.0  # a run's folder not made by then: the start is refused (a stalled disk)
DRAIN_S = 10.0            # the server's end waits this long at most for the writes still queued


class Stalled(OSError):
    """The data folder did not answer by a deadline; str() is the one line that says so."""


class OrderedWrites:
    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pool: SerialThread | None = None

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """From now on, writes run on the writer thread and `then` on `loop`. Before, both run inline."""
        self._loop = loop
        self._pool = SerialThread("previewlab-writer")

    def submit(self, write: Job | None, then: Job | None = None) -> None:
        loop, pool = self._loop, self._pool
        if loop is None or pool is None:
            _write(write)
            if then is not None:
                then()
            return

        def job() -> None:
            _write(write)
            if then is None:
                return
            try:
                loop.call_soon_threadsafe(then)
            except RuntimeError:  # the loop closed: the server is gone, and so are its clients
                log.warning("a message was not sent: the event loop had closed")

        try:
            pool.submit(job)
        except RuntimeError:  # the writer has stopped: the server is closing
            log.warning("a write came after the server's end; it was not made")

    async def begin(self, make: Job, undo: Job, what: str, deadline_s: float = FOLDER_DEADLINE_S) -> None:
        """Run `make` (a run's folder) in order with the writes, and wait for it at most deadline_s. Raises what
        it raises, or Stalled past the deadline; a `make` that finishes after that is undone on the writer (the
        run was refused: its folder must not stay listed as running)."""
        loop, pool = self._loop, self._pool
        if loop is None or pool is None:
            make()
            return
        made, refused, lock = [False], [False], threading.Lock()  # exactly one side undoes a late folder

        def job() -> None:
            make()
            with lock:
                made[0], late = True, refused[0]
            if late:
                _write(undo)

        fut: Future[None] = pool.submit(job)
        try:
            await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(fut)), deadline_s)
        except asyncio.TimeoutError:
            with lock:
                refused[0], already = True, made[0]
            if already:  # made in the instant between: undone on the writer, in order
                pool.submit(_write, undo)
            raise Stalled(f"{what} did not answer in {deadline_s:g} s (a stalled or frozen disk?): the run did "
                          "not start") from None

    def wait(self, timeout_s: float) -> bool:
        """From a thread other than the loop's: wait until every write submitted so far is done, at most
        timeout_s; False when it was not (or the writer has stopped)."""
        pool = self._pool
        if pool is None:
            return True
        try:
            pool.submit(lambda: None).result(timeout_s)
        except Exception:  # a timeout, or the writer stopped meanwhile
            return False
        return True

    async def drain(self, deadline_s: float | None = None) -> bool:
        """Wait until every write submitted so far is on disk and its message is queued on the loop, at most
        deadline_s (None: for ever). False when the deadline passed first."""
        if self._pool is not None and self._loop is not None:
            done = asyncio.wrap_future(self._pool.submit(lambda: None))
            try:
                await asyncio.wait_for(done, deadline_s)
            except asyncio.TimeoutError:
                return False
            await asyncio.sleep(0)  # the `then` of the last job runs before this returns
        return True

    def close(self, wait: bool = True) -> None:
        """Finish every write already submitted (a stopped server loses no row), then stop the thread; wait=False:
        the writes stalled past their deadline, and the thread is left to the disk."""
        if self._pool is not None:
            self._pool.stop(None if wait else 0)
            self._pool = None


def _write(write: Job | None) -> None:
    if write is None:
        return
    try:
        write()
    except Exception:
        log.exception("a disk write failed; the clients are told anyway")

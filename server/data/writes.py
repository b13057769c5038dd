"""Row appends, delivery records and a run's end leave the event loop, and nothing is announced before it is written.

One writer thread takes the jobs in order. Each job is a write and what to tell the clients once it is done
(`then`, posted back to the loop). So clients hear of steps, errors and a run's end in the order they happened,
and a step a client has been told of is already in the run's steps.csv: a SIGKILL right after loses nothing a
client saw. A write that fails is logged; its message is sent anyway (the store's writes are best effort).
"""
from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

log = logging.getLogger("previewlab.server")
Job = Callable[[], None]


class OrderedWrites:
    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pool: ThreadPoolExecutor | None = None

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """From now on, writes run on the writer thread and `then` on `loop`. Before, both run inline."""
        self._loop = loop
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="previewlab-writer")

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

        pool.submit(job)

    async def drain(self) -> None:
        """Wait until every write submitted so far is on disk and its message is queued on the loop."""
        if self._pool is not None and self._loop is not None:
            await self._loop.run_in_executor(self._pool, lambda: None)
            await asyncio.sleep(0)  # the `then` of the last job runs before this returns

    def close(self) -> None:
        """Finish every write already submitted (a stopped server loses no row), then stop the thread."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


def _write(write: Job | None) -> None:
    if write is None:
        return
    try:
        write()
    except Exception:
        log.exception("a disk write failed; the clients are told anyway")

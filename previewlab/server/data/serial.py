"""One daemon thread that runs jobs in order, for the data folder's reads and writes.

A disk can stall (a frozen or hung filesystem): a job then blocks until it answers. The thread is a daemon, so a
process that has given up waiting (a deadline passed, SIGTERM) still exits, where a ThreadPoolExecutor's worker
is joined at the interpreter's exit and would hold it until the disk thaws. What must reach the disk before the
process ends is waited for by its owner (the server's close, the embedded page's exit hook), with a deadline.
"""
from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from typing import Any, Callable, TypeVar

T = TypeVar("T")
_STOP = object()


class SerialThread:
    """submit() jobs; they run one at a time, in order, on one daemon thread started by the first."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._stopped = False

    def submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        """fn(*args) on the thread; its result or exception in the Future. Raises RuntimeError once stopped."""
        fut: Future[T] = Future()
        with self._lock:
            if self._stopped:
                raise RuntimeError(f"{self.name}: stopped")
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name=self.name, daemon=True)
                self._thread.start()
            self._jobs.put((fut, fn, args))
        return fut

    def _work(self) -> None:
        while True:
            item = self._jobs.get()
            if item is _STOP:
                return
            fut, fn, args = item
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn(*args))
            except BaseException as e:  # handed to whoever waits on the future
                fut.set_exception(e)

    def stop(self, timeout_s: float | None = None) -> bool:
        """No more jobs; wait up to timeout_s (None: for ever, 0: not at all) for those queued to finish.
        True when the thread has ended (or never started)."""
        with self._lock:
            if not self._stopped:
                self._stopped = True
                self._jobs.put(_STOP)
            t = self._thread
        if t is None:
            return True
        if timeout_s != 0:
            t.join(timeout_s)
        return not t.is_alive()

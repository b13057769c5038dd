"""The live page for a user's own pipeline: serve(watch) runs the server in a thread and attaches itself to the
watch as its RunEvents (preview/record/run.py): the core never imports the server.

The user's code owns the pipeline and its loop; this side only shows what the watch measures. Start is
refused (generations come from the script); set changes the watch's live controls; stop interrupts the
call at its next step. The image the script saves (watch.save()) becomes its run's final image.
"""
from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, Sequence

from previewlab.preview.call.final import write_whole
from previewlab.preview.record.run import RunMeta
from previewlab.preview.settings import PreviewSettings, RunSettings

from previewlab.server.app import build_app
from previewlab.server.hop import ToLoop
from previewlab.server.server import Server
from previewlab.server.worker import Busy
from previewlab.server.ws.protocol import Set

log = logging.getLogger("previewlab.server")
LOOP_WAIT_S = 5.0  # keep_final's wait for the loop to have made the run's folder (it takes milliseconds)
STOP_WAIT_S = 30.0  # close() during a call: the wait for the call's loop to stop at its next step


class ServeError(RuntimeError):
    """serve(watch) asked of a watch a page already serves."""


class WatchSource:
    """What the server's message handler asks of a run's owner, answered by the watch."""

    def __init__(self, watch: Any) -> None:
        self.watch = watch

    @property
    def state(self) -> str:
        return "running" if self.watch.running else "idle"

    async def start(self, settings: RunSettings) -> RunMeta:
        raise Busy("this page watches a script's own pipeline: start generations from the script")

    def set(self, change: Set) -> None:
        self.watch.controls.set(**change.changes)

    def live(self) -> PreviewSettings:
        """The watch's own preview settings (what the script chose, with the page's live changes)."""
        return self.watch.controls.get()

    def stop(self) -> bool:
        if self.state != "running":
            return False
        self.watch.request_stop()
        return True

    async def ended(self, timeout_s: float) -> bool:
        return not self.watch.running  # the script's call is the script's: the server does not wait for it

    def abandon(self) -> None:
        pass  # the script's call is the script's: the server never waits for it

    def shutdown(self) -> None:
        pass


class Embedded(ToLoop):
    """The watch's page, and its RunEvents: told on the denoising thread, each event hops to the server's loop
    (hop.py), where its relay hears it; none waits."""

    def __init__(self, server: Server, uv: Any, thread: threading.Thread, loop: asyncio.AbstractEventLoop,
                 url: str, watch: Any) -> None:
        super().__init__(loop, server.relay)
        self.server, self.uv, self.thread, self.url, self.watch = server, uv, thread, url, watch
        self.closed = False
        self.pid = os.getpid()  # the process the page belongs to (at_exit: never a forked child's)
        self._closing = threading.Lock()

    def new_id(self) -> str:
        """The watch's next run id, from the store that keeps its runs (one scheme, ordered, never one it holds)."""
        return self.server.store.new_id()

    def started(self, meta: RunMeta) -> None:
        """A script's run has no worker to make its folder: the relay makes it first, on the writer (the loop never
        waits on the disk)."""
        def begin() -> None:
            self.server.relay.begin_later(meta)
            self.server.relay.started(meta)
        self.call(begin)

    def keep_final(self, run_id: str, png: bytes) -> bool:
        """A script's saved image as its run's final image (final.png beside its rows), written whole on the
        script's thread after its call, before the run's end is told; True once it is there. The run's folder is
        made on the writer thread (started hands it there from the loop), so this waits for the loop, then the
        writer, to have done what they were handed before."""
        if not self.thread.is_alive():  # closed (watch.remove()): no loop will answer
            return False
        caught_up = threading.Event()
        try:
            self.loop.call_soon_threadsafe(caught_up.set)
        except RuntimeError:  # its loop has closed
            return False
        if not caught_up.wait(LOOP_WAIT_S) or not self.server.relay.writes.wait(LOOP_WAIT_S):
            return False
        if not self.server.store.known(run_id):  # its folder is made on the writer, waited for above
            return False
        try:
            write_whole(self.server.store.final_image_path(run_id), png)
        except OSError as e:  # a full disk: the run is listed without its image, the script's own file is kept
            log.warning("run %s: its final image could not be kept: %s", run_id, e)
            return False
        return True

    def close(self) -> None:
        """Stop the page: a call in progress is stopped at its next step and its run ended on disk (stopped, with
        its totals); the watch is detached (its later calls tell nobody and queue nothing); every write is on
        disk and the folder is free when this returns. Idempotent."""
        with self._closing:
            if self.closed:
                return
            self.closed = True
        w = self.watch
        if w.events is self:
            self._end_call(w)
            w.attach(None)
        self.uv.should_exit = True
        self.thread.join(30)
        self.server.store.close()

    def _end_call(self, w: Any) -> None:
        """The watch's call in progress ends while the page can still write it: one still denoising is stopped at
        its next step, then closed; from the call's own thread (a callback), cut short at once (it cannot wait
        for its own next step)."""
        if w.state == "denoising" and threading.get_ident() == w.call_thread:
            w.cut_short()  # from inside the call: it cannot wait for its own next step
            return
        if w.state == "denoising":
            w.request_stop()
            deadline = time.monotonic() + STOP_WAIT_S
            while w.state == "denoising" and time.monotonic() < deadline:
                time.sleep(0.01)
        if w.state == "denoised":
            w.finish()

    def at_exit(self) -> None:
        """The script's end (a threading atexit, before the interpreter stops its writer threads): a call the
        script left open ends, failed if it never finished its loop (an exception or a Ctrl-C: named), and the
        page closes, so a finished call is on disk, whole, however the script ends."""
        w = self.watch
        if self.closed or w.events is not self or os.getpid() != self.pid:
            return  # a forked child (a Pool's worker) runs this hook too at its end: the page is its parent's
        caller = next((t for t in threading.enumerate() if t.ident == w.call_thread), None)
        if caller is not None and caller is not threading.current_thread() and not caller.daemon:
            caller.join()  # Python joins it after this hook anyway: its call ends first, then the page closes
        if w.state in ("started", "denoising"):
            why = getattr(sys, "last_value", None)
            w.end_failed(f"the script ended during the call ({type(why).__name__ if why is not None else 'exit'})")
        self.close()


def serve(watch: Any, *, host: str = "127.0.0.1", port: int = 8000, data_dir: str | Path = Path("runs"),
          allow_remote: bool = False, token: str | None = None, allow_hosts: Sequence[str] = (),
          forwarded_allow_ips: str | Sequence[str] | None = None) -> Embedded:
    """The live page for `watch` (a previewlab.watch): starts uvicorn in a thread and attaches it to the watch.
    watch.remove() (or the returned object's close()) stops it. Exposed by `previewlab serve`'s rules
    (exposure.py): loopback unless allow_remote=True, and then only with a token (generated and printed unless
    given); allow_hosts: other names the page may be opened by; forwarded_allow_ips: the reverse proxies whose
    X-Forwarded-For names the client (addresses or networks; None reads FORWARDED_ALLOW_IPS, unset: none).
    Raises ValueError (ExposureError) for a host, token or proxy the rules refuse, InUse when another server owns
    data_dir."""
    import uvicorn

    from previewlab.server.http.exposure import access_for, page_url
    from previewlab.server.http.guard import is_loopback
    from previewlab.server.http.http11 import uvicorn_config

    served = watch.events
    if isinstance(served, Embedded) and not served.closed:
        raise ServeError(f"serve(watch): this watch is already served at {served.url}; close that page first "
                         "(its close(), or watch.remove())")
    access = access_for(host, allow_remote=allow_remote, token=token, allow_hosts=allow_hosts,
                        forwarded_allow_ips=forwarded_allow_ips, cli=False)
    server = Server(watch.model, Path(data_dir), access=access, source=WatchSource(watch))
    config = uvicorn_config(build_app(server), host, port, server.limits.max_clients, access.proxies)
    uv = uvicorn.Server(config)
    holder: dict[str, Any] = {}

    def run() -> None:
        loop = asyncio.new_event_loop()
        holder["loop"] = loop
        asyncio.set_event_loop(loop)
        loop.run_until_complete(uv.serve())

    t = threading.Thread(target=run, name="previewlab-server", daemon=True)
    t.start()
    deadline = time.monotonic() + 30
    while not uv.started:
        if time.monotonic() > deadline or not t.is_alive():
            raise RuntimeError(f"previewlab: the server could not start on {host}:{port}")
        time.sleep(0.02)
    port = uv.servers[0].sockets[0].getsockname()[1] if port == 0 else port
    url, note = page_url(host, port, access.token, allow_hosts)
    if not is_loopback(host):
        print(f"WARNING: previewlab listening on {host}, beyond loopback; the page needs the token in its URL",
              flush=True)
    print(f"previewlab: watching {watch.model.name}; open {url}" + (f" ({note})" if note else ""), flush=True)
    embedded = Embedded(server, uv, t, holder["loop"], url, watch)
    watch.attach(embedded, close=embedded.close, keep_final=embedded.keep_final)
    # before the interpreter's own exit work stops the writer thread (concurrent.futures registers there too,
    # earlier, and these run last-registered first); the one hook Python offers at that point
    threading._register_atexit(embedded.at_exit)  # type: ignore[attr-defined]
    return embedded

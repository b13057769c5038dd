"""SIGTERM and Ctrl-C for `previewlab serve`: uvicorn's Server that, told to stop, first stops the run and closes
the watchers (Graceful), and what that does to the previewlab Server (graceful: the run stopped at its next step,
its last rows and end written and sent, the watchers closed with 1001)."""
from __future__ import annotations

import asyncio
import logging
import socket

import uvicorn

from previewlab.preview.record.run import RunEnd

from previewlab.server.data.writes import DRAIN_S
from previewlab.server.http.http11 import SHUTDOWN_ABORT_S, abort_all
from previewlab.server.server import Server

log = logging.getLogger("previewlab.server")


async def graceful(server: Server) -> str:
    """Stop the run at its next step, let it write its last rows and its final image for up to
    runs.shutdown_grace_s, close clients with 1001. A run still inside a step (or its final decode) after
    that is recorded `interrupted` with the rows it has, and the worker is abandoned: the process exits
    without waiting for the step. Returns the line that says where the stopped run is kept ("": none ran)."""
    grace, relay, worker = server.runs.shutdown_grace_s, server.relay, server.worker
    going = relay.current
    if server.series is not None:
        server.series.stop("the server shut down")
    if worker is not None and worker.stop() and not await worker.ended(grace):
        worker.abandon()
        await asyncio.sleep(0)  # rows the run handed over before it was abandoned land first
        meta = relay.current
        if meta is not None:
            why = (f"the server shut down while the run was still in a step or its final decode after "
                   f"{grace:g} s (--shutdown-grace): its rows so far are kept, its final image is not")
            log.warning("shutdown: run %s recorded interrupted after %g s (--shutdown-grace)", meta.run_id, grace)
            relay.ended(RunEnd(meta, "interrupted", error=why))
    await relay.flush(DRAIN_S)  # no waiting for acks: the last rows and end written and queued (a stalled
    # disk: not past DRAIN_S)
    for _ in range(30):  # and sent, for up to 3 s, before the close frame
        if not any(c.texts for c in relay.hub.clients.values()):
            break
        await asyncio.sleep(0.1)
    await relay.hub.close_all(1001, "server shutting down")
    return stopped_line(server, going.run_id) if going is not None else ""


def stopped_line(server: Server, rid: str) -> str:
    """"stopped run X at step 34; its rows and image are in runs/X", from what was written."""
    last_rid, last_step = server.relay.last_row
    at = f"at step {last_step}" if last_rid == rid and last_step else "before its first step"
    kept = "its rows and image are" if server.store.final_image(rid) is not None else "its rows are"
    return f"stopped run {rid} {at}; {kept} in {server.store.root / rid}"


class Graceful(uvicorn.Server):
    """On SIGTERM / Ctrl-C: stop the run and close clients with 1001 before uvicorn shuts down. A second one
    while the run is still given its grace shuts down at once, the clients closed with 1001 first; a third
    is uvicorn's force exit. What it reads and overrides of uvicorn's own: http11.UVICORN_INTERNALS."""
    signals = 0  # SIGTERM and Ctrl-C received so far

    def __init__(self, config: uvicorn.Config, served: Server) -> None:
        super().__init__(config)
        self.served = served

    def handle_exit(self, sig: int, frame: object) -> None:
        self.signals += 1
        loop = asyncio.get_event_loop()

        def shut_down() -> None:  # uvicorn's own handling, once: told again, a Ctrl-C would force its exit
            if not self.should_exit:
                uvicorn.Server.handle_exit(self, sig, frame)  # type: ignore[arg-type]

        def stopped(task: asyncio.Task[str]) -> None:
            if not task.cancelled() and task.exception() is None and task.result():
                print(f"previewlab: {task.result()}", flush=True)  # where the run it stopped is kept
            shut_down()

        if self.should_exit or self.signals > 2:  # uvicorn is shutting down: a Ctrl-C forces its exit
            super().handle_exit(sig, frame)  # type: ignore[arg-type]
        elif self.signals == 1:
            loop.create_task(graceful(self.served)).add_done_callback(stopped)
        else:
            # uvicorn's shutdown closes each open WebSocket with 1012 (service restart) and aborts what is
            # left 2.5 s later (1006): the watchers are closed with 1001 first, as graceful() closes them
            closed = loop.create_task(self.served.relay.hub.close_all(1001, "server shutting down"))
            closed.add_done_callback(lambda _: shut_down())

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        # uvicorn cancels the tasks still running 3 s into shutdown and logs a traceback for each (60 stuck
        # peers: 2,162 lines); the connections still open just before that are aborted instead, so their
        # tasks end as for a peer that left, and one line per kind says what was cut off
        timer = asyncio.get_running_loop().call_later(SHUTDOWN_ABORT_S, self.abort_left)
        try:
            await super().shutdown(sockets)
        finally:
            timer.cancel()

    def abort_left(self) -> None:
        for kind, n in abort_all(self.server_state.connections).items():
            log.warning("shutdown: cancelled %d %s", n, kind)

"""uvicorn's h11 protocol with a deadline on every request head and every response, and a cap on whole heads.

uvicorn closes an idle keep-alive connection after timeout_keep_alive, but its timer is disarmed by the first
byte that arrives and is never armed for a connection's first request. A peer that sends a request line and
then one header byte every few seconds (or nothing at all) holds a connection, a file descriptor and up to
h11_max_incomplete_event_size bytes forever. Here a request head must be complete within `head_timeout_s` of
the connection opening, or of the previous response ending; otherwise the connection is closed.

A peer that pipelines requests and never reads holds its connection forever too: the response waits on a full
write buffer, so it never ends and no head deadline is armed again. Here a response must be complete within
`response_timeout_s` of its request head, or have made progress by then (the peer took some of it: a streamed
export, then each further `response_timeout_s`); otherwise the connection is aborted. A response that completed on a
connection that is closing keeps that deadline, since the close waits for the peer to take the rest.

h11's max_incomplete_event_size bounds only a head that has not arrived whole: a 60 KiB head sent in one
packet was accepted. Here the whole request line and headers are capped at `max_head_bytes` (400 beyond).
A connection answers at most `max_requests` requests (then it is closed after its response): small answers
fit the kernel's buffers, so without it one pipelined send could queue work without end and meet no deadline.
Connections upgraded to a WebSocket are left to server/http/ws_limits.py.

A peer holds at most `max_per_address` HTTP connections at once, counted when it connects, before any header.
Behind a reverse proxy every client's connections come from the proxy, so a trusted proxy's (forwarded.py) are
counted instead against the client its request's X-Forwarded-For names, from its head on, and again at each
request (a proxy may reuse a connection for another client). Before its first head such a connection counts
against nobody: a proxy sends a whole head at once (nginx reads the client's head before it connects here),
the head deadline still closes it, and `limit_concurrency` bounds them all.
"""
from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Any, Callable, Iterable, Type, Union

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol, RequestResponseCycle
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

from previewlab.server.http.forwarded import NOBODY, TrustedProxies
from previewlab.server.core.limits import FRAME_BURST, FRAME_PER_S, MAX_CONNECTIONS_PER_ADDRESS, MAX_REQUESTS_PER_CONNECTION
from previewlab.server.http.transports import reset
from previewlab.server.http.ws_limits import with_frame_budget

log = logging.getLogger("previewlab.server")
HEAD_TIMEOUT_S = 10.0      # a browser sends its whole head in one packet; 10 s is generous for a slow link
RESPONSE_TIMEOUT_S = 10.0  # previewlab's largest answers (runs.csv, uPlot's 50 KB) take milliseconds locally
MAX_HEAD_BYTES = 16 * 1024  # request line and headers; the page's are under 2 KB
SHUTDOWN_GRACE_S = 3.0     # uvicorn cancels the tasks still running this long into shutdown
SHUTDOWN_ABORT_S = SHUTDOWN_GRACE_S - 0.5  # previewlab serve aborts the connections still open by then


def head_bytes(request: h11.Request) -> int:
    """The size of a request line and headers as sent with single spaces and CRLFs (h11 strips the rest)."""
    line = len(request.method) + len(request.target) + len(request.http_version) + len(b"  HTTP/\r\n")
    return line + sum(len(name) + len(value) + len(b": \r\n") for name, value in request.headers) + 2


class HeadLimitedConnection(h11.Connection):
    """h11's server side, refusing a request whose whole head is over `max_head_bytes`."""

    def __init__(self, max_head_bytes: int) -> None:
        super().__init__(h11.SERVER, max_incomplete_event_size=max_head_bytes)
        self.max_head_bytes = max_head_bytes
        self.refusal: str | None = None  # the one line the 400 says, when this connection refused a head
        self.sent_bytes = 0  # every byte of every response handed to the transport
        self.forwarded_for: list[str] = []  # the X-Forwarded-For values of the last request head

    def send(self, event: Any) -> Any:  # type: ignore[override]  # h11's overloads, one body: it only counts
        out = super().send(event)
        self.sent_bytes += len(out or b"")
        return out

    def next_event(self) -> Union[h11.Event, Type[h11.NEED_DATA], Type[h11.PAUSED]]:
        event = super().next_event()
        if isinstance(event, h11.Request):
            if head_bytes(event) > self.max_head_bytes:
                self.refusal = f"request line and headers over {self.max_head_bytes // 1024} KiB"
                raise h11.RemoteProtocolError(self.refusal)  # uvicorn answers 400 and closes
            self.forwarded_for = [v.decode("latin-1") for k, v in event.headers if k == b"x-forwarded-for"]
        return event


# uvicorn's internals that previewlab reads or overrides, beyond what uvicorn documents (Config's keywords, a Server's
# run and serve), per class: "name" an attribute its instances have (dotted: an attribute of that one), "name(a, b)"
# a method with these parameters after self, "async name(a)" a coroutine method. pyproject pins uvicorn below the
# next minor, which may move them; tests/test_uvicorn_pin.py checks every one on the uvicorn installed.
UVICORN_INTERNALS: dict[type, tuple[str, ...]] = {
    H11Protocol: (  # BoundedH11, below; abort_all
        "connection_made(transport)", "data_received(data)", "on_response_complete()", "connection_lost(exc)",
        "send_400_response(msg)",
        "conn",  # replaced by HeadLimitedConnection: uvicorn must read every request through self.conn
        "cycle", "client", "transport", "loop"),
    RequestResponseCycle: ("response_complete", "keep_alive"),  # BoundedH11's response deadline and request cap
    WebSocketsSansIOProtocol: (  # ws_limits.BoundedWebSocket
        "pause_writing()", "resume_writing()", "async receive()", "async send(message)", "handle_events()",
        "read_paused", "writable", "queue", "close_sent", "client", "transport", "loop",
        "conn.events"),  # websockets' list of parsed events, which uvicorn's handle_events drains
    uvicorn.Server: (  # shutdown.py's Graceful, abort_all, embedded.py
        "handle_exit(sig, frame)", "async shutdown(sockets)",
        "should_exit", "started", "servers", "server_state.connections"),
}


class BoundedH11(H11Protocol):
    head_timeout_s = HEAD_TIMEOUT_S
    max_requests = MAX_REQUESTS_PER_CONNECTION
    _served = 0
    response_timeout_s = RESPONSE_TIMEOUT_S
    max_head_bytes = MAX_HEAD_BYTES
    conn: HeadLimitedConnection
    _deadline: asyncio.TimerHandle | None = None
    _timed: RequestResponseCycle | None = None  # the request whose response the deadline runs for
    _taken_mark = 0  # what the peer had taken when the response deadline was last armed
    max_per_address = MAX_CONNECTIONS_PER_ADDRESS
    _open: Counter[str] = Counter()  # HTTP connections open per client address, in this process
    _address: str | None = None      # this connection's, while it counts
    proxies: TrustedProxies = NOBODY
    _via_proxy = False               # the peer is a trusted proxy: each request names the client it counts for

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.conn = HeadLimitedConnection(self.max_head_bytes)

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        host = str((self.client or ("",))[0])
        self._via_proxy = self.proxies.trusts(host)
        if not self._via_proxy and not self._count(host):
            return
        self._arm(self.head_timeout_s, self._head_expired)

    def _count(self, host: str) -> bool:
        """This connection counts against `host` from now on; False, and the connection reset, when that address
        holds its most already."""
        if host == self._address:
            return True
        self._leave()
        if self._open[host] >= self.max_per_address:
            via = f" through {(self.client or ('',))[0]}" if self._via_proxy else ""
            log.info("closed a connection from %s%s: %d HTTP connections from that address are open already",
                     host, via, self._open[host])
            reset(self.transport)
            return False
        self._open[host] += 1
        self._address = host
        return True

    def _leave(self) -> None:
        """This connection no longer counts against its address (closed, or upgraded to a WebSocket)."""
        host, self._address = self._address, None
        if host is not None:
            self._open[host] -= 1
            if self._open[host] <= 0:
                del self._open[host]

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.transport.get_protocol() is not self:
            self._disarm()  # the connection is now a WebSocket
            self._leave()
        else:
            self._time_response()

    def on_response_complete(self) -> None:
        super().on_response_complete()  # may start answering the next pipelined request
        if self._answering():
            self._time_response()
        elif not self.transport.is_closing():
            self._arm(self.head_timeout_s, self._head_expired)  # the next request gets a deadline of its own
        # closing: the response deadline stays, since the close waits for the peer to take what is left

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._leave()
        super().connection_lost(exc)

    def send_400_response(self, msg: str) -> None:
        super().send_400_response(self.conn.refusal or msg)

    def sending(self) -> bool:
        """A response is being made or sent, or the rest of one waits for the peer to take it before a close."""
        return self._answering() or (self.transport.is_closing() and self.transport.get_write_buffer_size() > 0)

    def _answering(self) -> bool:
        return self.cycle is not None and not self.cycle.response_complete

    def _time_response(self) -> None:
        if self._answering() and self._timed is not self.cycle:
            self._timed = self.cycle
            peer = str((self.client or ("",))[0])
            if self._via_proxy and not self._count(self.proxies.client(peer, self.conn.forwarded_for)):
                return
            self._served += 1
            if self._served >= self.max_requests and self.cycle is not None:
                # small answers complete into the kernel's buffers, so a peer that pipelines thousands and
                # never reads meets no deadline; it gets this many, then the connection closes
                self.cycle.keep_alive = False
            self._taken_mark = self._taken()
            self._arm(self.response_timeout_s, self._response_expired)

    def _arm(self, seconds: float, then: Callable[[], None]) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, then)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _head_expired(self) -> None:
        self._deadline = None
        if self._answering() or self.transport.get_protocol() is not self:
            return
        if self.transport.get_write_buffer_size():  # the last response is not taken: a close would wait for it
            log.info("aborted a connection from %s: its last response not taken within %.0f s", self.client,
                     self.head_timeout_s)
            reset(self.transport)
        elif not self.transport.is_closing():
            if self.conn.trailing_data[0]:  # part of a request, never finished
                log.info("closed a connection from %s: no complete request within %.0f s", self.client,
                         self.head_timeout_s)
            else:  # not a byte: a browser's pre-connect or an idle keep-alive, a normal thing
                log.debug("closed an idle connection from %s after %.0f s (nothing sent: a browser's pre-connect "
                          "or keep-alive)", self.client, self.head_timeout_s)
            self.transport.close()

    def _taken(self) -> int:
        """Bytes of responses the peer's side has taken (handed to the transport and gone from its buffer)."""
        return self.conn.sent_bytes - self.transport.get_write_buffer_size()

    def _response_expired(self) -> None:
        self._deadline = None
        if self.transport.get_protocol() is not self:
            return
        taken = self._taken()
        if self._answering() and taken > self._taken_mark:
            # a streamed export that keeps flowing: each deadline asks for progress, not for the whole of it
            self._taken_mark = taken
            self._arm(self.response_timeout_s, self._response_expired)
            return
        log.info("aborted a connection from %s: its response was not complete within %.0f s", self.client,
                 self.response_timeout_s)
        reset(self.transport)  # what the peer would not take is dropped with it


def with_deadlines(head_timeout_s: float, response_timeout_s: float,
                   proxies: TrustedProxies = NOBODY) -> type[BoundedH11]:
    """The protocol class for uvicorn.Config(http=...), with its own deadlines (tests use short ones) and the
    proxies whose connections count against the clients they name."""
    return type("BoundedH11", (BoundedH11,), {"head_timeout_s": head_timeout_s,
                                              "response_timeout_s": response_timeout_s, "proxies": proxies})


def abort_all(connections: Iterable[Any]) -> Counter[str]:
    """Abort every connection still open (uvicorn's server_state.connections); how many of each kind.

    At the end of shutdown's grace uvicorn would cancel their tasks instead, and log a traceback for each (60
    stuck peers: 2,162 lines); aborted, their sends return and their tasks end as for any peer that left."""
    aborted: Counter[str] = Counter()
    for c in list(connections):
        if isinstance(c, BoundedH11) and c.sending():
            aborted["HTTP responses still being sent"] += 1
        elif isinstance(c, H11Protocol):
            aborted["HTTP connections"] += 1
        else:
            aborted["WebSockets still open"] += 1
        reset(c.transport)
    return aborted


def connection_limits(max_clients: int, head_timeout_s: float = HEAD_TIMEOUT_S,
                      response_timeout_s: float = RESPONSE_TIMEOUT_S,
                      frame_budget: tuple[int, float] = (FRAME_BURST, FRAME_PER_S),
                      proxies: TrustedProxies = NOBODY) -> dict[str, Any]:
    """uvicorn.Config keywords that bound what one connection, or many, can hold (README: who may drive it)."""
    return dict(
        http=with_deadlines(head_timeout_s, response_timeout_s, proxies),
        ws=with_frame_budget(*frame_budget),     # frames of every kind budgeted; reading waits on writing
        timeout_keep_alive=5,                    # seconds an idle keep-alive connection stays open
        h11_max_incomplete_event_size=MAX_HEAD_BYTES,  # uvicorn's own bound (BoundedH11 caps whole heads too)
        limit_concurrency=max_clients + 64,      # HTTP connections and tasks at once; beyond, 503 (WebSockets
                                                 # are capped by --max-clients before accept instead)
        timeout_graceful_shutdown=SHUTDOWN_GRACE_S,  # on shutdown, tasks still running after 3 s are cancelled
        ws_ping_interval=20.0, ws_ping_timeout=20.0,  # a WebSocket peer that stops answering is closed in 40 s
    )


def uvicorn_config(app: Any, host: str, port: int, max_clients: int, proxies: TrustedProxies = NOBODY) -> Any:
    """The one uvicorn.Config of `previewlab serve` and of serve(watch): every bound above, one message size.
    proxies: the app's own (build_app wraps it in forwarded.RealClient), for the connection count."""
    from previewlab.server.core.limits import MAX_MESSAGE_BYTES

    # no permessage-deflate: previews are JPEG or PNG bytes, which it cannot shrink, and it compresses on the
    # event loop (31 deflate watchers of 600 KB PNGs held /metrics for 2 s, each send for about 2 s).
    # proxy_headers off: uvicorn's own would trust 127.0.0.1 (or FORWARDED_ALLOW_IPS) whatever previewlab was told
    return uvicorn.Config(app, host=host, port=port, log_level="warning", ws_max_size=MAX_MESSAGE_BYTES,
                          ws_per_message_deflate=False, proxy_headers=False,
                          **connection_limits(max_clients, proxies=proxies))

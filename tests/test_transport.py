"""What one peer can make the transport hold or do, against a real uvicorn and raw sockets: unread pongs, floods
of control frames and empty fragments, pipelined requests never read, whole heads over 16 KiB, and a SIGTERM
with stuck peers (server/http/http11.py, server/http/ws_limits.py)."""
from __future__ import annotations

import asyncio
import json
import os
import re
import select
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import websockets

from previewlab.server.http.http11 import BoundedH11, connection_limits
from previewlab.server.core.limits import FRAME_BURST, MAX_FRAGMENTS, MAX_REQUESTS_PER_CONNECTION
from previewlab.server.ws.binary import unpack_frame
from previewlab.server.http.ws_limits import BoundedWebSocket
from previewlab.server.http.guard import Access
from tests.conftest import live_server, raw_ws, wait_until

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
KiB, MiB = 1024, 1024 * 1024
PING, PONG, TEXT, CONT, CLOSE = 0x9, 0xA, 0x1, 0x0, 0x8
SCRIPT = "/static/vendor/uPlot.iife.min.js"  # 50 KB: a few of them fill any buffer a test gives
SCRIPT_BYTES = (ROOT / "previewlab/web/vendor/uPlot.iife.min.js").stat().st_size


def frame(opcode: int, payload: bytes = b"", fin: bool = True) -> bytes:
    """One client frame (masked, as RFC 6455 requires), payload under 126 bytes."""
    mask = os.urandom(4)
    return (bytes([fin << 7 | opcode, 0x80 | len(payload)]) + mask
            + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))


def read_frame(f: Any) -> tuple[int, bytes]:
    """(opcode, payload) of the next server frame from a socket's binary file."""
    b0, b1 = f.read(2)
    n = b1 & 0x7F
    if n == 126:
        n = struct.unpack("!H", f.read(2))[0]
    elif n == 127:
        n = struct.unpack("!Q", f.read(8))[0]
    return b0 & 0x0F, f.read(n)


def pongs_until_close(s: socket.socket, timeout_s: float = 3.0) -> tuple[int, int | None, str]:
    """Pongs read, then the close code and reason (None, "" when no close came within timeout_s)."""
    s.settimeout(timeout_s)
    pongs = 0
    with s.makefile("rb") as f:
        try:
            while True:
                opcode, payload = read_frame(f)
                if opcode == PONG:
                    pongs += 1
                elif opcode == CLOSE:
                    return pongs, struct.unpack("!H", payload[:2])[0], payload[2:].decode()
        except (TimeoutError, socket.timeout, ValueError, ConnectionError):
            return pongs, None, ""


def test_a_peer_that_never_reads_its_pongs_is_not_read_either(make_app):
    """uvicorn answered every ping into the write buffer however full it was: a peer sending pings and never
    reading grew the server by 700 MiB in 40 s. Now reading waits while writes are backed up, so what the server
    reads from that peer is bounded by the buffers between them, and every ping is still answered once the peer
    reads. The frame budget is lifted here so that only the backpressure is at work."""
    srv, app = make_app()
    limits = connection_limits(srv.limits.max_clients)
    assert issubclass(limits["ws"], BoundedWebSocket)
    peers: list[Counted] = []

    class Counted(BoundedWebSocket):
        """The protocol under test, telling what it read and the most it held to be written."""
        frame_burst, frame_per_s = 10**9, 1e9
        read_bytes = most_buffered = 0

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            peers.append(self)

        def data_received(self, data: bytes) -> None:
            self.read_bytes += len(data)
            super().data_received(data)
            self.most_buffered = max(self.most_buffered, self.transport.get_write_buffer_size())

    limits["ws"] = Counted
    buf = 64 * KiB  # every kernel buffer on the way, each way; Linux doubles what is set
    with live_server(app, sndbuf=buf, **limits) as addr:
        s = raw_ws(addr, rcvbuf=buf, sndbuf=buf)
        ping = frame(PING, b"p" * 125)  # the largest ping: its pong is as large, 127 bytes
        period = 256 * len(ping)
        stream = memoryview(ping * 512)  # any 256 pings in a row, from any offset into them
        cap, sent = 16 * MiB, 0
        s.setblocking(False)
        while sent < cap and select.select([], [s], [], 2.0)[1]:  # until it is full, or the cap
            try:
                sent += s.send(stream[sent % period: sent % period + period])
            except BlockingIOError:
                pass
        s.setblocking(True)
        (peer,) = peers
        # what was read came back as pongs (127 bytes for every 131 read), held in the server's send buffer and
        # the client's receive buffer (64 KiB each, doubled), in the write buffer up to its 64 KiB high-water
        # mark, and past it the pongs of the read that crossed it (256 KiB at most)
        bound = 2 * 2 * buf + 64 * KiB + 256 * KiB
        assert peer.read_bytes < 1.1 * bound, f"read {peer.read_bytes / MiB:.1f} MiB of {sent / MiB:.1f} MiB"
        assert peer.most_buffered < 64 * KiB + 256 * KiB, f"held {peer.most_buffered / MiB:.1f} MiB to write"
        # reading resumes as the pongs are taken: every whole ping sent is answered
        pings, pongs = sent // len(ping), 0
        s.settimeout(10)
        with s.makefile("rb") as f:
            while pongs < pings:
                opcode, payload = read_frame(f)
                pongs += opcode == PONG
        assert pongs == pings and peer.read_bytes >= pings * len(ping)
        s.close()


def test_floods_of_pings_pongs_or_empty_fragments_are_closed_with_1008(make_app):
    """Control frames and continuation frames never reach the app, so no budget counted them: a flood of them
    cost the sender nothing and the server a core, and empty fragments piled up. Now every frame spends the
    connection's frame budget and a message has at most 64 fragments; a client like the page, acking every
    frame of a run, is nowhere near either."""
    srv, app = make_app()
    with live_server(app, **connection_limits(srv.limits.max_clients)) as addr:
        floods = {
            "pings": (frame(PING) * 5000, "frames at once"),
            "unsolicited pongs": (frame(PONG) * 5000, "frames at once"),
            "empty fragments": (frame(TEXT, b"{", fin=False) + frame(CONT, fin=False) * 5000, "fragments"),
        }
        for name, (flood, reason) in floods.items():
            s = raw_ws(addr)
            s.sendall(flood)
            pongs, code, why = pongs_until_close(s)
            s.close()
            assert code == 1008 and reason in why, (name, pongs, code, why)
        assert f"more than {MAX_FRAGMENTS} fragments" in why

        async def page() -> tuple[int, str]:
            acks = 0
            async with websockets.connect(f"ws://{addr}/ws", max_size=None, ping_interval=0.05) as ws:
                json.loads(await ws.recv())  # hello
                await ws.send(json.dumps({"type": "start", "steps": 40, "decoder": "latent2rgb"}))
                while True:
                    m = await asyncio.wait_for(ws.recv(), 60)
                    if isinstance(m, bytes):
                        header, _ = unpack_frame(m)
                        await ws.send(json.dumps({"type": "ack", "seq": header["seq"], "client_decode_ms": 1.0,
                                                  "client_paint_ms": 1.0}))
                        acks += 1
                    elif json.loads(m)["type"] == "done":
                        return acks, json.loads(m)["status"]

        acks, status = asyncio.run(page())
        assert status == "done" and acks > 0


def pipeline(addr: str, path: str, requests: int) -> socket.socket:
    """A peer that sends `requests` GETs at once and reads nothing, with a 4 KiB receive window."""
    host, port = addr.rsplit(":", 1)
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * KiB)
    s.connect((host, int(port)))
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n".encode() * requests)
    return s


def answered(s: socket.socket) -> bool:
    """The server has begun answering this peer: its bytes wait in the peer's receive buffer."""
    return bool(select.select([s], [], [], 0)[0])


def status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            r.read()
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except OSError:
        return 0  # not listening yet


def drain(s: socket.socket) -> int:
    """Bytes read until the server ends the connection (EOF or reset)."""
    s.settimeout(10)
    got = 0
    try:
        while chunk := s.recv(64 * KiB):
            got += len(chunk)
    except ConnectionResetError:
        pass
    return got


def test_peers_that_pipeline_and_never_read_are_aborted_at_the_response_deadline(make_app):
    """A pipelined response waiting on a peer that does not read never ended, so no deadline was armed again:
    about a hundred such peers made every request answer 503. Now a response has a deadline (0.5 s here) and
    the connection is aborted at it. With 4 slots, 3 stuck peers and the request that checks fill them."""
    srv, app = make_app(access=Access(hosts=("127.0.0.1",)))
    opened: dict[int, Recorded] = {}  # by the peer's port

    class Recorded(BoundedH11):
        """The protocol under test, telling when its connection is gone."""
        response_timeout_s = 0.5
        lost = False

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            opened[transport.get_extra_info("peername")[1]] = self

        def connection_lost(self, exc: Exception | None) -> None:
            self.lost = True
            super().connection_lost(exc)

    assert issubclass(connection_limits(srv.limits.max_clients)["http"], BoundedH11)
    limits = {**connection_limits(srv.limits.max_clients), "http": Recorded, "limit_concurrency": 4}
    with live_server(app, sndbuf=16 * KiB, **limits) as addr:
        stuck = [pipeline(addr, SCRIPT, 40) for _ in range(3)]
        wait_until(lambda: all(answered(s) for s in stuck), 10, "the server to answer the stuck peers")
        wait_until(lambda: all(opened[s.getsockname()[1]].lost for s in stuck), 10, "the stuck peers to be cut")
        assert status(f"http://{addr}/runs") == 200  # their slots are free
        for s in stuck:  # far less than their 40 answers came
            assert drain(s) < 10 * SCRIPT_BYTES
            s.close()
        with urllib.request.urlopen(f"http://{addr}{SCRIPT}", timeout=5) as r:  # a peer that reads is served
            assert len(r.read()) == SCRIPT_BYTES


def test_one_connection_is_answered_a_bounded_number_of_requests(make_app):
    """Small answers complete into the kernel's buffers, so the response deadline never fires: 30 peers that
    pipelined 2,000 `GET /` each and never read kept both cores busy for as long as they liked. Now a
    connection is closed after MAX_REQUESTS_PER_CONNECTION answers, and what was queued beyond is dropped."""
    srv, app = make_app(access=Access(hosts=("127.0.0.1",)))
    with live_server(app, **connection_limits(srv.limits.max_clients)) as addr:
        host, port = addr.rsplit(":", 1)
        with socket.create_connection((host, int(port))) as s:
            s.sendall(f"GET /runs HTTP/1.1\r\nHost: {addr}\r\n\r\n".encode() * (3 * MAX_REQUESTS_PER_CONNECTION))
            s.settimeout(10)
            got = b""
            while chunk := s.recv(64 * KiB):
                got += chunk
        assert got.count(b"HTTP/1.1 200 OK") == MAX_REQUESTS_PER_CONNECTION
        assert status(f"http://{addr}/runs") == 200  # a new connection is served as before


def test_a_peer_that_floods_after_its_close_is_reset(make_app):
    """Closed by the server (here for 21 bad messages), a peer used to have the whole close timeout (10 s) to
    flood pings at full speed: 1,050,000 frames were handled, both cores busy. Now the frame budget still holds
    after the close, and the connection is reset once it is spent."""
    srv, app = make_app(access=Access(hosts=("127.0.0.1",)))
    after_close: list[int] = [0]

    class Counted(BoundedWebSocket):
        """The protocol under test, counting the frames it handles once its close frame is out."""

        def _over_budget(self, frame: Any) -> str | None:
            if self.close_sent:
                after_close[0] += 1
            return super()._over_budget(frame)

    with live_server(app, **{**connection_limits(srv.limits.max_clients), "ws": Counted}) as addr:
        s = raw_ws(addr)
        s.sendall(b"".join(frame(0x1, b"{}") for _ in range(22)))  # bad messages: the server closes, 1008
        s.settimeout(15)
        f = s.makefile("rb")
        while (close := read_frame(f))[0] != 0x8:  # hello and 20 error replies come first
            pass
        assert struct.unpack("!H", close[1][:2])[0] == 1008
        ping = frame(0x9) * 200
        with pytest.raises((ConnectionResetError, BrokenPipeError)):
            for _ in range(5000):  # a million pings
                s.sendall(ping)
        s.close()
    assert 0 < after_close[0] < 3 * FRAME_BURST


def test_a_whole_head_over_16_kib_gets_400_and_one_under_it_is_served(make_app):
    """h11_max_incomplete_event_size bounds only a head that has not arrived whole: a 60 KiB head sent in one
    packet was answered. Now the whole request line and headers are capped at 16 KiB."""
    srv, app = make_app(access=Access(hosts=("127.0.0.1",)))
    with live_server(app, **connection_limits(srv.limits.max_clients)) as addr:
        host, port = addr.rsplit(":", 1)
        for head_bytes, expect in ((60 * KiB, b"HTTP/1.1 400"), (15 * KiB, b"HTTP/1.1 200")):
            start = f"GET /runs HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nX-Pad: ".encode()
            head = start + b"a" * (head_bytes - len(start) - 4) + b"\r\n\r\n"
            assert len(head) == head_bytes
            with socket.create_connection((host, int(port))) as s:
                s.sendall(head)  # one send: on loopback it arrives in one read
                s.settimeout(5)
                assert s.recv(100).startswith(expect), head_bytes


def idle(pid: int) -> bool:
    """The process used next to no CPU in half a second (Linux /proc): here, it has written all it can."""
    def cpu_s() -> float:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime

    before = cpu_s()
    time.sleep(0.5)
    return cpu_s() - before < 0.05


def test_sigterm_with_stuck_peers_exits_with_a_line_per_kind_and_no_traceback(tmp_path):
    """`previewlab serve` with 20 peers whose pipelined responses are stuck (they never read), then SIGTERM:
    uvicorn cancelled their tasks 3 s into shutdown and logged a traceback for each (60 peers: 2,162 lines).
    Now they are aborted before that, and counted in one line."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path / "stderr.txt"  # a file, not a pipe: a pipe nobody reads would block the server at 64 KiB
    with log.open("w") as out:
        p = subprocess.Popen([sys.executable, "-m", "previewlab", "serve", "--model", "synthetic:tiny", "--port", str(port),
                              "--data-dir", str(tmp_path / "runs")], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=out)
    try:
        wait_until(lambda: p.poll() is not None or status(f"http://127.0.0.1:{port}/runs") == 200, 120,
                   "the server to start")
        assert p.poll() is None, "the server did not start"
        addr = f"127.0.0.1:{port}"
        stuck = [pipeline(addr, SCRIPT, 200) for _ in range(20)]  # 10 MB each: more than the kernel takes
        watchers = [raw_ws(addr) for _ in range(3)]  # open WebSockets: each logged a traceback at SIGTERM
        wait_until(lambda: idle(p.pid), 60, "the server to fill what the stuck peers' sockets take")
        p.send_signal(signal.SIGTERM)
        rc = p.wait(20)
        for s in stuck + watchers:
            s.close()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    err = log.read_text()
    assert rc in (0, -signal.SIGTERM), err[-2000:]  # uvicorn raises the signal again once it has shut down
    assert "Traceback" not in err and len(err.splitlines()) <= 5, err[-2000:]
    assert re.search(r"cancelled \d+ HTTP responses still being sent", err), err

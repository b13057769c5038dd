"""Availability against real sockets (issue 11, items 5, 11, 12): peers that reset right after the handshake,
a SIGTERM after hundreds of them, requests that are never finished, and the URL a wildcard bind prints."""
from __future__ import annotations

from typing import Any

import asyncio
import base64
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import websockets

from previewlab.server.cli import allowed_hosts, page_url
from previewlab.server.guard import Guard, split_host
from previewlab.server.http11 import connection_limits
from tests.conftest import GOOD, live_server, make_run

ROOT = Path(__file__).resolve().parents[1]


def handshake_then_reset(host: str, port: int, source: str = "127.0.0.1") -> bool:
    """A WebSocket handshake by hand, then a TCP reset (SO_LINGER 0) the moment the 101 is read."""
    s = socket.socket()
    s.bind((source, 0))
    s.connect((host, port))
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall(f"GET /ws HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
              f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(1)
        if not chunk:
            break
        buf += chunk
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()
    return buf.startswith(b"HTTP/1.1 101")


def test_resets_after_the_handshake_leave_no_task_behind(make_app):
    """Each reset peer used to leave its endpoint waiting forever on a sender whose cancellation was lost."""
    srv, app = make_app()
    with live_server(app) as addr:
        host, port = addr.rsplit(":", 1)
        assert sum(handshake_then_reset(host, int(port)) for _ in range(30)) == 30
        loop = srv.worker.loop

        async def leftovers() -> list[str]:
            await asyncio.sleep(0)
            names = [getattr(t.get_coro(), "__qualname__", "") for t in asyncio.all_tasks()]
            return [n for n in names if "_sender" in n or "run_asgi" in n]

        deadline = time.monotonic() + 5
        while (left := asyncio.run_coroutine_threadsafe(leftovers(), loop).result(5)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert left == [] and srv.hub.clients == {}


def test_sigterm_after_200_resets_exits_within_seconds_and_a_corrupt_folder_starts(tmp_path):
    """`previewlab serve` over a data folder with a damaged run (item 3: it starts, names the file, lists the
    rest), then 200 handshakes reset at once (from 4 loopback addresses, 50 each: under the per-address
    handshake burst), then SIGTERM: the process is gone within a few seconds (item 5)."""
    make_run(tmp_path, GOOD)
    make_run(tmp_path, "20261130-120000-002", meta=b"null")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = subprocess.Popen([sys.executable, "-m", "previewlab", "serve", "--model", "synthetic:tiny", "--port", str(port),
                          "--data-dir", str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/runs", timeout=1) as r:
                    runs = json.loads(r.read())
                break
            except OSError:
                assert p.poll() is None and time.monotonic() < deadline, "the server did not start"
                time.sleep(0.1)
        assert {r["run_id"]: r["status"] for r in runs} == {GOOD: "done", "20261130-120000-002": "damaged"}
        sources = [f"127.0.0.{i}" for i in range(2, 6)]
        accepted = sum(handshake_then_reset("127.0.0.1", port, src) for src in sources for _ in range(50))
        assert accepted == 200
        time.sleep(0.3)
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)
        rc = p.wait(20)
        took = time.monotonic() - t0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    out = p.stdout.read() if p.stdout else ""
    assert rc in (0, -signal.SIGTERM)
    assert took < 5, f"shutdown took {took:.1f} s"
    assert "20261130-120000-002/meta.json" in out and "Traceback" not in out


def test_half_sent_requests_are_closed_and_whole_ones_still_served(make_app):
    """Item 12: uvicorn's keep-alive timer is disarmed by the first byte, so a request head sent a byte at a
    time (or never finished) held its connection forever. Here the head has a deadline (0.5 s in this test)."""
    srv, app = make_app(hosts=("127.0.0.1",))
    with live_server(app, **connection_limits(srv.max_clients, head_timeout_s=0.5)) as addr:
        host, port = addr.rsplit(":", 1)
        t0 = time.monotonic()
        with socket.create_connection((host, int(port))) as slow:
            slow.sendall(b"GET /runs HTTP/1.1\r\nHost: 127")
            closed_after = None
            for _ in range(40):  # a byte every 0.1 s: each one used to disarm uvicorn's only timer
                try:
                    slow.sendall(b"x")
                    slow.settimeout(0.1)
                    if slow.recv(1) == b"":
                        closed_after = time.monotonic() - t0
                        break
                except socket.timeout:
                    continue
                except OSError:
                    closed_after = time.monotonic() - t0
                    break
        assert closed_after is not None and closed_after < 2.0
        with socket.create_connection((host, int(port))) as idle:  # connected, sends nothing at all
            idle.settimeout(3)
            assert idle.recv(1) == b""
        # whole requests, keep-alive ones and the WebSocket are untouched by the deadline
        with urllib.request.urlopen(f"http://{addr}/runs", timeout=5) as r:
            assert r.status == 200

        async def ws_stays() -> str:
            async with websockets.connect(f"ws://{addr}/ws") as ws:
                await ws.recv()
                await asyncio.sleep(1.0)  # twice the head deadline
                await ws.send('{"type": "stop"}')
                return json.loads(await ws.recv())["message"]

        assert "no generation is running" in asyncio.run(ws_stays())


async def _nothing(scope: Any, receive: Any, send: Any) -> None:
    """An app behind the guard that is never reached in these checks."""


def test_a_wildcard_bind_prints_a_url_its_own_guard_accepts():
    """Item 11: `--allow-remote --host 0.0.0.0` printed http://0.0.0.0:8000/, which its Host check refused."""
    for host, extra in (("0.0.0.0", []), ("::", []), ("0.0.0.0", ["lab.example"]), ("192.0.2.7", [])):
        url, note = page_url(host, 8000, "tok", extra)
        guard = Guard(_nothing, hosts=allowed_hosts(host, extra), token="tok")
        parsed = split_host(urlsplit(url).netloc)
        assert parsed is not None and parsed[0] in guard.hosts, (host, extra, url)
        assert url.endswith("?token=tok")
        assert ("--allow-host" in note) == (host in ("0.0.0.0", "::") and not extra)


def test_a_huge_head_gets_400_and_a_slow_body_is_closed(make_app):
    """The head is capped at 16 KiB; a body sent slowly after its response was made holds nothing either."""
    srv, app = make_app(hosts=("127.0.0.1",))
    with live_server(app, **connection_limits(srv.max_clients, head_timeout_s=0.5)) as addr:
        host, port = addr.rsplit(":", 1)
        with socket.create_connection((host, int(port))) as big:
            big.sendall(b"GET /runs HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + b"a" * 20_000)
            big.settimeout(5)
            assert big.recv(100).startswith(b"HTTP/1.1 400")
        with socket.create_connection((host, int(port))) as slow:
            slow.sendall(b"POST /runs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n\r\n")
            slow.settimeout(0.1)
            t0, answer = time.monotonic(), b""
            while time.monotonic() - t0 < 5:
                try:
                    slow.sendall(b"x")
                    chunk = slow.recv(4096)
                except socket.timeout:
                    continue
                except OSError:
                    break
                if not chunk:
                    break
                answer += chunk
            assert answer.startswith(b"HTTP/1.1 405") and time.monotonic() - t0 < 2.5

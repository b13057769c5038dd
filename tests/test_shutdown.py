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
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import websockets

from previewlab.server.http.exposure import allowed_hosts, page_url
from previewlab.server.http.guard import Access, Guard, split_host
from previewlab.server.http.http11 import SHUTDOWN_GRACE_S, connection_limits
from tests.conftest import GOOD, live_server, make_run, wait_until

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


@pytest.mark.slow
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

        wait_until(lambda: not asyncio.run_coroutine_threadsafe(leftovers(), loop).result(5), 5,
                   "the reset peers' tasks to end")
        assert srv.relay.hub.clients == {}


@pytest.mark.slow
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
    def get(path: str) -> bytes | None:
        assert p.poll() is None, "the server exited"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=1) as r:
                return bytes(r.read())
        except OSError:
            return None

    def clients() -> float | None:
        text = get("/metrics")
        lines = [x for x in (text or b"").decode().splitlines() if x.startswith("previewlab_connected_clients ")]
        return float(lines[0].split()[1]) if lines else None

    try:
        wait_until(lambda: get("/runs") is not None, 120, "the server to start")
        runs = json.loads(get("/runs") or b"")
        assert {r["run_id"]: r["status"] for r in runs} == {GOOD: "done", "20261130-120000-002": "damaged"}
        sources = [f"127.0.0.{i}" for i in range(2, 6)]
        accepted = sum(handshake_then_reset("127.0.0.1", port, src) for src in sources for _ in range(50))
        assert accepted == 200
        wait_until(lambda: clients() == 0, 30, "the server to let go of the reset peers")
        p.send_signal(signal.SIGTERM)
        # uvicorn ends every task SHUTDOWN_GRACE_S into shutdown; a process still there 2 s later hangs
        rc = p.wait(SHUTDOWN_GRACE_S + 2)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    out = p.stdout.read() if p.stdout else ""
    assert rc in (0, -signal.SIGTERM)
    assert "20261130-120000-002/meta.json" in out and "Traceback" not in out


@pytest.mark.slow
def test_half_sent_requests_are_closed_and_whole_ones_still_served(make_app):
    """Item 12: uvicorn's keep-alive timer is disarmed by the first byte, so a request head sent a byte at a
    time (or never finished) held its connection forever. Here the head has a deadline (0.5 s in this test)."""
    srv, app = make_app(access=Access(hosts=("127.0.0.1",)))
    with live_server(app, **connection_limits(srv.limits.max_clients, head_timeout_s=0.5)) as addr:
        host, port = addr.rsplit(":", 1)
        with socket.create_connection((host, int(port))) as slow:
            slow.sendall(b"GET /runs HTTP/1.1\r\nHost: 127")
            closed = False
            for _ in range(40):  # a byte every 0.1 s for 4 s, 8 deadlines: each byte used to disarm the only timer
                try:
                    slow.sendall(b"x")
                    slow.settimeout(0.1)
                    if slow.recv(1) == b"":
                        closed = True
                        break
                except socket.timeout:
                    continue
                except OSError:
                    closed = True
                    break
        assert closed, "a head still trickling in was never closed"
        with socket.create_connection((host, int(port))) as idle:  # connected, sends nothing at all
            idle.settimeout(3)
            assert idle.recv(1) == b""
        # whole requests, keep-alive ones and the WebSocket are untouched by the deadline
        with urllib.request.urlopen(f"http://{addr}/runs", timeout=5) as r:
            assert r.status == 200

        async def ws_stays() -> str:
            async with websockets.connect(f"ws://{addr}/ws") as ws:
                await ws.recv()
                # a head opened after the WebSocket, closed at its deadline: a deadline has passed for both
                reader, writer = await asyncio.open_connection(host, int(port))
                writer.write(b"GET /runs HTTP/1.1\r\nHost: 127")
                assert await asyncio.wait_for(reader.read(), 10) == b""
                writer.close()
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


@pytest.mark.slow
def test_a_huge_head_gets_400_and_a_slow_body_is_closed(make_app):
    """The head is capped at 16 KiB; a body sent slowly after its response was made holds nothing either."""
    srv, app = make_app(access=Access(hosts=("127.0.0.1",)))
    with live_server(app, **connection_limits(srv.limits.max_clients, head_timeout_s=0.5)) as addr:
        host, port = addr.rsplit(":", 1)
        with socket.create_connection((host, int(port))) as big:
            big.sendall(b"GET /runs HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + b"a" * 20_000)
            big.settimeout(5)
            assert big.recv(100).startswith(b"HTTP/1.1 400")
        with socket.create_connection((host, int(port))) as slow:
            slow.sendall(b"POST /runs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n\r\n")
            slow.settimeout(0.1)
            answer, closed = b"", False
            for _ in range(50):  # a byte every 0.1 s for 5 s, 10 deadlines, of the 100,000 the head announced
                try:
                    slow.sendall(b"x")
                    chunk = slow.recv(4096)
                except socket.timeout:
                    continue
                except OSError:
                    closed = True
                    break
                if not chunk:
                    closed = True
                    break
                answer += chunk
            assert answer.startswith(b"HTTP/1.1 405") and closed


def serve_then_signal(data: Path, sig: int, side: int, *flags: str) -> tuple[str, int, str]:
    """`previewlab serve` on data, a long run started over the WebSocket, `sig` once 3 of its steps arrived:
    (the run's id, the exit status, everything the process printed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = subprocess.Popen([sys.executable, "-m", "previewlab", "serve", "--model", "synthetic:tiny", "--port", str(port),
                          "--data-dir", str(data), *flags], cwd=ROOT, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)

    async def run_then_signal() -> str:
        async with websockets.connect(f"ws://127.0.0.1:{port}/ws") as ws:
            await ws.send(json.dumps({"type": "start", "steps": 1000, "width": side, "height": side}))
            rid, rows = "", 0
            while rows < 3:
                msg = await ws.recv()
                if isinstance(msg, str):
                    m = json.loads(msg)
                    rid = m["run_id"] if m["type"] == "run" else rid
                    rows += m["type"] == "step"
            p.send_signal(sig)
            return rid

    try:
        wait_until(lambda: _answers(port), 120, "the server to start")
        rid = asyncio.run(run_then_signal())
        rc = p.wait(60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return rid, rc, p.stdout.read() if p.stdout else ""


@pytest.mark.slow
def test_sigterm_does_not_wait_for_the_step_past_its_grace(tmp_path):
    """Issue 33, item 11: SIGTERM waited for the run's step and final decode (192 s at 768x768 on a CPU), past
    any supervisor's kill timeout. With --shutdown-grace 0 the run is recorded `interrupted` at once with the
    rows it has, and the process exits without waiting for the step."""
    rid, rc, out = serve_then_signal(tmp_path, signal.SIGTERM, 256, "--shutdown-grace", "0")
    meta = json.loads((tmp_path / rid / "meta.json").read_text())
    steps = (tmp_path / rid / "steps.csv").read_text().splitlines()
    assert rc in (0, -signal.SIGTERM) and "Traceback" not in out, out  # uvicorn raises the signal again at its end
    assert meta["status"] == "interrupted" and "--shutdown-grace" in meta["error"], meta
    assert len(steps) >= 1 + 3 and not (tmp_path / rid / "final.png").exists()
    assert f"shutdown: run {rid} recorded interrupted after 0 s" in out


def _answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/runs", timeout=1):
            return True
    except OSError:
        return False


@pytest.mark.slow
def test_an_idle_pre_connect_is_closed_calmly_and_a_half_request_is_named(make_app, caplog):
    """Issue 35 item 10: a browser opens a connection ahead of need and sends nothing; closing it at the head
    deadline is normal, so it is logged at debug level in calm words. A request left half-sent keeps its line."""
    import logging
    import time

    srv, app = make_app(access=Access(hosts=("127.0.0.1",)))
    with caplog.at_level(logging.DEBUG, logger="previewlab.server"), \
            live_server(app, **connection_limits(srv.limits.max_clients, head_timeout_s=0.3)) as addr:
        host, port = addr.rsplit(":", 1)
        with socket.create_connection((host, int(port))) as idle:  # connected, not a byte sent
            idle.settimeout(5)
            assert idle.recv(1) == b""
        with socket.create_connection((host, int(port))) as half:
            half.sendall(b"GET /runs HTTP/1.1\r\nHost: 127")
            half.settimeout(5)
            assert half.recv(1) == b""
        time.sleep(0.1)
    closed = [r for r in caplog.records if r.name == "previewlab.server" and "closed" in r.getMessage()]
    idle_lines = [r for r in closed if "idle connection" in r.getMessage()]
    half_lines = [r for r in closed if "no complete request" in r.getMessage()]
    assert len(idle_lines) == 1 and idle_lines[0].levelno == logging.DEBUG
    assert "nothing sent" in idle_lines[0].getMessage()
    assert len(half_lines) == 1 and half_lines[0].levelno == logging.INFO


@pytest.mark.slow
def test_ctrl_c_says_where_the_stopped_run_is_kept(tmp_path):
    """Issue 35 item 7: Ctrl-C kept the run and printed nothing about it. Now one line names the run, the step it
    stopped at and its folder, which holds its rows and its final image."""
    data = tmp_path / "runs"
    rid, rc, out = serve_then_signal(data, signal.SIGINT, 64)
    meta = json.loads((data / rid / "meta.json").read_text())
    steps = (data / rid / "steps.csv").read_text().splitlines()
    last = int(steps[-1].split(",")[1])  # run_id, step, ...
    assert rc in (0, -signal.SIGINT, 130) and "Traceback" not in out, out
    assert meta["status"] == "stopped" and (data / rid / "final.png").is_file()
    said = [ln for ln in out.splitlines() if "stopped run" in ln]
    assert said == [f"previewlab: stopped run {rid} at step {last}; its rows and image are in {data / rid}"], out

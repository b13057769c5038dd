"""Slow, stuck and vanishing clients, oversized messages, and a server killed or stopped mid-run.

These need a real uvicorn on loopback and real sockets: Starlette's test client buffers without bound.
"""
from __future__ import annotations

import asyncio
import csv
import io
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

import pytest
import torch
import websockets

from previewlab.preview import models
from previewlab.server.core.limits import SessionLimits
from tests.conftest import live_server, raw_ws, wait_until

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


async def drive(url: str, start: dict) -> tuple[int, dict]:
    frames, done = 0, None
    async with websockets.connect(url, max_size=None) as ws:
        await ws.recv()
        await ws.send(json.dumps({"type": "start", **start}))
        while done is None:
            m = await asyncio.wait_for(ws.recv(), 120)
            if isinstance(m, bytes):
                frames += 1
            elif json.loads(m)["type"] == "done":
                done = json.loads(m)
    return frames, done


def test_stuck_reader_is_dropped_and_costs_nothing(make_app):
    srv, app = make_app(limits=SessionLimits(send_timeout_s=1.0))
    with live_server(app, sndbuf=16 * 1024) as addr:
        stuck = raw_ws(addr, rcvbuf=4096)
        wait_until(lambda: len(srv.relay.hub.clients) == 1, what="the stuck client to register")
        stuck_client = next(iter(srv.relay.hub.clients.values()))
        # PNG previews of noise are large: the stuck socket fills within a few frames
        frames, done = asyncio.run(drive(f"ws://{addr}/ws", {"steps": 30, "width": 128, "height": 128,
                                                              "decoder": "taesd", "encoder": "png"}))
        assert done["status"] == "done" and frames == 30  # the reading client got every frame
        assert stuck_client.killed == "send timeout"
        assert stuck_client.frames_sent < 10 and stuck_client.slot is None  # released: no frame kept for it
        assert stuck_client not in srv.relay.hub.clients.values()
        rows = srv.store.rows(done["run_id"])
        assert len(rows) == 30
        # while its send was blocked, newer frames replaced the one in its slot: counted as drops, not queued
        assert stuck_client.frames_dropped == sum(r.dropped or 0 for r in rows)
        stuck.close()


def test_abrupt_disconnect_mid_frame_releases_the_client(make_app):
    srv, app = make_app()
    with live_server(app) as addr:
        async def scenario():
            async with websockets.connect(f"ws://{addr}/ws", max_size=None) as ws:
                await ws.recv()
                victim = raw_ws(addr)
                while len(srv.relay.hub.clients) < 2:  # the victim is registered before the run starts
                    await asyncio.sleep(0.01)
                await ws.send(json.dumps({"type": "start", "steps": 40, "width": 128, "height": 128,
                                          "decoder": "vae", "encoder": "png"}))
                while len(victim.recv(1000)) == 0:
                    pass  # part of a frame has arrived
                victim.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                victim.close()  # RST, mid-frame
                while True:
                    m = await asyncio.wait_for(ws.recv(), 120)
                    if isinstance(m, str) and json.loads(m)["type"] == "done":
                        return json.loads(m)

        done = asyncio.run(scenario())
        assert done["status"] == "done" and len(srv.store.rows(done["run_id"])) == 40
        wait_until(lambda: len(srv.relay.hub.clients) == 0, what="both clients to be released")  # each released once


def test_message_over_64kib_closes_1009(make_app):
    srv, app = make_app()
    with live_server(app) as addr:
        async def scenario():
            async with websockets.connect(f"ws://{addr}/ws") as ws:
                await ws.recv()
                await ws.send(json.dumps({"type": "start", "prompt": "x" * 70_000}))
                with pytest.raises(websockets.ConnectionClosed) as e:
                    while True:
                        await asyncio.wait_for(ws.recv(), 10)
                assert e.value.rcvd is not None
                return e.value.rcvd.code

        assert asyncio.run(scenario()) == 1009
        assert srv.store.runs() == []  # nothing started


def test_preview_fault_is_reported_and_recorded(make_app, tiny):
    class Broken(torch.nn.Module):
        def decode(self, x, return_dict=False):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (simulated)")

    broken = models.Model(**{**tiny.__dict__, "taesd": Broken()})
    srv, app = make_app(model=broken)
    with live_server(app) as addr:
        async def scenario():
            errors = []
            async with websockets.connect(f"ws://{addr}/ws") as ws:
                await ws.recv()
                await ws.send(json.dumps({"type": "start", "steps": 4, "decoder": "taesd"}))
                while True:
                    m = await asyncio.wait_for(ws.recv(), 60)
                    if isinstance(m, str):
                        msg = json.loads(m)
                        if msg["type"] == "error":
                            errors.append(msg["message"])
                        if msg["type"] == "done":
                            return errors, msg

        errors, done = asyncio.run(scenario())
        assert done["status"] == "done"
        assert len(errors) == 1 and "OutOfMemoryError" in errors[0] and "continuing with latent2rgb" in errors[0]
        rows = srv.store.rows(done["run_id"])
        assert "taesd failed at step 1" in rows[0].event
        assert [r.decoder for r in rows] == ["taesd", "latent2rgb", "latent2rgb", "latent2rgb"]
        assert [r.preview for r in rows] == [0, 1, 1, 1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(data: Path, port: int) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-m", "previewlab", "serve", "--model", "synthetic:tiny", "--port", str(port),
                          "--data-dir", str(data)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/runs", timeout=1):
                return p
        except OSError:
            time.sleep(0.1)
    p.kill()
    raise RuntimeError("server did not start: " + (p.stdout.read() if p.stdout else ""))


async def steps_then(url: str, n: int, action) -> tuple[list[int], object]:
    seen: list[int] = []
    async with websockets.connect(url, max_size=None) as ws:
        await ws.recv()
        await ws.send(json.dumps({"type": "start", "steps": 1000, "decoder": "latent2rgb"}))
        while True:
            try:
                m = await asyncio.wait_for(ws.recv(), 60)
            except websockets.ConnectionClosed as e:
                return seen, e.rcvd.code if e.rcvd else None
            if isinstance(m, str):
                msg = json.loads(m)
                if msg["type"] == "step":
                    seen.append(msg["step"])
                    if len(seen) == n:
                        action()


def test_sigkill_mid_run_keeps_rows_and_restart_lists_it_interrupted(tmp_path):
    port = free_port()
    p = start_server(tmp_path, port)
    seen, _ = asyncio.run(steps_then(f"ws://127.0.0.1:{port}/ws", 20, lambda: os.kill(p.pid, signal.SIGKILL)))
    p.wait(30)
    assert len(seen) >= 20
    (run_dir,) = [d for d in tmp_path.iterdir() if d.is_dir()]
    with open(run_dir / "steps.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if None not in r.values()]
    assert len(rows) >= 20 and [int(r["step"]) for r in rows] == list(range(1, len(rows) + 1))
    p2 = start_server(tmp_path, port)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/runs") as r:
            runs = json.loads(r.read())
        assert [x["status"] for x in runs] == ["interrupted"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/runs/{runs[0]['run_id']}.csv") as r:
            assert len(list(csv.DictReader(io.StringIO(r.read().decode())))) >= 20
    finally:
        p2.kill()
        p2.wait(30)


def test_sigterm_finishes_writing_and_closes_clients_1001(tmp_path):
    port = free_port()
    p = start_server(tmp_path, port)
    try:
        seen, code = asyncio.run(steps_then(f"ws://127.0.0.1:{port}/ws", 10, lambda: os.kill(p.pid, signal.SIGTERM)))
        assert code == 1001
        # uvicorn re-raises the signal it caught once shutdown is done, so a clean exit reads as -SIGTERM
        assert p.wait(60) in (0, -signal.SIGTERM)
    finally:
        if p.poll() is None:
            p.kill()
    (run_dir,) = [d for d in tmp_path.iterdir() if d.is_dir()]
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["status"] == "stopped"
    with open(run_dir / "steps.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    # every step the client saw, and any the worker finished after, is written; the run did stop early
    assert len(seen) <= len(rows) < 1000 and [int(r["step"]) for r in rows] == list(range(1, len(rows) + 1))
    assert (run_dir / "final.png").is_file()

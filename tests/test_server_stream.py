"""Streaming against a real uvicorn on loopback with a real WebSocket client."""
from __future__ import annotations

import asyncio
import csv
import io
import json
import urllib.request

import pytest
import websockets

from previewlab.server.protocol import unpack_frame
from tests.conftest import live_server

pytestmark = pytest.mark.slow


async def watch(url: str, start: dict | None, switch_at: int | None = None, ack: bool = True,
                first_frame: asyncio.Event | None = None):
    frames, steps, done = [], [], None
    async with websockets.connect(url, max_size=None) as ws:
        json.loads(await ws.recv())  # hello
        if start:
            await ws.send(json.dumps({"type": "start", **start}))
        while done is None:
            m = await asyncio.wait_for(ws.recv(), 60)
            if isinstance(m, bytes):
                header, data = unpack_frame(m)
                frames.append((header, data))
                if first_frame is not None:
                    first_frame.set()
                if switch_at is not None and header["step"] == switch_at:
                    await ws.send(json.dumps({"type": "set", "decoder": "vae"}))
                if ack:
                    await ws.send(json.dumps({"type": "ack", "seq": header["seq"], "client_decode_ms": 2.5,
                                              "client_paint_ms": 1.25}))
            else:
                msg = json.loads(m)
                if msg["type"] == "step":
                    steps.append(msg)
                elif msg["type"] == "done":
                    done = msg
    return frames, steps, done


def test_frames_acks_and_live_switch_over_real_uvicorn(make_app):
    srv, app = make_app()
    with live_server(app) as addr:
        frames, steps, done = asyncio.run(watch(f"ws://{addr}/ws", {"steps": 8, "decoder": "latent2rgb"}, switch_at=3))
        assert done["status"] == "done" and len(steps) == 8
        h, data = frames[0]
        assert set(h) == {"run_id", "step", "seq", "decoder", "format", "width", "height", "sent_at_ms", "frames",
                          "sizes", "fps"}
        assert h["format"] == "jpeg" and data[:2] == b"\xff\xd8" and h["width"] == 32
        assert h["frames"] == 1 and h["sizes"] == [len(data)] and h["fps"] == 0  # an image: one frame
        # the set sent after frame 3 arrived takes effect at a later step, never mid-step
        decs = [s["decoder"] for s in steps]
        k = decs.index("vae")
        assert k >= 3 and set(decs[:k]) == {"latent2rgb"} and set(decs[k:]) == {"vae"}
        assert steps[k]["event"] == "set decoder=vae"
        assert [f[0]["seq"] for f in frames] == sorted(f[0]["seq"] for f in frames)
        with urllib.request.urlopen(f"http://{addr}/runs/{done['run_id']}.csv") as r:
            rows = list(csv.DictReader(io.StringIO(r.read().decode())))
        got = {int(f[0]["step"]) for f in frames}
        for row in rows:
            if int(row["step"]) in got:
                assert float(row["client_decode_ms"]) == 2.5 and float(row["client_paint_ms"]) == 1.25
                assert float(row["send_ms"]) > 0 and float(row["ack_rtt_ms"]) >= float(row["send_ms"])
        assert {r["decoder"] for r in rows} == {"latent2rgb", "vae"}


def test_two_watchers_share_frames_and_a_late_one_joins_at_the_next_frame(make_app):
    srv, app = make_app()

    async def both(url):
        going = asyncio.Event()  # the late watcher joins once frames flow, however long the run takes to start
        first = asyncio.create_task(watch(url, {"steps": 40, "decoder": "latent2rgb"}, first_frame=going))
        await asyncio.wait_for(going.wait(), 60)
        second = await watch(url, None)
        return await first, second

    with live_server(app) as addr:
        (f1, s1, d1), (f2, s2, d2) = asyncio.run(both(f"ws://{addr}/ws"))
    assert d1["run_id"] == d2["run_id"] and d1["status"] == "done"
    assert 0 < len(f2) < len(f1)
    by_seq = {h["seq"]: data for h, data in f1}
    for h, data in f2:  # the same encoded bytes, not a second encode
        assert by_seq[h["seq"]] == data

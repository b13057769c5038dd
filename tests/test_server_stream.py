"""Streaming against a real uvicorn on loopback with a real WebSocket client."""
from __future__ import annotations

import asyncio
import csv
import io
import json
import urllib.request

import pytest
import websockets

from previewlab.server.ws.binary import unpack_frame
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


def test_the_last_frames_ack_is_in_the_runs_csv_when_done_arrives(make_app):
    """Issue 23, item 8: a page acks a preview after decoding and painting it, so the last frame's ack comes
    after the last step's row, often after the run has ended. `done` now waits (bounded) for the acks of the
    frames a watcher holds, so the CSV fetched right after `done` has every ack. The client here acks each
    frame 0.3 s after it arrives and hangs up at `done`: before, the last ack was never sent."""
    from previewlab.server.core.limits import SessionLimits

    srv, app = make_app(limits=SessionLimits(ack_wait_s=600))  # the bound never decides here

    async def slow_page(url: str):
        frames, pending, done = [], [], None
        async with websockets.connect(url, max_size=None) as ws:
            json.loads(await ws.recv())
            await ws.send(json.dumps({"type": "start", "steps": 6, "decoder": "latent2rgb", "mode": "sync"}))

            async def ack(seq: int) -> None:
                await asyncio.sleep(0.3)  # the page's decode and paint, slow
                await ws.send(json.dumps({"type": "ack", "seq": seq, "client_decode_ms": 4.0,
                                          "client_paint_ms": 2.0}))
            while done is None:
                m = await asyncio.wait_for(ws.recv(), 60)
                if isinstance(m, bytes):
                    header, _ = unpack_frame(m)
                    frames.append(header)
                    pending.append(asyncio.create_task(ack(header["seq"])))
                elif json.loads(m)["type"] == "done":
                    done = json.loads(m)
            acked_before_done = sum(t.done() for t in pending)
            for t in pending:
                t.cancel()
        return frames, done, acked_before_done

    with live_server(app) as addr:
        frames, done, acked = asyncio.run(slow_page(f"ws://{addr}/ws"))
        with urllib.request.urlopen(f"http://{addr}/runs/{done['run_id']}.csv") as r:
            rows = list(csv.DictReader(io.StringIO(r.read().decode())))
    # a page that acks is sent its next preview once it acked the last (sender.ACK_GATE_S): a slow one gets the
    # newest, never a queue; the last step's preview always reaches it
    steps = [f["step"] for f in frames]
    assert steps[0] == 1 and steps[-1] == 6 and steps == sorted(set(steps)) and acked == len(frames)
    painted = {int(r["step"]): r["client_paint_ms"] for r in rows}
    assert all(float(painted[s]) == 2.0 for s in steps)  # the last step's ack included


def test_a_watcher_that_never_acks_cannot_hold_a_runs_end(make_app):
    """The wait for acks is released by more than its timer: a watcher that leaves releases it, and so does the
    next run's start, whose `run` message then follows the last run's `done`. The bound here (600 s) is far
    over the test's own receive timeouts (60 s), so only those releases can end the wait."""
    from previewlab.server.core.limits import SessionLimits

    # bad_burst: the start is sent again each time the worker is not idle yet ("already running" is a bad message)
    srv, app = make_app(limits=SessionLimits(ack_wait_s=600, bad_burst=10_000))
    start = json.dumps({"type": "start", "steps": 4, "decoder": "latent2rgb"})

    async def texts(ws):
        while True:
            m = await asyncio.wait_for(ws.recv(), 60)
            if isinstance(m, str):
                yield json.loads(m)

    async def leaver_and_observer(url: str) -> dict:
        async with websockets.connect(url, max_size=None) as observer:  # acks every frame at once
            json.loads(await observer.recv())
            async with websockets.connect(url, max_size=None) as leaver:  # takes frames, never acks
                json.loads(await leaver.recv())
                await leaver.send(start)
                async for msg in texts(leaver):
                    if msg["type"] == "step" and msg["step"] == 4:
                        break
            while True:  # the leaver has hung up: its unacked frames no longer hold the run's end
                m = await asyncio.wait_for(observer.recv(), 60)
                if isinstance(m, bytes):
                    await observer.send(json.dumps({"type": "ack", "seq": unpack_frame(m)[0]["seq"],
                                                    "client_decode_ms": 1, "client_paint_ms": 1}))
                elif json.loads(m)["type"] == "done":
                    return json.loads(m)

    async def starts_again(url: str) -> list[tuple[str, str]]:
        seen: list[tuple[str, str]] = []
        async with websockets.connect(url, max_size=None) as ws:  # never acks
            json.loads(await ws.recv())
            await ws.send(start)
            async for msg in texts(ws):
                seen.append((msg["type"], msg.get("run_id", "")))
                if msg["type"] == "error":
                    await asyncio.sleep(0.02)  # the worker still makes the final image: start again soon
                if msg["type"] == "step" and msg["step"] == 4 or msg["type"] == "error":
                    await ws.send(start)  # as soon as the worker is idle (an error: not yet, start again)
                if msg["type"] == "run" and len([k for k, _ in seen if k == "run"]) == 2:
                    break
        return seen

    with live_server(app) as addr:
        done = asyncio.run(leaver_and_observer(f"ws://{addr}/ws"))
        seen = asyncio.run(starts_again(f"ws://{addr}/ws"))
    assert done["status"] == "done"
    runs = [rid for kind, rid in seen if kind == "run"]
    order = [(kind, rid) for kind, rid in seen if kind in ("run", "done")]
    assert order == [("run", runs[0]), ("done", runs[0]), ("run", runs[1])]

"""previewlab load --link RATE[:DELAY]: previews over a shaped link (bench/link.py), measured per watcher.

Runs alternate: a run nobody watches (the run is started, its socket closed, its end read over HTTP) and a run
that `clients` watchers take over the link, each acking every preview as the page does. Per watcher it reports
the rate its link delivered (the server's own measure, from the acks), the previews made for it, painted and
dropped (as of its last painted preview: made up to then, less painted; the hub sends an acking watcher one
preview at a time, so the rest were replaced unsent), and the newest preview's age when painted (made to ack, p50 and p95, the server's figures in each
`delivery`); per pair, the watched run's wall time against the unwatched one's before it, whose median and
interval (preview/judging/estimates.py) say whether the link slowed the denoising beyond noise.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from typing import Any

from previewlab.bench.link import Link, Relay
from previewlab.preview.judging.estimates import estimate, percentile, verdict


@dataclass
class Watcher:
    """What one watcher saw of a run: every `delivery` the server sent it, and the frames it got. adapt: it lets
    the server re-encode its previews for the link (the `link` message; the page's default)."""
    adapt: bool = True
    frames: int = 0
    frame_bytes: int = 0
    ages_ms: list[float] = field(default_factory=list)
    link_mbps: float | None = None
    made: int = 0
    delivered: int = 0
    adapted: list[str] = field(default_factory=list)

    def report(self) -> dict[str, Any]:
        return {"adapt": self.adapt, "link_mbps": self.link_mbps, "made": self.made, "delivered": self.delivered,
                "dropped": max(0, self.made - self.delivered), "frames_received": self.frames,
                "mean_frame_kib": round(self.frame_bytes / max(1, self.frames) / 1024, 2),
                "age_p50_ms": round(percentile(self.ages_ms, 50), 1) if self.ages_ms else None,
                "age_p95_ms": round(percentile(self.ages_ms, 95), 1) if self.ages_ms else None,
                "adapted": sorted(set(a for a in self.adapted if a))}


async def watch(url: str, stop: asyncio.Event, seen: Watcher) -> None:
    """A tab: takes every message, acks every preview at once (a page's decode and paint are not the link's)."""
    import websockets

    async with websockets.connect(url, max_size=None) as ws:
        if not seen.adapt:
            await ws.send(json.dumps({"type": "link", "adapt": False}))
        while not stop.is_set():
            try:
                m = await asyncio.wait_for(ws.recv(), 0.2)
            except asyncio.TimeoutError:
                continue
            if isinstance(m, bytes):
                seen.frames += 1
                seen.frame_bytes += len(m)
                n = int.from_bytes(m[:4], "big")
                seq = json.loads(m[4:4 + n])["seq"]
                await ws.send(json.dumps({"type": "ack", "seq": seq, "client_decode_ms": 0, "client_paint_ms": 0}))
                continue
            msg = json.loads(m)
            if msg.get("type") == "delivery":
                if msg.get("age_ms") is not None:
                    seen.ages_ms.append(float(msg["age_ms"]))
                seen.link_mbps = msg.get("link_mbps", seen.link_mbps)
                seen.made, seen.delivered = msg.get("made") or seen.made, msg.get("delivered") or seen.delivered
                seen.adapted.append(msg.get("adapted") or "")


def wall_of(port: int, rid: str, timeout_s: float) -> float:
    """A run's wall time from the server's list once it has ended (a run nobody watches is read over HTTP)."""
    t_end = time.monotonic() + timeout_s
    while time.monotonic() < t_end:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/runs?limit=10", timeout=30) as f:
            for m in json.loads(f.read()):
                if m.get("run_id") == rid and m.get("status") and m.get("totals"):
                    return float(m["totals"]["wall_s"])
        time.sleep(0.2)
    raise SystemExit(f"previewlab load: run {rid} did not end within {timeout_s:g} s")


async def one(port: int, vias: list[int], args: argparse.Namespace) -> tuple[float, list[Watcher]]:
    """One run: (its wall time, what each watcher saw), a watcher through each of `vias` (its relay's port);
    none: nobody watches it."""
    import websockets

    watchers = len(vias)
    stop = asyncio.Event()
    seen = [Watcher(adapt=args.adapt == "on" or args.adapt == "both" and i % 2 == 0) for i in range(watchers)]
    tasks = [asyncio.create_task(watch(f"ws://127.0.0.1:{via}/ws", stop, s)) for via, s in zip(vias, seen)]
    await asyncio.sleep(0.5 if watchers else 0)
    async with websockets.connect(f"ws://127.0.0.1:{port}/ws", max_size=None) as ws:
        await ws.recv()  # hello
        await ws.send(json.dumps({"type": "start", "steps": args.steps, "decoder": args.decoder, "every": 1,
                                  "width": args.size, "height": args.size}))
        rid = None
        while rid is None:
            msg = await ws.recv()
            if isinstance(msg, str) and json.loads(msg)["type"] == "run":
                rid = json.loads(msg)["run_id"]
            elif isinstance(msg, str) and json.loads(msg)["type"] == "error":
                raise SystemExit(f"previewlab load: the server refused the run: {json.loads(msg)['message']}")
    # the driver has left: only the watchers take previews over the link
    wall = await asyncio.to_thread(wall_of, port, rid, args.timeout)
    await asyncio.sleep(1.0 if watchers else 0)  # the last acks come back over the link
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    return wall, seen


async def bench(port: int, link: Link, args: argparse.Namespace) -> dict[str, Any]:
    """Each watcher behind a relay of its own, each relay's outgoing traffic shaped to its own link."""
    from previewlab.bench.link import shape

    relays = [Relay(port, link.delay_ms) for _ in range(args.clients)]
    vias = [await r.start() for r in relays]
    try:
        await asyncio.to_thread(shape, link, vias)
        await one(port, [], argparse.Namespace(**{**vars(args), "steps": 2}))  # warm-up
        pairs: list[dict[str, Any]] = []
        for _ in range(args.pairs):
            alone, _ = await one(port, [], args)
            watched, seen = await one(port, vias, args)
            pairs.append({"unwatched_s": alone, "watched_s": watched, "watchers": [s.report() for s in seen]})
    finally:
        for r in relays:
            await r.close()
    slowdown = estimate([100 * (p["watched_s"] / p["unwatched_s"] - 1) for p in pairs])
    return {"link": link.name, "decoder": args.decoder, "steps": args.steps, "size": args.size,
            "clients": args.clients, "adapt": args.adapt, "pairs": pairs, "slowdown": slowdown.to_json(),
            "slowdown_words": f"{slowdown.signed()} ({verdict(slowdown)})"}


def summary(result: dict[str, Any]) -> list[str]:
    """The report's lines: per watcher of the last watched run, then the wall time's verdict."""
    lines = [f"{result['link']}: {result['decoder']} every step, {result['steps']} steps at {result['size']} px, "
             f"{result['clients']} watchers, {len(result['pairs'])} pairs"]
    for i, w in enumerate(result["pairs"][-1]["watchers"], 1):
        rate = "-" if w["link_mbps"] is None else f"{w['link_mbps']:.3g} Mbit/s"
        how = "adapting" if w["adapt"] else "as made"
        lines.append(f"  watcher {i} ({how}): {rate}, {w['delivered']} of {w['made']} previews painted, {w['dropped']} "
                     f"dropped, newest age p50 {w['age_p50_ms']} ms p95 {w['age_p95_ms']} ms, "
                     f"{w['mean_frame_kib']} KiB a frame" + (f", adapted: {', '.join(w['adapted'])}"
                                                             if w["adapted"] else ""))
    last = result["pairs"][-1]
    for i, w in enumerate(last["watchers"], 1):
        line = advice(w, last["watched_s"])
        if line:
            lines.append(f"  advice, watcher {i}: {line}")
    walls = [(p["unwatched_s"], p["watched_s"]) for p in result["pairs"]]
    lines.append("  wall time unwatched / watched: " + ", ".join(f"{a:.2f} / {b:.2f} s" for a, b in walls))
    lines.append(f"  denoising with watchers vs nobody watching: {result['slowdown_words']}")
    return lines


def advice(w: dict[str, Any], wall_s: float) -> str:
    """When the link, not the machine, holds the previews back: the previews' rate against what the link carried,
    and what to do (seed 003's rule for transfer: fewer or smaller frames). "" when the link keeps up."""
    if not w["made"] or not w["link_mbps"] or not w["dropped"]:
        return ""
    every_s = wall_s / w["made"]
    need = w["mean_frame_kib"] * 1024 * 8 / every_s / 1e6
    if need <= w["link_mbps"]:
        return ""
    fix = ("the server adapts this watcher's previews already" if w["adapt"] else
           "let the server adapt them (the page's default), or ask for fewer or smaller frames: a larger "
           "interval, a smaller preview, a lower quality")
    return (f"the link carries {w['link_mbps']:.3g} Mbit/s and a {w['mean_frame_kib']:.3g} KiB preview every "
            f"{every_s:.2f} s needs {need:.3g}: {w['dropped']} of {w['made']} dropped; {fix}")


def as_json(result: dict[str, Any]) -> str:
    return json.dumps(result, indent=1, default=lambda o: asdict(o))

"""previewlab load: many watchers, one stuck reader and one reconnecting client against a real server.

Starts `previewlab serve` on a loopback port (synthetic:small by default), then alternates runs with one
client and runs with the crowd, and reports the generation's wall time, the server's memory and the frames
delivered and dropped. Bounded: a fixed number of runs, each with a timeout; loopback only.

With --link RATE[:DELAY] it measures a shaped link instead (bench/link.py, bench/link_bench.py): the server and
its watchers in a private network namespace whose loopback carries RATE, per watcher the rate delivered, the
previews made, painted and dropped and the newest one's age when painted, and the denoising's wall time with
watchers against runs nobody watches.
"""
from __future__ import annotations

import argparse
import asyncio
import base64
import csv
import io
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, Sequence

from previewlab.bench.flags import Parser, between, ranged, steps_value
from previewlab.preview.names import DECODER_NAMES
from previewlab.preview.record.records import StepRow


def start_server(*flags: str) -> tuple[subprocess.Popen[bytes], int]:
    """`previewlab serve` on a free loopback port, returned once it answers HTTP."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "previewlab", "serve", "--port", str(port), *flags],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/runs", timeout=1).close()
            return proc, port
        except OSError:
            if proc.poll() is not None:
                raise SystemExit(f"previewlab load: the server exited with status {proc.returncode}")
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("previewlab load: the server did not answer within 120 s")


def rss_kib(pid: int, field: str = "VmRSS") -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def stuck_socket(port: int) -> socket.socket:
    """Completes the WebSocket handshake, then never reads (a small receive window fills fast)."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", port))
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall(f"GET /ws HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
              f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
    return s


async def watcher(url: str, stop: asyncio.Event, counts: list[int]) -> None:
    import websockets

    async with websockets.connect(url, max_size=None) as ws:
        while not stop.is_set():
            try:
                m = await asyncio.wait_for(ws.recv(), 0.5)
            except asyncio.TimeoutError:
                continue
            if isinstance(m, bytes):
                counts[0] += 1
                n = int.from_bytes(m[:4], "big")
                seq = json.loads(m[4:4 + n])["seq"]
                await ws.send(json.dumps({"type": "ack", "seq": seq, "client_decode_ms": 0, "client_paint_ms": 0}))


async def reconnector(url: str, stop: asyncio.Event, counts: list[int], period_s: float) -> None:
    """A tab that keeps reloading: connect, take the hello, leave, `period_s` later again."""
    import websockets

    while not stop.is_set():
        try:
            async with websockets.connect(url, max_size=None) as ws:
                await ws.recv()
                counts[1] += 1
        except Exception:
            pass
        await asyncio.sleep(period_s)


async def one_run(port: int, pid: int, crowd: int, args: argparse.Namespace) -> dict[str, Any]:
    import websockets

    url = f"ws://127.0.0.1:{port}/ws"
    stop = asyncio.Event()
    counts = [0, 0]
    tasks = []
    stuck = None
    if crowd:
        tasks = [asyncio.create_task(watcher(url, stop, counts)) for _ in range(crowd)]
        tasks.append(asyncio.create_task(reconnector(url, stop, counts, args.reconnect_period)))
        stuck = stuck_socket(port)
        await asyncio.sleep(1.0)
    peak, samples = 0, []
    for _ in range(100):  # a reconnect flood can use up this address's handshake budget: retry, as the page does
        try:
            ws = await websockets.connect(url, max_size=None)
            break
        except websockets.InvalidStatus:
            await asyncio.sleep(0.1)
    else:
        raise SystemExit("previewlab load: the driving client could not connect (handshakes refused for 10 s)")
    async with ws:
        await ws.recv()
        rss0 = rss_kib(pid)
        await ws.send(json.dumps({"type": "start", "steps": args.steps, "decoder": args.decoder, "every": 1}))
        done = None
        t_end = time.monotonic() + args.timeout
        while done is None and time.monotonic() < t_end:
            try:
                m = await asyncio.wait_for(ws.recv(), 0.1)
            except asyncio.TimeoutError:
                m = None
            r = rss_kib(pid)
            peak = max(peak, r)
            samples.append(r)
            if isinstance(m, str) and json.loads(m)["type"] == "done":
                done = json.loads(m)
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    if stuck:
        stuck.close()
    if done is None:
        raise SystemExit(f"previewlab load: run did not finish within {args.timeout} s")
    rid = done["run_id"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/runs/{rid}.csv") as f:
        rows = [StepRow.from_row(r) for r in csv.DictReader(io.StringIO(f.read().decode()))]
    dropped = sum(r.dropped or 0 for r in rows)
    half = samples[len(samples) // 2] if samples else 0
    return dict(crowd=crowd, wall_s=done["totals"]["wall_s"], rss_start_mib=rss0 / 1024, rss_mid_mib=half / 1024,
                rss_end_mib=(samples[-1] if samples else 0) / 1024, rss_peak_mib=peak / 1024,
                frames_delivered=counts[0], reconnects=counts[1], frames_dropped=dropped)


def main(argv: Sequence[str] | None = None) -> int:
    p = Parser(prog="previewlab load", description=__doc__)
    p.add_argument("--model", default="synthetic:small")
    p.add_argument("--clients", type=ranged("clients", 1, 1000), default=50,
                   help="watching clients besides the stuck and reconnecting ones")
    p.add_argument("--steps", type=steps_value, default=20)
    p.add_argument("--decoder", default="taesd", choices=[d for d in DECODER_NAMES if d != "none"])
    p.add_argument("--pairs", type=ranged("pairs", 1, 100), default=2, help="(one client, crowd) pairs, interleaved")
    p.add_argument("--timeout", type=between("timeout", 1, 86_400), default=600, help="seconds one run may take")
    p.add_argument("--reconnect-period", type=between("reconnect-period", 0, 60), default=0.1,
                   help="seconds between the reconnecting client's connections (0: as fast as it can)")
    p.add_argument("--out", type=Path, default=Path("runs/load"))
    p.add_argument("--link", help="RATE[:DELAY]: watch over a shaped link (root): 1mbit, 10mbit:40ms, 100mbit; "
                                  "then --clients watchers (default 2) take every run but the unwatched baselines")
    p.add_argument("--size", type=ranged("size", 64, 2048), default=256, help="--link: the image side, px")
    p.add_argument("--adapt", choices=("on", "off", "both"), default="both",
                   help="--link: the watchers let the server re-encode their previews for the link (on), take them "
                        "as made (off), or half and half (both: the first watcher adapts, the second does not, ...)")
    args = p.parse_args(argv)
    if args.link is not None:
        return _link_main(args, list(argv if argv is not None else sys.argv[1:]))
    data = Path(tempfile.mkdtemp(prefix="previewlab-load-"))
    server, port = start_server("--model", args.model, "--data-dir", str(data), "--max-clients",
                                str(args.clients + 8), "--send-timeout", "5")
    try:
        results = []
        asyncio.run(one_run(port, server.pid, 0, argparse.Namespace(**{**vars(args), "steps": 3})))  # warm-up
        for _ in range(args.pairs):
            for crowd in (0, args.clients):
                r = asyncio.run(one_run(port, server.pid, crowd, args))
                results.append(r)
                print(json.dumps(r), file=sys.stderr)
        peak_hwm = rss_kib(server.pid, "VmHWM") / 1024
    finally:
        server.terminate()
        server.wait(60)
    solo = statistics.median(r["wall_s"] for r in results if r["crowd"] == 0)
    crowd = statistics.median(r["wall_s"] for r in results if r["crowd"])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "load.json").write_text(json.dumps({"results": results, "peak_hwm_mib": peak_hwm}, indent=1))
    print(f"{args.model} {args.steps} steps, {args.decoder} every step; {args.clients} watchers + 1 stuck + "
          f"1 reconnecting every {args.reconnect_period:g} s, {args.pairs} interleaved pairs")
    print(f"wall: one client {solo:.2f} s, crowd {crowd:.2f} s ({100 * (crowd / solo - 1):+.1f} %)")
    for r in results:
        print(f"  crowd={r['crowd']:>3} wall {r['wall_s']:.2f} s  rss start/mid/end/peak "
              f"{r['rss_start_mib']:.0f}/{r['rss_mid_mib']:.0f}/{r['rss_end_mib']:.0f}/{r['rss_peak_mib']:.0f} MiB  "
              f"frames to watchers {r['frames_delivered']}  dropped {r['frames_dropped']}  reconnects {r['reconnects']}")
    print(f"server peak RSS (VmHWM) {peak_hwm:.0f} MiB")
    return 0


def _link_main(args: argparse.Namespace, argv: list[str]) -> int:
    """--link: re-run in a private network namespace, shape its loopback, bench the watchers over it."""
    from previewlab.bench import link, link_bench

    try:
        shaped = link.parse(args.link)
    except link.LinkError as e:
        print(f"previewlab load: {e}", file=sys.stderr)
        return 2
    if not link.in_namespace():
        why = link.why_not()
        if why is not None:
            print(f"previewlab load: {why}", file=sys.stderr)
            return 2
        return link.reexec(argv)
    try:
        link.up()
    except link.LinkError as e:
        print(f"previewlab load: {e}", file=sys.stderr)
        return 2
    if "--clients" not in " ".join(argv):
        args.clients = 2
    data = Path(tempfile.mkdtemp(prefix="previewlab-load-"))
    server, port = start_server("--model", args.model, "--data-dir", str(data), "--max-clients",
                                str(args.clients + 8), "--send-timeout", "60")
    try:
        result = asyncio.run(link_bench.bench(port, shaped, args))
    finally:
        server.terminate()
        server.wait(60)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "link.json").write_text(link_bench.as_json(result))
    print("\n".join(link_bench.summary(result)))
    return 0

"""What CSV exports cost a running model (issue 45, item 9): a real `previewlab serve` over a data folder of
150 runs of 1000 steps, a run's median denoise_ms alone, then while four clients (four loopback addresses:
one export per address) export every run's steps (/runs/steps.csv) over and over, from before the run starts
to after it ends: first with nothing kept, then three times with what the first exports kept, each loaded run
between two runs alone.

    .venv/bin/python bench/export_cost.py            # about 1.5 minutes on 2 cores (8 minutes before)

Figures: docs/tables.md, "Exports while a run goes". Another version of the code is measured by putting its
checkout first: PYTHONPATH=/path/to/checkout .venv/bin/python bench/export_cost.py (the server inherits it).
"""
from __future__ import annotations

import argparse
import asyncio
import csv
import http.client
import io
import json
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Sequence

import websockets

from previewlab.bench.load import start_server
from previewlab.preview.record.records import STEP_COLUMNS, StepRow

INTS = {"step", "preview", "bytes", "every", "quality", "width", "height", "dropped", "frames"}


def make_runs(root: Path, runs: int, steps: int) -> None:
    """Runs as the server writes them: meta.json done with its totals, steps.csv with a number in each measured
    cell (varied, so they compress as real rows do), no deliveries."""
    rng = random.Random(0)
    kinds = {f.name: str(f.type) for f in StepRow.__dataclass_fields__.values()}
    for k in range(runs):
        rid = f"20261130-12{k // 60:02d}{k % 60:02d}-000"
        d = root / rid
        d.mkdir(parents=True)
        meta = {"run_id": rid, "status": "done", "model": "synthetic:small", "device": "cpu", "dtype": "float32",
                "prompt": "a red cube on a blue floor, studio light", "seed": k, "guidance": 7.5, "steps": steps,
                "width": 128, "height": 128, "totals": {"device_name": "cpu", "wall_s": 61.2, "steps": steps}}
        (d / "meta.json").write_text(json.dumps(meta, indent=1))
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(STEP_COLUMNS)
        for step in range(1, steps + 1):
            row = []
            for c in STEP_COLUMNS:
                kind = kinds[c]
                row.append(rid if c == "run_id" else step if c == "step" else "sync" if c == "mode"
                           else rng.randint(0, 999) if c in INTS or kind.startswith("int")
                           else f"{rng.uniform(0, 100):.3f}" if "float" in kind else "")
            w.writerow(row)
        (d / "steps.csv").write_text(buf.getvalue())


def exports(port: int, source: str, stop: threading.Event, out: list[dict[str, Any]]) -> None:
    """GET /runs/steps.csv from one loopback address, read to the end, again and again until stop is set (the
    one under way is finished): each one's status, bytes and seconds."""
    while not stop.is_set():
        t0 = time.perf_counter()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600, source_address=(source, 0))
        conn.request("GET", "/runs/steps.csv")
        r = conn.getresponse()
        n = 0
        while chunk := r.read(1 << 20):
            n += len(chunk)
        conn.close()
        out.append({"status": r.status, "bytes": n, "s": time.perf_counter() - t0, "at": t0})


async def one_run(port: int, steps: int, side: int) -> str:
    async with websockets.connect(f"ws://127.0.0.1:{port}/ws", max_size=None) as ws:
        await ws.recv()  # hello
        await ws.send(json.dumps({"type": "start", "steps": steps, "width": side, "height": side,
                                  "decoder": "none", "seed": 1}))
        while True:
            m = await asyncio.wait_for(ws.recv(), 600)
            if isinstance(m, str) and json.loads(m)["type"] in ("done", "error"):
                msg = json.loads(m)
                if msg["type"] == "error":
                    raise SystemExit(f"export_cost: the run failed: {msg}")
                return str(msg["run_id"])


def denoise(data: Path, rid: str) -> list[float]:
    with open(data / rid / "steps.csv", newline="") as f:
        return [float(r["denoise_ms"]) for r in csv.DictReader(f)][1:]  # step 1 pays for warm-up


def phase(name: str, port: int, data: Path, steps: int, side: int, clients: int) -> dict[str, Any]:
    """One measured run, with `clients` exporting every run's steps from before it starts to after it ends."""
    stop = threading.Event()
    done: list[list[dict[str, Any]]] = [[] for _ in range(clients)]
    threads = [threading.Thread(target=exports, args=(port, f"127.0.0.{2 + i}", stop, done[i]))
               for i in range(clients)]
    for t in threads:
        t.start()
    time.sleep(0.5 if clients else 0)  # the exports are under way
    t0 = time.perf_counter()
    rid = asyncio.run(one_run(port, steps, side))
    run_s = time.perf_counter() - t0
    stop.set()
    for t in threads:
        t.join()
    ms = denoise(data, rid)
    row = {"phase": name, "median_ms": round(statistics.median(ms), 1),
           "p90_ms": round(sorted(ms)[int(0.9 * len(ms))], 1),
           "run_s": round(run_s, 1), "exports": [[(round(e["at"] - t0, 1), round(e["s"], 1), e["bytes"] >> 20)
                                                  for e in d] for d in done],
           "statuses": sorted({e["status"] for d in done for e in d})}
    print(json.dumps(row), flush=True)
    return row


def report(rows: list[dict[str, Any]]) -> None:
    """Each loaded run against the mean of the runs alone either side of it (a shared machine drifts), and
    the drift itself: how far each run alone is from the one before it."""
    alone = [r["median_ms"] for r in rows[0::2]]
    drift = [100 * (b / a - 1) for a, b in zip(alone, alone[1:])]
    print(f"alone: median denoise {statistics.median(alone):.1f} ms; from one run alone to the next "
          f"{min(drift):+.0f} % to {max(drift):+.0f} %")
    for before, r, after in zip(rows[0::2], rows[1::2], rows[2::2]):
        base = (before["median_ms"] + after["median_ms"]) / 2
        longest = max((e[1] for d in r["exports"] for e in d), default=0.0)
        print(f"{r['phase']}: median denoise {r['median_ms']:.1f} ms against {base:.1f} ms alone "
              f"({100 * (r['median_ms'] / base - 1):+.0f} %); exports took up to {longest:.1f} s")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=150)
    p.add_argument("--run-steps", type=int, default=1000, help="steps of each kept run")
    p.add_argument("--steps", type=int, default=80, help="steps of each measured run")
    p.add_argument("--side", type=int, default=64, help="the measured run's width and height")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "runs"
        make_runs(data, args.runs, args.run_steps)
        proc, port = start_server("--model", "synthetic:small", "--data-dir", str(data), "--keep-runs", "0")
        try:
            asyncio.run(one_run(port, 5, args.side))  # warm-up: the model's first call
            plan = [("alone", 0), ("4 exports, nothing kept", 4)] + [("alone", 0), ("4 exports, kept", 4)] * 3
            rows = [phase(name, port, data, args.steps, args.side, clients) for name, clients in plan + [("alone", 0)]]
            report(rows)
        finally:
            proc.terminate()
            proc.wait(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())

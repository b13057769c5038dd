"""The order of a pair, measured (docs/figures.md#the-order-of-a-pair): the page's measure series on a model, in
this process, until a configuration has PAIRS pairs (Measure, then Measure again: 6, 9, 12 ...), then each pair's
overhead by its order, baseline first against previews first, with the one analysis' pairing and interval.

    .venv/bin/python docs/order_effect.py --model demo --pairs 24 --steps 20 --size 128 --decoder latent2rgb
"""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from starlette.testclient import TestClient

from previewlab.preview.judging.analysis import overhead_pct, paired
from previewlab.preview.judging.estimates import estimate
from previewlab.preview.models import load
from previewlab.server.app import build_app
from previewlab.server.server import Server
from previewlab.server.http.guard import Access
from previewlab.server.core.limits import SessionLimits

ORIGIN = {"origin": "http://testserver"}  # the test client's host, as the guard allows it


def _until_ended(ws: Any) -> dict[str, Any]:
    """The series' last `measure` message (its state no longer running); a refusal raises."""
    while True:
        got = ws.receive()
        if got.get("text") is None:
            continue  # a preview
        m = json.loads(got["text"])
        if m["type"] == "error" and "run_id" not in m:
            raise SystemExit(f"order_effect: {m['message']}")
        if m["type"] == "measure" and m["state"] != "running":
            return m


def measure(model: str, pairs: int, steps: int, size: int, decoder: str, every: int) -> dict[str, list[float]]:
    """Each pair's overhead (%) by its order, over a fresh data folder; the series' lines printed as they end."""
    srv = Server(load(model, device="cpu"), Path(tempfile.mkdtemp()) / "runs", access=Access(hosts=("testserver",)),
                 limits=SessionLimits(ack_wait_s=0.0))  # this client acks nothing: no run's end waits for it
    ask = {"type": "measure", "steps": steps, "width": size, "height": size, "decoder": decoder, "every": every,
           "mode": "sync"}
    with TestClient(build_app(srv)) as client, client.websocket_connect("/ws", headers=ORIGIN) as ws:
        have = 0
        while have < pairs:
            ws.send_text(json.dumps(ask))
            ended = _until_ended(ws)
            print(ended["line"], flush=True)
            if ended["state"] != "done":
                raise SystemExit(f"order_effect: the series ended {ended['state']}")
            have = ended["pairs"]
    runs = srv.figures.entries()
    order = {e.record.run_id: i for i, e in enumerate(runs)}
    out: dict[str, list[float]] = {"baseline first": [], "previews first": []}
    for ps in paired(runs).values():
        for r, b in ps:
            first = "baseline first" if order[b.record.run_id] < order[r.record.run_id] else "previews first"
            out[first].append(overhead_pct(r.record, b.record))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="demo")
    ap.add_argument("--pairs", type=int, default=12)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--decoder", default="latent2rgb")
    ap.add_argument("--every", type=int, default=1)
    a = ap.parse_args()
    by = measure(a.model, a.pairs, a.steps, a.size, a.decoder, a.every)
    for name, xs in by.items():
        if xs:
            # the median and its distribution-free interval (its level named under 95 %), then each pair
            print(f"{name}: median {estimate(xs).signed()}, n={len(xs)}; pairs: {', '.join(f'{x:+.1f}' for x in xs)}")
    both = [x for xs in by.values() for x in xs]
    print(f"all pairs: median {estimate(both).signed()}, n={len(both)}")


if __name__ == "__main__":
    main()

"""The data folder: one folder per run, append-only files, so a restart (or a kill) keeps every written row.

  <data>/<run_id>/meta.json        settings, model, status (running | done | stopped | failed | interrupted), totals
  <data>/<run_id>/steps.csv        the engine's step rows, one per step as it finishes
  <data>/<run_id>/deliveries.csv   per frame and client: ack (send, round trip, browser decode/paint) or drop
  <data>/<run_id>/final.png        the final image

The CSV a user downloads joins steps and deliveries into the engine's schema (records.STEP_COLUMNS).
Run ids are only ever looked up among the folders this store knows; no path is built from a request.
"""
from __future__ import annotations

import csv
import io
import json
import os
import re
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from preview.records import STEP_COLUMNS, CsvAppender, StepRow, as_csv_row

DELIVERY_COLUMNS = ("run_id", "step", "seq", "client", "kind", "send_ms", "ack_rtt_ms", "client_decode_ms",
                    "client_paint_ms")
RUN_ID = re.compile(r"^[0-9]{8}-[0-9]{6}-[0-9]{3}$")
ACK_FIELDS = ("send_ms", "ack_rtt_ms", "client_decode_ms", "client_paint_ms")


class Store:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._steps: dict[str, CsvAppender] = {}
        self._deliveries: dict[str, CsvAppender] = {}
        self._n = 0
        for meta in self._scan():
            if meta.get("status") == "running":  # the process died mid-run
                meta["status"] = "interrupted"
                self._write_meta(meta)

    def _scan(self) -> list[dict[str, Any]]:
        out = []
        for d in sorted(self.root.iterdir()):
            f = d / "meta.json"
            if RUN_ID.match(d.name) and f.is_file():
                try:
                    out.append(json.loads(f.read_text()))
                except ValueError:
                    continue  # a meta.json torn by a kill: the run's CSV is still there, the listing skips it
        return out

    def new_id(self) -> str:
        self._n = (self._n + 1) % 1000
        rid = time.strftime("%Y%m%d-%H%M%S") + f"-{self._n:03d}"
        while (self.root / rid).exists():
            self._n = (self._n + 1) % 1000
            rid = time.strftime("%Y%m%d-%H%M%S") + f"-{self._n:03d}"
        return rid

    def _write_meta(self, meta: dict[str, Any]) -> None:
        d = self.root / meta["run_id"]
        d.mkdir(exist_ok=True)
        tmp = d / "meta.json.tmp"
        tmp.write_text(json.dumps(meta, indent=1))
        os.replace(tmp, d / "meta.json")  # atomic: a kill leaves the old or the new file, never half of one

    def begin(self, meta: dict[str, Any]) -> None:
        rid = meta["run_id"]
        self._write_meta({**meta, "status": "running"})
        self._steps[rid] = CsvAppender(self.root / rid / "steps.csv", STEP_COLUMNS, fsync=False)
        self._deliveries[rid] = CsvAppender(self.root / rid / "deliveries.csv", DELIVERY_COLUMNS, fsync=False)

    def step(self, row: StepRow) -> None:
        w = self._steps.get(row.run_id)
        if w:
            w.append([row])

    def delivery(self, rid: str, **fields: Any) -> None:
        w = self._deliveries.get(rid)
        if w:
            w.append([{"run_id": rid, **fields}])

    def finish(self, meta: dict[str, Any]) -> None:
        self._write_meta(meta)

    def close_run(self, rid: str) -> None:
        for d in (self._steps, self._deliveries):
            w = d.pop(rid, None)
            if w:
                w.close()

    def final_image_path(self, rid: str) -> Path:
        return self.root / rid / "final.png"

    def runs(self) -> list[dict[str, Any]]:
        return self._scan()

    def known(self, rid: str) -> bool:
        return bool(RUN_ID.match(rid)) and (self.root / rid / "meta.json").is_file()

    def rows(self, rid: str) -> list[dict[str, Any]]:
        """The run's step rows in the engine's schema, with the first ack of each frame and its drop count."""
        d = self.root / rid
        steps = _read(d / "steps.csv")
        acks: dict[str, dict[str, str]] = {}
        drops: dict[str, int] = {}
        for r in _read(d / "deliveries.csv"):
            if r["kind"] == "ack":
                acks.setdefault(r["step"], r)
            elif r["kind"] == "drop":
                drops[r["step"]] = drops.get(r["step"], 0) + 1
        for s in steps:
            a = acks.get(s["step"])
            for k in ACK_FIELDS:
                s[k] = a[k] if a else ""
            if s["preview"] == "1":
                s["dropped"] = drops.get(s["step"], 0)
        return steps

    def csv(self, rids: list[str]) -> str:
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(STEP_COLUMNS)
        for rid in rids:
            for r in self.rows(rid):
                w.writerow(as_csv_row(r, STEP_COLUMNS))
        return buf.getvalue()


def _read(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        # a kill can leave the last line half-written: keep only complete rows
        return [r for r in csv.DictReader(f) if None not in r.values() and None not in r]


def step_message(row: StepRow) -> dict[str, Any]:
    return {"type": "step", **asdict(row)}

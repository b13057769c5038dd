"""What a long-running server exposes: GET /metrics (Prometheus text format) and two append-only logs.

  <data>/wall-seconds.txt     one line per finished generation: its wall seconds
  <data>/generations.jsonl    one JSON object per finished generation (settings, totals, device memory)

Both keep the newest `keep` lines (the server's --keep-runs): once a log holds twice that many, it is rewritten
with the newest `keep`, so neither outgrows the runs it describes by more than a factor of two.
"""
from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Callable

import torch
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from previewlab.preview.record.records import PREVIEW_STAGES, StepRow
from previewlab.preview.record.run import RunEnd

log = logging.getLogger("previewlab.server")
SECONDS = (0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600)
STAGE_SECONDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)


class Metrics:
    """One registry per server (tests run several in a process)."""

    def __init__(self, data_dir: Path, device: torch.device, keep: int = 0) -> None:
        """keep: lines each side log keeps (0: all)."""
        self.data_dir, self.device, self.keep = Path(data_dir), device, keep
        self._lines: dict[str, int] = {}  # side log -> its lines, counted once, then kept up to date
        r = self.registry = CollectorRegistry()
        self.generation = Histogram("previewlab_generation_seconds", "Wall time of a generation", ["decoder", "status"],
                                    buckets=SECONDS, registry=r)
        self.stage = Histogram("previewlab_preview_stage_seconds", "Time of one preview stage", ["stage", "decoder"],
                               buckets=STAGE_SECONDS, registry=r)
        self.denoise = Histogram("previewlab_denoise_step_seconds", "Denoising time of one step", buckets=STAGE_SECONDS,
                                 registry=r)
        self.frames_sent = Counter("previewlab_frames_sent", "Preview messages written to a client (a clip preview "
                                   "is one message of several frames)", registry=r)
        self.frames_dropped = Counter("previewlab_frames_dropped", "Frames replaced before a client got them",
                                      registry=r)
        self.bytes_sent = Counter("previewlab_bytes_sent", "Preview bytes written to clients", registry=r)
        self.clients = Gauge("previewlab_connected_clients", "WebSocket watchers connected", registry=r)
        self.device_memory = Gauge("previewlab_device_memory_bytes", "CUDA memory", ["kind"], registry=r)
        self._mem_before: dict[str, int] = {}
        self._failing: set[str] = set()  # side logs whose last write failed: logged once until one works

    def step(self, row: StepRow) -> None:
        self.denoise.observe(row.denoise_ms / 1e3)
        if row.preview:
            for k in PREVIEW_STAGES:
                self.stage.labels(k.removesuffix("_ms"), row.decoder).observe(getattr(row, k) / 1e3)

    def sent(self, nbytes: int) -> None:
        self.frames_sent.inc()
        self.bytes_sent.inc(nbytes)

    def memory(self) -> dict[str, int]:
        if self.device.type != "cuda":
            return {}
        return {"allocated": torch.cuda.memory_allocated(self.device),
                "reserved": torch.cuda.memory_reserved(self.device),
                "peak": torch.cuda.max_memory_allocated(self.device)}

    def run_started(self) -> None:
        self._mem_before = self.memory()
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)

    def run_ended(self, end: RunEnd) -> Callable[[], None]:
        """Record a run's end now (histogram, device memory: before the next run can start and reset them) and
        return the disk half, the side-log appends, for the caller to run off the event loop."""
        m, p = end.meta, end.meta.to_row()  # p: the preview settings' cells (every run a server shows has them)
        totals = end.totals.to_json() if end.totals is not None else {}
        wall = end.totals.wall_s if end.totals is not None else 0.0
        self.generation.labels(p["decoder"], end.status).observe(wall)
        after = self.memory()
        for k, v in after.items():
            self.device_memory.labels(k).set(v)
        entry = {
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "run_id": m.run_id, "prompt": m.prompt[:100],
            "seed": m.seed, "steps": m.steps, "width": m.width, "height": m.height, "model": m.model,
            "synthetic": m.synthetic, "status": end.status, "guidance": m.guidance, "decoder": p["decoder"],
            "every": p["every"], "mode": p["mode"], "budget": p["budget"], "encoder": p["encoder"],
            "quality": p["quality"], "preview_max": p["preview_max"], "wall_s": wall,
            "totals_ms": {k: v for k, v in totals.items() if k.endswith("_ms")},
            "device_memory": {"before": self._mem_before or None, "after": after or None,
                              "peak": after.get("peak") if after else None},
        }
        def write() -> None:
            self._append("wall-seconds.txt", f"{wall:.3f}\n")
            self._append("generations.jsonl", json.dumps(entry) + "\n")

        return write

    def _append(self, name: str, line: str) -> None:
        """Side logs are best effort: a full disk or a missing permission is logged once, and the run's
        end still reaches every client (the caller goes on to send `done`)."""
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            path = self.data_dir / name
            with open(path, "a", encoding="utf-8") as f:
                f.write(line)
            if self.keep > 0:
                n = self._lines[name] + 1 if name in self._lines else _count_lines(path)
                if n > 2 * self.keep:
                    _keep_last(path, self.keep)
                    n = self.keep
                self._lines[name] = n
        except OSError as e:
            self._lines.pop(name, None)  # count again once it works
            if name not in self._failing:
                self._failing.add(name)
                log.warning("could not append to %s: %s; runs go on without it", self.data_dir / name, e)
            return
        if name in self._failing:
            self._failing.discard(name)
            log.info("%s is writable again", self.data_dir / name)

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _count_lines(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))


def _keep_last(path: Path, n: int) -> None:
    """Rewrite the log with its newest n lines; atomic, so a kill leaves the old log or the new one."""
    with open(path, "rb") as f:
        lines = f.readlines()[-n:]
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(b"".join(lines))
    os.replace(tmp, path)

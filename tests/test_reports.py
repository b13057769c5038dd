"""Reports and comparisons from sweeps the bench itself made on synthetic:tiny, and the server's /metrics."""
from __future__ import annotations

import csv
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from previewlab.bench.report import figures, read
from tests.conftest import previewlab, SAME_ORIGIN




@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sweep")
    p = previewlab("bench", "--model", "synthetic:tiny", "--decoders", "none,latent2rgb,vae", "--every", "1,2", "--modes",
              "sync,overlap", "--steps", "4", "--repeats", "3", "--out", str(out))
    assert p.returncode == 0, p.stderr
    return out


def test_report_writes_html_and_plots_whose_figures_match_the_csvs(sweep):
    p = previewlab("report", str(sweep))
    assert p.returncode == 0, p.stderr
    for name in ("overhead_vs_interval", "preview_breakdown", "per_step", "bytes_per_frame"):
        png = sweep / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    html = (sweep / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 4
    assert 'src="http' not in html and 'href="http' not in html  # self-contained: nothing to fetch
    assert "SYNTHETIC synthetic:tiny" in html and "64x64" in html and "4 steps" in html and "float32" in html

    runs, steps = read(sweep)
    fig = figures(runs, steps)
    steady = {r["run_id"]: r["config"] for r in runs if r["role"] != "warmup" and r["first_run"] != "1"}
    # overhead line: the median of the runs' own overhead_pct for that configuration
    for every in (1, 2):
        want = statistics.median(float(r["overhead_pct"]) for r in runs
                                 if r["config"] == f"vae/every{every}/sync" and r["run_id"] in steady)
        assert dict(fig["overhead"]["vae sync"])[every] == pytest.approx(want)
    # bytes per frame: the median over the steady runs' preview rows
    want_bytes = statistics.median(int(s["bytes"]) for s in steps
                                   if s["run_id"] in steady and s["preview"] == "1" and s["decoder"] == "vae")
    assert fig["bytes"]["vae turbojpeg"] == want_bytes
    # the breakdown: mean decode ms per preview of one configuration
    rows = [s for s in steps if steady.get(s["run_id"]) == "latent2rgb/every2/overlap" and s["preview"] == "1"]
    assert fig["stacked"]["latent2rgb/every2/overlap"]["decode_ms"] == pytest.approx(
        sum(float(s["decode_ms"]) for s in rows) / len(rows))


def test_compare_passes_identical_and_fails_a_planted_regression(sweep, tmp_path):
    same = previewlab("compare", str(sweep), str(sweep))
    assert same.returncode == 0, same.stdout + same.stderr
    assert "vae/every1/sync" in same.stdout and "WORSE" not in same.stdout
    planted = tmp_path / "planted"
    shutil.copytree(sweep, planted)
    with open(planted / "runs.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    mine = [float(r["overhead_pct"]) for r in rows if r["config"] == "vae/every1/sync" and r["role"] == "config"]
    shift = 300 + 10 * (max(mine) - min(mine))  # far past the spread, even when a loaded machine widened it
    for r in rows:
        if r["config"] == "vae/every1/sync" and r["role"] == "config":
            r["overhead_pct"] = str(float(r["overhead_pct"]) + shift)
            r["wall_s"] = str(float(r["wall_s"]) * 4)
    with open(planted / "runs.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    bad = previewlab("compare", str(sweep), str(planted))
    assert bad.returncode == 1
    assert "vae/every1/sync" in bad.stdout.splitlines()[-1] and "latent2rgb/every1/sync" not in bad.stdout.splitlines()[-1]
    wall = previewlab("compare", str(sweep), str(planted), "--figure", "wall_s", "--threshold", "50")
    assert wall.returncode == 1
    better = previewlab("compare", str(planted), str(sweep))  # B faster than A is not a regression
    assert better.returncode == 0


def metric(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
    return total


def test_metrics_parse_and_move_with_a_run_and_logs_are_appended(make_app, tmp_path):
    srv, app = make_app(data_dir=tmp_path / "data")
    with TestClient(app) as client:
        before = client.get("/metrics")
        assert before.status_code == 200 and before.headers["content-type"].startswith("text/plain")
        assert metric(before.text, "previewlab_generation_seconds_count") == 0
        with client.websocket_connect("/ws", headers=SAME_ORIGIN) as ws:
            ws.receive_text()
            ws.send_text(json.dumps({"type": "start", "steps": 3, "decoder": "vae", "prompt": "p" * 300, "seed": 7}))
            while True:
                m = ws.receive()
                if m.get("text") and json.loads(m["text"])["type"] == "done":
                    break
            during = client.get("/metrics").text
            assert metric(during, "previewlab_connected_clients") == 1
        after = client.get("/metrics").text
    assert metric(after, "previewlab_generation_seconds_count", decoder="vae", status="done") == 1
    assert metric(after, "previewlab_preview_stage_seconds_count", stage="decode", decoder="vae") == 3
    assert metric(after, "previewlab_frames_sent_total") == 3 and metric(after, "previewlab_bytes_sent_total") > 0
    assert metric(after, "previewlab_denoise_step_seconds_count") == 3
    walls = (tmp_path / "data" / "wall-seconds.txt").read_text().splitlines()
    gens = [json.loads(x) for x in (tmp_path / "data" / "generations.jsonl").read_text().splitlines()]
    assert len(walls) == len(gens) == 1
    g = gens[0]
    assert float(walls[0]) == pytest.approx(g["wall_s"], abs=1e-3) and g["wall_s"] > 0
    assert g["prompt"] == "p" * 100 and g["seed"] == 7 and g["steps"] == 3 and g["decoder"] == "vae"
    assert g["totals_ms"]["decode_ms"] > 0 and g["device_memory"]["before"] is None  # no device on the CPU

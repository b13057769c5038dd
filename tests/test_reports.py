"""Reports and comparisons from sweeps the bench itself made on synthetic:tiny, and the server's /metrics."""
from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from previewlab.bench.compare import per_config
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
    assert sorted(dict(fig["overhead"]["vae sync"])) == [1, 2] and "latent2rgb/every2/overlap" in fig["stacked"]


# Hand-written rows, as read back from runs.csv and steps.csv (every value a string). Each figure's expected
# value is stated; the warm-up run and the first run after load carry values far off, so counting them in any
# figure moves it.
def _run(rid: str, config: str, overhead: str, role: str = "config", first: str = "0") -> dict[str, str]:
    return dict(run_id=rid, role=role, first_run=first, config=config, wall_s="1.0", previews="1", bytes="0",
                overhead_pct=overhead, pair_overhead_pct="")


def _step(rid: str, config: str, step: int, denoise: float, decode: float = 0.0, nbytes: int = 0,
          decoder: str = "vae") -> dict[str, str]:
    return dict(run_id=rid, config=config, step=str(step), preview="1", denoise_ms=str(denoise), on_path_ms="5",
                decode_ms=str(decode), sync_ms="0", transfer_ms="0", resize_ms="0", encode_ms="0", send_ms="",
                client_decode_ms="", client_paint_ms="", decoder=decoder, encoder="turbojpeg", bytes=str(nbytes))


V1, V2, L2 = "vae/every1/sync", "vae/every2/sync", "latent2rgb/every2/overlap"
RUNS = [_run("w", V1, "900", role="warmup", first="1"), _run("f", V1, "800", first="1"),
        _run("a", V1, "10"), _run("b", V1, "20"), _run("c", V1, "60"), _run("d", V2, "4"), _run("e", V2, "6"),
        _run("wl", L2, "", role="warmup"), _run("g", L2, ""), _run("n", "none", "")]
STEPS = [_step("w", V1, 1, 100, nbytes=5000), _step("f", V1, 1, 200, nbytes=7000),
         _step("a", V1, 1, 10, nbytes=100), _step("b", V1, 1, 12, nbytes=300), _step("c", V1, 1, 20, nbytes=200),
         _step("d", V2, 2, 10, nbytes=400), _step("e", V2, 2, 10, nbytes=500),
         _step("wl", L2, 2, 10, decode=100, decoder="latent2rgb"), _step("g", L2, 2, 10, decode=2, decoder="latent2rgb"),
         _step("g", L2, 4, 10, decode=4, decoder="latent2rgb")]


def test_figures_leave_out_warmup_and_first_runs():
    fig = figures(RUNS, STEPS)
    assert fig["overhead"]["vae sync"] == [(1, 20.0), (2, 5.0)]  # medians of 10, 20, 60 and of 4, 6
    assert fig["bytes"]["vae turbojpeg"] == 300                  # the median of 100, 300, 200, 400, 500
    assert fig["stacked"][L2]["decode_ms"] == pytest.approx(3.0)  # the mean of 2 and 4
    assert fig["per_step"][V1] == {1: 17.0}                      # denoise + on_path: 15, 17, 25
    assert {s["config"]: s["runs"] for s in fig["summary"]} == {V1: 3, V2: 2, L2: 1, "none": 1}


def test_compare_takes_the_same_runs():
    assert per_config(RUNS, "overhead_pct") == {V1: [10.0, 20.0, 60.0], V2: [4.0, 6.0]}  # no figure, no entry


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

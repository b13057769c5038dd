"""Reports and comparisons from sweeps the bench itself made on synthetic:tiny, and the server's /metrics."""
from __future__ import annotations

import csv
import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Callable

import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from previewlab.bench.compare import per_config
from previewlab.bench.report_figures import figures
from previewlab.bench.report_plots import draw_breakdown, draw_noise, draw_overhead, draw_per_step, titled
from previewlab.bench.rows import Sweep, SweepRow, SweepStep, read
from tests.conftest import SAME_ORIGIN, previewlab_here


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sweep")
    # six pairs a configuration: the fewest whose interval holds at 95 %, which compare's better and worse need
    p = previewlab_here("bench", "--model", "synthetic:tiny", "--decoders", "none,latent2rgb,vae", "--every", "1,2", "--modes",
              "sync", "--steps", "4", "--repeats", "6", "--out", str(out))
    assert p.returncode == 0, p.stderr
    return out


@pytest.mark.slow
def test_report_writes_html_and_plots_whose_figures_match_the_csvs(sweep):
    p = previewlab_here("report", str(sweep))
    assert p.returncode == 0, p.stderr
    for name in ("overhead_vs_interval", "overhead_intervals", "preview_breakdown", "memory", "per_step",
                 "bytes_per_frame"):
        png = sweep / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    html = (sweep / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 6
    assert "<pre class=advice>advice (budget 5 %" in html  # the advice under the table
    assert "no-preview baselines spread" in html and "overhead % [interval]" in html  # the noise, at the top
    assert html.index("no-preview baselines spread") < html.index("<table>")
    assert 'src="http' not in html and 'href="http' not in html  # self-contained: nothing to fetch
    assert "SYNTHETIC synthetic:tiny" in html and "64x64" in html and "4 steps" in html and "float32" in html

    fig = figures(read(sweep))
    assert sorted(dict(fig.overhead["vae sync"])) == [1, 2] and "latent2rgb/every2/sync" in fig.stacked


# Hand-written rows, as read back from runs.csv and steps.csv (every value a string), in the order they ran: each
# configuration right after a no-preview baseline of 1.0 s. Each figure's expected value is stated; the warm-up
# run and the first run after load carry values far off, so counting them in any figure moves it.
def _run(rid: str, config: str, wall: float, role: str = "config", first: str = "0", previews: int = 1,
         decode: float = 0.0) -> SweepRow:
    decoder, every, mode = (config.split("/") + ["every1", "sync"])[:3]  # what the name says, as a sweep writes both
    # overhead_pct: an older previewlab's column, still read
    return SweepRow.from_row(dict(run_id=rid, role=role, first_run=first, config=config, wall_s=str(wall),
                                  previews=str(previews), decode_ms=str(decode), bytes="0", overhead_pct="",
                                  decoder=decoder, every=every.removeprefix("every"), mode=mode))


def _step(rid: str, config: str, step: int, denoise: float, decode: float = 0.0, nbytes: int = 0,
          decoder: str = "vae") -> SweepStep:
    return SweepStep.from_row(dict(
        run_id=rid, config=config, role="config", step=str(step), preview="1", denoise_ms=str(denoise), on_path_ms="5",
        decode_ms=str(decode), sync_ms="0", transfer_ms="0", resize_ms="0", encode_ms="0", send_ms="",
        client_decode_ms="", client_paint_ms="", decoder=decoder, encoder="turbojpeg", bytes=str(nbytes)))


V1, V2, L2 = "vae/every1/sync", "vae/every2/sync", "latent2rgb/every2/overlap"


def _pairs(*runs: tuple[str, str, float]) -> list[SweepRow]:
    out = []
    for rid, cfg, wall in runs:
        out += [_run(f"base-{rid}", "none", 1.0, role="baseline"), _run(rid, cfg, wall)]
    return out


RUNS = ([_run("w", V1, 9.0, role="warmup", first="1"), _run("f", V1, 8.0, first="1")]
        + _pairs(("a", V1, 1.1), ("b", V1, 1.2), ("c", V1, 1.6), ("d", V2, 1.04), ("e", V2, 1.06))
        + [_run("wl", L2, 5.0, role="warmup"), _run("base-g", "none", 1.0, role="baseline"),
           _run("g", L2, 1.0, previews=2, decode=6.0)])  # its two previews: 2 and 4 ms (STEPS)
STEPS = [_step("w", V1, 1, 100, nbytes=5000), _step("f", V1, 1, 200, nbytes=7000),
         _step("a", V1, 1, 10, nbytes=100), _step("b", V1, 1, 12, nbytes=300), _step("c", V1, 1, 20, nbytes=200),
         _step("d", V2, 2, 10, nbytes=400), _step("e", V2, 2, 10, nbytes=500),
         _step("wl", L2, 2, 10, decode=100, decoder="latent2rgb"), _step("g", L2, 2, 10, decode=2, decoder="latent2rgb"),
         _step("g", L2, 4, 10, decode=4, decoder="latent2rgb")]
SWEEP = Sweep(tuple(RUNS), tuple(STEPS))


def test_figures_leave_out_warmup_and_first_runs():
    fig = figures(SWEEP)
    # the pairs' medians: of +10, +20, +60 % and of +4, +6 %
    assert [(n, round(e.value, 6)) for n, e in fig.overhead["vae sync"]] == [(1, 20.0), (2, 5.0)]
    assert fig.preview_bytes["vae turbojpeg"] == 300                  # the median of 100, 300, 200, 400, 500
    assert fig.stacked[L2]["decode"] == pytest.approx(3.0)  # the mean ms a preview: 6 ms over 2 previews
    assert fig.per_step[V1] == {1: 17.0}                      # denoise + on_path: 15, 17, 25
    assert {s.config: s.runs for s in fig.summary} == {V1: 3, V2: 2, L2: 1, "none": 6}


def test_compare_takes_the_same_runs():
    """compare's figures are the analysis's: an overhead its finding's (the summary's), any other over the steady
    runs."""
    got = per_config(RUNS, "overhead_pct")
    summary = {r.config: r.overhead for r in figures(SWEEP).summary if r.overhead is not None}
    assert got == summary
    assert {c: (round(e.value, 6), e.n) for c, e in got.items()} == {V1: (20.0, 3), V2: (5.0, 2), L2: (0.0, 1)}
    wall = per_config(RUNS, "wall_s")[V1]
    assert (wall.value, wall.n, wall.lo, wall.hi) == (1.2, 3, 1.1, 1.6)  # no warm-up, no first run


def test_compare_calls_better_or_worse_only_where_the_intervals_lie_apart():
    from previewlab.bench.compare import judge
    from previewlab.preview.judging.estimates import estimate

    a = estimate([10.0, 11.0, 12.0, 10.5, 11.5, 10.8])                 # 95 %: [10.0, 12.0]
    assert judge("x", a, estimate([20.0, 21.0, 22.0, 20.5, 21.5, 20.8]), "overhead_pct", 5.0).verdict == "WORSE"
    assert judge("x", a, estimate([13.0, 14.0, 15.0, 13.5, 14.5, 13.8]), "overhead_pct", 5.0).verdict == "worse"
    assert judge("x", a, estimate([1.0, 2.0, 3.0, 1.5, 2.5, 1.8]), "overhead_pct", 5.0).verdict == "better"
    assert judge("x", a, estimate([11.9, 13.0, 14.0, 13.5, 12.5, 12.8]), "overhead_pct", 5.0).verdict == \
        "within noise"  # B's median lies outside A's interval, but the intervals overlap
    # two pairs on B's side: 50 %, however far apart the medians (the old rule called this WORSE)
    short = judge("x", a, estimate([30.0, 31.0]), "overhead_pct", 5.0).verdict
    assert short == "short of the 95 % level (B --repeats 4 more): cannot be told apart"


def test_the_interval_axis_is_categorical_and_the_banner_fits():
    """Issue 23, item 5: the interval axis was logarithmic (ticks like 2x10^0) and a long banner was cut off at
    both edges of every plot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = figures(SWEEP)
    f, ax = plt.subplots(figsize=(7, 4.4))
    draw_overhead(ax, fig)
    assert ax.get_xscale() == "linear"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2"] and list(ax.get_xticks()) == [0, 1]
    banner = titled(f, "SYNTHETIC synthetic:sdxl (random weights: real costs, noise pictures) | NVIDIA H200 bfloat16 | "
              "1024x1024 | 30 steps | torch 2.13.0+cu128 diffusers 0.42.1 | " * 2)
    f.canvas.draw()
    box, page = banner.get_window_extent(), f.bbox
    assert page.x0 <= box.x0 and box.x1 <= page.x1 and box.y1 <= page.y1
    plt.close(f)


def test_the_noise_plot_greys_what_is_within_noise():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = figures(SWEEP)
    f, ax = plt.subplots()
    draw_noise(ax, fig)
    # one error bar per configuration with an overhead: vae every 1 (+10..+60: beyond), every 2 (+4..+6: beyond,
    # at 50 %), latent2rgb every 2 (n=1: no interval, grey)
    assert [t.get_text() for t in ax.get_yticklabels()] == sorted([V1, V2, L2])
    colours = [c[0].get_color() for c in ax.containers]  # an error bar's container: (its marker line, caps, bars)
    assert colours == ["#999", "#1f5fa8", "#1f5fa8"]
    plt.close(f)


@pytest.mark.slow
def test_compare_of_identical_sweeps_is_within_noise_in_every_row(sweep):
    same = previewlab_here("compare", str(sweep), str(sweep))
    assert same.returncode == 0, same.stdout + same.stderr
    lines = same.stdout.splitlines()
    # each side's noise line first, as its own summary says it (issue 34, item 6)
    assert lines[0].startswith("A ") and lines[1].startswith("B ") and "no-preview baselines spread" in lines[0]
    rows = lines[4:]
    assert len(rows) == 4 and all(r.endswith("within noise") for r in rows), same.stdout
    # like with like: an overhead is compared in points, never as a ratio of two percentages
    assert lines[2].startswith("overhead against the no-preview baseline beside each run, %")
    assert "B - A" in lines[3] and "+0.0 points" in rows[0]
    counts = previewlab_here("compare", str(sweep), str(sweep), "--figure", "bytes")
    assert counts.returncode == 0 and "preview bytes sent in a run, bytes" in counts.stdout
    vae = next(r for r in counts.stdout.splitlines() if r.startswith("vae/every1/sync"))
    assert "." not in vae.split("x1.000")[0] and "x1.000" in vae  # a count is an integer; a ratio B/A


def edited(sweep: Path, dest: Path, edit: Callable[[dict[str, str]], None]) -> Path:
    """A copy of the sweep folder whose runs.csv rows went through edit()."""
    shutil.copytree(sweep, dest)
    with open(dest / "runs.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        edit(r)
    with open(dest / "runs.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return dest


@pytest.mark.slow
def test_compare_refuses_sweeps_of_different_work(sweep, tmp_path):
    other = edited(sweep, tmp_path / "other", lambda r: r.update(steps="8", width="128"))
    p = previewlab_here("compare", str(sweep), str(other))
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.strip() == "previewlab compare: not comparable: steps 4 vs 8; size 64x64 vs 128x64"


@pytest.mark.slow
def test_compare_refuses_baselines_far_apart_and_bad_folders_under_its_own_name(sweep, tmp_path):
    """Issue 34, item 6: two sweeps whose baselines differed tenfold (0.33 s against 3.24 s, both noisy) were
    compared, a configuration called WORSE and the exit status 1; a missing folder exited 1 as `previewlab
    report`."""
    # the same work on a machine a hundred times slower: far past any spread a loaded machine gives a sweep
    slow = edited(sweep, tmp_path / "slow", lambda r: r.update(wall_s=str(float(r["wall_s"]) * 100)))
    apart = previewlab_here("compare", str(sweep), str(slow))
    assert apart.returncode == 2 and apart.stdout == ""
    assert apart.stderr.startswith("previewlab compare: not comparable: the no-preview baselines differ x100.0")
    for cmd, args in (("compare", [str(tmp_path / "nope"), str(sweep)]), ("report", [str(tmp_path / "nope")])):
        p = previewlab_here(cmd, *args)
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"previewlab {cmd}: "), p.stderr
        assert "runs.csv not found" in lines[0]


@pytest.mark.slow
def test_compare_fails_a_planted_regression(sweep, tmp_path):
    planted = tmp_path / "planted"
    shutil.copytree(sweep, planted)
    with open(planted / "runs.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    walls = [float(r["wall_s"]) for r in rows if r["role"] != "warmup"]
    shift = 1 + 10 * (max(walls) - min(walls))  # seconds: far past the spread, even when a loaded machine widened it
    for r in rows:
        if r["config"] == "vae/every1/sync" and r["role"] == "config":
            r["wall_s"] = str(float(r["wall_s"]) * 4 + shift)
    with open(planted / "runs.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    bad = previewlab_here("compare", str(sweep), str(planted))
    assert bad.returncode == 1
    assert "vae/every1/sync" in bad.stdout.splitlines()[-1] and "latent2rgb/every1/sync" not in bad.stdout.splitlines()[-1]
    wall = previewlab_here("compare", str(sweep), str(planted), "--figure", "wall_s", "--threshold", "50")
    assert wall.returncode == 1
    better = previewlab_here("compare", str(planted), str(sweep))  # B faster than A is not a regression
    assert better.returncode == 0


def metric(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
    return total


@pytest.mark.slow
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


def test_the_breakdown_takes_the_advices_parts_and_the_per_step_plot_whole_steps():
    """Issue 54: the breakdown took medians where the analysis takes means, so "where a preview's time goes"
    differed between the report's plot and its advice. It is the analysis's parts now (the mean ms a preview,
    named so), the advice's figure; and the per-step plot of a 3-step run has whole steps (issue 35 item 10)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = RUNS[:-1] + [_run("g", L2, 1.0, previews=3, decode=36.0)]
    fig = figures(Sweep(tuple(runs), tuple(STEPS + [_step("g", L2, 6, 10, decode=30, decoder="latent2rgb")])))
    assert fig.stacked[L2]["decode"] == pytest.approx(12.0)  # the mean of 2, 4 and 30 (their median: 4)
    found = fig.analysis.finding(L2)
    assert found is not None and fig.stacked[L2] == {k: found.parts[k] for k in fig.stacked[L2]}
    f, ax = plt.subplots()
    draw_breakdown(ax, fig)
    assert "mean" in ax.get_xlabel() and "median" not in ax.get_xlabel()
    plt.close(f)
    f, ax = plt.subplots()
    draw_per_step(ax, replace(fig, per_step={"vae/every1/sync": {1: 15.0, 2: 17.0, 3: 16.0}}))
    f.canvas.draw()
    lo, hi = ax.get_xlim()
    shown = [t for t in ax.get_xticks() if lo <= t <= hi]
    assert shown and all(float(t).is_integer() for t in shown), shown
    plt.close(f)

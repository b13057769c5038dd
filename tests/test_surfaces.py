"""Issue 43: one set of runs through every surface. The same runs, in the same order, go to the bench's summary
(a sweep folder), its report, the server's figures (a data folder, through the real app) and watch.summary()
(a watch's calls), and each names the same verdicts, the same configuration and the same level: they all
render the one analysis (preview/judging/advice.py), none computes its own."""
from __future__ import annotations

import argparse
import csv
import re

import pytest
from starlette.testclient import TestClient

from previewlab.bench import report
from previewlab.bench.cli import summary_text
from previewlab.bench.rows import RUNS_CSV_COLUMNS, STEPS_CSV_COLUMNS, Config, SweepRow, read
from previewlab.bench.summary import summarize
from previewlab.preview.judging.analysis import name_of
from previewlab.preview.record.run import RunEnd, RunRecord
from tests.conftest import SAME_ORIGIN, make_run

STEPS = 10
# name -> (decoder, every, each pair's wall over its baseline's); the baselines' walls cycle through BASE
CONFIGS = {
    "latent2rgb/every1/sync": ("latent2rgb", 1, [1.01, 1.02, 1.015, 1.02, 1.01, 1.025]),  # sure, under 5 %
    "vae/every1/sync": ("vae", 1, [1.40, 1.42, 1.41, 1.43, 1.39, 1.41]),                  # sure, over 5 %
    "taesd/every2/sync": ("taesd", 2, [1.10, 1.12]),                                       # 2 pairs: 50 % only
    "taesd/every1/sync": ("taesd", 1, [0.50, 0.52, 0.49, 0.51, 0.50, 0.52]),             # below zero: drift
}
BASE = [1.0, 1.01, 0.99, 1.0]


def record(rid: str, decoder: str, every: int, wall: float, first: bool = False) -> RunRecord:
    made = 0 if decoder == "none" else STEPS // every
    return RunRecord.from_row(dict(
        run_id=rid, started_at="2026-12-05T12:00:00+0000", model="synthetic:tiny", synthetic="1", device="cpu",
        dtype="float32", prompt="(your script)", steps=str(STEPS), width="64", height="64", seed="-1",
        guidance="7.5", task="script", decoder=decoder, every=str(every), mode="sync", status="done",
        first_run=str(int(first)), wall_s=str(wall), steps_run=str(STEPS), denoise_ms=str(80.0 * STEPS),
        previews=str(made), decode_ms=str(3.0 * made), encode_ms=str(1.0 * made), bytes=str(2000 * made)))


def runs() -> list[tuple[str, RunRecord]]:
    """(role, record) in the order they ran: a warm-up, then each configuration's run after a baseline."""
    out = [("warmup", record("20261205-120000-000", "none", 1, 1.3, first=True))]
    base = iter(BASE * 20)
    n = 1
    for r in range(6):
        for decoder, every, walls in CONFIGS.values():
            if r >= len(walls):
                continue
            b = next(base)
            out.append(("baseline", record(f"20261205-120000-{n:03d}", "none", 1, b)))
            out.append(("config", record(f"20261205-120000-{n + 1:03d}", decoder, every, b * walls[r])))
            n += 2
    # the newest run: vae, the configuration "in use" for the page and the watch
    b = next(base)
    out.append(("baseline", record(f"20261205-120000-{n:03d}", "none", 1, b)))
    out.append(("config", record(f"20261205-120000-{n + 1:03d}", "vae", 1, b * 1.41)))
    return out


VERDICTS = {"latent2rgb/every1/sync": "beyond noise", "vae/every1/sync": "beyond noise",
            "taesd/every2/sync": "beyond noise at 50 % only",
            "taesd/every1/sync": "below zero beyond noise: the machine drifted"}
PICK = "latent2rgb/every1/sync"


@pytest.mark.slow  # a report with its plots, a server and a pipeline: several seconds


def test_the_bench_the_report_the_server_and_a_watch_name_the_same_verdicts_and_configuration(tmp_path, tiny):
    from previewlab.preview.call.callback import Watch
    from previewlab.preview.models import synthetic_pipeline
    from previewlab.server.app import Server, build_app
    from previewlab.server.http.guard import Access

    ordered = runs()
    # the bench: a sweep folder, read back as report and compare read it
    sweep_dir = tmp_path / "sweep"
    sweep_dir.mkdir()
    with open(sweep_dir / "runs.csv", "w", newline="") as f:
        w = csv.DictWriter(f, RUNS_CSV_COLUMNS, extrasaction="ignore")
        w.writeheader()
        for role, rec in ordered:
            w.writerow(SweepRow(Config.of(name_of(rec.meta.preview), rec.meta.preview), role, 1, rec).to_row())  # type: ignore[arg-type]
    (sweep_dir / "steps.csv").write_text(",".join(STEPS_CSV_COLUMNS) + "\n")
    sweep = read(sweep_dir)
    rows = summarize(sweep.runs, sweep.steps)
    bench = summary_text(argparse.Namespace(budget=None, noise_limit=10.0), sweep.runs, rows, "meta", None, [])
    assert report.main([str(sweep_dir)]) == 0
    html = (sweep_dir / "report.html").read_text()
    # the server: the same runs in a data folder, through the real app
    data = tmp_path / "data"
    for _, rec in ordered:
        make_run(data, rec.run_id, meta=RunEnd(rec.meta, "done", rec.totals).to_json())
    srv = Server(tiny, data, access=Access(hosts=("testserver",)))
    with TestClient(build_app(srv), headers=SAME_ORIGIN) as client:
        listed = {m["run_id"]: m for m in client.get("/runs?limit=100").json()}
        newest = ordered[-1][1].run_id
        judged = client.get(f"/analysis?run={newest}").json()
    # a watch: the same runs as its calls, its settings the newest run's
    pipe = synthetic_pipeline("synthetic:tiny")
    watch = Watch(pipe, decoder="vae", every=1, mode="sync")
    try:
        watch.records[:] = [rec for _, rec in ordered]
        said = watch.summary()
    finally:
        watch.remove()

    server_verdicts = {f["name"]: f["verdict"] for f in judged["findings"]}
    assert server_verdicts == VERDICTS
    for name, verdict in VERDICTS.items():
        row = next(r for r in rows if r.config == name)
        assert row.verdict.startswith(verdict), (name, row.verdict)  # the bench adds "(--repeats 6 ...)"
        # each surface's own line for this configuration carries its verdict
        assert any(ln.startswith(f"  {name}: ") and f": {verdict}" in ln for ln in bench.splitlines()), name
        assert any(ln.startswith(f"{name}: ") and f": {verdict}" in ln for ln in said.splitlines()), name
        html_row = re.search(rf"<tr><td>{re.escape(name)}</td>.*?</tr>", html)
        assert html_row is not None and f"<td>{verdict}" in html_row.group(0), name
        listed_of = next(m["figures"]["finding"] for m in listed.values()
                         if m["figures"]["config"] == name and m["figures"]["finding"])
        assert listed_of["verdict"] == verdict
    # the level, in the same words: 2 pairs are 50 %
    for text in (bench, html, said, judged["findings"][2]["said"]):
        assert "+11.0 % [+10.0, +12.0] (50 %)" in text
    # the same configuration named, in each surface's words: the bench has none in use, the page and the watch
    # have vae, and name what they would change
    assert judged["advice"]["pick"] == PICK and judged["advice"]["change"] == "decoder vae -> latent2rgb"
    assert judged["advice"]["drifted"] == ["taesd/every1/sync"]
    assert f"  set: {PICK} (" in bench and f"  set: {PICK} (" in html
    assert f"set: decoder vae -> latent2rgb (now vae/every1/sync): {PICK} (" in said
    assert any(ln.strip().startswith(f"set: decoder vae -> latent2rgb (now vae/every1/sync): {PICK}")
               for ln in judged["advice"]["lines"])
    # and no surface advises the drifting configuration, however cheap it looks
    for text in (bench, html, said, "\n".join(judged["advice"]["lines"])):
        assert "set: taesd/every1/sync" not in text and "the machine drifted" in text


def test_the_page_holds_no_statistics_code():
    """Issue 43: web/ renders the server's figures. The statistics the page once ported from the bench (an
    interval's coverage, a median's estimate, a decoder's rank, a budget's fit, the advice's rules) must not
    come back in any of its scripts."""
    from pathlib import Path

    web = Path(__file__).resolve().parents[1] / "web"
    scripts = {p.name: p.read_text() for p in web.glob("*.js")}
    assert "app.js" in scripts
    for name, text in scripts.items():
        for word in ("coveragePct", "estimate(", "quantile", "percentile", "median", "RANK", "CHEAPER", "fits(",
                     "Math.ceil", "withinNoise", "LEVEL_PCT", "sort((a, b) => a - b)"):
            assert word not in text, f"web/{name} computes a statistic again: {word}"

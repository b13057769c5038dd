"""Issues 43 and 54: one set of runs through every surface. The same runs, with their stage figures (a real
steps.csv, every run's totals its steps' sums), in the same order, go to the bench (a sweep folder: its summary,
summary.csv and runs.csv's answer columns), its report, compare, the server (a data folder through the real
app: /analysis, the run list's figures, the /runs.csv export) and watch.summary() (a watch's calls). Each must
give every configuration the same overhead, interval, level and verdict, the same pairs, the same parts of a
preview's time and their shares, the same decoders' order, and the same answer: they all render the one
analysis (preview/judging/), none computes its own.

The runs are counterbalanced as the bench and the page's Measure run them (odd repeats the baseline first, even
ones the configuration first), and a preview's stage times vary within a run, so their mean (the analysis's
"ms a preview") and their median (the table's p50) differ: a surface that took the other would show."""
from __future__ import annotations

import argparse
import csv
import io
import re
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from previewlab.bench import compare, report
from previewlab.bench.finish import finish
from previewlab.bench.report_figures import figures
from previewlab.bench.rows import RUNS_CSV_COLUMNS, STEPS_CSV_COLUMNS, Config, Judging, SweepRow, SweepStep, read
from previewlab.preview.judging.answers import ANSWER_COLUMNS
from previewlab.preview.judging.estimates import Estimate
from previewlab.preview.judging.analysis import name_of
from previewlab.preview.record.csv_writer import CsvAppender, to_csv_text
from previewlab.preview.record.records import STEP_COLUMNS, StepRow
from previewlab.preview.record.run import RunEnd, RunRecord
from tests.conftest import SAME_ORIGIN, make_run

STEPS = 10  # tests/test_advice.py's and test_server_logic.py's runs (record) too
BUDGET = 8.0        # the sweep's --budget, not the default 5: report and compare take it from the folder
NOISE_LIMIT = 20.0  # and its --noise-limit
# name -> (decoder, every, each pair's wall over its baseline's)
CONFIGS = {
    "latent2rgb/every1/sync": ("latent2rgb", 1, [1.01, 1.02, 1.015, 1.02, 1.01, 1.025]),  # sure, under 8 %
    "vae/every1/sync": ("vae", 1, [1.40, 1.42, 1.41, 1.43, 1.39, 1.41]),                  # sure, over 8 %
    "taesd/every2/sync": ("taesd", 2, [1.10, 1.12]),                                       # 2 pairs: 50 % only
    "taesd/every1/sync": ("taesd", 1, [0.50, 0.52, 0.49, 0.51, 0.50, 0.52]),             # below zero: drift
}
BASE = [1.0, 1.01, 0.99, 1.0]
# a preview's stage ms by decoder: decode, resize, transfer, encode (multiples of 1/8: exact in a CSV's 3 decimals)
STAGE = {"latent2rgb": (0.5, 0.25, 0.125, 1.0), "taesd": (8.0, 0.5, 0.125, 1.0), "vae": (30.0, 0.5, 0.25, 1.5)}


def steps_of(rid: str, decoder: str, every: int, k: int) -> list[StepRow]:
    """A run's step rows: 80 ms of denoising a step; each third preview's decode half again as long (so a
    preview's mean decode is not its median), the run's k-th variation an eighth of a ms each; sync mode: all
    the preview's time on the denoising path."""
    out = []
    for s in range(1, STEPS + 1):
        made = decoder != "none" and s % every == 0
        dec, res, tra, enc = STAGE.get(decoder, (0.0, 0.0, 0.0, 0.0)) if made else (0.0, 0.0, 0.0, 0.0)
        dec = dec * (1.5 if s % 3 == 0 else 1.0) + 0.125 * (k % 4) * made
        out.append(StepRow.from_row(dict(
            run_id=rid, step=str(s), timestep="0", preview=str(int(made)), denoise_ms="80.0", decode_ms=str(dec),
            resize_ms=str(res), transfer_ms=str(tra), sync_ms="0", encode_ms=str(enc), on_path_ms=str(dec + res + tra + enc),
            decoder=decoder, every=str(every), mode="sync", bytes=str(2000 * made), encoder="turbojpeg" if made else "")))
    return out


def record(rid: str, decoder: str, every: int, wall: float, rows: list[StepRow] | None = None,
           first: bool = False) -> RunRecord:
    """The run's record, its totals its steps' sums (rows: its steps; None: steps_of's, the run's first
    variation)."""
    rows = steps_of(rid, decoder, every, 0) if rows is None else rows
    def total(k: str) -> str:
        return str(sum(getattr(r, k) for r in rows))
    return RunRecord.from_row(dict(
        run_id=rid, started_at="2026-12-07T12:00:00+0000", model="synthetic:tiny", synthetic="1", device="cpu",
        dtype="float32", prompt="(your script)", steps=str(STEPS), width="64", height="64", seed="-1",
        guidance="7.5", task="script", decoder=decoder, every=str(every), mode="sync", status="done",
        first_run=str(int(first)), wall_s=str(wall), steps_run=str(STEPS), denoise_ms=total("denoise_ms"),
        on_path_ms=total("on_path_ms"), previews=total("preview"), decode_ms=total("decode_ms"),
        resize_ms=total("resize_ms"), transfer_ms=total("transfer_ms"), sync_ms="0", encode_ms=total("encode_ms"),
        bytes=total("bytes")))


def runs() -> list[tuple[str, RunRecord, list[StepRow]]]:
    """(role, record, steps) in the order they ran: a warm-up, then each configuration beside a baseline, the
    baseline first in odd repeats and the configuration first in even ones; last, vae beside a baseline, the
    configuration "in use" for the page and the watch."""
    out = []
    n = 0

    def run(role: str, decoder: str, every: int, wall: float, first: bool = False) -> None:
        nonlocal n
        rid = f"20261207-120000-{n:03d}"
        rows = steps_of(rid, decoder, every, n)
        # walls of 3 decimals: a CSV's cells hold them exactly
        out.append((role, record(rid, decoder, every, round(wall, 3), rows, first), rows))
        n += 1

    run("warmup", "none", 1, 1.3, first=True)
    base = iter(BASE * 20)
    for r in range(6):
        for decoder, every, walls in CONFIGS.values():
            if r >= len(walls):
                continue
            b = next(base)
            pair = [("baseline", "none", 1, b), ("config", decoder, every, b * walls[r])]
            for role, d, e, wall in pair if r % 2 == 0 else pair[::-1]:
                run(role, d, e, wall)
    b = next(base)
    run("baseline", "none", 1, b)
    run("config", "vae", 1, b * 1.41)
    return out


def cell(row: dict[str, str], prefix: str) -> str:
    """An estimate's cells as every surface prints it."""
    e = Estimate.from_cells(row, prefix)
    return e.signed() if e is not None else ""


HOLDS = re.compile(r"(\S+/every\d+/sync): .*?; (\w[\w ]*?) holds ([\d.]+) of its ([\d.]+) ms a preview \((\d+) %\)")


def holds(text: str) -> dict[str, tuple[str, ...]]:
    """Each configuration's dominant part, its ms, all parts' ms and its share, as the advice's lines say them."""
    return {m.group(1): m.groups()[1:] for m in HOLDS.finditer(text)}


def order_line(text: str) -> str:
    (line,) = [ln.strip() for ln in text.splitlines() if "decoders by their measured ms a preview here:" in ln]
    return line


@pytest.mark.slow  # a report with its plots, a server and a pipeline: several seconds
def test_every_surface_gives_the_same_figures_to_the_digit(tmp_path, tiny, capsys):
    from previewlab.preview.call.callback import Watch
    from previewlab.preview.models import synthetic_pipeline
    from previewlab.server.app import build_app
    from previewlab.server.server import Server
    from previewlab.server.http.guard import Access

    ordered = runs()
    # the bench: a sweep folder as run_sweep writes it, then the bench's own end (finish): summary, runs.csv's answers
    sweep_dir = tmp_path / "sweep"
    sweep_dir.mkdir()
    Judging(BUDGET, NOISE_LIMIT).write(sweep_dir)  # as the bench writes it when it starts
    rows_csv, steps_csv = CsvAppender(sweep_dir / "runs.csv", RUNS_CSV_COLUMNS), CsvAppender(sweep_dir / "steps.csv", STEPS_CSV_COLUMNS)
    swept = []
    for role, rec, steps in ordered:
        cfg = Config.of(name_of(rec.meta.preview), rec.meta.preview)
        steps_csv.append(SweepStep(cfg.name, role, 1, s).to_row() for s in steps)  # type: ignore[arg-type]
        swept.append(SweepRow(cfg, role, 1, rec))  # type: ignore[arg-type]
        rows_csv.append([swept[-1].to_row()])
    rows_csv.close()
    steps_csv.close()
    args = argparse.Namespace(out=sweep_dir, budget=BUDGET, noise_limit=NOISE_LIMIT, strict=False,
                              min_fidelity=0.5)
    assert finish(args, swept, "meta", []) == 0
    bench = (sweep_dir / "summary.txt").read_text()
    with open(sweep_dir / "summary.csv", newline="") as f:
        summary_csv = {r["config"]: r for r in csv.DictReader(f)}
    with open(sweep_dir / "runs.csv", newline="") as f:
        runs_csv = {r["run_id"]: r for r in csv.DictReader(f)}
    assert report.main([str(sweep_dir)]) == 0  # no --budget: the folder's
    html = (sweep_dir / "report.html").read_text()
    fig = figures(read(sweep_dir))
    capsys.readouterr()
    assert compare.main([str(sweep_dir), str(sweep_dir)]) == 0
    compared = capsys.readouterr().out
    # the server: the same runs in a data folder, through the real app, judged at the same budget
    data = tmp_path / "data"
    for _, rec, steps in ordered:
        make_run(data, rec.run_id, meta=RunEnd(rec.meta, "done", rec.totals).to_json(),
                 steps=to_csv_text(steps, STEP_COLUMNS))
    srv = Server(tiny, data, access=Access(hosts=("testserver",)))
    newest = ordered[-1][1].run_id
    with TestClient(build_app(srv), headers=SAME_ORIGIN) as client:
        listed = {m["run_id"]: m for m in client.get("/runs?limit=100").json()}
        judged = client.get(f"/analysis?run={newest}&budget={BUDGET:g}").json()
        exported = {r["run_id"]: r for r in csv.DictReader(io.StringIO(client.get("/runs.csv").text))}
    # a watch: the same runs as its calls, its settings and its latest call's rows the newest run's
    pipe = synthetic_pipeline("synthetic:tiny")
    watch = Watch(pipe, decoder="vae", every=1, mode="sync")
    try:
        watch.records[:] = [rec for _, rec, _ in ordered]
        watch.rows[:] = ordered[-1][2]
        said = watch.summary(budget=BUDGET)
    finally:
        watch.remove()

    found = {f["name"]: f for f in judged["findings"]}
    assert set(found) == set(CONFIGS)
    assert {k: f["verdict"] for k, f in found.items()} == {
        "latent2rgb/every1/sync": "beyond noise", "vae/every1/sync": "beyond noise",
        "taesd/every2/sync": "beyond noise at 50 % only",
        "taesd/every1/sync": "below zero beyond noise: the machine drifted"}
    for name, f in found.items():
        e = Estimate.from_json(f["overhead"])
        shown, verdict = e.signed(), f["verdict"]
        # the bench's table, summary.csv, the report's table, compare, the watch's line, the run list
        (line,) = [ln for ln in bench.splitlines() if ln.startswith(name + " ")]
        assert f"  {shown}" in line and verdict in line, line
        assert cell(summary_csv[name], "overhead") == shown and summary_csv[name]["verdict"] == verdict
        row = re.search(rf"<tr><td>{re.escape(name)}</td>.*?</tr>", html)
        assert row is not None and f"<td>{shown}</td><td>{verdict}" in row.group(0), name
        assert fig.intervals[name] == Estimate(e.value, e.n, e.lo, e.hi, e.level_pct)
        (line,) = [ln for ln in compared.splitlines() if ln.startswith(name + " ")]
        assert line.count(compare.cell(fig.intervals[name], compare.FIGURES["overhead_pct"])) == 2, line
        assert any(ln.startswith(f"{name}: {shown}: {verdict}") for ln in said.splitlines()), name
        listed_of = [m["figures"]["finding"] for m in listed.values() if m["figures"]["config"] == name]
        assert listed_of and all(x["overhead"] == f["overhead"] and x["parts"] == f["parts"] for x in listed_of)
        # the exports: each run of it names its baseline as the analysis paired them, and its configuration's figure
        pairs = dict(tuple(p) for p in f["pairs"])  # type: ignore[misc]
        runs_of = [rid for rid, r in runs_csv.items() if r["config"] == name and r["role"] == "config"]
        assert {rid: runs_csv[rid]["baseline_run_id"] for rid in runs_of} == pairs
        for rid in runs_of:
            assert cell(runs_csv[rid], "config_overhead") == shown and runs_csv[rid]["verdict"] == verdict
            pair = listed[rid]["figures"]["pair"]
            assert pair["baseline"] == pairs[rid] and float(runs_csv[rid]["pair_overhead_pct"]) == \
                pytest.approx(pair["overhead_pct"], abs=5e-4)
    # the page's /runs.csv and the bench's runs.csv: the same columns, the same cells, run for run
    assert set(exported) == set(runs_csv)
    for rid, r in runs_csv.items():
        assert {c: exported[rid][c] for c in ANSWER_COLUMNS} == {c: r[c] for c in ANSWER_COLUMNS}, rid
    # the counterbalanced order: half of each configuration's pairs ran the baseline first, half after
    ids = list(runs_csv)
    vae_pairs = found["vae/every1/sync"]["pairs"]
    assert sorted(ids.index(b) - ids.index(r) for r, b in vae_pairs) == [-1, -1, -1, -1, 1, 1, 1]

    # where a preview's time goes: the same parts, the same dominant part and share on every surface, the mean
    # ms a preview (vae: each run's decodes 30, 30, 45 ms and so on, plus its variation), never the median
    advice_lines = "\n".join(judged["advice"]["lines"])
    want = holds(advice_lines)
    assert set(want) == set(CONFIGS)  # each names its part (the sure ones with a remedy)
    for text in (bench, html, said):
        assert holds(text) == want, text
    vae = found["vae/every1/sync"]
    runs_k = [k for k, (role, rec, _) in enumerate(ordered) if role == "config" and rec.meta.preview
              and rec.meta.preview.decoder == "vae"]
    mean = (7 * 30.0 + 3 * 45.0) / 10  # steps 3, 6 and 9 of 10 half again as long
    assert vae["parts"]["decode"] == pytest.approx(mean + 0.125 * sum(k % 4 for k in runs_k) / len(runs_k))
    assert want["vae/every1/sync"][:2] == ("decode", f"{vae['parts']['decode']:.1f}")
    for name, f in found.items():
        assert fig.stacked[name] == f["parts"], name  # the report's breakdown is the analysis's parts
    assert order_line(bench) == order_line(html.replace("&lt;", "<")) == order_line(advice_lines) == order_line(said)
    # the table's stage spreads are the medians (p50) its header names: vae's decode median is 30 and a bit
    assert 30.0 <= float(summary_csv["vae/every1/sync"]["decode_ms_p50"]) < 31.0

    # the on-path share: the previews' share of the denoising path, the same on the page and in the watch
    t = ordered[-1][1].totals
    share = 100 * t.on_path_ms / (t.denoise_ms + t.on_path_ms)
    assert listed[newest]["figures"]["on_path_share_pct"] == pytest.approx(share)
    assert f"{t.on_path_ms:.0f} ms on the denoising path, {share:.1f} % of it" in said

    # the noise: the same spread everywhere; the folder's own limit on the bench's surfaces
    spread = f"spread {judged['noise']['spread_pct']:.1f} %"
    for text in (bench, html, compared, said):
        assert spread in text
    assert f"within the {NOISE_LIMIT:g} % limit" in bench and f"within the {NOISE_LIMIT:g} % limit" in html
    assert compared.splitlines()[0].endswith(f"within the {NOISE_LIMIT:g} % limit")

    # the same answer: what fits the sweep's budget, and no surface advises the drifting configuration
    fits = f"fit {BUDGET:g} % at the 95 % level"
    assert judged["advice"]["fit"] == ["latent2rgb/every1/sync"]
    for text in (bench, html, said, advice_lines):
        assert f"advice (budget {BUDGET:g} %" in text and fits in text and "latent2rgb/every1/sync (10 previews a run" in text
        assert "set: taesd/every1/sync" not in text and "the machine drifted" in text
    assert judged["advice"]["pick"] == "latent2rgb/every1/sync" and judged["advice"]["change"] == "decoder vae -> latent2rgb"
    assert "set: decoder vae -> latent2rgb (now vae/every1/sync): latent2rgb/every1/sync (" in said


def test_report_and_compare_judge_a_folder_at_its_own_budget_and_noise_limit(tmp_path):
    """Issue 54: `report DIR` judged at its own 5 % budget, whatever the sweep's --budget; compare at a fixed 10 %
    noise limit. Both read the folder's sweep.json; a folder without one (an older previewlab's) the defaults."""
    d = tmp_path / "sweep"
    d.mkdir()
    (d / "runs.csv").write_text(",".join(RUNS_CSV_COLUMNS) + "\n")
    (d / "steps.csv").write_text(",".join(STEPS_CSV_COLUMNS) + "\n")
    assert read(d).judging == Judging(5.0, 10.0)
    Judging(12.5, 2.0).write(d)
    assert read(d).judging == Judging(12.5, 2.0) and read(d).by_device().judging == Judging(12.5, 2.0)
    ordered = runs()
    sweep = read(d)
    rows = tuple(SweepRow(Config.of(name_of(rec.meta.preview), rec.meta.preview), role, 1, rec)  # type: ignore[arg-type]
                 for role, rec, _ in ordered)
    fig = figures(type(sweep)(rows, (), sweep.judging))
    noise, advice = fig.noise, fig.analysis.advice
    assert noise is not None and noise.limit_pct == 2.0 and advice.budget == 12.5
    assert figures(type(sweep)(rows, (), sweep.judging), budget=3.0).analysis.advice.budget == 3.0
    (d / "sweep.json").write_text("{not json")
    with pytest.raises(Exception, match="sweep.json: not a sweep's budget and noise limit"):
        read(d)


def test_a_sweep_counterbalances_its_pairs():
    """Issue 54, 4: every pair ran the baseline first, so the order's own effect could not be told from noise.
    Odd repeats run the baseline first, even ones the configuration first; a direct call stays right before its
    baseline, last in its repeat, and the analysis pairs every run with its own baseline."""
    from previewlab.bench.plan import Plan
    from previewlab.preview.judging.analysis import Entry, paired
    from previewlab.preview.settings import PreviewSettings, RunSettings

    plan = Plan(RunSettings(preview=PreviewSettings(decoder="none")), ("latent2rgb", "taesd"), (1,), repeats=4,
                warmup=1, direct=True, modes=("sync",))
    slots = [(role, rep, p.decoder if p else "direct") for role, rep, p, _ in plan.schedule() if role != "warmup"]
    by = {rep: [(role, d) for role, r, d in slots if r == rep] for rep in (1, 2, 3, 4)}
    assert by[1] == [("baseline", "none"), ("config", "latent2rgb"), ("baseline", "none"), ("config", "taesd"),
                     ("direct", "direct"), ("baseline", "none")]
    assert by[2] == [("config", "latent2rgb"), ("baseline", "none"), ("config", "taesd"), ("baseline", "none"),
                     ("direct", "direct"), ("baseline", "none")]
    assert by[3] == by[1] and by[4] == by[2]
    # the analysis pairs them as they were planned: each configuration with the baseline of its own pair
    rec = runs()[1][1]
    entries = [Entry(d if role != "baseline" else "none", role, True, rec) for role, _, d in slots]  # type: ignore[arg-type]
    at = {id(e): i for i, e in enumerate(entries)}  # equal entries: told apart by identity
    got = sorted((at[id(r)], at[id(b)]) for ps in paired(entries).values() for r, b in ps)
    want = []  # (a run's place, its baseline's)
    for k in range(4):
        o = 6 * k
        want += [(o + 1, o), (o + 3, o + 2)] if k % 2 == 0 else [(o, o + 1), (o + 2, o + 3)]
        want.append((o + 4, o + 5))
    assert got == sorted(want)


def test_the_page_holds_no_statistics_code():
    """Issue 43: web/ renders the server's figures. The statistics the page once ported from the bench (an
    interval's coverage, a median's estimate, a decoder's rank, a budget's fit, the advice's rules, the on-path
    share) must not come back in any of its scripts."""
    web = Path(__file__).resolve().parents[1] / "previewlab" / "web"
    scripts = {p.name: p.read_text() for p in web.glob("*.js")}
    assert "app.js" in scripts
    for name, text in scripts.items():
        for word in ("coveragePct", "estimate(", "quantile", "percentile", "median", "RANK", "CHEAPER", "fits(",
                     "Math.ceil", "withinNoise", "LEVEL_PCT", "sort((a, b) => a - b)", "on_path_ms /", "/ t.denoise_ms"):
            assert word not in text, f"web/{name} computes a statistic again: {word}"


def test_an_older_folder_is_read_as_it_is_and_never_appended_to(tmp_path, capsys):
    """Issue 54: runs.csv's overhead_pct (against the baselines' median) went, for the answer's columns. A folder
    an older previewlab wrote still reads, every figure the analysis's, and the bench refuses to append to it
    before writing anything (its sweep.json included)."""
    from previewlab.bench.cli import main as bench_main
    from previewlab.bench.rows import SWEEP_COLUMNS
    from previewlab.preview.judging.analysis import findings
    from previewlab.preview.record.run import RUN_COLUMNS

    old = SWEEP_COLUMNS + RUN_COLUMNS + ("overhead_pct", "pair_overhead_pct", "node")
    d = tmp_path / "old"
    d.mkdir()
    ordered = runs()
    rows = [SweepRow(Config.of(name_of(rec.meta.preview), rec.meta.preview), role, 1, rec)  # type: ignore[arg-type]
            for role, rec, _ in ordered]
    with open(d / "runs.csv", "w", newline="") as f:
        w = csv.DictWriter(f, old, extrasaction="ignore")
        w.writeheader()
        w.writerows({**r.to_row(), "overhead_pct": "99.9", "pair_overhead_pct": "99.9"} for r in rows)
    (d / "steps.csv").write_text(",".join(STEPS_CSV_COLUMNS) + "\n")
    text = (d / "runs.csv").read_text()
    sweep = read(d)
    assert sweep.judging == Judging() and [r.run_id for r in sweep.runs] == [r.run_id for r in rows]
    assert findings(sweep.runs) == findings(rows)  # its old cells play no part
    assert bench_main(["--model", "synthetic:tiny", "--out", str(d)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "runs.csv: its columns differ from this version's" in err[0], err
    assert (d / "runs.csv").read_text() == text and not (d / "sweep.json").exists()

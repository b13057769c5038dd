"""The GPU check's dry run as the GPU machine would run it, on the CPU with synthetic:tiny: every row of its
table, each with a ratio, previews and skipped, and the profiler reference; its overheads are the bench's."""
from __future__ import annotations

import csv
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from previewlab.preview.judging.analysis import paired
from previewlab.bench.rows import SweepRow, read
from previewlab.bench.plan import Plan
from previewlab.bench.sweep import capped
from previewlab.preview.settings import PreviewSettings, RunSettings
from tests.conftest import previewlab_here

ROWS = ("engine, decoder none / bare diffusers call", "taesd every step, overlap / no previews",
        "vae every step: overlap overhead / sync overhead", "latent2rgb every step, overlap / no previews",
        "autopilot taesd, budget 10 % / no previews", "nvjpeg / turbojpeg, transfer+encode per preview",
        "nvjpeg every step, overlap / no previews", "hidden syncs in the step callback (overlap, live switches)",
        "sdxl 64 px, preview_max 32: taesd every step, sync, decode_at preview / full")
VIDEO_ROWS = ("wan21 5 frames: taesd first frame every step, overlap / no previews",
              "wan21 5 frames: taesd whole clip every step, overlap / no previews",
              "wan21 5 frames: latent2rgb whole clip every step, overlap / no previews",
              "wan21 5 frames: hidden syncs (overlap, live frames and decoder switches)")


def table_rows(text: str) -> dict[str, list[str]]:
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("check (A / B)"))
    rows = {}
    for ln in lines[start + 2:]:
        if ln.startswith("ratio:"):
            break
        cells = re.split(r"\s{2,}", ln.strip())
        rows[cells[0]] = cells[1:]
    return rows


@pytest.mark.slow
def test_dry_run_prints_every_row(tmp_path):
    p = previewlab_here("gpu-check", "--dry-run", "--steps", "4", "--repeats", "1", "--out", str(tmp_path))
    assert p.returncode == 0, p.stderr[-3000:]
    rows = table_rows(p.stdout)
    assert list(rows) == list(ROWS + VIDEO_ROWS), p.stdout
    # the clip rows (synthetic:tiny-wan21, its 3 steps): frames sent per run, 1 or the whole clip per preview
    measured = VIDEO_ROWS[:3]
    sent = {label: int(re.search(r"(\d+) frames sent", rows[label][1]).group(1)) for label in measured}  # type: ignore[union-attr]
    assert list(sent.values()) == [3, 15, 6] and all(rows[label][2] == "3/0" for label in measured), rows
    assert "not run: no CUDA device" in rows[VIDEO_ROWS[3]][1]
    not_run = ROWS[-4:-1]  # both nvjpeg rows and the hidden syncs need CUDA
    for label in ROWS[:-4] + ROWS[-1:]:
        ratio, figure, previews, skipped = rows[label]
        if ratio == "n/a":  # only a sync run that cost nothing leaves the overlap/sync ratio undefined
            assert label.startswith("vae") and re.search(r"sync [-+]0\.0 %|sync -", figure), figure
        else:
            assert float(ratio) > 0, (label, ratio)
        assert re.fullmatch(r"\d+/\d+", previews) and re.fullmatch(r"\d+/\d+", skipped), (label, previews, skipped)
    assert rows["taesd every step, overlap / no previews"][2] == "4/0"  # a preview after each of 4 steps
    assert rows["vae every step: overlap overhead / sync overhead"][2].endswith("/4")  # sync never skips
    assert all("not run: no CUDA device" in rows[label][1] for label in not_run), [rows[x] for x in not_run]
    # decode_at (tiny-xl, 3 steps): TAESD stops at the 32 px preview, one stage short of the 64 px image
    xl = rows[ROWS[-1]]
    assert xl[2] == "3/3" and re.search(r"decode [\d.]+ vs [\d.]+ ms/preview at 32x32 vs 64x64 px, on-path", xl[1]), xl
    with open(tmp_path / "steps.csv", newline="") as f:
        made = [r for r in csv.DictReader(f) if r["config"].startswith("xl-") and r["preview"] == "1"]
    sizes = {(r["config"], r["role"], r["decode_at"], r["decode_width"], r["preview_width"]) for r in made}
    assert sizes == {("xl-taesd/at-preview", role, "preview", "32", "32") for role in ("warmup", "config")} | \
        {("xl-taesd/at-full", role, "full", "64", "32") for role in ("warmup", "config")}, sizes
    assert re.search(r"^  denoise\s+4\s", p.stdout, re.M) and re.search(r"^  decode\s+4\s", p.stdout, re.M)
    summary = (tmp_path / "summary.txt").read_text()
    assert "torch " in summary and "diffusers " in summary and ROWS[0] in summary
    runs = (tmp_path / "runs.csv").read_text().splitlines()
    assert runs[0].startswith("config,role,repeat,run_id") and len(runs) > 10
    assert (tmp_path / "steps.csv").stat().st_size > 0


@pytest.mark.slow
def test_the_check_states_the_benchs_overhead_for_the_same_configuration(tiny, tmp_path, capsys):
    from previewlab.bench.cli import main as bench
    from previewlab.bench.gpu.arms import ARMS, DRY
    from previewlab.bench.gpu.figures import wall_row
    from previewlab.bench.gpu.measure import measure
    from previewlab.bench.summary import summarize
    from previewlab.bench.summary_rows import ConfigSummary

    # the dry run's path on TAESD every step (overlap), 64 px, 3 steps: 6 repeats give each side an interval. One
    # torch thread, as the dry run takes: two stall each other on a busy small machine
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        setup = replace(DRY, steps=3, repeats=6)
        m = measure(tiny, setup, setup.settings(), {"taesd/overlap": ARMS["taesd/overlap"]}, tmp_path / "check",
                    lambda _: None)
        assert bench(["--model", "synthetic:tiny", "--device", "cpu", "--threads", "1", "--decoders", "taesd",
                      "--every", "1", "--modes", "overlap", "--steps", "3", "--width", "64", "--height", "64",
                      "--repeats", "6", "--out", str(tmp_path / "bench")]) == 0
    finally:
        torch.set_num_threads(threads)
    capsys.readouterr()
    check = m.overhead("taesd/overlap")
    assert wall_row("taesd", m, "taesd/overlap")[1:3] == [f"{1 + check.value / 100:.3f}", f"overhead {check.signed()}"]
    # the figure is what the bench's summary makes of the check's own CSVs: each run against the baseline beside it
    done = read(tmp_path / "check")
    again = {r.config: r for r in summarize(done.runs, done.steps)}
    assert again["taesd/overlap"].overhead == check
    with open(tmp_path / "bench" / "summary.csv", newline="") as f:
        row = next(r for r in csv.DictReader(f) if r["config"] == "taesd/every1/overlap")
    sweep = ConfigSummary.from_row(row).overhead
    assert sweep is not None and check.lo is not None and check.hi is not None and sweep.lo is not None \
        and sweep.hi is not None
    assert check.lo <= sweep.hi and sweep.lo <= check.hi, (check.signed(), sweep.signed())


def test_alternate_repeats_keep_each_arm_beside_its_baseline_and_a_time_bound_stops_between_repeats():
    plan = Plan(RunSettings(steps=2), (), (), repeats=4, direct=True, alternate=True, runs_s=13.0,
                arms=(("a", PreviewSettings(decoder="taesd")), ("b", PreviewSettings(decoder="vae"))))
    slots = [(role, rep, plan.name(p)) for role, rep, p, _ in plan.schedule()]
    assert slots[:3] == [("warmup", 0, "none"), ("warmup", 0, "a"), ("warmup", 0, "b")]
    one, two = ([(role, name) for role, rep, name in slots if rep == r] for r in (1, 2))
    assert one == [("baseline", "none"), ("config", "a"), ("baseline", "none"), ("config", "b"), ("direct", "direct"),
                   ("baseline", "none")]
    # the even repeat: the arms in reverse order (alternate), each before its baseline (counterbalanced), the direct
    # call last, right before its own baseline
    assert two == [("config", "b"), ("baseline", "none"), ("config", "a"), ("baseline", "none"),
                   ("direct", "direct"), ("baseline", "none")]
    # the summary's rule pairs every arm with its own baseline, in either order: a's and b's walls only
    wall = {"none": 1.0, "a": 1.1, "b": 1.5, "direct": 0.9}
    rows = [SweepRow.from_row({"run_id": str(i), "config": name, "role": role, "first_run": "0",
                               "wall_s": str(wall[name])}) for i, (role, _, name) in enumerate(slots)]
    walls = {cfg: [(r.record.totals.wall_s, b.record.totals.wall_s) for r, b in ps] for cfg, ps in paired(rows).items()}
    assert walls == {"a": [(1.1, 1.0)] * 4, "b": [(1.5, 1.0)] * 4, "direct": [(0.9, 1.0)] * 4}
    # a fake clock: a measured run takes 1 s, a warm-up 100 s (not counted). Repeat 2 would end at 12 s, within
    # 13 s; repeat 3 at 18 s, past it
    now = [0.0]
    said: list[str] = []
    ran: list[int] = []
    for role, rep, _, _ in capped(plan.schedule(), plan, said.append, clock=lambda: now[0]):
        ran.append(rep)
        now[0] += 100.0 if role == "warmup" else 1.0
    assert ran == [0] * 3 + [1] * 6 + [2] * 6
    assert said == ["  repeat 1/4 done", "  repeat 2/4 done", "  stopping after 2 repeats: another would end past 13 s"]


def test_wheels_that_cannot_install_here_are_left_out_with_a_reason(tmp_path):
    import zipfile

    from previewlab.bench.gpu.wheelsite import why_not

    def wheel(name: str, requires: str) -> Path:
        p = tmp_path / name
        dist = "-".join(name.split("-")[:2])
        with zipfile.ZipFile(p, "w") as z:
            z.writestr(f"{dist}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: x\n{requires}\n")
        return p

    tv = wheel("torchvision-0.26.0-cp312-cp312-manylinux_2_28_x86_64.whl",
               "Requires-Dist: numpy\nRequires-Dist: torch (==2.11.0)\nRequires-Dist: scipy ; extra == 'scipy'")
    assert why_not(tv, "cp312", lambda k: {"torch": "2.11.0+cu130"}.get(k)) == ""
    assert why_not(tv, "cp312", lambda k: {"torch": "2.13.0+cpu"}.get(k)) == "needs torch==2.11.0, torch here is 2.13.0+cpu"
    assert why_not(tv, "cp311", lambda k: {"torch": "2.11.0"}.get(k)) == "built for cp312, this interpreter is cp311"
    pure = wheel("diffusers-0.42.1-py3-none-any.whl", "Requires-Dist: huggingface-hub<3.0,>=1.32.0")
    assert why_not(pure, "cp311", lambda k: None) == ""

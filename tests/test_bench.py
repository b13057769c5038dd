"""The bench as a user runs it on synthetic:tiny: its CSVs, its errors, and a kill mid-sweep. The command runs in
this process (previewlab_here) except where the test is about a process: the kill, the console script's help."""
from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from previewlab.preview.record.records import STEP_COLUMNS
from tests.conftest import previewlab_here

ROOT = Path(__file__).resolve().parents[1]
REQUIRED_STEP = ("run_id, step, timestep, preview, denoise_ms, decode_ms, sync_ms, transfer_ms, resize_ms, encode_ms, "
                 "bytes, decoder, every, encoder, quality, width, height, preview_width, preview_height").split(", ")



def rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_sweep_writes_csvs_and_summary(tmp_path):
    p = previewlab_here("bench", "--model", "synthetic:tiny", "--decoders", "none,latent2rgb,vae", "--every", "1,2", "--steps", "4",
              "--repeats", "2", "--warmup", "1", "--direct", "--out", str(tmp_path))
    assert p.returncode == 0, p.stderr
    runs, steps = rows(tmp_path / "runs.csv"), rows(tmp_path / "steps.csv")
    assert set(REQUIRED_STEP) <= set(steps[0]) and tuple(steps[0])[3:] == STEP_COLUMNS
    for col in ("wall_s", "baseline_run_id", "pair_overhead_pct", "config_overhead_pct", "verdict", "device_name", "dtype", "threads", "torch", "diffusers", "synthetic",
                "text_encode_ms", "denoise_ms", "final_decode_ms", "final_encode_ms", "write_ms", "first_run",
                "load_s", "other_ms", "previews", "bytes"):
        assert col in runs[0], col
    assert all(r["synthetic"] == "1" and r["model"] == "synthetic:tiny" for r in runs)
    # warm-up: none, latent2rgb, vae; then per repeat 4 configs x (baseline, config) + direct + baseline
    assert len(runs) == 3 + 2 * (4 * 2 + 2)
    assert [r["first_run"] for r in runs].count("1") == 1 and runs[0]["role"] == "warmup"
    roles = [r["role"] for r in runs[3:13]]
    assert roles == ["baseline", "config"] * 4 + ["direct", "baseline"]
    # counterbalanced: the second repeat runs each configuration before its baseline
    assert [r["role"] for r in runs[13:23]] == ["config", "baseline"] * 4 + ["direct", "baseline"]
    # runs.csv answers alone: each run with previews names its baseline (the one beside it, in either order), its
    # pair's overhead and its configuration's figure; the column nothing read is gone
    cfg = [r for r in runs if r["role"] == "config"]
    at = {r["run_id"]: i for i, r in enumerate(runs)}
    assert all(abs(at[r["baseline_run_id"]] - at[r["run_id"]]) == 1 and r["pair_overhead_pct"] != "" for r in cfg)
    assert all(r["config_overhead_n"] == "2" and r["verdict"] for r in cfg) and "overhead_pct" not in runs[0]
    assert all(r["baseline_run_id"] == "" and r["config_overhead_pct"] == "" for r in runs if r["role"] == "baseline")
    assert json.loads((tmp_path / "sweep.json").read_text()) == {"budget_pct": 5.0, "noise_limit_pct": 10.0,
                                                                 "min_fidelity_ssim": 0.5}
    vae1 = [r for r in cfg if r["config"] == "vae/every1/sync"]
    assert len(vae1) == 2 and all(int(r["previews"]) == 4 for r in vae1)
    every2 = [r for r in cfg if r["config"].endswith("/every2/sync")]
    assert len(every2) == 4 and all(int(r["previews"]) == 2 for r in every2)
    # every run's step rows are in steps.csv, with previews where the schedule says
    by_run: dict[str, list[dict[str, str]]] = {}
    for s in steps:
        by_run.setdefault(s["run_id"], []).append(s)
    for r in runs:
        if r["role"] != "direct":
            assert sum([int(s["preview"]) for s in by_run[r["run_id"]]]) == int(r["previews"])
    summary = (tmp_path / "summary.txt").read_text()
    assert "SYNTHETIC" in summary and "vae/every1" in summary and "vs direct" in summary
    assert "ms/frame" not in summary.splitlines()[2]  # an image sweep: no clip columns
    assert summary.splitlines()[0].startswith(("noise: the 10 no-preview baselines", "NOISY MACHINE: the 10"))
    assert "vae/every1" in p.stdout


@pytest.mark.parametrize("args,needle", [
    (("--decoders", "none,vqgan"), "unknown 'vqgan'; allowed are none, latent2rgb, taesd, vae"),
    (("--every", "0"), "every must be from 1"),
    (("--width", "65"), "multiple of 8"),
    (("--model", "/no/such/model"), "no such file or folder: /no/such/model"),
    (("--taesd", "/no/such/taesd.pth"), "no such file or folder"),
    (("--quality", "0"), "quality must be from 1 to 100"),
    (("--steps", "0"), "steps must be from 1 to 1000"),      # the limits are settings.py's, named as the flag
    (("--width", "4096"), "multiple of 8 from 64 to 2048"),
    (("--repeats", "0"), "repeats must be from 1 to 1000"),
    (("--frames", "first,1"), "a number of frames must be from 2 to 256 (use first or middle for one frame)"),
    (("--frames", "all"), "--frames and --num-frames are for a video model; synthetic:tiny makes images"),
    (("--num-frames", "300"), "--num-frames must be from 1 to 257"),
    (("--noise-limit", "0"), "noise-limit is a percent above 0, at most 100"),
    (("--threads", "0"), "threads must be from 1 to 1024"),
    (("--device", "tpu"), "'tpu': not a device; allowed are auto, cpu, cuda, mps, xpu"),
    pytest.param(("--device", "cuda"), "--device: 'cuda': torch sees no CUDA device here; allowed on this machine: "
                 "auto, cpu", marks=pytest.mark.skipif(torch.cuda.is_available(), reason="torch sees CUDA here")),
    (("--ray", "local", "--warmup", "0"), "--ray needs --warmup 1 or more: each unit loads its model on its node"),
    (("--ray", "local", "--trace", "t"), "--trace and --cprofile trace one run on this machine; leave them out with --ray"),
    (("--ray", "127.0.0.1:1"), "--ray 127.0.0.1:1: nothing answers at 127.0.0.1:1 (Connection refused)"),  # at once
    (("--ray", ":"), "argument --ray: ':': give auto, local, HOST:PORT or ray://HOST:PORT (a port from 1 to 65535)"),
    (("--ray", "localhost:notaport"), "'localhost:notaport': give auto, local, HOST:PORT or ray://HOST:PORT"),
])
def test_bad_flags_exit_2_with_one_line(args, needle, tmp_path):
    p = previewlab_here("bench", "--model", "synthetic:tiny", "--out", str(tmp_path), *args)
    assert p.returncode == 2
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0], p.stderr
    assert "Traceback" not in p.stderr


def test_help_documents_every_flag():
    p = previewlab_here("bench", "--help")
    for flag in ("--model", "--taesd", "--decoders", "--every", "--steps", "--width", "--height", "--seed", "--prompt",
                 "--repeats", "--warmup", "--device", "--dtype", "--encoder", "--quality", "--preview-max", "--out",
                 "--frames", "--num-frames", "--batch"):
        assert flag in p.stdout


@pytest.mark.slow
def test_killed_sweep_leaves_readable_csvs(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "previewlab", "bench", "--model", "synthetic:tiny", "--decoders", "vae",
                             "--every", "1", "--steps", "6", "--repeats", "50", "--out", str(tmp_path)],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    runs_csv = tmp_path / "runs.csv"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if runs_csv.exists() and len(runs_csv.read_text().splitlines()) >= 5:
            break
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    runs = rows(runs_csv)
    steps = rows(tmp_path / "steps.csv")
    assert len(runs) >= 4
    assert all(None not in r.values() and r["wall_s"] for r in runs)  # no torn row
    # every run listed has all of its step rows
    ids = {r["run_id"] for r in runs}
    for rid in ids:
        n = sum(1 for s in steps if s["run_id"] == rid)
        want = 3 if rid == runs[0]["run_id"] or rid == runs[1]["run_id"] else 6  # warm-up runs take 3 steps
        assert n == want


@pytest.mark.slow
def test_trace_and_cprofile_write_named_stages(tmp_path):
    p = previewlab_here("bench", "--model", "synthetic:tiny", "--decoders", "taesd", "--every", "1", "--modes", "sync", "--steps", "3",
              "--repeats", "1", "--warmup", "0", "--trace", str(tmp_path / "t"), "--cprofile", str(tmp_path / "c"),
              "--out", str(tmp_path / "o"))
    assert p.returncode == 0, p.stderr
    (trace,) = (tmp_path / "t").glob("trace-*.json")
    events = json.loads(trace.read_text())["traceEvents"]
    names = {e.get("name") for e in events}
    for stage in ("denoise", "decode", "resize", "sync", "transfer", "encode", "text_encode", "final_decode"):
        assert f"previewlab.{stage}" in names, stage
    assert sum(e.get("name") == "previewlab.decode" for e in events) == 3  # one per preview
    (prof,) = (tmp_path / "c").glob("cprofile-*.prof")
    import pstats

    assert any("generate" in fn[2] for fn in pstats.Stats(str(prof)).stats)  # type: ignore[attr-defined]
    summary = (tmp_path / "o" / "summary.txt").read_text()
    assert "trace: " in summary and "cprofile: " in summary and "untraced median" in summary  # cost reported apart
    runs = rows(tmp_path / "o" / "runs.csv")
    assert all(r["role"] in ("baseline", "config") for r in runs)  # traced runs never enter the statistics


@pytest.mark.slow
def test_dtype_and_channels_last_are_axes(tmp_path):
    p = previewlab_here("bench", "--model", "synthetic:tiny", "--decoders", "latent2rgb", "--every", "2", "--steps", "2",
              "--repeats", "1", "--warmup", "0", "--dtype", "float32,bfloat16", "--channels-last", "off,on",
              "--out", str(tmp_path))
    assert p.returncode == 0, p.stderr
    runs = rows(tmp_path / "runs.csv")
    combos = {(r["dtype"], r["channels_last"]) for r in runs}
    assert combos == {("float32", "0"), ("float32", "1"), ("bfloat16", "0"), ("bfloat16", "1")}
    assert any(r["config"].startswith("[bfloat16 offload=none compile=none cl=on] latent2rgb") for r in runs)


@pytest.mark.slow
def test_offload_needs_a_gpu_and_says_so(tmp_path):
    p = previewlab_here("bench", "--model", "synthetic:tiny", "--device", "cpu", "--offload", "model", "--out",
                        str(tmp_path))
    assert p.returncode == 2 and "needs a CUDA device" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.slow
def test_load_tool_runs_a_bounded_crowd(tmp_path):
    p = previewlab_here("load", "--model", "synthetic:tiny", "--clients", "3", "--steps", "3", "--pairs", "1",
              "--out", str(tmp_path))
    assert p.returncode == 0, p.stderr
    result = json.loads((tmp_path / "load.json").read_text())
    crowd = [r for r in result["results"] if r["crowd"] == 3]
    assert len(crowd) == 1 and crowd[0]["frames_delivered"] == 3 * 3 and crowd[0]["reconnects"] >= 1
    assert "wall: one client" in p.stdout


@pytest.mark.slow
def test_a_video_sweep_compares_first_middle_and_all(tmp_path):
    """Issue 22: a video model's default sweep is the frames axis at every step, against no previews."""
    p = previewlab_here("bench", "--model", "synthetic:tiny-wan21", "--decoders", "none,latent2rgb,vae", "--steps", "2",
                   "--repeats", "1", "--out", str(tmp_path))
    assert p.returncode == 0, p.stderr[-2000:]
    assert "x 5 frames" in p.stderr.splitlines()[0]
    with open(tmp_path / "runs.csv", newline="") as f:
        runs = [r for r in csv.DictReader(f) if r["role"] == "config"]
    by = {r["config"]: r for r in runs}
    assert set(by) == {f"{d}/every1/sync/frames-{f}" for d in ("latent2rgb", "vae") for f in ("first", "middle", "all")}
    # frames sent in the run's 2 previews: one each, or the whole clip (5 frames decoded, 2 latent ones projected)
    assert {c: int(r["frames_sent"]) for c, r in by.items()} == {
        "latent2rgb/every1/sync/frames-first": 2, "latent2rgb/every1/sync/frames-middle": 2,
        "latent2rgb/every1/sync/frames-all": 4, "vae/every1/sync/frames-first": 2,
        "vae/every1/sync/frames-middle": 2, "vae/every1/sync/frames-all": 10}
    assert all(r["num_frames"] == "5" for r in runs)
    head = (tmp_path / "summary.txt").read_text().splitlines()[2]
    assert "frames" in head and "ms/frame" in head and "KB/prev" in head


def test_a_sweep_of_one_first_run_writes_its_summary_and_says_why_it_is_empty(tmp_path):
    """Issue 23, item 4: --repeats 1 --warmup 0 died with IndexError, its only run being the first after the load."""
    p = previewlab_here("bench", "--model", "synthetic:tiny", "--decoders", "none", "--repeats", "1", "--warmup", "0",
                   "--steps", "2", "--out", str(tmp_path))
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr[-2000:]
    summary = (tmp_path / "summary.txt").read_text()
    assert "no figures: every run of this sweep was a warm-up or the first run after the model loaded" in summary
    assert (tmp_path / "summary.csv").read_text().strip() == "config"


@pytest.mark.slow
def test_a_noisy_sweep_says_so_first_and_last_and_strict_fails_it(tmp_path):
    """Issue 23, item 2: with the limit set below any real machine's spread, the summary's first line names the
    spread and the remedies, the bench's last line points at it, and --strict exits 3; the figures are still
    written. Issue 56: the NOISY MACHINE line is said once (it was three times: the summary's first line, the
    advice under it, and the last line)."""
    p = previewlab_here("bench", "--model", "synthetic:tiny", "--decoders", "none,latent2rgb", "--every", "1", "--steps", "2",
                   "--repeats", "3", "--noise-limit", "0.001", "--strict", "--threads", "1", "--out", str(tmp_path))
    assert p.returncode == 3, p.stderr[-2000:]
    first = (tmp_path / "summary.txt").read_text().splitlines()[0]
    assert first.startswith("NOISY MACHINE: the 3 no-preview baselines spread") and "over the 0.001 % limit" in first
    assert "more --repeats, a quiet machine (no other jobs), or fewer torch threads than cores (--threads N, with taskset to pin them)" in first
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("previewlab bench: a noisy machine (the baselines spread ") and last.endswith(
        "past --noise-limit 0.001 %): the summary's first line says what that means and what to do; exit 3 (--strict)")
    assert p.stdout.splitlines()[0] == first and "latent2rgb/every1/sync" in p.stdout
    assert (p.stdout + p.stderr).count("NOISY MACHINE") == 1 and (tmp_path / "summary.txt").read_text().count(
        "NOISY MACHINE") == 1
    runs = rows(tmp_path / "runs.csv")
    assert {r["threads"] for r in runs} == {"1"}  # --threads pinned torch's CPU threads


@pytest.mark.slow
def test_decode_at_is_an_axis_whose_rows_say_where_the_decoder_stopped(tmp_path):
    """Issue 24, item 4: --decode-at sweeps where a decoder stops. synthetic:tiny's TAE has one upsampling stage
    (its latents are at 1/2): at a preview_max of a quarter of the image, taesd at preview leaves it out and
    makes half the side, at full it makes the image's size; both are resized to the quarter that is sent."""
    p = previewlab_here("bench", "--model", "synthetic:tiny", "--decoders", "none,taesd", "--every", "1", "--steps", "2",
                   "--repeats", "1", "--warmup", "1", "--preview-max", "16", "--decode-at", "preview,full",
                   "--out", str(tmp_path))
    assert p.returncode == 0, p.stderr[-2000:]
    runs = [r for r in rows(tmp_path / "runs.csv") if r["role"] == "config"]
    assert sorted(r["config"] for r in runs) == ["taesd/every1/sync/at-full", "taesd/every1/sync/at-preview"]
    ids = {r["run_id"]: r["config"] for r in runs}
    assert {r["config"]: r["decode_at"] for r in runs} == {"taesd/every1/sync/at-full": "full",
                                                          "taesd/every1/sync/at-preview": "preview"}
    made = {(ids[s["run_id"]], s["decode_at"], s["decode_width"], s["preview_width"])
            for s in rows(tmp_path / "steps.csv") if s["run_id"] in ids and s["preview"] == "1"}
    assert made == {("taesd/every1/sync/at-preview", "preview", "32", "16"),
                    ("taesd/every1/sync/at-full", "full", "64", "16")}
    summary = (tmp_path / "summary.txt").read_text()
    assert "preview_max 16" in summary.splitlines()[1] and "at-preview" in summary

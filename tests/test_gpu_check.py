"""The GPU check's dry run as the GPU machine would run it, on the CPU with synthetic:tiny: every row of its
table, each with a ratio, previews and skipped, and the profiler reference."""
from __future__ import annotations

import csv
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
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


def test_dry_run_prints_every_row(tmp_path):
    p = subprocess.run([sys.executable, "-m", "previewlab.bench.gpu.check", "--dry-run", "--steps", "4", "--repeats", "1",
                        "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=300)
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

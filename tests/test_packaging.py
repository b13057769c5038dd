"""The wheel carries what an installed previewlab needs: the page's files, the demo model, the single-file configs."""
from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_wheel_serves_the_page_from_any_folder(tmp_path):
    """Issue 20, item 1: the wheel held preview, bench and server but not web/, so an installed server stopped at
    start-up ("Directory .../site-packages/web does not exist")."""
    shutil.rmtree(ROOT / "build", ignore_errors=True)  # setuptools' scratch: a stale copy must not reach the wheel
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", ".", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp_path)], cwd=ROOT, check=True, capture_output=True)
    wheel = next(tmp_path.glob("previewlab-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for shipped in ("web/index.html", "web/app.js", "web/style.css", "web/vendor/uPlot.iife.min.js",
                    "preview/models/demo_model/model_index.json",
                    "preview/models/single_file_configs/v1/model_index.json"):
        assert f"previewlab/{shipped}" in names, shipped
    # issue 20, item 3: one import name; nothing claims server, bench or preview in site-packages
    assert {n.split("/")[0] for n in names if not n.startswith("previewlab-")} == {"previewlab"}
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    # from another folder, with the unpacked wheel first on the path: the page is found inside it
    out = subprocess.run([sys.executable, "-c", "import previewlab.server.app as a; print(a.__file__); print(a.WEB)"],
                         cwd=tmp_path, env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == [str(site / "previewlab" / "server" / "app.py"), str(site / "previewlab" / "web")]


def test_one_console_command_lists_and_runs_its_subcommands():
    """Issue 20, item 2: `previewlab --help` lists every subcommand; each keeps its own flags; a wrong name is
    one line that names the commands there are."""
    from tests.conftest import previewlab

    listing = previewlab("--help", timeout=60)
    assert listing.returncode == 0
    names = [line.split()[0] for line in listing.stdout.splitlines() if line.startswith("  ")]
    assert names == ["serve", "bench", "report", "compare", "load", "gpu-check", "train-demo"]
    serve = previewlab("serve", "--help", timeout=60)
    assert serve.returncode == 0 and serve.stdout.startswith("usage: previewlab serve") and "--keep-runs" in serve.stdout
    wrong = previewlab("sever", timeout=60)
    assert wrong.returncode == 2 and wrong.stdout == ""
    assert wrong.stderr == ("previewlab: unknown command 'sever'; the commands are serve, bench, report, compare, "
                            "load, gpu-check, train-demo\n")

"""The Makefile's targets as the README names them: what `make -n` would run, in a copy of the Makefile whose
.venv is as `make serve` left it (the product installed, the test tools not)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def after_make_serve(tmp_path: Path) -> Path:
    """A folder holding the Makefile and pyproject.toml, with the stamp `make serve` leaves and no other."""
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / ".venv").mkdir()
    stamp = tmp_path / ".venv" / ".installed-run"
    stamp.touch()
    later = time.time() + 60  # newer than pyproject.toml: the product's install is up to date
    os.utime(stamp, (later, later))
    return tmp_path


def dry_run(folder: Path, *args: str) -> list[str]:
    """The recipe lines make would run, in order."""
    p = subprocess.run(["make", "-n", "-C", str(folder), *args], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return [ln for ln in p.stdout.splitlines() if not ln.startswith("make")]


def test_make_serve_takes_a_port(after_make_serve):
    """Issue 45, item 14: `make serve PORT=8001` was ignored; the page listened on 8000 whatever was asked."""
    assert dry_run(after_make_serve, "serve", "PORT=8001")[-1].endswith("serve --model demo --port 8001")
    assert dry_run(after_make_serve, "serve", "PORT=0")[-1].endswith("--port 0")
    assert dry_run(after_make_serve, "serve")[-1].endswith("serve --model demo --port 8000")  # the README's URL


def test_the_readmes_test_commands_install_the_test_tools_first(after_make_serve):
    """Issue 45, item 16: after `make serve`, the README's quick loop (`.venv/bin/python -m pytest ...`) failed
    with "No module named pytest": only `make test` installed the test tools. Each test command the README
    names installs them before pytest runs."""
    readme = (ROOT / "README.md").read_text()
    (tests_paragraph,) = re.findall(r"^Tests: (.*?)\n\n", readme + "\n\n", re.S | re.M)
    commands = [c for c in re.findall(r"`([^`]+)`", tests_paragraph) if "pytest" in c or c.startswith("make ")]
    assert "make test" in commands and len(commands) >= 2, commands  # CI's and the quick loop
    for command in commands:
        assert command.startswith("make "), f"{command!r} runs pytest without installing it"
        lines = dry_run(after_make_serve, *command.split()[1:])
        install = next((i for i, ln in enumerate(lines) if "install" in ln and "'.[test]'" in ln), None)
        run = next((i for i, ln in enumerate(lines) if "-m pytest" in ln), None)
        assert install is not None and run is not None and install < run, (command, lines)
    (quick,) = [c for c in commands if c != "make test"]
    assert '-m "not slow"' in dry_run(after_make_serve, *quick.split()[1:])[-1]  # the quick loop leaves them out

"""python -m previewlab.bench.gpu.wheelsite FOLDER: the wheels in FOLDER that this interpreter can use, one path a line.

.whl/ holds what the GPU machine lacks, for its CPython 3.12 (bench/gpu/gpu_wheels.sh). A binary wheel for another
interpreter cannot install, and one pinned to another version of an installed package (torchvision pins its
torch) would break at import: both are left out, each with its reason on stderr, so a dry run elsewhere still
installs the rest. Standard library only: it runs before anything is installed.
"""
from __future__ import annotations

import importlib.metadata
import re
import sys
import zipfile
from pathlib import Path
from typing import Callable

PIN = re.compile(r"^Requires-Dist:\s*([A-Za-z0-9_.-]+)\s*\(?\s*==\s*([^\s,;)]+)\s*\)?\s*$")


def pins(metadata: str) -> dict[str, str]:
    """Exact pins without markers or extras: {"torch": "2.11.0"} from "Requires-Dist: torch (==2.11.0)"."""
    out = {}
    for line in metadata.splitlines():
        m = PIN.match(line.strip())
        if m:
            out[m.group(1).lower().replace("_", "-")] = m.group(2)
    return out


def installed(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def why_not(wheel: Path, python_tag: str, version_of: Callable[[str], str | None] = installed) -> str:
    """"" when the wheel fits this interpreter and what is installed, else the reason it does not."""
    parts = wheel.name[:-len(".whl")].split("-")
    py_tags = set(parts[-3].split("."))
    if not py_tags & {"py3", "py2.py3", python_tag}:
        return f"built for {parts[-3]}, this interpreter is {python_tag}"
    with zipfile.ZipFile(wheel) as z:
        meta = next((n for n in z.namelist() if n.endswith(".dist-info/METADATA")), None)
        text = z.read(meta).decode("utf-8", "replace") if meta else ""
    for name, want in pins(text).items():
        have = version_of(name)
        # a local label (+cu130, +cpu) is the build, not the release the pin names
        if have is not None and have.split("+")[0] != want:
            return f"needs {name}=={want}, {name} here is {have}"
    return ""


def main(argv: list[str]) -> int:
    folder = Path(argv[0] if argv else ".whl")
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    for w in sorted(folder.glob("*.whl")):
        reason = why_not(w, tag)
        if reason:
            print(f"gpu_check: not installing {w.name}: {reason}", file=sys.stderr)
        else:
            print(w)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

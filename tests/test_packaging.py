"""The wheel carries what an installed previewlab needs: the page's files, the demo model, the single-file configs;
and the Python it claims is the one its code needs."""
from __future__ import annotations

import ast
import functools
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path
from typing import Iterator, NamedTuple

import mypy
import pytest

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# typeshed, as the type check reads the standard library: which Python first has each module, and each name
TYPESHED = Path(mypy.__file__).parent / "typeshed" / "stdlib"
Version = tuple[int, int]


class Installed(NamedTuple):
    clone: Path            # the checkout the wheel was built from
    names: set[str]        # the wheel's files
    site: Path             # the folder it was installed into
    found: dict[str, str]  # where the installed package finds its modules and its page, from another folder


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """A clone made without symbolic links (core.symlinks=false, Git for Windows' default), as a fresh clone
    builds it (no build/ or *.egg-info/ of the checkout's), built into a wheel and installed from it into a
    folder of its own; what the installed package's modules resolve to, read from another folder."""
    tmp = tmp_path_factory.mktemp("installed")
    clone, site = tmp / "clone", tmp / "site"
    subprocess.run(["git", "-c", "core.symlinks=false", "clone", "-q", str(ROOT), str(clone)], check=True)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", ".", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp)], cwd=clone, check=True, capture_output=True)
    wheel = next(tmp.glob("previewlab-*.whl"))
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--disable-pip-version-check",
                           "--target", str(site), str(wheel)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    code = ("import previewlab.preview.call.engine as e, previewlab.server.app as a, previewlab.bench.cli as b; "
            "print(e.__file__); print(a.__file__); print(b.__file__); print(a.WEB)")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp, capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(site)})
    assert out.returncode == 0, out.stderr[-2000:]
    found = dict(zip(("engine", "app", "cli", "web"), out.stdout.split()))
    return Installed(clone, set(zipfile.ZipFile(wheel).namelist()), site, found)


@pytest.mark.slow
def test_the_wheel_serves_the_page_from_any_folder(installed: Installed) -> None:
    """Issue 20, item 1: the wheel held preview, bench and server but not web/, so an installed server stopped at
    start-up ("Directory .../site-packages/web does not exist")."""
    names = installed.names
    for shipped in ("web/index.html", "web/app.js", "web/style.css", "web/vendor/uPlot.iife.min.js",
                    "preview/models/demo_model/model_index.json",
                    "preview/models/single_file_configs/v1/model_index.json"):
        assert f"previewlab/{shipped}" in names, shipped
    # issue 45, item 15: the wheel left out web/favicon.svg (package-data listed html, js and css) and the
    # installed server answered /favicon.ico with a 500. Every file of the page travels, whatever its kind
    page = subprocess.run(["git", "ls-files", "previewlab/web"], cwd=installed.clone, capture_output=True,
                          text=True, check=True).stdout
    missing = [f for f in page.split() if f not in names]
    assert "previewlab/web/favicon.svg" in page.split() and missing == [], missing
    # issue 20, item 3: one import name; nothing claims server, bench or preview in site-packages
    assert {n.split("/")[0] for n in names if not n.startswith("previewlab-")} == {"previewlab"}
    # from another folder, with the installed package first on the path: the page is found inside it
    site = installed.site
    assert (installed.found["app"], installed.found["web"]) == (str(site / "previewlab" / "server" / "app.py"),
                                                                str(site / "previewlab" / "web"))
    # the installed server answers the browser's icon request with the icon
    ask = ("from starlette.testclient import TestClient\n"
           "from previewlab.preview.models import load\n"
           "from previewlab.server.app import build_app\n"
           "from previewlab.server.server import Server\n"
           "from previewlab.server.http.guard import Access\n"
           "srv = Server(load('synthetic:tiny', device='cpu'), 'runs', access=Access(hosts=('testserver',)))\n"
           "with TestClient(build_app(srv)) as c:\n"
           "    r = c.get('/favicon.ico')\n"
           "    print(r.status_code, r.headers['content-type'], r.content[:4])\n")
    icon = subprocess.run([sys.executable, "-c", ask], cwd=site.parent, capture_output=True, text=True,
                          env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"})
    assert icon.stdout.split() == ["200", "image/svg+xml", "b'<svg'"], icon.stderr[-2000:]


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


def _version(text: str) -> Version:
    major, minor = text.strip().split(".")[:2]
    return int(major), int(minor)


@functools.cache
def _module_since() -> dict[str, Version]:
    """The first Python with each standard module ("tomllib: 3.11-" in typeshed's VERSIONS)."""
    since = {}
    for line in (TYPESHED / "VERSIONS").read_text().splitlines():
        if line := line.partition("#")[0].strip():
            name, span = line.split(":")
            since[name.strip()] = _version(span.partition("-")[0])
    return since


def _module_needs(module: str) -> Version | None:
    """The first Python with `module` (its own entry, else its package's), None when it is not a standard one."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in _module_since():
            return _module_since()[".".join(parts[:n])]
    return None


def _at_least(test: ast.expr) -> Version | None:
    """(3, N) for a stub's `sys.version_info >= (3, N)`, else None."""
    if (isinstance(test, ast.Compare) and isinstance(test.ops[0], ast.GtE)
            and ast.unparse(test.left) == "sys.version_info" and isinstance(test.comparators[0], ast.Tuple)):
        return _version(".".join(ast.unparse(e) for e in test.comparators[0].elts))
    return None


def _defines(node: ast.stmt) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    if isinstance(node, ast.ImportFrom):
        return [a.asname or a.name for a in node.names]
    return []


@functools.cache
def _names_since(module: str) -> dict[str, Version]:
    """Each name typeshed's stub of `module` defines at its top level, with the first Python that has it: a name
    under `if sys.version_info >= (3, N)` is N's; a star import from a submodule (asyncio's) counts as its own."""
    base = TYPESHED.joinpath(*module.split("."))
    stub = next((p for p in (base / "__init__.pyi", base.with_suffix(".pyi")) if p.is_file()), None)
    if stub is None:
        return {}
    package = module if stub.name == "__init__.pyi" else module.rpartition(".")[0]
    since: dict[str, Version] = {}

    def add(name: str, version: Version) -> None:
        since[name] = min(since.get(name, version), version)

    def visit(body: list[ast.stmt], floor: Version) -> None:
        for node in body:
            if isinstance(node, ast.If):
                visit(node.body, max(floor, _at_least(node.test) or floor))
                visit(node.orelse, floor)
            elif isinstance(node, ast.ImportFrom) and node.names[0].name == "*":
                parent = package.rsplit(".", node.level - 1)[0] if node.level else ""
                source = ".".join(p for p in (parent, node.module or "") if p)
                for name, version in _names_since(source).items():
                    add(name, max(floor, version))
            else:
                for name in _defines(node):
                    add(name, floor)

    visit(ast.parse(stub.read_text()).body, (3, 0))
    return since


def _installed_modules() -> Iterator[Path]:
    """The .py files of every package pyproject installs."""
    for package in PYPROJECT["tool"]["setuptools"]["packages"]:
        yield from sorted(ROOT.joinpath(*package.split(".")).glob("*.py"))


def _needs(path: Path) -> Iterator[tuple[Version, str]]:
    """(the Python it needs, where and what) for each use in `path` of a standard module, of a name imported from
    or read off one, and of `except*`."""
    tree = ast.parse(path.read_text(), str(path))
    imported: dict[str, str] = {}  # the name `import M` or `import M as X` binds -> M
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                imported[a.asname or a.name.partition(".")[0]] = a.name if a.asname else a.name.partition(".")[0]
    for node in ast.walk(tree):
        at = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"
        used: list[tuple[Version | None, str]] = []
        if isinstance(node, ast.Import):
            used = [(_module_needs(a.name), f"import {a.name}") for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            used = [(_module_needs(node.module), f"from {node.module}")]
            used += [(_names_since(node.module).get(a.name), f"from {node.module} import {a.name}") for a in node.names]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in imported:
            used = [(_names_since(imported[node.value.id]).get(node.attr), f"{imported[node.value.id]}.{node.attr}")]
        elif isinstance(node, ast.TryStar):
            used = [((3, 11), "except*")]
        yield from ((version, f"{at}: {what}") for version, what in used if version is not None)


@pytest.mark.slow
def test_the_python_the_package_claims_is_the_one_its_code_needs():
    """Issue 44, item 6: pyproject claimed Python >= 3.10 while preview/call/callback.py imports typing.Unpack (3.11), so
    previewlab.watch() failed on 3.10. The claim, the type check's version and the code's needs agree: nothing in
    the installed code needs a newer Python than the claim (the type check reads it as the claim's), and something
    needs the claim's own, so an older one would fail."""
    claim = re.fullmatch(r">=\s*(\d+\.\d+)", PYPROJECT["project"]["requires-python"].strip())
    assert claim is not None, "requires-python is a lower bound alone: >=3.N"
    floor = _version(claim[1])
    assert _version(PYPROJECT["tool"]["mypy"]["python_version"]) == floor  # the type check reads the code as the floor
    needs = [need for path in _installed_modules() for need in _needs(path)]
    assert len({where for _, where in needs}) > 100  # the scan read the package, not an empty folder
    newer = [f"{where} ({v[0]}.{v[1]})" for v, where in needs if v > floor]
    assert newer == [], f"requires-python says >={claim[1]}, but these need a newer Python: {newer}"
    at_floor = [where for v, where in needs if v == floor]
    assert at_floor, (f"nothing in the package needs Python {claim[1]}: requires-python (and mypy's python_version) "
                      "could be lowered, once an interpreter that old has run the tests")


@pytest.mark.slow
def test_a_checkout_without_symbolic_links_installs(installed: Installed) -> None:
    """Issue 57, item 1: Git for Windows checks a link out as a small text file, and `pip install .` then failed
    (previewlab/preview "is not a directory"). The repository holds no link now, so such a clone is the
    checkout itself: it installs, and the installed package serves its page from where it was installed."""
    modes = subprocess.run(["git", "ls-files", "-s"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert not [line for line in modes.splitlines() if line.startswith("120000")]  # no symbolic link tracked
    pkg = installed.site / "previewlab"
    assert installed.found == {"engine": str(pkg / "preview" / "call" / "engine.py"),
                               "app": str(pkg / "server" / "app.py"), "cli": str(pkg / "bench" / "cli.py"),
                               "web": str(pkg / "web")}
    assert (pkg / "web" / "index.html").is_file() and not (installed.site / "tests").exists()


def test_the_readme_states_the_torch_range_that_is_tested():
    """Issue 45, item 17: `pip install .` on a CPU machine pulled PyPI's CUDA torch (5.8 GB), and pyproject
    claimed torch>=2.4, which nothing ran (the code calls torch.accelerator's memory counters, 2.9's). The
    README says how to install the CPU or the CUDA build first and states the range pyproject declares; the
    range starts at the oldest torch something here runs or is made for, and holds every one of them."""
    from packaging.requirements import Requirement
    from packaging.version import Version

    import torch

    (declared,) = [Requirement(d) for d in PYPROJECT["project"]["dependencies"] if Requirement(d).name == "torch"]
    readme = (ROOT / "README.md").read_text()
    stated = re.findall(r"previewlab takes `(torch[^`]*)`", readme)
    assert stated == [str(declared)], f"README states {stated}, pyproject declares {declared}"
    assert re.search(r"pip install torch==\S+ --index-url https://download\.pytorch\.org/whl/cpu", readme)
    assert re.search(r"pip install torch==\S+ --index-url https://download\.pytorch\.org/whl/cu\d+", readme)
    # what runs: the installed torch, the pins of the Makefile, CI's wheel check, the GPU dry run and the
    # README's install commands, and the GPU machine's torch that the GPU check is made for
    pinned = {f"{path}: {v}": Version(v) for path in ("Makefile", ".ci/wheel_check", "previewlab/bench/gpu/gpu_dryrun_bare.sh",
                                                     "README.md")
              for v in re.findall(r"torch==([\d.]+)", (ROOT / path).read_text())}
    gpu = re.search(r"pinned to torch ([\d.]+) like the GPU machine's", (ROOT / "previewlab/bench/gpu/gpu_wheels.sh").read_text())
    assert gpu and {k.split(":")[0] for k in pinned} == {"Makefile", ".ci/wheel_check", "previewlab/bench/gpu/gpu_dryrun_bare.sh",
                                                          "README.md"}
    runs = {**pinned, "the GPU machine": Version(gpu[1]), "installed": Version(torch.__version__.split("+")[0])}
    outside = [k for k, v in runs.items() if v not in declared.specifier]
    assert outside == [], f"{declared} leaves out torch that runs here: {outside}"
    floors = [Version(s.version) for s in declared.specifier if s.operator == ">="]
    assert floors == [min(runs.values())], f"{declared} should start at {min(runs.values())}, the oldest that runs"

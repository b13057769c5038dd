"""What a worker stands in for the hub with: the repository's offline helpers (tests/tiny_pipes.py,
tests/tiny_hooks.py), the error for a hub load that has no stand-in, and the notes of what it stood in for."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any


class NoStandIn(RuntimeError):
    """A hub load inside the test's components that has no offline stand-in here: the case is not built."""


STOOD_IN: list[str] = []  # what this worker stood in for (hub loads served offline, ...), in order: notes


def repo() -> Path:
    """The checkout previewlab runs from: its tests/ folder, its git commit, the workers' working folder."""
    import previewlab

    return Path(previewlab.__file__).resolve().parent.parent


def load_helpers() -> tuple[Any, Any]:
    """The repository's tests/tiny_pipes.py and tests/tiny_hooks.py, loaded by path as tests.tiny_pipes and
    tests.tiny_hooks under diffusers' own `tests` package (the worker imports diffusers' tests as `tests`:
    two of their files import themselves absolutely), so that tiny_hooks' `from tests import tiny_pipes` finds it."""
    import importlib.util

    import tests as package

    loaded = []
    for name in ("tiny_pipes", "tiny_hooks"):
        full = f"tests.{name}"
        if full not in sys.modules:
            path = repo() / "tests" / f"{name}.py"
            if not path.is_file():
                raise NoStandIn(f"the repository's tests/{name}.py is not here (offline tokenizers and recipes)")
            spec = importlib.util.spec_from_file_location(full, path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[full] = module
            setattr(package, name, module)
            spec.loader.exec_module(module)
        loaded.append(sys.modules[full])
    return loaded[0], loaded[1]

"""The worker's process: offline, one thread, quiet, diffusers' tests importable as `tests`, the hub's loads served
by stand-ins; a time limit (signal.alarm) that names the phase it ran out in; the same random state before every
call."""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from previewlab.bench.survey import stand_ins


class OverTime(BaseException):
    """The case's time limit (signal.alarm). A BaseException, so that no `except Exception` inside a pipeline or
    a preview swallows it."""


_phase = "start"  # what the worker does now: what its time limit and its errors name


def enter(phase: str) -> None:
    """The worker now does `phase`: import, build, plain call, the watched call with vae, ..."""
    global _phase
    _phase = phase


def phase() -> str:
    return _phase


def _alarm(signum: int, frame: Any) -> None:
    raise OverTime(_phase)


def _stub_test_only_modules() -> None:
    """diffusers' tests import `parameterized` and `requests_mock` (not installed here) for tests this survey does
    not run: stand-ins that import."""
    import importlib.util
    import types

    if importlib.util.find_spec("requests_mock") is None:
        sys.modules["requests_mock"] = types.ModuleType("requests_mock")
    if importlib.util.find_spec("parameterized") is not None:
        return

    class parameterized:  # noqa: N801
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

        def __call__(self, f: Any) -> Any:
            return f

        @staticmethod
        def expand(*args: Any, **kwargs: Any) -> Any:
            return lambda f: f

    module = types.ModuleType("parameterized")
    module.parameterized = parameterized  # type: ignore[attr-defined]
    module.param = lambda *a, **k: (a, k)  # type: ignore[attr-defined]
    sys.modules["parameterized"] = module


OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "TRANSFORMERS_VERBOSITY": "error", "DIFFUSERS_VERBOSITY": "error", "OMP_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONWARNINGS": "ignore"}


def prepare(tests: Path) -> None:
    """The worker's process: offline, one thread, quiet; diffusers' tests importable as `tests`. The environment
    (OFFLINE) is set before huggingface_hub is imported: it reads HF_HUB_OFFLINE once, at import."""
    import signal
    import warnings

    os.environ.update(OFFLINE)
    warnings.filterwarnings("ignore")
    sys.path.insert(0, str(tests.parent))
    for cached in [m for m in sys.modules if m == "tests" or m.startswith("tests.")]:
        del sys.modules[cached]  # a `tests` package imported from elsewhere
    import torch

    torch.set_num_threads(1)
    from diffusers.utils import logging as dlog
    from transformers.utils import logging as tlog

    dlog.set_verbosity_error()
    tlog.set_verbosity_error()
    _stub_test_only_modules()
    stand_ins.install()
    signal.signal(signal.SIGALRM, _alarm)


def seed() -> None:
    """The same global random state before every call: only the call's own generator and this make its noise."""
    import random

    import numpy as np
    import torch

    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)

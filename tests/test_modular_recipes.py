"""tests/tiny_hooks.py's Krea 2, Krea 2 Turbo and ERNIE-Image Modular recipes (the survey's parts for them): each
builds offline, its plain call makes a 64 px image, bit-identically twice, and its scheduler steps the latents in the
pipeline's own layout: Krea 2's packed 2x2 tokens (B, h/2 * w/2, 4 x 16), ERNIE-Image's patchified in place
(B, 4 x 32, h/2, w/2), h and w at 1/8."""
from __future__ import annotations

import numpy as np
import pytest

from tests.tiny_hooks import _counted, _run, build

pytestmark = pytest.mark.filterwarnings("ignore")

STEPPED = {"krea2_modular": (1, 16, 64), "krea2_turbo_modular": (1, 16, 64), "ernie_image_modular": (1, 128, 4, 4)}


@pytest.mark.parametrize("name", list(STEPPED))
def test_recipe_builds_and_calls(name: str) -> None:
    tiny = build(name)
    _, out = _run(tiny)
    calls, again = _counted(tiny)
    assert [a.shape for a in out] == [(1, 64, 64, 3)]
    assert np.array_equal(out[0], again[0])
    assert [(who, shape) for who, _, shape in calls] == [("scheduler", STEPPED[name])] * 2

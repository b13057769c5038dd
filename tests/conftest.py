from __future__ import annotations

import pytest

from preview.models import Model, load


@pytest.fixture(scope="session")
def tiny() -> Model:
    return load("synthetic:tiny", device="cpu")


@pytest.fixture(scope="session")
def tiny_xl() -> Model:
    return load("synthetic:tiny-xl", device="cpu")

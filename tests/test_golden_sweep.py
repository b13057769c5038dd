"""Issue 44: rebuilding the middle changes no figure. A fixed sweep on a fake clock (tests/golden_sweep.py) gives the
same runs.csv, steps.csv, summary, advice and report figures as the code gave before the rebuild (the golden
file was written at commit 8b67670, the last before it, and this code gave it byte for byte). When a change
means to move a figure, write the file again with `python tests/golden_sweep.py tests/data/golden_sweep.json`
and say why in the commit."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.golden_sweep import digest

GOLDEN = Path(__file__).parent / "data" / "golden_sweep.json"


@pytest.mark.slow  # 28 runs of the tiny model
def test_a_fixed_sweep_on_a_fake_clock_gives_the_same_csvs_summary_advice_and_report():
    got = json.loads(json.dumps(digest(), sort_keys=True))  # as the file holds it: tuples as lists
    want = json.loads(GOLDEN.read_text())
    assert got.keys() == want.keys()
    for part in want:  # one part at a time, so a failure names where the figures moved
        assert got[part] == want[part], part

"""Issue 23: what the bench may call a finding. The intervals are checked against simulation, not against their
own formula; the noise warning and the verdicts against hand-written sweeps."""
from __future__ import annotations

import csv
import math
import random

import pytest

from previewlab.preview.judging.analysis import baseline_noise, overhead_pct, paired
from previewlab.preview.judging.estimates import NOISE_LIMIT_PCT, estimate
from previewlab.bench.rows import SweepRow
from previewlab.bench.summary import summarize, table
from previewlab.bench.summary_rows import ConfigSummary


@pytest.mark.parametrize("n,level", [(3, 75.0), (4, 87.5), (9, 95.0), (25, 95.0)])
def test_a_median_interval_holds_the_true_median_as_often_as_it_says(n, level):
    """Skewed noise (exponential, true median ln 2), 4000 seeded draws: the interval holds the median at its stated
    level, and from six samples on at 95 % or more."""
    rng = random.Random(n)
    held, stated = 0, set()
    for _ in range(4000):
        e = estimate([rng.expovariate(1.0) for _ in range(n)])
        held += e.holds(math.log(2))
        stated.add(round(e.level_pct, 3))
    (said,) = stated
    assert said >= level
    assert held / 4000 == pytest.approx(said / 100, abs=0.02)


def test_one_sample_has_no_interval_and_says_n_1():
    e = estimate([12.34])
    assert not e.has_interval and not e.within_noise and e.signed() == "+12.3 % n=1"


def test_an_interval_that_holds_0_is_within_noise():
    assert estimate([-3.0, 1.0, 4.0, 6.0, 2.0, 8.0]).within_noise
    assert not estimate([3.0, 1.0, 4.0, 6.0, 2.0, 8.0]).within_noise
    assert estimate([3.0, 1.0, 4.0]).signed() == "+3.0 % [+1.0, +4.0] (75 %)"  # too few for 95 %: says its level


def _r(rid: str, config: str, wall: float, role: str = "config", first: str = "0") -> SweepRow:
    return SweepRow.from_row(dict(run_id=rid, role=role, first_run=first, config=config, wall_s=str(wall),
                                  previews="1", bytes="0", pair_overhead_pct=""))


def test_each_run_pairs_with_the_baseline_beside_it():
    runs = [_r("w", "none", 9.0, "warmup", "1"), _r("w1", "vae", 3.0, "warmup"),   # warm-ups: never paired
            _r("b0", "none", 2.0, "baseline"), _r("b", "vae", 3.0),              # +50 %
            _r("c0", "none", 4.0, "baseline"), _r("c", "vae", 5.0),              # +25 %: drift cancels in the pair
            _r("e", "vae", 3.3), _r("e0", "none", 3.0, "baseline"),              # the configuration first: +10 %
            _r("d", "direct", 3.0, "direct"), _r("d0", "none", 2.4, "baseline")]  # after its direct call: +25 %
    got = {cfg: [overhead_pct(r.record, b.record) for r, b in ps] for cfg, ps in paired(runs).items()}
    assert {k: [round(x, 9) for x in xs] for k, xs in got.items()} == {"vae": [50.0, 25.0, 10.0], "direct": [25.0]}


@pytest.mark.parametrize("walls,noisy", [((1.0, 1.0, 1.3, 1.3), True),     # IQR 0.15 over median 1.15: 13 %
                                         ((1.0, 1.02, 1.04, 1.06), False)])  # 2.9 %
def test_baselines_that_spread_past_the_limit_mark_the_machine_noisy(walls, noisy):
    runs = [_r("w", "none", 50.0, "warmup")] + [_r(f"b{i}", "none", w, "baseline") for i, w in enumerate(walls)]
    noise = baseline_noise(runs)
    assert noise is not None and noise.n == len(walls) and noise.noisy is noisy and noise.limit_pct == NOISE_LIMIT_PCT
    assert noise.line().startswith("NOISY MACHINE" if noisy else "noise: ")
    assert baseline_noise(runs[:2]) is None  # one steady baseline: no spread to judge


def test_the_summary_prints_no_finding_inside_its_interval():
    runs = []
    for i, (cfg, wall) in enumerate([("taesd", 1.5), ("taesd", 1.6), ("taesd", 1.7), ("taesd", 1.55),
                                     ("taesd", 1.65), ("taesd", 1.58), ("l2r", 0.98), ("l2r", 1.03), ("l2r", 1.01),
                                     ("l2r", 0.99), ("l2r", 1.02), ("l2r", 0.97), ("vae", 3.0)]):
        runs += [_r(f"b{i}", "none", 1.0 + 0.01 * (i % 3), "baseline"), _r(f"c{i}", cfg, wall)]
    rows = {r.config: r for r in summarize(runs, [])}
    assert rows["taesd"].verdict == "beyond noise" and rows["l2r"].verdict == "within noise"
    assert rows["vae"].verdict == "one pair: noise unknown"
    text = table(list(rows.values()), "meta", baseline_noise(runs))
    lines = {ln.split()[0]: ln for ln in text.splitlines()[4:-1]}
    assert lines["l2r"].endswith("within noise") and "[" in lines["l2r"]
    # the advice's words: how many more pairs the 95 % level needs, never a fixed --repeats
    assert lines["vae"].endswith("one pair: noise unknown; --repeats 5 more for the 95 % level")
    assert "±" not in text and "[" not in lines["vae"] and "--repeats 6" not in text
    assert text.splitlines()[0].startswith("noise: the 13 no-preview baselines spread")


def test_a_summary_row_read_back_from_its_csv_prints_the_same_overhead(tmp_path):
    """One number everywhere: report and compare read summary figures back from CSV strings."""
    runs = []
    for i, wall in enumerate([1.123456, 1.2, 1.31, 1.4, 1.25, 1.17]):
        runs += [_r(f"b{i}", "none", 1.0, "baseline"), _r(f"c{i}", "taesd", wall)]
    (row,) = [r for r in summarize(runs, []) if r.config == "taesd"]
    with open(tmp_path / "summary.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(row.to_row()))
        w.writeheader()
        w.writerow(row.to_row())
    with open(tmp_path / "summary.csv", newline="") as f:
        (back,) = list(csv.DictReader(f))
    a, b = row.overhead, ConfigSummary.from_row(back).overhead
    assert a is not None and b is not None and a.signed() == b.signed() == "+22.5 % [+12.3, +40.0]"


def test_the_legend_names_the_levels_parentheses():
    """Issue 35 item 10: the legend said an interval's level is "in brackets"; it is printed in parentheses."""
    runs = []
    for i, wall in enumerate([1.2, 1.3, 1.25]):  # three pairs: an interval at 75 %, not 95 %
        runs += [_r(f"b{i}", "none", 1.0, "baseline"), _r(f"c{i}", "taesd", wall)]
    text = table(summarize(runs, []), "meta", baseline_noise(runs))
    (row,) = [ln for ln in text.splitlines() if ln.startswith("taesd")]
    assert "] (75 %)" in row
    legend = text.splitlines()[-1]
    assert "its level in parentheses" in legend and "bracket" not in legend

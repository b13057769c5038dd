"""The budget autopilot driven with injected costs: it converges and stays within budget."""
from __future__ import annotations

import random

from preview.autopilot import Autopilot


def simulate(ap: Autopilot, step_ms, cost_ms: dict[str, float], steps: int, seed: int = 0):
    """A run as the engine drives it: a preview when `interval` steps have passed since the last one."""
    rng = random.Random(seed)
    since, intervals, previews = 0, [], 0
    for i in range(1, steps + 1):
        ap.observe_step(step_ms(i) * rng.uniform(0.9, 1.1))
        since += 1
        n = ap.decide()
        intervals.append(n)
        if since >= n:
            ap.observe_preview(cost_ms[ap.decoder] * rng.uniform(0.9, 1.1))
            previews += 1
            since = 0
    return intervals, previews


def test_converges_to_the_interval_the_budget_allows_and_stays_within_it():
    ap = Autopilot(budget_pct=10, steps=300, decoder="taesd")
    intervals, previews = simulate(ap, lambda i: 100.0, {"taesd": 30.0}, 300)
    # 30 ms per preview over 100 ms steps at 10 %: every 3 steps
    assert set(intervals[-100:]) <= {3, 4}
    assert ap.overhead_pct() <= 10.0
    assert previews >= 300 // 4


def test_every_step_when_it_fits():
    ap = Autopilot(budget_pct=10, steps=100, decoder="latent2rgb")
    intervals, previews = simulate(ap, lambda i: 100.0, {"latent2rgb": 2.0}, 100)
    assert set(intervals) == {1} and previews == 100 and ap.overhead_pct() <= 10


def test_follows_a_change_in_step_cost():
    ap = Autopilot(budget_pct=20, steps=400, decoder="taesd")
    # steps get 4x cheaper half way (as after a resolution or scheduler change): the interval must widen
    intervals, _ = simulate(ap, lambda i: 200.0 if i <= 200 else 50.0, {"taesd": 40.0}, 400)
    assert set(intervals[150:200]) <= {1, 2}
    assert set(intervals[-50:]) <= {4, 5}
    assert ap.overhead_pct() <= 20


def test_falls_back_to_a_cheaper_decoder_when_nothing_fits():
    ap = Autopilot(budget_pct=5, steps=30, decoder="vae")
    intervals, _ = simulate(ap, lambda i: 100.0, {"vae": 2000.0, "taesd": 20.0, "latent2rgb": 1.0}, 30)
    assert ap.decoder == "taesd"
    assert "cannot fit" in ap.note or ap.decoder == "taesd"
    ap2 = Autopilot(budget_pct=5, steps=30, decoder="vae", has_taesd=False)
    simulate(ap2, lambda i: 100.0, {"vae": 2000.0, "latent2rgb": 1.0}, 30)
    assert ap2.decoder == "latent2rgb"

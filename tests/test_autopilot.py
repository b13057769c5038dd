"""The budget autopilot driven with injected costs: it converges and stays within budget."""
from __future__ import annotations

import random

from preview.autopilot import Autopilot


def simulate(ap: Autopilot, step_ms, cost_ms: dict[str, float], steps: int, seed: int = 0):
    """A run as the engine drives it: after each step, decide the interval and whether a preview is due;
    the preview's cost is observed with the next step's row. Returns the intervals, the preview count and
    the largest running overhead seen at any step."""
    rng = random.Random(seed)
    since, intervals, previews, worst = 0, [], 0, 0.0
    for i in range(1, steps + 1):
        since += 1
        n = ap.decide()
        intervals.append(n)
        made = ap.due(since)
        if made:
            ap.started()
            since = 0
            previews += 1
        ap.observe_step(step_ms(i) * rng.uniform(0.9, 1.1))
        if made:
            ap.observe_preview(cost_ms[ap.decoder] * rng.uniform(0.9, 1.1))
        worst = max(worst, ap.overhead_pct())
    return intervals, previews, worst


def test_converges_to_the_interval_the_budget_allows_and_stays_within_it():
    ap = Autopilot(budget_pct=10, steps=300, decoder="taesd")
    intervals, previews, worst = simulate(ap, lambda i: 100.0, {"taesd": 30.0}, 300)
    # 30 ms per preview over 100 ms steps at 10 %: every 3 steps
    assert set(intervals[-100:]) <= {3, 4}
    assert worst <= 10.0  # under budget at every step, not only at the end
    assert previews >= 300 // 4


def test_every_step_when_it_fits():
    ap = Autopilot(budget_pct=10, steps=100, decoder="latent2rgb")
    intervals, previews, worst = simulate(ap, lambda i: 100.0, {"latent2rgb": 2.0}, 100)
    # unmeasured, a preview is assumed to cost a step: the first waits until the budget pays for it (step 10)
    assert intervals.index(1) <= 11 and set(intervals[12:]) == {1}
    assert previews >= 100 - 11 and worst <= 10
    # with a cost known from an earlier run there is no wait
    ap2 = Autopilot(budget_pct=10, steps=100, decoder="latent2rgb", prior_ms=2.0)
    _, previews2, worst2 = simulate(ap2, lambda i: 100.0, {"latent2rgb": 2.0}, 100)
    assert previews2 >= 99 and worst2 <= 10  # step 1 has no step time to weigh a preview against yet


def test_follows_a_change_in_step_cost():
    ap = Autopilot(budget_pct=20, steps=400, decoder="taesd")
    # steps get 4x cheaper half way (as after a resolution or scheduler change): the interval must widen
    intervals, _, worst = simulate(ap, lambda i: 200.0 if i <= 200 else 50.0, {"taesd": 40.0}, 400)
    assert set(intervals[150:200]) <= {1, 2}
    assert set(intervals[-50:]) <= {4, 5}
    assert worst <= 20


def test_falls_back_to_a_cheaper_decoder_when_nothing_fits():
    ap = Autopilot(budget_pct=5, steps=30, decoder="vae")
    notes = []
    orig = ap.decide

    def decide():
        n = orig()
        notes.append(ap.note)
        return n

    ap.decide = decide  # type: ignore[method-assign]
    simulate(ap, lambda i: 100.0, {"vae": 2000.0, "taesd": 20.0, "latent2rgb": 1.0}, 30)
    assert ap.decoder == "taesd"
    assert any(n.startswith("autopilot: vae at ") and "cannot fit a 5% budget" in n and "switching to taesd" in n
               for n in notes)
    ap2 = Autopilot(budget_pct=5, steps=30, decoder="vae", has_taesd=False)
    simulate(ap2, lambda i: 100.0, {"vae": 2000.0, "latent2rgb": 1.0}, 30)
    assert ap2.decoder == "latent2rgb"

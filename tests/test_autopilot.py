"""The budget autopilot driven by simulated runs (no models, no sleeps): it holds the wall time a run's previews
cost, as the user pays it, to the budget."""
from __future__ import annotations

import itertools
import random
import re
from dataclasses import dataclass, field

import pytest

from previewlab.preview.budget.autopilot import Autopilot

BASE = 100.0  # ms per step without previews


@dataclass
class Run:
    ap: Autopilot                # the autopilot at the end (a live change may have replaced the first)
    overhead: float = 0.0        # the run's true wall overhead, % of the same steps without previews
    intervals: list[int] = field(default_factory=list)  # decide() at each step
    made: list[int] = field(default_factory=list)       # the steps that got a preview
    notes: list[tuple[int, str]] = field(default_factory=list)  # (step, note) for the notes that were not empty
    decoders: list[str] = field(default_factory=list)   # the decoder at each step
    smaller: list[int] = field(default_factory=list)    # the autopilot's halvings of the preview's side at each step


def simulate(ap: Autopilot, steps: int, cost, *, mode: str = "sync", on_path: float = 0.2, after: float = 0.0,
             jitter: float = 0.01, lag: int = 0, seed: int = 0, step_ms=None, at=None) -> Run:
    """A run as the step meter drives the autopilot: at each step decide(), then due(since), then
    preview_started() when one is made; the step rows reach books.observe() `lag` steps late, all of them at the end.

    A step costs BASE (or step_ms(step)) x (1 +- jitter). A preview costs cost[decoder] (or cost(autopilot): its
    decoder at the size it decodes at) x (1 +- 10 %): in sync
    mode all of it lands on its own step; in overlap mode `on_path` of it does and the rest slows the next step,
    during which it is still in flight (so that step is touched too). `after` x the cost more slows the step after
    that, untouched (cold caches on a CPU). at(step, ap) may return a replacement autopilot (a live change).
    The overhead is measured against the same steps, same jitter, without the previews."""
    rng = random.Random(seed)
    price = cost if isinstance(cost, dict) else None
    rows: list[tuple[float, bool]] = []
    nop: list[float] = []
    extra = [0.0] * (steps + 3)
    touch = [False] * (steps + 3)
    run = Run(ap)
    since, seen = 0, 0
    for i in range(1, steps + 1):
        if at is not None:
            ap = at(i, ap)
        since += 1
        run.intervals.append(ap.decide())
        run.decoders.append(ap.decoder)
        run.smaller.append(ap.smaller)
        if ap.note:
            run.notes.append((i, ap.note))
        made = ap.due(since)
        b = (step_ms(i) if step_ms else BASE) * (1 + rng.uniform(-jitter, jitter))
        if made:
            ap.preview_started()
            since = 0
            run.made.append(i)
            c = (cost(ap) if callable(cost) else price[ap.decoder] if price else cost) * rng.uniform(0.9, 1.1)
            share = 1.0 if mode == "sync" else on_path
            extra[i] += share * c
            touch[i] = True
            if share < 1:
                extra[i + 1] += (1 - share) * c
                touch[i + 1] = True
            extra[i + 1 + (share < 1)] += after * c
        rows.append((b + extra[i], touch[i]))
        nop.append(b)
        while seen < i - lag:
            ap.books.observe(*rows[seen])
            seen += 1
    while seen < steps:
        ap.books.observe(*rows[seen])
        seen += 1
    run.ap, run.overhead = ap, 100 * (sum(s for s, _ in rows) - sum(nop)) / sum(nop)
    return run


def tolerance(cost: float, steps: int) -> float:
    """One point; when a single preview is worth more than a point of the run, half a preview plus half a point
    (no whole number of previews lands nearer)."""
    chunk = 100 * cost / (steps * BASE)
    return 1.0 if chunk <= 1.0 else chunk / 2 + 0.5


def reachable(budget: float, cost: float, steps: int) -> bool:
    """Two previews fit even at +10 % cost, and the budget needs previews on at most half the steps."""
    allowance = budget / 100 * steps * BASE
    return 2 * 1.1 * cost <= allowance <= 0.5 * steps * cost


@pytest.mark.parametrize("mode,lag", [("sync", 0), ("overlap", 1)])
def test_lands_within_a_point_of_the_budget(mode, lag):
    checked, errors = 0, []
    for budget, ratio, steps, prior, seed in itertools.product((5, 10, 20), (0.2, 0.5, 1, 2, 3), (30, 50, 100),
                                                                (False, True), (0, 1)):
        cost = ratio * BASE
        if not reachable(budget, cost, steps):
            continue
        ap = Autopilot(budget, steps, "taesd", prior_ms=cost if prior else None)
        run = simulate(ap, steps, {"taesd": cost}, mode=mode, lag=lag, seed=seed)
        err = run.overhead - budget
        assert abs(err) <= tolerance(cost, steps), (budget, ratio, steps, prior, seed, run.overhead, run.made)
        assert ap.books.overhead_pct() == pytest.approx(run.overhead, abs=1.0)  # its own books agree
        checked += 1
        errors.append(abs(err))
    assert checked >= 100
    assert sum(errors) / len(errors) < 0.5


def test_counts_what_the_user_pays_not_the_time_on_the_denoising_thread():
    # CUDA overlap: nothing of the preview runs on the denoising thread, it only slows the next step
    for budget, ratio, steps in ((10, 0.5, 50), (5, 0.2, 100), (20, 1, 50)):
        cost = ratio * BASE
        ap = Autopilot(budget, steps, "taesd")
        run = simulate(ap, steps, cost, mode="overlap", on_path=0.0, lag=2)
        assert abs(run.overhead - budget) <= tolerance(cost, steps), (budget, ratio, run.overhead)
        assert ap.books.cost_ms == pytest.approx(cost, rel=0.15)
    # CPU sync: a preview also slows the untouched step after it (cold caches)
    for budget, ratio, steps in ((10, 0.5, 50), (10, 1, 30), (5, 0.2, 100)):
        cost = ratio * BASE
        ap = Autopilot(budget, steps, "taesd")
        run = simulate(ap, steps, cost, after=0.3)
        assert abs(run.overhead - budget) <= tolerance(1.3 * cost, steps), (budget, ratio, run.overhead)
        assert ap.books.cost_ms == pytest.approx(1.3 * cost, rel=0.15)


def test_rows_that_arrive_late_and_noisier_steps():
    for lag, jitter in ((3, 0.01), (1, 0.03)):
        for budget, ratio, steps in ((10, 0.5, 50), (20, 1, 100), (5, 0.2, 100)):
            cost = ratio * BASE
            ap = Autopilot(budget, steps, "taesd")
            run = simulate(ap, steps, cost, mode="overlap", lag=lag, jitter=jitter, seed=3)
            assert abs(run.overhead - budget) <= tolerance(cost, steps) + (0.5 if jitter > 0.01 else 0), \
                (lag, jitter, budget, ratio, run.overhead)


def flaps(intervals: list[int]) -> int:
    """Times the interval went back to a value it left one or two steps before."""
    return sum(1 for i in range(len(intervals) - 2) if intervals[i] == intervals[i + 2] != intervals[i + 1]) + \
        sum(1 for i in range(len(intervals) - 3) if intervals[i] == intervals[i + 3] != intervals[i + 1])


def test_the_interval_does_not_flap():
    cases = [c for c in itertools.product(("sync", "overlap"), (5, 10, 20), (0.3, 0.6, 1, 1.5), (30, 50, 100), (0, 1))
             if 2 * 1.1 * c[2] * BASE <= c[1] / 100 * c[3] * BASE]  # no fallback to another decoder
    steady, loose = 0, 0
    for mode, budget, ratio, steps, seed in cases:
        lag = int(mode == "overlap")

        def sim(ap: Autopilot) -> Run:
            return simulate(ap, steps, ratio * BASE, mode=mode, lag=lag, jitter=0.02, seed=seed)

        run = sim(Autopilot(budget, steps, "taesd", prior_ms=ratio * BASE))
        changes = sum(1 for a, b in zip(run.intervals, run.intervals[1:]) if a != b)
        assert flaps(run.intervals) == 0 and changes <= 4, (mode, budget, ratio, steps, seed, run.intervals)
        # noted on its row: the first interval, once a row was seen (step 2, a step later when rows come a step
        # late), then each change
        first = 2 + lag
        assert [i for i, _ in run.notes] == [first] + [i for i in range(first + 1, steps + 1)
                                                       if run.intervals[i - 1] != run.intervals[i - 2]]
        steady += 1
        loose += flaps(sim(Autopilot(budget, steps, "taesd", prior_ms=ratio * BASE, hysteresis=0)).intervals)
    assert steady >= 80 and loose >= 20  # without hysteresis the same runs flap


def test_notes_say_the_interval_and_its_changes():
    ap = Autopilot(10, 50, "taesd", prior_ms=30.0)
    run = simulate(ap, 50, 30.0)
    first_step, first = run.notes[0]
    assert first_step == 2 and first == f"autopilot: every {run.intervals[1]}"  # step 1 has no step time yet
    for (i, note) in run.notes[1:]:
        assert note == f"autopilot: every {run.intervals[i - 1]}" and run.intervals[i - 1] != run.intervals[i - 2]


def test_the_spacing_honours_the_interval_and_the_first_and_last_steps_get_none():
    for mode, budget, ratio in (("sync", 50, 1), ("overlap", 20, 0.3), ("sync", 10, 0.1)):
        run = simulate(Autopilot(budget, 40, "taesd"), 40, ratio * BASE, mode=mode, lag=mode == "overlap")
        assert run.made and run.made[0] >= 7 and 40 not in run.made  # row 1 is setup, then 5 clean steps
        assert all(b - a >= run.intervals[b - 1] for a, b in zip(run.made, run.made[1:]))


def test_row_1_carries_the_setup_and_is_no_measure_of_a_step():
    ap = Autopilot(10, 30, "taesd")
    ap.books.observe(1000.0, False)  # the pipeline's text encoding and setup land in row 1
    assert ap.books.base_ms() == 1000.0  # nothing else seen yet: the smallest step
    ap.books.observe(100.0, False)
    assert ap.books.base_ms() == 100.0
    for _ in range(3):
        ap.books.observe(100.0, False)
    assert ap.books.base_ms() == 100.0 and ap.books.overhead_pct() == 0.0


def test_every_step_when_even_that_is_under_budget():
    # 2 ms previews on 100 ms steps cannot spend a 10 % budget: a preview at every step but the last, once the
    # cost is known (unknown, the first is taken to cost a step and waits for its share of the run)
    ap = Autopilot(10, 100, "latent2rgb")
    run = simulate(ap, 100, 2.0)
    assert run.made[0] <= 10 and set(run.intervals[12:]) == {1} and set(range(13, 100)) <= set(run.made)
    assert ap.books.cost_ms == pytest.approx(2.0, abs=1.0)
    known = simulate(Autopilot(10, 100, "latent2rgb", prior_ms=2.0), 100, 2.0)
    assert known.made == list(range(7, 100))  # row 1 is setup, then 5 clean steps; the last step gets none
    assert run.overhead < 3 and known.overhead < 3


def test_a_known_cost_starts_at_once_an_unknown_one_waits_for_the_budget():
    # a cost measured in an earlier run (cost_ms, carried as prior_ms) lets the first preview come after the
    # warm-up; unknown, a preview is taken to cost a step, and the first waits for its share of the run
    first = Autopilot(5, 50, "taesd")
    simulate(first, 50, 20.0)
    assert first.books.measured and first.books.cost_ms == pytest.approx(20.0, rel=0.15)
    known = simulate(Autopilot(5, 50, "taesd", prior_ms=first.books.cost_ms), 50, 20.0)
    unknown = simulate(Autopilot(5, 50, "taesd"), 50, 20.0)
    assert known.made[0] == 7 and unknown.made[0] > 10
    assert abs(known.overhead - 5) <= 1 and abs(unknown.overhead - 5) <= 1


def test_falls_back_to_a_cheaper_decoder_when_nothing_fits():
    # 2000 ms per VAE preview against 100 ms steps: even 2 previews in 30 steps cost 133 % of a 5 % budget
    run = simulate(Autopilot(5, 30, "vae"), 30, {"vae": 2000.0, "taesd": 20.0, "latent2rgb": 1.0})
    assert run.ap.decoder == "taesd"
    switch = [(i, n) for i, n in run.notes if "switching" in n]
    assert len(switch) == 1 and switch[0][1].startswith("autopilot: vae at ")
    assert "cannot fit a 5% budget (100 ms steps); switching to taesd" in switch[0][1]
    assert run.decoders[switch[0][0] - 1] == "taesd" and run.decoders[switch[0][0] - 2] == "vae"
    assert len(run.made) == 1  # the one that measured it; the budget is spent
    no_taesd = simulate(Autopilot(5, 30, "vae", has_taesd=False), 30, {"vae": 2000.0, "latent2rgb": 1.0})
    assert no_taesd.ap.decoder == "latent2rgb"
    assert any("switching to latent2rgb" in n for _, n in no_taesd.notes)
    # two previews fit (2 x 120 ms in 5 % of 5000 ms): no switch, and the run lands at its budget
    fits = simulate(Autopilot(5, 50, "vae"), 50, {"vae": 110.0, "taesd": 20.0})
    assert set(fits.decoders) == {"vae"} and not any("switching" in n for _, n in fits.notes)
    assert abs(fits.overhead - 5) <= tolerance(110.0, 50)


def test_a_live_budget_change_keeps_the_books():
    def change(to: float):
        def at(i: int, ap: Autopilot) -> Autopilot:
            if i != 26:
                return ap
            new = Autopilot(to, ap.steps, ap.decoder, prior_ms=ap.books.cost_ms)
            new.keep_books(ap)
            return new
        return at

    for before, after in ((20, 5), (5, 20)):
        run = simulate(Autopilot(before, 50, "taesd", prior_ms=50.0), 50, 50.0, at=change(after))
        assert run.ap.budget_pct == after
        # each half at the budget it ran under: the run as a whole at their mean
        assert abs(run.overhead - (before + after) / 2) <= 1.5, (before, after, run.overhead, run.made)
        first, second = sum(1 for i in run.made if i <= 25), sum(1 for i in run.made if i > 25)
        assert (first > second) == (before > after)


def test_a_live_decoder_change_learns_the_new_cost():
    def to_vae(i: int, ap: Autopilot) -> Autopilot:
        if i != 31:
            return ap
        new = Autopilot(ap.budget_pct, ap.steps, "vae")
        new.keep_books(ap)
        return new

    run = simulate(Autopilot(10, 100, "taesd", prior_ms=30.0), 100, {"taesd": 30.0, "vae": 150.0}, at=to_vae)
    ap = run.ap
    assert ap.decoder == "vae" and ap.books.measured and ap.books.cost_ms == pytest.approx(150.0, rel=0.15)
    assert abs(run.overhead - 10) <= tolerance(150.0, 100)
    assert max(run.intervals[:30]) < min(run.intervals[45:])  # cheaper previews came more often


def test_follows_a_change_in_step_cost():
    # steps get 4x cheaper half way (another process left the machine): the base is measured anew, the
    # interval widens, and the run still lands at its budget
    for mode in ("sync", "overlap"):
        ap = Autopilot(10, 400, "taesd")
        run = simulate(ap, 400, 40.0, mode=mode, lag=mode == "overlap", step_ms=lambda i: 200.0 if i <= 200 else 50.0)
        assert ap.books.base_ms() == pytest.approx(50.0, rel=0.03)
        assert set(run.intervals[150:200]) == {2} and min(run.intervals[-150:]) >= 4
        assert abs(run.overhead - 10) <= 1, (mode, run.overhead)


# ---- pixels before frequency (issue 24): a smaller decode first, then the interval, then the decoder -------------

SIDES = {"taesd": (512, 256, 128)}  # Previewer.sides for TAESD on a 1024 px image shown at 512 px


def sized(full: float, ratios: tuple[float, ...] = (1.0, 0.45, 0.2), others: dict[str, float] | None = None):
    """A preview's cost at the size the autopilot decodes it: `full` at the user's size, then each ratio of it
    (TAESD a stage fewer took 0.40 to 0.58 of the whole decode in bench.quality, two stages 0.13 to 0.22)."""
    def cost(ap: Autopilot) -> float:
        return full * ratios[ap.smaller] if ap.decoder == "taesd" else (others or {})[ap.decoder]
    return cost


def test_trades_pixels_before_frequency():
    # 60 ms previews on 100 ms steps: a 10 % budget affords one every 6 steps at full size
    run = simulate(Autopilot(10, 60, "taesd", sides=SIDES), 60, sized(60.0))
    smaller = [(i, n) for i, n in run.notes if "smaller previews first" in n]
    assert [n.split("first: ")[1].split(";")[0] for _, n in smaller] == ["256 px, was 512 px", "128 px, was 256 px"]
    assert re.fullmatch(r"autopilot: taesd at \d+ ms per preview fits one every \d+\.\d steps in a 10% budget; "
                        r"smaller previews first: 256 px, was 512 px; every \d+", smaller[0][1]), smaller[0][1]
    assert run.ap.smaller == 2 and run.ap.preview_max == 128 and set(run.decoders) == {"taesd"}
    assert smaller[0][0] > run.made[0]  # only once a preview at full size was measured
    # the interval after the trades is narrower than the one the same budget holds at full size
    plain = simulate(Autopilot(10, 60, "taesd"), 60, 60.0)
    assert max(run.intervals[smaller[-1][0] + 5:-2]) < min(plain.intervals[20:-2])
    assert len(run.made) > 2 * len(plain.made)
    assert abs(run.overhead - 10) <= tolerance(60.0 * 0.2, 60) and abs(plain.overhead - 10) <= tolerance(60.0, 60)


def test_keeps_its_pixels_when_the_budget_affords_the_interval_it_wants():
    cheap = simulate(Autopilot(10, 60, "taesd", sides=SIDES), 60, sized(5.0))  # every step costs 5 %
    assert cheap.ap.smaller == 0 and not any("smaller" in n for _, n in cheap.notes)
    assert set(cheap.intervals[15:]) == {1}
    # a run's first previews pay first-call costs: one dear preview is no reason to trade
    first_dear = simulate(Autopilot(10, 60, "taesd", sides=SIDES), 60,
                          lambda ap: 300.0 if ap.books.n < 8 else 5.0)
    assert first_dear.ap.smaller == 0 and not any("smaller" in n for _, n in first_dear.notes)
    # decode_at full (or a decoder with no stage to leave out): one side, nothing to trade; the interval widens
    full = simulate(Autopilot(10, 60, "taesd", sides={"taesd": (512,)}), 60, sized(60.0))
    assert full.ap.smaller == 0 and not any("smaller" in n for _, n in full.notes)
    assert min(full.intervals[20:-2]) >= 4


@pytest.mark.parametrize("mode,lag", [("sync", 0), ("overlap", 1)])
def test_smaller_previews_still_land_within_a_point_of_the_budget(mode, lag):
    checked, traded = 0, 0
    for budget, ratio, steps, seed in itertools.product((5, 10, 20), (0.5, 1, 2, 3), (30, 50, 100), (0, 1)):
        full = ratio * BASE
        smallest = 0.2 * full
        if not reachable(budget, smallest, steps) or not 2 * 1.1 * full <= budget / 100 * steps * BASE:
            continue  # the first preview, at full size, must fit too
        ap = Autopilot(budget, steps, "taesd", sides=SIDES)
        run = simulate(ap, steps, sized(full), mode=mode, lag=lag, seed=seed)
        paid = full * (1.0, 0.45, 0.2)[run.ap.smaller]  # the previews after the last trade cost this
        assert abs(run.overhead - budget) <= tolerance(paid, steps), \
            (budget, ratio, steps, seed, run.overhead, run.made, run.notes)
        checked += 1
        traded += run.ap.smaller > 0
    assert checked >= 30 and traded >= checked // 2


def test_pixels_then_interval_then_decoder():
    # the VAE has no stage to leave out: it falls back to TAESD, which then decodes smaller before it widens
    # (600 ms: two cost more than a 10 % budget of 100 steps; what the first left pays for TAESD's previews)
    run = simulate(Autopilot(10, 100, "vae", sides=SIDES), 100, sized(60.0, others={"vae": 600.0}))
    kinds = ["switching" if "switching to taesd" in n else "smaller" if "smaller" in n else "every"
             for _, n in run.notes]
    assert kinds.index("switching") < kinds.index("smaller") and run.ap.decoder == "taesd" and run.ap.smaller > 0
    # TAESD that even at its smallest would not fit two previews: straight to latent2rgb, no pixels traded
    run = simulate(Autopilot(5, 30, "taesd", sides=SIDES), 30, sized(2000.0, others={"latent2rgb": 1.0}))
    assert run.ap.decoder == "latent2rgb" and not any("smaller" in n for _, n in run.notes)
    assert [n.split(" ms per preview")[1] for _, n in run.notes if "switching" in n] == \
        [" cannot fit a 5% budget (100 ms steps); switching to latent2rgb"]


def test_a_live_change_starts_again_at_the_users_size():
    seen: list[tuple[int, int, bool]] = []

    def raise_budget(i: int, ap: Autopilot) -> Autopilot:
        if i != 31:
            return ap
        new = Autopilot(40, ap.steps, ap.decoder, sides=ap.sides)
        new.keep_books(ap)
        seen.append((ap.smaller, new.books.n, new.books.measured))
        return new

    run = simulate(Autopilot(10, 80, "taesd", sides=SIDES), 80, sized(60.0), at=raise_budget)
    assert seen == [(2, 30, False)]  # it had traded down; the new one keeps the books, its cost learned anew
    after = [i for i in run.made if i > 31]
    assert after and run.smaller[after[0] - 1] == 0  # its first preview is at the user's 512 px again
    # the steps before the change at 10 %, the 50 after it at 40 % at most: every step at 256 px costs 27 %
    assert run.ap.budget_pct == 40 and run.overhead <= (30 * 10 + 50 * 40) / 80 + 1
    assert sum(1 for i in run.made if i > 31) > 2 * sum(1 for i in run.made if i <= 31)


def test_a_cost_measured_earlier_at_the_smaller_size_is_its_prior():
    def costs_at(prior_of):
        seen: dict[int, float | None] = {}

        def watch(i: int, ap: Autopilot) -> Autopilot:
            if ap.smaller and ap.smaller not in seen:
                seen[ap.smaller] = ap.books.cost_ms  # right after the trade, before a preview at that size
            return ap
        simulate(Autopilot(10, 60, "taesd", sides=SIDES, prior_of=prior_of), 60, sized(60.0), at=watch)
        return seen

    known = {256: 27.0, 128: 12.0}
    assert costs_at(lambda decoder, side: known.get(side) if decoder == "taesd" else None) == {1: 27.0, 2: 12.0}
    guessed = costs_at(lambda decoder, side: None)
    assert set(guessed) == {1, 2} and 0.6 * 54 <= guessed[1] <= 0.6 * 66  # 0.6 of the 512 px cost measured

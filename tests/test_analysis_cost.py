"""Issue 56, hole 2: the analysis must never stall the server. The median's interval is found in one pass (it
summed a binomial tail for each candidate k: 24.5 s for 2,000 pairs), and the run list reads what it lists, not
every run of the folder, yielding to a running model as the exports do."""
from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path

import pytest

from previewlab.preview.call.engine import RunContext, generate
from previewlab.preview.judging.estimates import coverage_pct, estimate, widest_k
from previewlab.preview.record.run import RunEnd, RunRecord
from previewlab.preview.settings import PreviewSettings, RunSettings
from previewlab.server.data.pacer import Pacer
from previewlab.server.data.store import Store
from previewlab.server.figures import Figures
from tests.conftest import make_run


def test_the_interval_is_the_binomial_one_for_every_small_n():
    """The one-pass k and level are the definition's: the largest k whose 1 - 2 P(B(n, 1/2) < k) is at least
    95 %, the whole range (k = 1) below 6 samples, for every n up to 200."""
    for n in range(2, 201):
        tail = [sum(math.comb(n, i) for i in range(k)) / 2**n for k in range(n // 2 + 2)]
        best = max([k for k in range(1, n // 2 + 1) if 1 - 2 * tail[k] >= 0.95], default=1)
        k, level = widest_k(n)
        assert (k, level) == (best, pytest.approx(100 * (1 - 2 * tail[best]), abs=1e-9)), n
        assert coverage_pct(n, k) == pytest.approx(level, abs=1e-9)


@pytest.mark.slow
def test_the_interval_of_100000_samples_is_found():
    """The per-k sum took hours here (it grew with n cubed); one pass takes about a second. The normal
    approximation puts k within a few of n/2 - 0.98 sqrt(n), and the level just over 95 %."""
    n = 100_000
    e = estimate([float(i) for i in range(n)])
    k = int(e.lo or 0) + 1
    assert abs(k - (n / 2 - 1.96 * math.sqrt(n) / 2)) < 3 and 95 <= e.level_pct < 95.2
    assert e.hi == n - k  # x(n + 1 - k), counted from 1


def ended(tiny, decoder: str) -> RunRecord:
    s = RunSettings(steps=2, width=64, height=64, preview=PreviewSettings(decoder=decoder))  # type: ignore[arg-type]
    return generate(RunContext(tiny, s, "x")).record


@pytest.fixture(scope="module")
def folder(tiny, tmp_path_factory) -> Path:
    """300 ended runs, baseline and latent2rgb in turn, as a server's meta.json holds them."""
    root = tmp_path_factory.mktemp("runs")
    base, conf = ended(tiny, "none"), ended(tiny, "latent2rgb")
    for i in range(300):
        rec = base if i % 2 == 0 else conf
        rid = f"20261207-120000-{i + 1:03d}"
        totals = dataclasses.replace(rec.totals, first_run=0, wall_s=rec.totals.wall_s * (1 + i % 7 / 100))
        end = RunEnd.of(dataclasses.replace(rec.meta, run_id=rid), totals)
        make_run(root, rid, meta=json.dumps(end.to_json()).encode())
    return root


class Counting(Store):
    """The real store, counting the runs the figures read (each read asks first for the end the store holds)."""
    reads = 0

    def pending(self, rid):
        self.reads += 1
        return super().pending(rid)


@pytest.fixture
def counting(folder):
    store = Counting(folder)
    yield store
    store.close()  # the folder's lock, for the next test's store


def test_a_listing_reads_what_it_lists_not_the_folder(folder, counting, monkeypatch):
    """A listing stats the runs it lists (a hand edit there is read again), never the other 298: at 100,000 runs
    that check of every run's meta.json took 3.8 s of every /runs."""
    store, stats = counting, []
    real_stat = os.stat

    def stat(path, *args, **kwargs):
        if str(path).endswith("meta.json"):
            stats.append(Path(path).parent.name)
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat)
    figures = Figures(store)
    first = figures.of_runs(store.runs(limit=2))
    assert store.reads == 300 and all("figures" in r for r in first)  # the first listing reads every run once
    store.reads, stats[:] = 0, []
    again = figures.of_runs(store.runs(limit=2))
    assert store.reads == 0 and again == first  # nothing changed: nothing read again
    assert sorted(stats) == ["20261207-120000-299", "20261207-120000-300"]  # only the listed runs are checked
    newest = folder / "20261207-120000-300" / "meta.json"
    edited = json.loads(newest.read_text())
    edited["totals"]["first_run"] = 1  # a hand edit of a listed run: read again, and now a warm-up
    newest.write_text(json.dumps(edited))
    os.utime(newest, ns=(1, 1))
    relisted = figures.of_runs(store.runs(limit=2))
    assert store.reads == 1 and relisted[0]["figures"]["role"] == "warm-up"
    me, group = figures.like("20261207-120000-001")  # the run that ended, say: its group from what is known
    assert me is not None and len(group) == 300 and group[-1].role == "warmup"  # the edit, known without a read


def test_reading_the_folder_yields_to_a_running_model(counting):
    """While a run is being written, the first read of 300 runs rests between slices (the exports' pacer)."""
    now = [0.0]
    rests: list[float] = []

    def clock() -> float:
        now[0] += 0.001  # each reading of the clock: 1 ms of work
        return now[0]

    store = counting
    store.pacer = Pacer(clock=clock, sleep=rests.append)
    store.open_runs = lambda: {"20261207-130000-001"}  # type: ignore[method-assign]  # a run being written
    Figures(store).entries()
    assert len(rests) >= 100 and all(r > 0 for r in rests)

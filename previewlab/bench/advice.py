"""What to set after a sweep: the one analysis (previewlab.preview.judging.advice), over the sweep's runs in the order they
ran, as the bench's summary and its report print it. The server's page and a watch's summary render the same."""
from __future__ import annotations

from typing import Sequence

from previewlab.bench.rows import SweepRow
from previewlab.preview.judging.advice import DEFAULT_BUDGET_PCT, Analysis, analyze
from previewlab.preview.judging.estimates import NOISE_LIMIT_PCT
from previewlab.preview.judging.fidelity import NONE, Fidelities

__all__ = ["of_sweep", "lines"]


def of_sweep(runs: Sequence[SweepRow], budget: float = DEFAULT_BUDGET_PCT,
             noise_limit: float = NOISE_LIMIT_PCT, fidelity: Fidelities = NONE) -> Analysis:
    """The analysis of a sweep's runs (runs.csv's order): nothing is in use, so the advice names whole
    configurations; its hints say --repeats; fidelity: the folder's fidelity pass (NONE: none ran)."""
    return analyze(runs, budget, None, noise_limit, fidelity=fidelity)


def lines(runs: Sequence[SweepRow], budget: float = DEFAULT_BUDGET_PCT,
          noise_limit: float = NOISE_LIMIT_PCT, fidelity: Fidelities = NONE) -> list[str]:
    """The advice's lines for the bench's summary and the report."""
    return list(of_sweep(runs, budget, noise_limit, fidelity).advice.lines)

"""previewlab bench --fidelity: the fidelity pass (preview/call/fidelity_pass.py) after the sweep's timed runs, over
the sweep's step counts, decoders and decode_ats. Its calls are never timed, never paired, and never written to
runs.csv or steps.csv: fidelity.csv and finals.csv are their only record.
"""
from __future__ import annotations

from typing import Any, Callable

from previewlab.bench.plan import Plan
from previewlab.preview.call.fidelity_pass import FidelityError, measure
from previewlab.preview.judging.fidelity import Final, Sample
from previewlab.preview.models import Model

__all__ = ["FidelityError", "run_pass"]


def run_pass(model: Model, plan: Plan, seeds: int, log: Callable[[str], Any] = lambda _: None,
             ) -> tuple[list[Sample], list[Final]]:
    """The pass over `seeds` seeds from the sweep's seed, each step count of the plan, each decoder (not none)
    and decode_at of the plan. Raises FidelityError for a video model or a sweep with no decoder to judge."""
    if model.space.video:
        raise FidelityError("--fidelity: a video model's clips are not measured yet (images only)")
    base = plan.settings
    decoders = [d for d in dict.fromkeys(p.decoder for p in plan.configs()) if d != "none"]
    if not decoders:
        raise FidelityError("--fidelity: the sweep has no decoder to judge (--decoders names only none)")
    ats = list(plan.decode_ats or (base.preview.decode_at,))
    counts = sorted({u.steps or base.steps for u in plan.setups()})
    return measure(model, base, decoders, ats, counts, seeds, log)

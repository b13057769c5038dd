"""How much of a sweep's figures is noise: the bench's names for the one judgement every surface shares.

The rules live in previewlab.preview.judging.estimates (a median's interval and its level, the baselines' spread) and
previewlab.preview.judging.analysis (the interleaved pairs); the bench, the server's page and a watch's summary use the
same functions, so they say the same thing about the same runs.
"""
from __future__ import annotations

from previewlab.preview.judging.analysis import baseline_noise, overhead_pct, pair_overheads, paired
from previewlab.preview.judging.estimates import (LEVEL_PCT, NOISE_LIMIT_PCT, Estimate, Noise, coverage_pct, estimate,
                                          percentile, spread_pct)

__all__ = ["LEVEL_PCT", "NOISE_LIMIT_PCT", "Estimate", "Noise", "baseline_noise", "coverage_pct", "estimate",
           "overhead_pct", "pair_overheads", "paired", "percentile", "spread_pct"]

"""What a run-per-row export says of each run, from the one analysis: the bench's runs.csv and the page's
/runs.csv carry the same columns, so either answers the question alone, without pairing runs by hand.

  config                      its configuration's name, as the summary, the report and the page name it
  role                        warmup | baseline | config (with previews) | direct (the bare diffusers call)
  baseline_run_id             the no-preview run it is paired with (analysis.py's rule); "" where none is
  pair_overhead_pct           that pair's overhead: 100 * (its wall / the baseline's - 1)
  config_overhead_pct, _lo, _hi, _n, _level_pct
                              its configuration's overhead over all its pairs: the median, its interval, the
                              pairs, the interval's level (Estimate.to_cells); empty but for a configuration's runs
  verdict                     that overhead's verdict in the words every surface uses (estimates.verdict)

Their numbers are written whole (Python's shortest text that reads back as the same float, as_text): rounded to
a CSV's usual 3 decimals, a median of 1.7499... would read back as 1.75 and print +1.8 % where every surface
prints +1.7 %.

No torch here.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from previewlab.preview.judging.analysis import Finding, Measured, overhead_pct, paired
from previewlab.preview.judging.estimates import Estimate

ANSWER_COLUMNS = ("config", "role", "baseline_run_id", "pair_overhead_pct",
                  *Estimate.to_cells(None, "config_overhead"), "verdict")


def answers(runs: Sequence[Measured], found: Sequence[Finding]) -> dict[str, dict[str, Any]]:
    """Each run's cells (ANSWER_COLUMNS) by run id: runs in the order they ran, found the analysis's findings of
    them (Analysis.findings). A pair is the finding's own (Finding.pairs); a direct call's, analysis.paired's."""
    records = {r.record.run_id: r.record for r in runs}
    base: dict[str, str] = {run: b for f in found for run, b in f.pairs}
    base.update({r.record.run_id: b.record.run_id for r, b in paired(runs).get("direct", [])})
    of = {f.name: f for f in found}
    out: dict[str, dict[str, Any]] = {}
    for r in runs:
        rid = r.record.run_id
        b = base.get(rid)
        f = of.get(r.name) if r.role == "config" else None
        out[rid] = {"config": r.name, "role": r.role, "baseline_run_id": b or "",
                    "pair_overhead_pct": overhead_pct(r.record, records[b]) if b else None,
                    **Estimate.to_cells(f.overhead if f else None, "config_overhead"),
                    "verdict": f.verdict if f else ""}
    return out


def as_text(cells: Mapping[str, Any]) -> list[str]:
    """A run's answer cells as CSV text, in ANSWER_COLUMNS' order: a number whole (repr), None empty."""
    return ["" if (v := cells.get(c)) is None else repr(v) if isinstance(v, float) else str(v)
            for c in ANSWER_COLUMNS]

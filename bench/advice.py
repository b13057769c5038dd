"""What to set: the verdict a sweep's figures support. Every sentence quotes the figure it comes from.

The rule this product is built on: choose the sparsest interval that still gives useful feedback. Here, read
the other way round as a user asks it: the most frequent preview, then the largest decoder, then the largest
size, whose overhead interval stays under the user's budget. Where the preview's time goes decides the remedy:
decoding → a smaller decoder or a smaller preview; encoding and transfer → fewer or smaller frames; a slower
denoising → syncs and memory pressure. A figure that noise can explain is called noise.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable

from previewlab.bench.noise import Estimate
from previewlab.bench.summary import overhead_of
from previewlab.preview.decoders import DECODERS
from previewlab.preview.digest import REMEDY, rank

DEFAULT_BUDGET_PCT = 5.0
__all__ = ["DEFAULT_BUDGET_PCT", "Option", "advise", "best", "goes", "of_summary", "rank"]


@dataclass(frozen=True)
class Option:
    """One measured configuration: its settings, its overhead, and each part of a preview's time in ms."""
    config: str
    decoder: str
    every: int               # 0: the autopilot chose (a budget, not an interval)
    preview_max: int
    overhead: Estimate | None
    parts: dict[str, float]  # ms a preview: decode, resize, transfer, encode, slower denoising

    @classmethod
    def of(cls, row: dict[str, Any], overhead: Estimate | None) -> Option:
        """From a summary row (summary.summarize) and its overhead."""
        steps, made = float(row.get("steps") or 0), float(row.get("previews") or 0)
        slower = row.get("slower_ms_per_step")
        slow = max(0.0, float(slower)) * steps / made if slower not in (None, "") and made else 0.0
        parts = {"decode": float(row["decode_ms_p50"]), "resize": float(row["resize_ms_p50"]),
                 "transfer": float(row["sync_ms_p50"]) + float(row["transfer_ms_p50"]),
                 "encode": float(row["encode_ms_p50"]), "slower denoising": slow}
        auto = float(row.get("budget") or 0) > 0
        return cls(str(row["config"]), str(row.get("decoder", "")), 0 if auto else int(row.get("every") or 0),
                   int(row.get("preview_max") or 0), overhead, parts)

    def dominant(self) -> tuple[str, float, float]:
        """The part that holds most of a preview's time: (its name, its ms, all parts' ms)."""
        name = max(self.parts, key=lambda k: self.parts[k])
        return name, self.parts[name], sum(self.parts.values())

    def fits(self, budget: float) -> bool:
        """Its overhead's interval stays under the budget (one pair has no interval, so it never fits)."""
        e = self.overhead
        return e is not None and e.hi is not None and e.hi <= budget


def _said(e: Estimate | None) -> str:
    if e is None:
        return "no overhead measured"
    if not e.has_interval:
        return f"{e.signed()}: one pair, noise unknown"
    return e.signed() + (", within noise" if e.within_noise else "")


def goes(o: Option) -> str:
    """Where one configuration's preview time goes, and the remedy when its cost is a finding."""
    name, ms, total = o.dominant()
    head = f"{o.config}: {_said(o.overhead)}"
    if total <= 0:
        return f"{head}; no preview time measured"
    where = f"{name} holds {ms:.1f} of its {total:.1f} ms a preview ({100 * ms / total:.0f} %)"
    e = o.overhead
    if e is None or not e.has_interval or e.within_noise:
        return f"{head}; {where}, but its overhead is no finding"
    return f"{head}; {where}: {REMEDY[name]}"


def best(options: Iterable[Option], budget: float) -> Option | None:
    """The most frequent preview, then the largest decoder, then the largest size, whose interval fits."""
    fit = [o for o in options if o.every > 0 and o.fits(budget)]
    return min(fit, key=lambda o: (o.every, -rank(o.decoder), -o.preview_max)) if fit else None


def _cheaper(o: Option, budget: float) -> str:
    """What would bring the cheapest measured option under the budget, if its cost scales with the previews."""
    e = o.overhead
    assert e is not None
    ideas = []
    if e.value > 0 and o.every > 0:
        every = math.ceil(o.every * e.value / budget - 1e-9)
        ideas.append(f"about every {every} (its cost over the previews it makes)")
    down = DECODERS[o.decoder].cheaper if o.decoder in DECODERS else None  # type: ignore[index]
    if down:
        ideas.append(down)
    return ", or ".join(ideas) if ideas else "fewer previews"


def advise(options: list[Option], budget: float = DEFAULT_BUDGET_PCT) -> list[str]:
    """The advice's lines: where each configuration's preview time goes, then what to set within `budget`."""
    measured = [o for o in options if o.overhead is not None]
    if not measured:
        return []
    lines = [f"advice (budget {budget:g} %, the best is the most frequent preview, then the largest decoder and "
             f"size, whose interval stays under it):"]
    lines += [f"  {goes(o)}" for o in measured]
    findings = [o for o in measured if o.overhead and o.overhead.has_interval and not o.overhead.within_noise]
    if not findings:
        lines.append("  every overhead here is noise (its interval holds 0) or has no interval: these figures "
                     "cannot tell the configurations apart; measure again with more --repeats on a quieter machine")
    pick = best(measured, budget)
    if pick is not None:
        assert pick.overhead is not None
        lines.append(f"  set: {pick.config} ({_said(pick.overhead)}, under {budget:g} % to the interval's top)")
    else:
        with_interval = [o for o in measured if o.overhead and o.overhead.has_interval and o.every > 0]
        if with_interval:
            low = min(with_interval, key=lambda o: o.overhead.value if o.overhead else math.inf)
            lines.append(f"  nothing measured fits {budget:g} %: the cheapest, {low.config}, costs "
                         f"{_said(low.overhead)}; to stay under {budget:g} %: {_cheaper(low, budget)}")
        else:
            lines.append(f"  nothing measured fits {budget:g} %: no configuration has an interval (--repeats 2 "
                         f"or more)")
    return lines


def of_summary(rows: list[dict[str, Any]], budget: float = DEFAULT_BUDGET_PCT) -> list[str]:
    """The advice for a sweep's summary rows (summary.summarize): the bench's and the report's."""
    return advise([Option.of(r, overhead_of(r)) for r in rows if r.get("decoder") not in ("none", "", None)],
                  budget)

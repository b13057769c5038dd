"""Which configurations the advice may name: those whose runs preview, those under the budget (under) and those it
may recommend (fits), a figure it may build on (finding_is_sure), and how far one configuration is from the one in
use (changes, nearest). No torch here.
"""
from __future__ import annotations

import math
from typing import Sequence

from previewlab.preview.judging.analysis import Finding
from previewlab.preview.judging.estimates import Estimate
from previewlab.preview.settings import PreviewSettings

MIN_PREVIEWS = 2  # a run that previews fewer times shows nothing of its course: never advised


def finding_is_sure(e: Estimate | None) -> bool:
    """A figure advice may build on: its interval holds at the 95 % level and lies wholly above 0."""
    return e is not None and e.sure and e.lo is not None and e.lo > 0


def shows(f: Finding) -> bool:
    """Its runs made at least MIN_PREVIEWS previews each (the median): otherwise it previews nothing to judge."""
    return f.previews >= MIN_PREVIEWS


def under(f: Finding, budget: float) -> bool:
    """Its overhead holds at the 95 % level, its top under the budget, not wholly below 0 (a drifting machine),
    and its runs preview: a configuration in use that is under the budget is kept, the autopilot's included."""
    e = f.overhead
    return e is not None and e.sure and e.hi is not None and e.hi <= budget and not e.below_zero and shows(f)


def fits(f: Finding, budget: float) -> bool:
    """Recommendable: a fixed interval under the budget (under); the autopilot picks its own intervals, so it is
    kept where it is in use, never recommended in place of one."""
    return f.preview.budget <= 0 and under(f, budget)


def _every(p: PreviewSettings) -> str:
    return f"auto {p.budget:g} %" if p.budget > 0 else str(p.every)


CHANGED = ("decoder", "preview_max", "mode", "target", "frames", "decode_at")


def changes(current: Finding | None, pick: Finding) -> str:
    """The settings `pick` changes from `current`, in words ('decoder vae -> taesd, every 1 -> 4'); its whole name
    when there is no current configuration."""
    if current is None:
        return pick.name
    a, b = current.preview, pick.preview
    out = [f"every {_every(a)} -> {_every(b)}"] if _every(a) != _every(b) else []
    out += [f"{k} {getattr(a, k)} -> {getattr(b, k)}" for k in CHANGED if getattr(a, k) != getattr(b, k)]
    return ", ".join(out) or pick.name


def nearest(fit: Sequence[Finding], current: Finding) -> Finding:
    """Of the configurations that fit, the one nearest the one in use: fewest settings changed, then the interval
    nearest to its own (on a log scale), then the lower overhead."""
    a = current.preview

    def key(f: Finding) -> tuple[float, ...]:
        b, e = f.preview, f.overhead
        moved = sum(getattr(a, k) != getattr(b, k) for k in CHANGED) + (_every(a) != _every(b))
        return (moved, abs(math.log(b.every / max(1, a.every))), e.value if e else math.inf)
    return min(fit, key=key)

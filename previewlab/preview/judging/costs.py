"""Decoders by their measured cost, and which configuration is surely the cheapest: each decoder's ms a preview
as measured here (never an assumed order), their order from the cheapest, the decoders to try instead of one, and
the configuration whose overhead interval lies below every other's, or those that cannot be told apart. No torch
here.
"""
from __future__ import annotations

import math
from typing import Sequence

from previewlab.preview.judging.analysis import Finding
from previewlab.preview.judging.estimates import Estimate
from previewlab.preview.judging.surface import Surface
from previewlab.preview.settings import PreviewSettings


def costed(p: PreviewSettings) -> str:
    """The name a decoder's cost goes by: the decoder, with where it stops when not at the preview's size
    ('vae at half_latents') and the preview's size where one is set ('taesd max64'): one decoder stopping
    elsewhere, or making a smaller preview, is another cost."""
    name = p.decoder if p.decode_at == "preview" else f"{p.decoder} at {p.decode_at}"
    return name + (f" max{p.preview_max}" if p.preview_max > 0 else "")


def _bare(key: str) -> str:
    """A costed name without its preview size: what a remedy names, the size being the run's own."""
    return " ".join(w for w in key.split(" ") if not w.startswith("max"))


def _size(key: str) -> str:
    """The preview size a costed name carries ('max64'), or '' for the image's own."""
    return next((w for w in key.split(" ")[1:] if w.startswith("max")), "")


def decoder_costs(found: Sequence[Finding]) -> dict[str, Estimate]:
    """Each decoder's ms a preview as measured here (per where it stops, costed): of its configurations that made
    previews, the one with the most runs (its interval the tightest), so decoders are compared on their own
    figures, never the registry's."""
    out: dict[str, Finding] = {}
    for f in found:
        if f.preview_ms is None or f.preview.decoder == "none":
            continue
        have = out.get(k := costed(f.preview))
        if have is None or (have.preview_ms is not None and f.preview_ms.n > have.preview_ms.n):
            out[k] = f
    return {d: f.preview_ms for d, f in out.items() if f.preview_ms is not None}


def cheaper_than(a: Estimate, b: Estimate) -> bool:
    """a is surely cheaper than b: both intervals hold at the 95 % level and a's lies wholly below b's."""
    return a.sure and b.sure and a.hi is not None and b.lo is not None and a.hi < b.lo


def ms(e: Estimate) -> str:
    """A duration's estimate: '8.0 ms [7.5, 8.4]', its level where under 95 %, or '8.0 ms n=1'."""
    if e.lo is None or e.hi is None:
        return f"{e.value:.1f} ms n={e.n}"
    level = "" if e.sure else f" ({e.level_pct:.0f} %)"
    return f"{e.value:.1f} ms [{e.lo:.1f}, {e.hi:.1f}]{level}"


def cost_order(costs: dict[str, Estimate]) -> str:
    """The decoders from the cheapest, as measured: 'latent2rgb 1.2 ms [1.1, 1.3] < taesd 8.0 ms [...]', with
    '~' between two that the intervals cannot tell apart."""
    ranked = sorted(costs.items(), key=lambda kv: kv[1].value)
    out = ""
    for i, (d, e) in enumerate(ranked):
        if i:
            out += " < " if cheaper_than(ranked[i - 1][1], e) else " ~ "
        out += f"{d} {ms(e)}"
    return out


def cheaper_decoders(f: Finding, costs: dict[str, Estimate], can: Sequence[str], surface: Surface) -> list[str]:
    """The decoders to try instead of f's: those measured surely cheaper here, with their figure; where none was,
    those this model can run (can) that were not measured, and how to measure them."""
    me = costed(f.preview)
    mine = costs.get(me)
    out = [f"decoder {_bare(d)} ({ms(e)} a preview here, against {_bare(me)}'s {ms(mine)})"
           for d, e in sorted(costs.items(), key=lambda kv: kv[1].value)
           if d.split(" ")[0] != f.preview.decoder and _size(d) == _size(me)  # compared at one preview size
           and mine is not None and cheaper_than(e, mine)]
    if out:
        return out
    measured = {d.split(" ")[0] for d in costs}
    unmeasured = [d for d in can if d not in measured and d not in ("none", f.preview.decoder)]
    if unmeasured:
        return [f"decoder {' or '.join(unmeasured)}, not measured here: which costs less on this model is a "
                f"measurement ({surface.how('decoder', unmeasured[0])})"]
    return []


def separated(costs: Sequence[Finding]) -> tuple[Finding | None, tuple[str, ...]]:
    """The configuration whose 95 % interval lies below every other's (None where none does), and, where none
    does, the names of those that cannot be told apart from the lowest median."""
    if len(costs) < 2:
        return None, ()
    low = min(costs, key=lambda f: f.overhead.value if f.overhead else math.inf)
    e = low.overhead
    rest = [f for f in costs if f is not low]
    if e is not None and all(f.overhead is not None and cheaper_than(e, f.overhead) for f in rest):
        return low, ()
    tied = [low] + [f for f in rest if f.overhead is None or e is None or not cheaper_than(e, f.overhead)]
    return None, tuple(f.name for f in tied)

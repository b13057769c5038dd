"""What to set: the verdict a set of runs supports, built once here and rendered by every surface (the bench's
summary and report, the server's page, a watch's summary). Every sentence quotes the figure it comes from.

The rule this product is built on: choose the sparsest interval that still gives useful feedback. Here, read
the other way round as a user asks it: the most frequent preview, then the largest decoder, then the largest
size, whose overhead interval stays under the user's budget. Where the preview's time goes decides the remedy:
decoding -> a smaller decoder or a smaller preview; encoding and transfer -> fewer or smaller frames; a slower
denoising -> syncs and memory pressure. Advice never builds on noise:
- it recommends a configuration only when its interval holds at the 95 % level and its top is under the budget,
  so never on one pair, never on an interval of a few pairs, never on a noisy machine's guess;
- an overhead wholly below 0 is a drifting machine (previews cannot make a run faster): said, never recommended;
- "the cheapest" is the lowest-cost configuration measured, whatever its level, and the advice says its level;
- it names the setting it would change, and never recommends the one in use.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from previewlab.preview.judging.analysis import Finding, Measured, baseline_noise, findings, steady_baselines
from previewlab.preview.decoding.decoders import DECODERS
from previewlab.preview.judging.estimates import NOISE_LIMIT_PCT, Estimate, Noise, verdict
from previewlab.preview.settings import SIDE_STREAM_DEVICES

DEFAULT_BUDGET_PCT = 5.0
# where a preview's time goes, and what to do when that part dominates
REMEDY = {
    "decode": "a smaller decoder or a smaller preview",
    "resize": "a smaller preview (decode at the preview's size)",
    "transfer": "fewer or smaller frames (a larger interval, a smaller preview)",
    "encode": "fewer or smaller frames (a larger interval, a smaller preview, a lower quality)",
    "slower denoising": "look at syncs and memory pressure (overlap mode, a smaller decoder)",
}


def remedy(part: str, mode: str, device: str) -> str:
    """REMEDY, said for the mode in use: overlap is never offered to a run already in it, nor where it has no
    side stream to run on (a CPU)."""
    if part != "slower denoising":
        return REMEDY[part]
    if mode == "overlap":
        why = "its side stream runs beside the denoising" if device in SIDE_STREAM_DEVICES else \
            f"on a {device} overlap has no side stream, so the preview work still shares the cores"
        return f"a smaller decoder or fewer previews (overlap is in use: {why})"
    if device in SIDE_STREAM_DEVICES:
        return REMEDY[part]
    return f"a smaller decoder or fewer previews (overlap would not help: a {device} has no side stream)"


def rank(decoder: str) -> int:
    """How large a decoder is: the steps down its `cheaper` chain to the bottom (vae 3, taesd 2, latent2rgb 1)."""
    spec = DECODERS.get(decoder)  # type: ignore[call-overload]
    if spec is None or spec.build is None:
        return 0
    return 1 + (rank(spec.cheaper) if spec.cheaper else 0)


def bench_more(n: int) -> str:
    """How the bench gets n more pairs."""
    return f"--repeats {n} more for the 95 % level"


def said(e: Estimate | None, more: Callable[[int], str] = bench_more) -> str:
    """An overhead and its verdict in the words every surface uses."""
    if e is None:
        return "no baseline beside it"
    tail = f"; {more(e.more_for_level)}" if e.more_for_level else ""
    return f"{e.signed()}: {verdict(e)}{tail}"


def under(f: Finding, budget: float) -> bool:
    """Its overhead holds at the 95 % level, its top under the budget, and not wholly below 0 (a drifting
    machine): a configuration in use that is under the budget is kept, the autopilot's included."""
    e = f.overhead
    return e is not None and e.sure and e.hi is not None and e.hi <= budget and not e.below_zero


def fits(f: Finding, budget: float) -> bool:
    """Recommendable: a fixed interval under the budget (under); the autopilot picks its own intervals, so it is
    kept where it is in use, never recommended in place of one."""
    return f.preview.budget <= 0 and under(f, budget)


def changes(current: Finding | None, pick: Finding) -> str:
    """The settings `pick` changes from `current`, in words ('decoder vae -> taesd, every 1 -> 4'); its whole name
    when there is no current configuration."""
    if current is None:
        return pick.name
    a, b = current.preview, pick.preview
    def every(p: Any) -> str:
        return f"auto {p.budget:g} %" if p.budget > 0 else str(p.every)
    out = [f"every {every(a)} -> {every(b)}"] if every(a) != every(b) else []
    out += [f"{k} {getattr(a, k)} -> {getattr(b, k)}" for k in ("decoder", "preview_max", "mode", "target", "frames",
                                                                "decode_at") if getattr(a, k) != getattr(b, k)]
    return ", ".join(out) or pick.name


@dataclass(frozen=True)
class Advice:
    """What the figures support: keep the configuration in use (keep), set another (pick, and the settings it
    changes), or, when nothing measured fits, the cheapest measured and what would fit; the configurations
    whose overhead is wholly below 0 (drifted); its lines, as every surface prints them."""
    budget: float
    current: str | None
    keep: bool
    pick: str | None
    change: str
    cheapest: str | None
    drifted: tuple[str, ...]
    lines: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        return {"budget": self.budget, "current": self.current, "keep": self.keep, "pick": self.pick,
                "change": self.change, "cheapest": self.cheapest, "drifted": list(self.drifted),
                "lines": list(self.lines)}


def goes(f: Finding, more: Callable[[int], str] = bench_more) -> str:
    """Where one configuration's preview time goes, and the remedy only when its cost is a sure finding."""
    name, ms, total = f.dominant()
    head = f"{f.name}: {said(f.overhead, more)}"
    if total <= 0:
        return f"{head}; no preview time measured"
    where = f"{name} holds {ms:.1f} of its {total:.1f} ms a preview ({100 * ms / total:.0f} %)"
    e = f.overhead
    if e is None or not e.sure or e.within_noise or e.below_zero:
        return f"{head}; {where}, but its overhead is no finding"
    return f"{head}; {where}: {remedy(name, f.preview.mode, f.device)}"


def best(found: Sequence[Finding], budget: float, current: str | None = None) -> Finding | None:
    """The most frequent preview, then the largest decoder, then the largest size (0, the image's own, is the
    largest), whose interval fits; among equals the one in use, then the cheapest."""
    fit = [f for f in found if fits(f, budget)]

    def key(f: Finding) -> tuple[Any, ...]:
        p, e = f.preview, f.overhead
        return (p.every, -rank(p.decoder), -(p.preview_max or math.inf), f.name != current,
                e.value if e else math.inf)
    return min(fit, key=key) if fit else None


def registry_cheaper(decoder: str) -> str | None:
    """The next decoder down the registry's chain, whatever the model has (a sweep's advice, which knows no
    model); a server or a watch passes decoders.cheaper for its model, which skips a TAE it lacks."""
    spec = DECODERS.get(decoder)  # type: ignore[call-overload]
    return spec.cheaper if spec is not None else None


def _would(f: Finding, budget: float, current: Finding | None,
           cheaper: Callable[[str], str | None] = registry_cheaper) -> str:
    """What would bring the cheapest measured configuration under the budget: measuring it surely where its
    median already is, else a sparser interval or a cheaper decoder, if its cost scales with the previews."""
    e = f.overhead
    assert e is not None
    if e.value <= budget:
        return f"its median is under {budget:g} %, but only a 95 % interval can say so: measure it more"
    ideas = []
    if f.preview.budget <= 0 and math.isfinite(e.value):
        every = math.ceil(min(f.preview.every * e.value / budget - 1e-9, 10_000.0))  # settings' MAX_EVERY
        if every > f.preview.every:
            ideas.append(f"every about {every} (its cost over the previews it makes)")
    down = cheaper(f.preview.decoder)
    if down and not (current is not None and current.preview.decoder == down):
        ideas.append(f"decoder {down}")
    return ", or ".join(ideas) if ideas else "fewer previews"


def advise(found: Sequence[Finding], budget: float = DEFAULT_BUDGET_PCT, current: str | None = None,
           noise: Noise | None = None, more: Callable[[int], str] = bench_more,
           remedies: str | None = None, cheaper: Callable[[str], str | None] = registry_cheaper) -> Advice:
    """The advice for these findings within `budget` percent; current: the configuration in use (the page's
    running or latest run, a watch's settings; None: a sweep, where nothing is in use); noise: the baselines'
    spread, named first when noisy; more: how this surface gets n more pairs; remedies: its NOISY line's."""
    measured = [f for f in found if f.overhead is not None]
    cur = next((f for f in found if f.name == current), None)
    drifted = tuple(f.name for f in measured if f.overhead and f.overhead.below_zero)
    if not measured:
        return Advice(budget, current, False, None, "", None, drifted)
    lines = [f"advice (budget {budget:g} %: the most frequent preview, then the largest decoder and size, whose "
             f"95 % interval stays under it):"]
    if noise is not None and noise.noisy:
        lines.append("  " + (noise.line(remedies) if remedies else noise.line()))
    lines += [f"  {goes(f, more)}" for f in measured]
    if not any(f.overhead and f.overhead.sure and not f.overhead.within_noise for f in measured):
        lines.append("  no overhead here is a finding at the 95 % level (within noise, one pair, or too few pairs): "
                     "these figures cannot tell the configurations apart")
    if drifted:
        lines.append(f"  below zero beyond noise: {', '.join(drifted)}: previews cannot make a run faster, so the "
                     f"machine drifted between the runs; measure again on a quieter machine")
    pick = best(measured, budget, current)
    if cur is not None and under(cur, budget) and (pick is None or pick.name == cur.name or cur.preview.budget > 0):
        lines.append(f"  keep: {cur.name} ({said(cur.overhead, more)}), its interval's top under {budget:g} %")
        return Advice(budget, current, True, None, "", None, drifted, tuple(lines))
    if pick is not None:
        change = changes(cur, pick)
        what = f"{change} (now {cur.name}): {pick.name}" if cur is not None else pick.name
        lines.append(f"  set: {what} ({said(pick.overhead, more)}), under {budget:g} % to the interval's top")
        return Advice(budget, current, False, pick.name, change, None, drifted, tuple(lines))
    # nothing fits: the lowest-cost configuration measured, at whatever level, said with its level
    costs = [f for f in measured if f.preview.budget <= 0 and f.overhead and not f.overhead.below_zero]
    if not costs:
        lines.append(f"  nothing measured fits {budget:g} %: no fixed-interval configuration has a figure above "
                     f"zero (the autopilot picks its own intervals; one below zero is the machine's drift)")
        return Advice(budget, current, False, None, "", None, drifted, tuple(lines))
    low = min(costs, key=lambda f: f.overhead.value if f.overhead else math.inf)
    lines.append(f"  nothing measured fits {budget:g} % at the 95 % level: the cheapest measured, {low.name}, costs "
                 f"{said(low.overhead, more)}; to stay under {budget:g} %: {_would(low, budget, cur, cheaper)}")
    return Advice(budget, current, False, None, "", low.name, drifted, tuple(lines))


@dataclass(frozen=True)
class Analysis:
    """Everything every surface shows of a set of runs: each configuration's finding, the baselines' noise,
    the steady baselines counted, and the advice."""
    findings: tuple[Finding, ...]
    noise: Noise | None
    baselines: int
    advice: Advice
    more: Callable[[int], str] = field(default=bench_more, compare=False)  # how its surface gets more pairs
    remedies: str | None = field(default=None, compare=False)             # its NOISY line's remedies

    def finding(self, name: str) -> Finding | None:
        return next((f for f in self.findings if f.name == name), None)

    def to_json(self) -> dict[str, Any]:
        return {"findings": [f.to_json(said(f.overhead, self.more)) for f in self.findings],
                "noise": self.noise.to_json() if self.noise else None,
                "noise_line": (self.noise.line(self.remedies) if self.remedies else self.noise.line())
                if self.noise else None,
                "baselines": self.baselines, "advice": self.advice.to_json()}


PAGE_REMEDIES = ("measure more baselines (the measure button), stop other jobs on this machine, or start the "
                 "server with fewer torch threads than cores")


def analyze(runs: Sequence[Measured], budget: float = DEFAULT_BUDGET_PCT, current: str | None = None,
            noise_limit: float = NOISE_LIMIT_PCT, more: Callable[[int], str] = bench_more,
            remedies: str | None = None, cheaper: Callable[[str], str | None] = registry_cheaper) -> Analysis:
    """The one analysis: runs in the order they ran (analysis.py's pairing), judged within `budget`; cheaper:
    the next decoder down that the model can run (registry_cheaper: the registry's chain)."""
    found = tuple(findings(runs))
    noise = baseline_noise(runs, noise_limit)
    return Analysis(found, noise, steady_baselines(runs),
                    advise(found, budget, current, noise, more, remedies, cheaper), more, remedies)

"""What to set: the verdict a set of runs supports, built once here and rendered by every surface (the bench's
summary and report, compare, the server's page, a watch's summary). Every sentence quotes the figure it comes from.

The rule this product is built on: choose the sparsest interval that still gives useful feedback. Of the
configurations whose overhead interval stays under the user's budget (fit), the advice prefers, where the bench's
fidelity pass measured what a preview shows (fidelity.py):
- those whose decoder reaches the fidelity the user set (SSIM against the VAE's preview, --min-fidelity, default
  fidelity.DEFAULT_MIN_SSIM): its interval, at the 95 % level (6 seeds or more), at or above it. One wholly below
  is left out; one whose interval holds the threshold, or is short of the level, is not told from it, and is left
  out, said so;
- and, where the runs measured where the picture settles (settle.Settle), whose interval previews at least
  twice before it settles (every <= settle step / 2): a sparser one misses the changes on the way;
- then the cheapest: the one whose overhead interval lies below every other's; where intervals overlap, the one
  whose fidelity interval lies above every other's (never a fidelity difference within noise), else the
  sparsest interval, then the lowest median. Its line leads: decoder, interval, overhead, fidelity, settle step.
A synthetic model's fidelity (noise pictures) is shown and never advised on. Without fidelity figures, what a
preview shows is not measured: the advice names every configuration that fits, sparsest first, and keeps the one
in use where it fits, or sets the one nearest to it (fewest settings changed, then the nearest interval); it never
prefers the most frequent preview. Where the picture settles well before the last step, it says so, and how to
measure a shorter schedule (the bench's --steps axis; a shorter schedule is another run), with the final images'
SSIM where the pass measured both step counts. Advice never builds on noise:
- a setting is recommended or derived ("every about N") only from a figure whose interval holds at the 95 % level
  and lies above 0, on a machine whose baselines are not NOISY: never from one pair, a few pairs, or noise;
- "the cheapest" is claimed only where that configuration's 95 % interval lies below every other's; otherwise
  the configurations that cannot be told apart are named;
- a configuration whose runs made fewer than 2 previews shows nothing to judge: it is never named or advised,
  and no interval is proposed that makes fewer than 2 in the run;
- decoders are ordered by the ms a preview they took here (the stage times recorded for this model, size and
  device), each an interval over its runs; never by an assumed order. Where nothing was measured, it says so;
- an overhead wholly below 0 is a drifting machine (previews cannot make a run faster): said, never recommended.
A remedy names a setting that shrinks the part that dominates, for the decoder and decode_at in use, and says how
the surface measures it.
No torch here.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from previewlab.preview.judging.advice_record import Advice, Asked
from previewlab.preview.judging.analysis import Finding, Measured, baseline_noise, findings, steady_baselines
from previewlab.preview.judging.costs import cost_order, decoder_costs, separated
from previewlab.preview.judging.estimates import NOISE_LIMIT_PCT, Estimate, Noise
from previewlab.preview.judging.fidelity import NONE, Fidelities
from previewlab.preview.judging.fidelity_rule import by_rule, fidelity_lines, steps_lines
from previewlab.preview.judging.fit import changes, finding_is_sure, fits, nearest, shows, under
from previewlab.preview.judging.remedies import goes, would
from previewlab.preview.judging.settle import Settle, settle_of
from previewlab.preview.judging.surface import BENCH, Surface, said
from previewlab.preview.names import DECODER_NAMES

DEFAULT_BUDGET_PCT = 5.0


def _head(asked: Asked, measured: Sequence[Finding], costs: dict[str, Estimate], noise: Noise | None,
          decoders: Sequence[str], surface: Surface) -> list[str]:
    """The advice's first lines: the rule and the budget, the machine's noise where NOISY, where each
    configuration's preview time goes, and the decoders by their measured cost."""
    lines = [f"advice (budget {asked.budget:g} %: of the configurations whose 95 % interval stays under it, the "
             f"sparsest interval that still gives useful feedback, then the cheapest decoder):"]
    if noise is not None and noise.noisy:
        lines.append("  " + (noise.line(surface.remedies) if surface.remedies else noise.line()))
    lines += [f"  {goes(f, costs, decoders, surface)}" for f in measured]
    if len(costs) > 1:
        lines.append(f"  decoders by their measured ms a preview here: {cost_order(costs)}")
    if len({d.split(" ")[0] for d in costs}) == 1:
        only = next(iter(costs)).split(" ")[0]
        others = [d for d in decoders if d not in ("none", only)]
        lines.append(f"  decoders: only {only} measured here, so none is known to cost less on this model"
                     + (f" ({surface.how('decoder', others[0])})" if others else ""))
    return lines


def _doubts(measured: Sequence[Finding], drifted: tuple[str, ...]) -> list[str]:
    """What the figures cannot say: no overhead is a finding, or some lie below zero (a drifting machine)."""
    out = []
    if not any(finding_is_sure(f.overhead) for f in measured):
        out.append("  no overhead here is a finding at the 95 % level (within noise, one pair, or too few pairs): "
                   "these figures cannot tell the configurations apart")
    if drifted:
        out.append(f"  below zero beyond noise: {', '.join(drifted)}: previews cannot make a run faster, so the "
                   f"machine drifted between the runs; measure again on a quieter machine")
    return out


def advise(found: Sequence[Finding], budget: float = DEFAULT_BUDGET_PCT, current: str | None = None,
           noise: Noise | None = None, surface: Surface = BENCH,
           decoders: Sequence[str] = DECODER_NAMES, fidelity: Fidelities = NONE,
           settle: Settle | None = None) -> Advice:
    """The advice for these findings within `budget` percent; current: the configuration in use (the page's
    running or latest run, a watch's settings; None: a sweep, where nothing is in use); noise: the baselines'
    spread, named first when noisy; surface: how the surface that shows it words its measures; decoders: those
    this model can run (a remedy names only these); fidelity: the fidelity pass's figures (NONE: not measured);
    settle: where the runs' picture settles (None: not measured)."""
    measured = [f for f in found if f.overhead is not None]
    cur = next((f for f in found if f.name == current), None)
    asked = Asked(budget, current, cur, tuple(f.name for f in measured if f.overhead and f.overhead.below_zero))
    if not measured:
        return asked.advice(())
    costs = decoder_costs(found)
    lines = (_head(asked, measured, costs, noise, decoders, surface) + fidelity_lines(fidelity)
             + steps_lines(settle, fidelity, surface) + _doubts(measured, asked.drifted))
    fit = [f for f in measured if fits(f, budget)]
    fit_names = tuple(f.name for f in fit)
    if cur is not None and under(cur, budget):
        lines.append(f"  keep: {cur.name} ({said(cur.overhead, surface.more)}), its interval's top under {budget:g} %")
        return asked.advice(lines, fit_names, keep=True)
    if fit and noise is not None and noise.noisy:
        lines.append(f"  fit {budget:g} % at the 95 % level: {', '.join(fit_names)}; on a NOISY machine no change "
                     f"is advised: measure again on a quiet one")
        return asked.advice(lines, fit_names)
    if fit and fidelity.figures and not fidelity.synthetic:
        return by_rule(fit, fidelity, settle, asked, lines)
    if fit:
        return _nearest_fit(fit, fidelity.synthetic, asked, surface, lines)
    return _nothing_fits(measured, asked, noise, costs, decoders, surface, lines)


def _nearest_fit(fit: Sequence[Finding], synthetic: bool, asked: Asked, surface: Surface, lines: list[str]) -> Advice:
    """Configurations fit, but what their previews show is not judged (not measured, or a synthetic model's): all
    of them, sparsest first, and where one is in use, the one nearest to it."""
    budget, cur, fit_names = asked.budget, asked.cur, tuple(f.name for f in fit)
    listed = ", ".join(f"{f.name} ({f.previews:g} previews a run, {f.overhead.signed() if f.overhead else ''})"
                       for f in sorted(fit, key=lambda f: -f.preview.every))
    why = ("a synthetic model's previews are noise, so their fidelity is not advised on" if synthetic
           else "what a preview shows is not measured (fidelity: previewlab bench --fidelity)")
    lines.append(f"  fit {budget:g} % at the 95 % level, sparsest first: {listed}; {why}, so choose the "
                 f"sparsest whose previews still tell you what you need")
    if cur is None:
        return asked.advice(lines, fit_names)
    pick = nearest(fit, cur)
    change = changes(cur, pick)
    lines.append(f"  set: {change} (now {cur.name}): {pick.name} ({said(pick.overhead, surface.more)}), the "
                 f"nearest to yours under {budget:g} % to the interval's top")
    return asked.advice(lines, fit_names, pick=pick.name, change=change)


def _nothing_fits(measured: Sequence[Finding], asked: Asked, noise: Noise | None, costs: dict[str, Estimate],
                  decoders: Sequence[str], surface: Surface, lines: list[str]) -> Advice:
    """Nothing fits: the cheapest where its interval separates it, else the configurations that cannot be told
    apart, and what would fit, derived only from a sure figure."""
    budget, cur = asked.budget, asked.cur
    costs_of = [f for f in measured if f.preview.budget <= 0 and f.overhead and not f.overhead.below_zero and shows(f)]
    if not costs_of:
        lines.append(f"  nothing measured fits {budget:g} %: no fixed-interval configuration that previews has a "
                     f"figure above zero (the autopilot picks its own intervals; one below zero is the machine's drift)")
        return asked.advice(lines)
    low, apart = separated(costs_of)
    target = cur if cur is not None and cur in costs_of else low if low is not None else \
        costs_of[0] if len(costs_of) == 1 else None
    head = f"  nothing measured fits {budget:g} % at the 95 % level"
    if low is not None:
        head += f": the cheapest, its interval below every other's, is {low.name} ({said(low.overhead, surface.more)})"
    elif apart:
        need = max((f.overhead.more_for_level for f in costs_of if f.overhead), default=0)
        head += (f": {', '.join(apart)} cannot be told apart (their intervals overlap, or are short of the 95 % "
                 f"level), so none is named the cheapest" + (f"; {surface.more(need)}" if need else ""))
    if target is not None:
        head += f"; to bring {target.name} under {budget:g} %: {would(target, budget, noise, costs, decoders, surface)}"
    lines.append(head)
    return asked.advice(lines, cheapest=low.name if low else None, apart=apart)


@dataclass(frozen=True)
class Analysis:
    """Everything every surface shows of a set of runs: each configuration's finding, the baselines' noise,
    the steady baselines counted, the decoders' measured costs, and the advice."""
    findings: tuple[Finding, ...]
    noise: Noise | None
    baselines: int
    advice: Advice
    surface: Surface = field(default=BENCH, compare=False)
    fidelity: Fidelities = NONE
    settle: Settle | None = None

    @property
    def more(self) -> Callable[[int], str]:
        return self.surface.more

    def finding(self, name: str) -> Finding | None:
        return next((f for f in self.findings if f.name == name), None)

    def to_json(self) -> dict[str, Any]:
        r = self.surface.remedies
        fid = self.fidelity

        def shown(f: Finding) -> dict[str, Any] | None:  # None: not measured
            x = fid.judging(f.preview)
            return x.to_json() if x else None
        return {"findings": [{**f.to_json(said(f.overhead, self.more)), "fidelity": shown(f)} for f in self.findings],
                "fidelity": fid.to_json() if fid.figures or fid.steps_alike else None,
                "settle": self.settle.to_json() if self.settle else None,
                "noise": self.noise.to_json() if self.noise else None,
                "noise_line": (self.noise.line(r) if r else self.noise.line()) if self.noise else None,
                "decoder_costs": {d: e.to_json() for d, e in decoder_costs(self.findings).items()},
                "baselines": self.baselines, "advice": self.advice.to_json()}


def analyze(runs: Sequence[Measured], budget: float = DEFAULT_BUDGET_PCT, current: str | None = None,
            noise_limit: float = NOISE_LIMIT_PCT, surface: Surface = BENCH,
            decoders: Sequence[str] = DECODER_NAMES, fidelity: Fidelities = NONE) -> Analysis:
    """The one analysis: runs in the order they ran (analysis.py's pairing), judged within `budget`, the
    baselines' noise against noise_limit; decoders: those the model can run; fidelity: the fidelity pass's
    figures (NONE: not measured); where the picture settles is read from the runs (settle.settle_of)."""
    found = tuple(findings(runs))
    noise = baseline_noise(runs, noise_limit)
    settle = settle_of(runs)
    return Analysis(found, noise, steady_baselines(runs),
                    advise(found, budget, current, noise, surface, decoders, fidelity, settle), surface,
                    fidelity, settle)

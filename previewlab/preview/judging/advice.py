"""What to set: the verdict a set of runs supports, built once here and rendered by every surface (the bench's
summary and report, compare, the server's page, a watch's summary). Every sentence quotes the figure it comes from.

The rule this product is built on: choose the sparsest interval that still gives useful feedback. Of the
configurations whose overhead interval stays under the user's budget (fit), the advice prefers, where the bench's
fidelity pass measured what a preview shows (fidelity.py):
- those whose decoder reaches the fidelity the user set (SSIM against the VAE's preview, --min-fidelity, default
  fidelity.DEFAULT_MIN_SSIM): its interval, at the 95 % level (6 seeds or more), at or above it. One wholly below
  is left out; one whose interval holds the threshold, or is short of the level, is not told from it, and is left
  out, said so;
- and, where the runs measured where the picture settles (fidelity.Settle), whose interval previews at least
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

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from previewlab.preview.judging.analysis import Finding, Measured, baseline_noise, findings, steady_baselines
from previewlab.preview.judging.estimates import NOISE_LIMIT_PCT, SAMPLES_FOR_LEVEL, Estimate, Noise, verdict
from previewlab.preview.judging.fidelity import NONE, Fidelities, Fidelity, Settle, apart, settle_of
from previewlab.preview.names import DECODER_NAMES
from previewlab.preview.settings import SIDE_STREAM_DEVICES

DEFAULT_BUDGET_PCT = 5.0
MIN_PREVIEWS = 2  # a run that previews fewer times shows nothing of its course: never advised
MAX_EVERY = 10_000  # settings' largest interval


def bench_more(n: int) -> str:
    """How the bench gets n more pairs."""
    return f"--repeats {n} more for the 95 % level"


_FLAGS = {"decoder": "--decoders", "every": "--every", "decode_at": "--decode-at", "preview_max": "--preview-max"}


def bench_how(setting: str, value: object) -> str:
    """How the bench measures a setting."""
    return f"measure it: previewlab bench {_FLAGS.get(setting, '--' + setting)} {value}"


@dataclass(frozen=True)
class Surface:
    """What differs between the surfaces that render the advice: how each gets n more pairs (more), what its
    NOISY line offers (remedies: None, the bench's), and how its user measures a setting (how)."""
    more: Callable[[int], str] = bench_more
    remedies: str | None = None
    how: Callable[[str, object], str] = bench_how


BENCH = Surface()


def said(e: Estimate | None, more: Callable[[int], str] = bench_more) -> str:
    """An overhead and its verdict in the words every surface uses."""
    if e is None:
        return "no baseline beside it"
    tail = f"; {more(e.more_for_level)}" if e.more_for_level else ""
    return f"{e.signed()}: {verdict(e)}{tail}"


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


def _every(p: Any) -> str:
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


# -- decoders by their measured cost ---------------------------------------------------------------------------

def costed(p: Any) -> str:
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


def _cheaper_decoders(f: Finding, costs: dict[str, Estimate], can: Sequence[str],
                      surface: Surface) -> list[str]:
    """The decoders to try instead of f's: those measured surely cheaper here, with their figure; where none was,
    those this model can run that were not measured, and how to measure them."""
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


def levers(f: Finding, part: str, costs: dict[str, Estimate], can: Sequence[str], surface: Surface) -> list[str]:
    """Settings that shrink `part` for f's decoder and decode_at, each with how this surface measures it."""
    p = f.preview
    out: list[str] = []
    if part in ("decode", "resize"):
        if p.decoder == "vae" and p.decode_at != "half_latents":
            out.append("decode_at half_latents (the VAE decodes the latents halved per side: about a quarter of the "
                       f"work, blurrier; {surface.how('decode_at', 'half_latents')})")
        if p.decoder == "taesd" and p.decode_at == "full":
            out.append("decode_at preview (TAESD leaves out its last upsampling stages down to the preview's size; "
                       f"{surface.how('decode_at', 'preview')})")
        elif p.decoder == "taesd" and p.preview_max == 0 and f.image_side >= 128:
            # native size: the TAE runs every upsampling stage; at half the side it leaves out its last
            out.append("a smaller preview (TAESD stops its upsampling at the preview's size; "
                       f"{surface.how('preview_max', f.image_side // 2)})")
        if part == "decode":
            out += _cheaper_decoders(f, costs, can, surface)
    elif part in ("transfer", "encode"):
        out.append("fewer or smaller frames (a sparser interval, a smaller preview"
                   + (", a lower quality" if part == "encode" else "") + ")")
    else:  # slower denoising
        if p.mode == "overlap":
            why = "its side stream runs beside the denoising" if f.device in SIDE_STREAM_DEVICES else \
                f"on a {f.device} overlap has no side stream, so the preview work still shares the cores"
            out.append(f"fewer previews (overlap is in use: {why})")
        elif f.device in SIDE_STREAM_DEVICES:
            out.append("overlap mode (the preview work on a side stream), or look at syncs and memory pressure")
        else:
            out.append(f"fewer previews (overlap would not help: a {f.device} has no side stream)")
        out += _cheaper_decoders(f, costs, can, surface)
    return out or ["fewer previews (a sparser interval)"]


def goes(f: Finding, costs: dict[str, Estimate], can: Sequence[str], surface: Surface) -> str:
    """Where one configuration's preview time goes, and the remedy only when its cost is a sure finding."""
    name, ms, total = f.dominant()
    head = f"{f.name}: {said(f.overhead, surface.more)}"
    if not shows(f):
        made = f"{f.previews:g} preview" + ("" if f.previews == 1 else "s")
        return f"{head}; its runs made {made} each: nothing to judge, never advised"
    if total <= 0:
        return f"{head}; no preview time measured"
    where = f"{name} holds {ms:.1f} of its {total:.1f} ms a preview ({100 * ms / total:.0f} %)"
    if not finding_is_sure(f.overhead):
        return f"{head}; {where}, but its overhead is no finding"
    return f"{head}; {where}: {', or '.join(levers(f, name, costs, can, surface))}"


# -- the advice ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Advice:
    """What the figures support: keep the configuration in use (keep), set another (pick, and the settings it
    changes), the configurations that fit the budget (fit), the one surely cheapest of those measured (cheapest)
    or those that cannot be told apart (apart), the configurations whose overhead is wholly below 0 (drifted);
    its lines, as every surface prints them."""
    budget: float
    current: str | None
    keep: bool
    pick: str | None
    change: str
    cheapest: str | None
    drifted: tuple[str, ...]
    lines: tuple[str, ...] = field(default=())
    fit: tuple[str, ...] = ()
    apart: tuple[str, ...] = ()
    headline: str = ""  # the one line a glance reads (the rule's pick and why); "" where the rule picked none

    def to_json(self) -> dict[str, Any]:
        return {"budget": self.budget, "current": self.current, "keep": self.keep, "pick": self.pick,
                "change": self.change, "cheapest": self.cheapest, "drifted": list(self.drifted),
                "fit": list(self.fit), "apart": list(self.apart), "lines": list(self.lines),
                "headline": self.headline}


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


def interval_for(f: Finding, budget: float) -> int | None:
    """The interval that would bring f under `budget`, from its interval's top as if its cost were all per
    preview (every * hi / budget); None where that interval would make fewer than MIN_PREVIEWS in its run."""
    e = f.overhead
    assert e is not None and e.hi is not None
    every = math.ceil(min(f.preview.every * e.hi / budget - 1e-9, MAX_EVERY))
    return every if f.steps // every >= MIN_PREVIEWS else None


def _would(f: Finding, budget: float, noise: Noise | None, costs: dict[str, Estimate], can: Sequence[str],
           surface: Surface) -> str:
    """What would bring f under the budget, derived only from a sure figure on a quiet machine; otherwise what to
    measure instead."""
    e = f.overhead
    assert e is not None
    if noise is not None and noise.noisy:
        return "nothing is derived from a NOISY machine's figures: measure again on a quiet one"
    if not e.sure:
        return f"nothing is derived from a figure short of the 95 % level: {surface.more(e.more_for_level)}"
    if not finding_is_sure(e):
        return "its overhead is within noise: nothing is derived from it"
    if e.hi is not None and e.value <= budget < e.hi:
        return f"its median is under {budget:g} %, its interval's top is not: more pairs narrow the interval"
    ideas = []
    if f.preview.budget <= 0:
        every = interval_for(f, budget)
        if every is not None and every > f.preview.every:
            ideas.append(f"every about {every} ({f.steps // every} previews in its {f.steps} steps: its interval's top "
                         f"over the previews; {surface.how('every', every)})")
        elif every is None:
            ideas.append(f"no interval of {f.preview.decoder} fits with {MIN_PREVIEWS} previews in {f.steps} steps")
    name, _, total = f.dominant()
    if total > 0:
        ideas += [x for x in levers(f, name, costs, can, surface) if not x.startswith("fewer")]
    return ", or ".join(ideas) if ideas else "fewer previews"


# -- what a preview shows: the fidelity pass's figures, the settle step, the rule ----------------------------------

def fidelity_lines(fid: Fidelities) -> list[str]:
    """Each decoder's fidelity against the VAE's preview, the highest first; nothing where no pass ran."""
    if not fid.figures:
        return []
    head = (f"  fidelity (SSIM and PSNR against the full VAE's decode of the same latents, at the preview's size; "
            f"useful from SSIM {fid.min_ssim:g})")
    if fid.synthetic:
        head += ": a SYNTHETIC model paints noise, so these figures say nothing of a real picture and are never advised on"
    out = [head + ":"]
    for f in sorted(fid.figures, key=lambda f: -f.ssim.value):
        r = f.reaches(fid.min_ssim)
        tag = "" if fid.synthetic else " (reaches it)" if r else " (below it)" if r is False else \
            f" (short of the 95 % level: --fidelity-seeds {SAMPLES_FOR_LEVEL} or more)" if not f.ssim.sure else \
            " (its interval holds the threshold: not told from it; more --fidelity-seeds)"
        out.append(f"    {f.name}: {f.said()}{tag}")
    return out


def steps_lines(settle: Settle | None, fid: Fidelities, surface: Surface) -> list[str]:
    """Where the picture settles well before the last step: said, with how to measure a shorter schedule (never
    'use fewer steps': it is another run), and the final images' SSIM where the pass ran both step counts."""
    out = []
    if settle is not None and settle.early:
        bench = surface.how is bench_how  # the bench sweeps both step counts at once; the page runs one at a time
        value = f"{settle.step},{settle.steps}" if bench else settle.step
        out.append(f"  steps: the picture settles at step {settle.step} of {settle.steps} (previews every "
                   f"{settle.every}): its last {settle.steps - settle.step} steps change no preview visibly. A shorter "
                   f"schedule is another run, not this one stopped early: {surface.how('steps', value)}"
                   + (" (with --fidelity the bench compares the final images of the two step counts)" if bench else
                      ", and compare its final image with this one's"))
    for a in fid.steps_alike:
        out.append(f"  steps measured: {a.said()}")
    return out


def _why(f: Finding, fid: Fidelity | None, settle: Settle | None) -> str:
    """The one line of a pick: decoder and interval, overhead, fidelity, the settle step, the previews before it."""
    p, e = f.preview, f.overhead
    head = f"{p.decoder} every {p.every}" + ("" if p.decode_at == "preview" else f" at {p.decode_at}")
    out = f"{head}: {e.signed() if e else 'no overhead'}, {fid.said() if fid else 'fidelity not measured'}"
    if settle is None:
        return out + "; where the picture settles is not measured"
    if not settle.settled:
        return out + f"; {settle.said()}"
    return (out + f"; {settle.said()}; every {p.every} previews {settle.step // p.every} times before it settles")


def _tie(tied: Sequence[Finding], fid: Fidelities) -> tuple[Finding, str]:
    """Of configurations whose overheads cannot be told apart: the one whose fidelity lies above every other's
    (beyond noise), else the sparsest interval, then the lowest median; and why, in words."""
    def of(f: Finding) -> Fidelity | None:
        return fid.judging(f.preview)
    for f in tied:
        mine = of(f)
        others = [o for g in tied if (o := of(g)) is not None and o != mine]
        if mine is not None and others and all(apart(mine, o) for o in others):
            return f, f"of {', '.join(g.name for g in tied)} (overheads not told apart), the highest fidelity beyond noise"
    pick = min(tied, key=lambda f: (-f.preview.every, f.overhead.value if f.overhead else math.inf))
    same = len({of(g) for g in tied}) > 1
    return pick, (f"of {', '.join(g.name for g in tied)} (overheads not told apart"
                  + ("; fidelity within noise, so no decoder is preferred on it" if same else "")
                  + "), the sparsest interval, then the lowest median")


def by_rule(fit: Sequence[Finding], fid: Fidelities, settle: Settle | None, budget: float, current: str | None,
            cur: Finding | None, drifted: tuple[str, ...], lines: list[str]) -> Advice:
    """The rule (the module's docstring) over the configurations that fit, with fidelity figures of a real model."""
    fit_names = tuple(f.name for f in fit)
    useful, out = [], []
    for f in fit:
        mine = fid.judging(f.preview)
        r = mine.reaches(fid.min_ssim) if mine else None
        if mine is None:
            out.append(f"{f.name} (its decoder's fidelity not measured)")
        elif r is False:
            out.append(f"{f.name} (SSIM {mine.ssim.value:.2f} below {fid.min_ssim:g})")
        elif r is None and not mine.ssim.sure:
            out.append(f"{f.name} (SSIM {mine.ssim.value:.2f} from {mine.seeds} seeds: short of the 95 % level)")
        elif r is None:
            out.append(f"{f.name} (SSIM {mine.ssim.value:.2f}: its interval holds {fid.min_ssim:g})")
        elif settle is not None and not settle.shows(f.preview.every):
            out.append(f"{f.name} (every {f.preview.every} previews {settle.step // f.preview.every} times before "
                       f"the picture settles at step {settle.step}: it misses changes)")
        else:
            useful.append(f)
    if out:
        lines.append(f"  fit {budget:g} % but left out: {', '.join(out)}")
    if not useful:
        lines.append(f"  none of the {len(fit)} configurations that fit {budget:g} % shows a useful preview by this "
                     f"rule: lower --min-fidelity, or measure a denser interval or another decoder")
        return Advice(budget, current, False, None, "", None, drifted, tuple(lines), fit_names)
    low, tied = separated(useful)
    if low is not None or len(useful) == 1:
        pick, how = low or useful[0], "the cheapest, its interval below every other's" if low else "the one left"
    else:
        pick, how = _tie([f for f in useful if f.name in tied], fid)
    headline = _why(pick, fid.judging(pick.preview), settle)
    change = changes(cur, pick)
    lines.append(f"  set: {pick.name} ({how}): {headline}")
    return Advice(budget, current, False, pick.name, change, low.name if low else None, drifted, tuple(lines),
                  fit_names, tied if low is None else (), headline)


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
    drifted = tuple(f.name for f in measured if f.overhead and f.overhead.below_zero)
    if not measured:
        return Advice(budget, current, False, None, "", None, drifted)
    noisy = noise is not None and noise.noisy
    costs = decoder_costs(found)
    lines = [f"advice (budget {budget:g} %: of the configurations whose 95 % interval stays under it, the sparsest "
             f"interval that still gives useful feedback, then the cheapest decoder):"]
    if noisy:
        assert noise is not None
        lines.append("  " + (noise.line(surface.remedies) if surface.remedies else noise.line()))
    lines += [f"  {goes(f, costs, decoders, surface)}" for f in measured]
    if len(costs) > 1:
        lines.append(f"  decoders by their measured ms a preview here: {cost_order(costs)}")
    if len({d.split(" ")[0] for d in costs}) == 1:
        only = next(iter(costs)).split(" ")[0]
        others = [d for d in decoders if d not in ("none", only)]
        lines.append(f"  decoders: only {only} measured here, so none is known to cost less on this model"
                     + (f" ({surface.how('decoder', others[0])})" if others else ""))
    lines += fidelity_lines(fidelity) + steps_lines(settle, fidelity, surface)
    if not any(finding_is_sure(f.overhead) for f in measured):
        lines.append("  no overhead here is a finding at the 95 % level (within noise, one pair, or too few pairs): "
                     "these figures cannot tell the configurations apart")
    if drifted:
        lines.append(f"  below zero beyond noise: {', '.join(drifted)}: previews cannot make a run faster, so the "
                     f"machine drifted between the runs; measure again on a quieter machine")
    fit = [f for f in measured if fits(f, budget)]
    fit_names = tuple(f.name for f in fit)
    if cur is not None and under(cur, budget):
        lines.append(f"  keep: {cur.name} ({said(cur.overhead, surface.more)}), its interval's top under {budget:g} %")
        return Advice(budget, current, True, None, "", None, drifted, tuple(lines), fit_names)
    if fit and noisy:
        lines.append(f"  fit {budget:g} % at the 95 % level: {', '.join(fit_names)}; on a NOISY machine no change "
                     f"is advised: measure again on a quiet one")
        return Advice(budget, current, False, None, "", None, drifted, tuple(lines), fit_names)
    if fit and fidelity.figures and not fidelity.synthetic:
        return by_rule(fit, fidelity, settle, budget, current, cur, drifted, lines)
    if fit:
        listed = ", ".join(f"{f.name} ({f.previews:g} previews a run, {f.overhead.signed() if f.overhead else ''})"
                           for f in sorted(fit, key=lambda f: -f.preview.every))
        why = ("a synthetic model's previews are noise, so their fidelity is not advised on" if fidelity.synthetic
               else "what a preview shows is not measured (fidelity: previewlab bench --fidelity)")
        lines.append(f"  fit {budget:g} % at the 95 % level, sparsest first: {listed}; {why}, so choose the "
                     f"sparsest whose previews still tell you what you need")
        if cur is None:
            return Advice(budget, current, False, None, "", None, drifted, tuple(lines), fit_names)
        pick = nearest(fit, cur)
        change = changes(cur, pick)
        lines.append(f"  set: {change} (now {cur.name}): {pick.name} ({said(pick.overhead, surface.more)}), the "
                     f"nearest to yours under {budget:g} % to the interval's top")
        return Advice(budget, current, False, pick.name, change, None, drifted, tuple(lines), fit_names)
    return _nothing_fits(measured, budget, current, cur, noise, costs, decoders, surface, drifted, lines)


def _nothing_fits(measured: Sequence[Finding], budget: float, current: str | None, cur: Finding | None,
                  noise: Noise | None, costs: dict[str, Estimate], decoders: Sequence[str], surface: Surface,
                  drifted: tuple[str, ...], lines: list[str]) -> Advice:
    """Nothing fits: the cheapest where its interval separates it, else the configurations that cannot be told
    apart, and what would fit, derived only from a sure figure."""
    costs_of = [f for f in measured if f.preview.budget <= 0 and f.overhead and not f.overhead.below_zero and shows(f)]
    if not costs_of:
        lines.append(f"  nothing measured fits {budget:g} %: no fixed-interval configuration that previews has a "
                     f"figure above zero (the autopilot picks its own intervals; one below zero is the machine's drift)")
        return Advice(budget, current, False, None, "", None, drifted, tuple(lines))
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
        head += f"; to bring {target.name} under {budget:g} %: {_would(target, budget, noise, costs, decoders, surface)}"
    lines.append(head)
    return Advice(budget, current, False, None, "", low.name if low else None, drifted, tuple(lines), (), apart)


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
    figures (NONE: not measured); where the picture settles is read from the runs (fidelity.settle_of)."""
    found = tuple(findings(runs))
    noise = baseline_noise(runs, noise_limit)
    settle = settle_of(runs)
    return Analysis(found, noise, steady_baselines(runs),
                    advise(found, budget, current, noise, surface, decoders, fidelity, settle), surface,
                    fidelity, settle)

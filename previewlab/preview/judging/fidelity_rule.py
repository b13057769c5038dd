"""What a preview shows, in the advice: the fidelity pass's figures and where the picture settles, in lines, and
the rule that picks by them (advice.py's docstring) among the configurations that fit, where the pass measured a
real model. No torch here.
"""
from __future__ import annotations

import math
from typing import Sequence

from previewlab.preview.judging.advice_record import Advice, Asked
from previewlab.preview.judging.analysis import Finding
from previewlab.preview.judging.costs import separated
from previewlab.preview.judging.estimates import SAMPLES_FOR_LEVEL
from previewlab.preview.judging.fidelity import Fidelities, Fidelity, apart
from previewlab.preview.judging.fit import changes
from previewlab.preview.judging.settle import Settle
from previewlab.preview.judging.surface import Surface, bench_how


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


def headline(f: Finding, fid: Fidelity | None, settle: Settle | None) -> str:
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


def by_rule(fit: Sequence[Finding], fid: Fidelities, settle: Settle | None, asked: Asked, lines: list[str]) -> Advice:
    """The rule (advice.py's docstring) over the configurations that fit, with fidelity figures of a real model."""
    budget, fit_names = asked.budget, tuple(f.name for f in fit)
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
        return asked.advice(lines, fit_names)
    low, tied = separated(useful)
    if low is not None or len(useful) == 1:
        pick, how = low or useful[0], "the cheapest, its interval below every other's" if low else "the one left"
    else:
        pick, how = _tie([f for f in useful if f.name in tied], fid)
    line = headline(pick, fid.judging(pick.preview), settle)
    lines.append(f"  set: {pick.name} ({how}): {line}")
    return asked.advice(lines, fit_names, pick=pick.name, change=changes(asked.cur, pick),
                        cheapest=low.name if low else None, apart=tied if low is None else (), headline=line)

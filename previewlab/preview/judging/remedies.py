"""Remedies: where one configuration's preview time goes, the settings that shrink the part that dominates (for
the decoder and decode_at in use, each with how the surface measures it), and what would bring a configuration
under the budget, derived only from a sure figure on a quiet machine (the interval it proposes included). No torch
here.
"""
from __future__ import annotations

import math
from typing import Sequence

from previewlab.preview.judging.analysis import Finding
from previewlab.preview.judging.costs import cheaper_decoders
from previewlab.preview.judging.estimates import Estimate, Noise
from previewlab.preview.judging.fit import MIN_PREVIEWS, finding_is_sure, shows
from previewlab.preview.judging.surface import Surface, said
from previewlab.preview.settings import SIDE_STREAM_DEVICES

MAX_EVERY = 10_000  # settings' largest interval


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
            out += cheaper_decoders(f, costs, can, surface)
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
        out += cheaper_decoders(f, costs, can, surface)
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


def interval_for(f: Finding, budget: float) -> int | None:
    """The interval that would bring f under `budget`, from its interval's top as if its cost were all per
    preview (every * hi / budget); None where that interval would make fewer than MIN_PREVIEWS in its run."""
    e = f.overhead
    assert e is not None and e.hi is not None
    every = math.ceil(min(f.preview.every * e.hi / budget - 1e-9, MAX_EVERY))
    return every if f.steps // every >= MIN_PREVIEWS else None


def would(f: Finding, budget: float, noise: Noise | None, costs: dict[str, Estimate], can: Sequence[str],
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

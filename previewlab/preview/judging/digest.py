"""One run in a few lines: what it cost, where a preview's time went and what it held; then what the watch's calls
of the same settings support, from the one analysis every surface renders (advice.py).

A script's watch sees only its own calls. A call with previews is measured against the watch's calls without
previews (decoder none) of the same settings, paired as the bench pairs its runs: the call right before it.
Without such calls the overhead is unknown, and the summary says how to measure it rather than advising on the
previews' on-path share, which overlap mode hides and a loaded machine inflates.
"""
from __future__ import annotations

from typing import Collection, Sequence

from previewlab.preview.judging.advice import DEFAULT_BUDGET_PCT, analyze
from previewlab.preview.judging.analysis import cost_key, entry, name_of
from previewlab.preview.judging.estimates import NOISE_LIMIT_PCT, SAMPLES_FOR_LEVEL
from previewlab.preview.judging.progress import settle_line
from previewlab.preview.judging.stages import on_path_share_pct, row_parts, shares_pct
from previewlab.preview.judging.surface import Surface
from previewlab.preview.names import DECODER_NAMES
from previewlab.preview.record.records import StepRow
from previewlab.preview.record.run import RunRecord
from previewlab.preview.settings import PreviewSettings

__all__ = ["digest", "judged", "parts"]

def parts(rows: Sequence[StepRow]) -> dict[str, float]:
    """A run's mean ms a preview by part over its previews (stages.row_parts: the analysis's definition)."""
    return row_parts(rows)


def digest(record: RunRecord, rows: Sequence[StepRow]) -> list[str]:
    """The run's own lines: what it cost and where its previews' time went (facts of one run: no advice)."""
    t, p = record.totals, record.meta.preview or PreviewSettings(decoder="none")  # None: no step callback
    steps = max(1, t.steps_run or len(rows))
    made = sum(r.preview for r in rows)
    every = f"auto {p.budget:g} %" if p.budget > 0 else f"every {p.every}"
    lines = [f"run {record.run_id}: {steps} steps in {t.wall_s:.2f} s, {t.denoise_ms / steps:.1f} ms a "
             f"step denoising; {made} previews ({p.decoder}, {every}, {p.mode})"]
    share = on_path_share_pct(t.on_path_ms, t.denoise_ms)
    if made:
        by = parts(rows)
        name = max(by, key=lambda k: by[k])
        total = sum(by.values())
        where = (f"; {name} holds {by[name]:.1f} of its {total:.1f} ms a preview "
                 f"({shares_pct(by)[name]:.0f} %)") if total > 0 else ""
        overlap = " (overlap: what runs beside the denoising shows only against a call without previews)" \
            if p.mode == "overlap" else ""
        lines.append(f"previews: {t.on_path_ms:.0f} ms on the denoising path, {share:.1f} % of it{overlap}{where}")
        most = max(r.mem_mb for r in rows)
        if t.mem_source:
            lines.append(f"memory: a preview raised it by up to {most:.1f} MiB over its step; the run peaked at "
                         f"{t.peak_mem_mb:.0f} MiB ({t.mem_source})")
    elif t.mem_source:
        lines.append(f"memory: the run peaked at {t.peak_mem_mb:.0f} MiB ({t.mem_source})")
    if t.busy_pct is not None:
        lines.append(f"device busy while denoising: {t.busy_pct:.0f} % ({t.busy_source})")
    said = settle_line(record.meta, t)
    if said:
        lines.append(said if said.startswith("progress") else f"progress: {said}")
    elif made:
        lines.append("progress: not read (watch.save(image, path) hands the final image over)")
    return lines


WATCH_REMEDIES = "more pairs of calls, no other jobs on this machine, or fewer torch threads than cores"


def watch_more(n: int) -> str:
    """How a watch gets n more pairs."""
    return f"{n} more pairs of calls (previews off, then on) for the 95 % level"


def watch_how(setting: str, value: object) -> str:
    """How a script's user measures a setting."""
    return f"measure it: watch.controls.set({setting}={value!r}), calls alternating with previews off and on"


WATCH = Surface(watch_more, WATCH_REMEDIES, watch_how)


def judged(records: Sequence[RunRecord], current: PreviewSettings, budget: float = DEFAULT_BUDGET_PCT,
           changed: Collection[str] = (), decoders: Sequence[str] = DECODER_NAMES,
           noise_limit: float = NOISE_LIMIT_PCT) -> list[str]:
    """What a watch's calls of the latest call's settings support (advice.analyze over them, in the order they
    ran, the ids in `changed` being calls whose settings changed live, as the server's figures read them), for
    the settings in use now, the baselines' noise against noise_limit; how to measure where no call without
    previews can be paired."""
    last = records[-1]
    like = [entry(r, r.totals.status, changed=r.run_id in changed) for r in records
            if cost_key(r.meta) == cost_key(last.meta)]
    in_use = name_of(current, last.meta.num_frames)
    a = analyze(like, budget, in_use, noise_limit, surface=WATCH, decoders=decoders)
    if not any(f.overhead is not None for f in a.findings):
        return [f"overhead: unknown: no call of these settings without previews ran right before one with them. "
                f"Alternate calls with previews off (watch.controls.set(decoder=\"none\")) and on, "
                f"{SAMPLES_FOR_LEVEL} pairs or more, as the bench pairs its runs; summary() then says what previews "
                f"cost, and how much of it is noise"]
    quiet = [a.noise.line(WATCH_REMEDIES)] if a.noise is not None and not a.noise.noisy else []
    return quiet + [ln.strip() for ln in a.advice.lines]

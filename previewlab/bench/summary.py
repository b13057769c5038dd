"""The bench's summary: each configuration's row, rendered from the one analysis (preview/judging/): its overhead,
interval, verdict and slowdown are the findings', its stage spreads stages.py's; nothing here estimates."""
from __future__ import annotations

import statistics
from dataclasses import replace
from typing import Iterable, Sequence

from previewlab.bench.rows import SweepRow, SweepStep
from previewlab.bench.summary_rows import STAGES, ConfigSummary, Spread, Stages
from previewlab.preview.judging.analysis import Finding, direct_cost, findings
from previewlab.preview.judging.estimates import Estimate, Noise, percentile
from previewlab.preview.judging.fidelity import NONE, Fidelities
from previewlab.preview.judging.fit import finding_is_sure
from previewlab.preview.judging.stages import spread, stage_spreads
from previewlab.preview.judging.surface import bench_more, said
from previewlab.preview.record.records import StepRow
from previewlab.preview.settings import PreviewSettings

__all__ = ["STAGES", "percentile", "steady", "summarize", "table", "mode_ratios"]


def steady(runs: Iterable[SweepRow]) -> list[SweepRow]:
    """The runs statistics are taken over (SweepRow.steady)."""
    return [r for r in runs if r.steady]


def summarize(runs: Iterable[SweepRow], steps: Iterable[SweepStep],
              found: Sequence[Finding] | None = None, fidelity: Fidelities = NONE) -> list[ConfigSummary]:
    """One row per configuration, in the order each first ran: runs, median wall, each stage's median and p95
    (stages.stage_spreads), and the overhead, its verdict and the denoising's slowdown from the analysis's
    findings (found; None: analysis.findings of these runs, in the order they ran). Warm-up runs and the first
    run after load are left out. fidelity: the fidelity pass's figures, each configuration's decoder's on its row."""
    ordered = list(runs)
    of = {f.name: f for f in (findings(ordered) if found is None else found)}
    direct = direct_cost(ordered)
    runs = steady(ordered)
    steady_ids = {r.run_id for r in runs}
    by_cfg: dict[str, list[SweepRow]] = {}
    for r in runs:
        by_cfg.setdefault(r.config.name, []).append(r)
    step_rows: dict[str, list[StepRow]] = {}
    for s in steps:
        if s.row.run_id in steady_ids:
            step_rows.setdefault(s.config, []).append(s.row)
    ids = {r.run_id: r for r in ordered}
    return [_with_fidelity(_summary(cfg, rs, step_rows.get(cfg, []), of.get(cfg), ids, direct.get(cfg)), fidelity,
                           rs[0].record.meta.preview)
            for cfg, rs in by_cfg.items()]


def _with_fidelity(row: ConfigSummary, fid: Fidelities, p: PreviewSettings | None) -> ConfigSummary:
    """The row with its decoder's fidelity at its decode_at, where the pass measured it."""
    x = fid.of(p.decoder, p.decode_at) if p is not None else None
    if x is None:
        return row
    return replace(row, fidelity_ssim=x.ssim, fidelity_psnr_db=x.psnr_db.value, fidelity_synthetic=x.synthetic)


def _summary(cfg: str, runs: list[SweepRow], steps: list[StepRow], f: Finding | None,
             ids: dict[str, SweepRow], vs_direct: Estimate | None) -> ConfigSummary:
    """A configuration's row from its steady runs, their step rows and its finding (None: a baseline or a
    direct call). Besides its settings (from its first run): each preview's memory rise over its step (median,
    most), the runs' peak and its rise over the baseline paired with each run (median), the device's busy
    share."""
    spreads = stage_spreads(steps)
    stages = Stages(**{st: Spread(*spreads[st]) for st in STAGES})
    made = max(1, sum(r.record.totals.previews for r in runs))
    per_frame = [s.decode_ms_per_frame for s in steps if s.preview and s.decode_ms_per_frame]
    mems = [s.mem_mb for s in steps if s.preview]
    peaks = [p for r in runs if (p := r.record.totals.peak_mem_mb)]
    pairs = [(ids[a], ids[b]) for a, b in (f.pairs if f else ())]
    over = [p - b for r, base in pairs if (p := r.record.totals.peak_mem_mb) and (b := base.record.totals.peak_mem_mb)]
    busy = [r.record.totals.busy_pct for r in runs if r.record.totals.busy_pct is not None]
    first = runs[0].config
    ov = f.overhead if f else None
    return ConfigSummary(
        config=cfg, runs=len(runs), wall_s=statistics.median(r.record.totals.wall_s for r in runs), stages=stages,
        previews=statistics.median(r.record.totals.previews for r in runs),
        bytes_per_preview=sum(r.record.totals.bytes for r in runs) / made,  # a clip's preview: all its frames
        # a clip's previews send several frames each; older CSVs have no frames_sent: one frame per preview
        frames_per_preview=sum(r.record.totals.frames_sent or r.record.totals.previews for r in runs) / made,
        decode_ms_per_frame_p50=spread(per_frame)[0] if per_frame else stages.decode_ms.p50,
        overhead=ov, vs_direct=vs_direct, verdict=f.verdict if f and ov else "",
        decoder=first.decoder, every=first.every, budget=first.budget, preview_max=first.preview_max,
        mode=first.mode, steps=statistics.median(_steps(r) for r in runs),
        slower_ms_per_step=f.slower_ms_per_step if f else None,
        mem_mb_p50=spread(mems)[0] if mems else None, mem_mb_max=max(mems) if mems else None,
        peak_mem_mb=statistics.median(peaks) if peaks else None,
        mem_over_mb=statistics.median(over) if over else None,
        busy_pct=statistics.median(busy) if busy else None,
        mem_source=next((r.record.totals.mem_source for r in runs), ""))


def _steps(r: SweepRow) -> int:
    """The steps a run did (older CSVs: the steps asked)."""
    return r.record.totals.steps_run or r.record.meta.steps


def said_once(advice: Sequence[str], noise: Noise | None) -> list[str]:
    """The advice's lines under the table, less its NOISY line: the table's first line says it (once, first)."""
    if noise is None or not noise.noisy:
        return list(advice)
    return [ln for ln in advice if ln.strip() != noise.line()]


def noisy_exit(noise: Noise, strict: bool) -> str:
    """The bench's last line on a noisy machine: where the NOISY line is, not the line again."""
    return (f"a noisy machine (the baselines spread {noise.spread_pct:.1f} %, past --noise-limit "
            f"{noise.limit_pct:g} %): the summary's first line says what that means and what to do"
            + ("; exit 3 (--strict)" if strict else ""))


def table(rows: list[ConfigSummary], meta: str, noise: Noise | None) -> str:
    """A fixed-width table: the baselines' noise first, then per configuration stage medians/p95 (ms per
    preview) and the overhead with its interval and verdict."""
    clips = any(r.previews and r.frames_per_preview > 1 for r in rows)  # a clip's previews: frames too
    cw = max([30] + [len(r.config) + 1 for r in rows])  # a clip's names are longer: the column fits them
    head = f"{'config':<{cw}}{'runs':>5}{'wall s':>9}{'denoise p50':>12}{'decode p50/p95':>16}" \
           f"{'resize p50/p95':>16}{'sync+xfer p50':>14}{'encode p50/p95':>16}{'KB/prev':>9}{'MB/prev':>9}{'peak MB':>15}{'busy %':>8}" \
        + (f"{'frames':>7}{'ms/frame':>9}" if clips else "") \
        + f"  {'overhead % [interval]':<34}verdict"
    first = noise.line() if noise else "noise: fewer than two no-preview baselines, so their spread cannot be judged"
    lines = [first, meta, head, "-" * len(head)]
    for r in rows:
        e, d, st = r.overhead, r.vs_direct, r.stages
        ov, said = (e.signed(), _verdict(e)) if e else ("", "")
        if d is not None:
            ov, said = "vs direct " + d.signed(2), _verdict(d)
        lines.append(
            f"{r.config:<{cw}}{r.runs:>5}{r.wall_s:>9.2f}{st.denoise_ms.p50:>12.1f}"
            f"{st.decode_ms.p50:>9.1f}/{st.decode_ms.p95:<6.1f}{st.resize_ms.p50:>9.2f}/{st.resize_ms.p95:<6.2f}"
            f"{st.sync_ms.p50 + st.transfer_ms.p50:>14.2f}{st.encode_ms.p50:>9.2f}/{st.encode_ms.p95:<6.2f}"
            f"{r.bytes_per_preview / 1024:>9.1f}{_fig(r.mem_mb_p50, '.1f'):>9}{_peak(r):>15}"
            f"{_fig(r.busy_pct, '.0f'):>8}"
            + (f"{r.frames_per_preview:>7.1f}{r.decode_ms_per_frame_p50:>9.1f}" if clips else "")
            + f"  {ov:<34}{said}".rstrip())
    lines.append("denoise p50: median ms per step; decode, resize, sync+xfer, encode: median (p50) and 95th "
                 "percentile (p95) ms over the previews (where a preview's time goes, in the advice and the report's "
                 "breakdown, is the mean ms a preview); "
                 "KB/prev: KiB per preview; MB/prev: median MiB a preview raised memory over its step's; peak MB: "
                 "the runs' median peak memory (+ over the baseline beside each run); busy %: the device busy while "
                 "denoising" + ("; frames: per preview, ms/frame: median decode ms per frame shown"
                                              if clips else "")
                 + "; overhead: median over the runs of wall vs the no-preview baseline run beside it, "
                 "[the interval that holds the true median with 95 % probability], then its level in parentheses "
                 "when too few runs reach 95 %; within noise: the interval holds 0, so it is no finding")
    return "\n".join(lines)


def _verdict(e: Estimate) -> str:
    """An overhead's verdict and how the bench gets to the 95 % level, in the advice's words (surface.said)."""
    return said(e, bench_more).removeprefix(f"{e.signed()}: ")


def _fig(x: float | None, spec: str) -> str:
    return "–" if x is None else format(float(x), spec)


def _peak(r: ConfigSummary) -> str:
    """The runs' peak memory, with its rise over the baselines beside them where it has one."""
    if r.peak_mem_mb is None:
        return "–"
    return f"{float(r.peak_mem_mb):.0f}" + ("" if r.mem_over_mb is None else f" ({float(r.mem_over_mb):+.0f})")


def mode_ratios(rows: list[ConfigSummary]) -> str:
    """Per decoder and interval measured in both modes: overlap's overhead as a fraction of sync's."""
    by = {r.config: r for r in rows}
    lines = []
    for full, r in by.items():
        name, sync, rest = full.partition("/sync")  # rest: a run setup's axes ('/euler/8steps'), or nothing
        if not sync or rest[:1] not in ("", "/"):
            continue
        o = by.get(name + "/overlap" + rest)
        name += rest
        se, oe = r.overhead, (o.overhead if o else None)
        if se is None or oe is None:
            continue
        # a ratio of two overheads means something only when both are findings (fit.finding_is_sure)
        if not finding_is_sure(se) or not finding_is_sure(oe):
            ratio = "n/a (an overhead short of a finding: within noise, below the 95 % level, or n=1)"
        else:
            ratio = f"{oe.value / se.value:.2f}" if se.value > 0 else "n/a (sync overhead <= 0)"
        lines.append(f"  {name:<28} sync {se.signed():<24} overlap {oe.signed():<24} "
                     f"overlap/sync {ratio}")
    return ("overhead, overlap against sync:\n" + "\n".join(lines)) if lines else ""

"""previewlab report DIR: a sweep's CSVs -> PNG plots and one self-contained report.html.

Reading (CSV -> rows) and the figures (rows -> numbers, report_figures.py) are pure; plotting (report_plots.py)
and writing are the I/O at the end.
"""
from __future__ import annotations

import argparse
import base64
import html
import sys
from pathlib import Path
from typing import Sequence

from previewlab.bench.report_figures import Figures, figures
from previewlab.bench.report_plots import plot
from previewlab.bench.rows import NotASweep, SweepRow, read
from previewlab.bench.summary_rows import ConfigSummary
from previewlab.preview.judging.surface import bench_more, said


def caption(runs: Sequence[SweepRow]) -> str:
    """Model (synthetic where it is), device, dtype, resolution and steps: carried by every plot."""
    r = next((x for x in runs if x.role != "warmup"), runs[0]).record
    synth = "SYNTHETIC " if r.meta.synthetic else ""
    note = f" ({r.meta.model_note})" if r.meta.model_note else ""
    return (f"{synth}{r.meta.model}{note} | {r.totals.device_name} {r.meta.dtype} | {r.meta.width}x{r.meta.height} | "
            f"{r.meta.steps} steps | torch {r.totals.torch} diffusers {r.totals.diffusers}")


def _fig(x: float | None) -> str:
    return "" if x is None else f"{float(x):.1f}"


def render_html(fig: Figures, title: str, images: list[Path], advice: Sequence[str] = (),
                headline: str = "") -> str:
    def overhead(s: ConfigSummary) -> tuple[str, str]:
        e = s.overhead
        return (e.signed(), said(e, bench_more).removeprefix(f"{e.signed()}: ")) if e else ("", "")
    summary: list[ConfigSummary] = fig.summary
    rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(v if not isinstance(v, float) else round(v, 2)))}</td>"
                         for v in (s.config, s.runs, s.wall_s, s.stages.decode_ms.p50, s.stages.encode_ms.p50,
                                   _fig(s.mem_mb_p50), _fig(s.peak_mem_mb), _fig(s.mem_over_mb),
                                   _fig(s.busy_pct), *overhead(s))) + "</tr>"
        for s in summary)
    noise = fig.noise
    line = noise.line() if noise else "noise: fewer than two no-preview baselines, so their spread cannot be judged"
    warn = (f'<p class="{"noisy" if noise is not None and noise.noisy else "quiet"}">{html.escape(line)}</p>')
    imgs = "".join(f'<figure><img alt="{p.stem}" src="data:image/png;base64,{base64.b64encode(p.read_bytes()).decode()}">'
                   f"<figcaption>{p.stem.replace('_', ' ')}</figcaption></figure>" for p in images)
    return (f"<!doctype html><meta charset=utf-8><title>previewlab report</title>"
            f"<style>body{{font:14px system-ui;margin:24px}}td,th{{padding:2px 8px;border-bottom:1px solid #ddd}}"
            f"img{{max-width:100%}}pre.advice{{white-space:pre-wrap;overflow-wrap:anywhere}}.noisy{{background:#fde3b8;border:1px solid #d08a1e;padding:8px}}</style>"
            f"<h1>previewlab report</h1>{warn}<p>{html.escape(title)}</p>"
            + (f'<p class=headline><b>advised: {html.escape(headline)}</b></p>' if headline else
               "<p class=headline>" + ("fidelity: not measured (previewlab bench --fidelity)" if not fig.worth
                                       else "no configuration advised by the rule (the advice says why)") + "</p>") +
            f"<table><tr><th>config</th><th>runs</th><th>wall s (median)</th><th>decode ms p50</th><th>encode ms p50</th>"
            f"<th>MiB a preview p50</th><th>peak MiB</th><th>peak over baseline MiB</th><th>device busy %</th>"
            f"<th>overhead % [interval]</th><th>verdict</th></tr>{rows}</table>"
            f"<pre class=advice>{html.escape(chr(10).join(advice))}</pre>{imgs}")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="previewlab report", description=__doc__)
    p.add_argument("dir", type=Path, help="a folder written by previewlab bench --out")
    p.add_argument("--budget", type=float, default=None,
                   help="the preview overhead the advice keeps under, percent (default: the sweep's own, from its "
                        "sweep.json; 5 for a folder without one)")
    args = p.parse_args(argv)
    try:
        sweep = read(args.dir).by_device()  # a sweep over several devices: a table per device
    except NotASweep as e:
        print(f"previewlab report: {e}", file=sys.stderr)
        return 2
    if not sweep.runs:
        print(f"previewlab report: {args.dir}/runs.csv has no runs", file=sys.stderr)
        return 2
    title = caption(sweep.runs)
    fig = figures(sweep, args.budget)
    noise = fig.noise
    loud = f"NOISY MACHINE (baselines spread {noise.spread_pct:.1f} %) | " if noise is not None and noise.noisy else ""
    images = plot(fig, loud + title, args.dir)  # a plot copied out of the report still says so
    analysis = fig.analysis
    (args.dir / "report.html").write_text(render_html(fig, title, images, analysis.advice.lines,
                                                      analysis.advice.headline))
    print(f"wrote {args.dir / 'report.html'} and {len(images)} plots")
    return 0

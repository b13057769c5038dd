"""Pure statistics over a sweep's rows, and the table the bench prints."""
from __future__ import annotations

import statistics
from typing import Any, Iterable, Sequence

from previewlab.preview.records import PREVIEW_STAGES

STAGES = ("denoise_ms",) + PREVIEW_STAGES


def percentile(xs: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks; q in [0, 100]."""
    s = sorted(xs)
    if not s:
        return float("nan")
    k = (len(s) - 1) * q / 100
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def steady(runs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs statistics are taken over: neither warm-up rounds nor the first run after the model loaded
    (both kept in runs.csv). `first_run` is 0/1, or "0"/"1" as read back from the CSV."""
    return [r for r in runs if r["role"] != "warmup" and not int(r["first_run"])]


def summarize(runs: Iterable[dict[str, Any]], steps: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One dict per configuration: runs, median wall, per-stage median and p95 over the steps that made a
    preview (denoise over all steps), and the median overhead against the median baseline with its IQR.
    Warm-up runs and the first run after load are left out."""
    runs = steady(runs)
    steady_ids = {r["run_id"] for r in runs}
    by_cfg: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        by_cfg.setdefault(r["config"], []).append(r)
    step_rows: dict[str, list[dict[str, Any]]] = {}
    for s in steps:
        if s["run_id"] in steady_ids:
            step_rows.setdefault(s["config"], []).append(s)
    out = []
    for cfg, rs in by_cfg.items():
        walls = [float(r["wall_s"]) for r in rs]
        row: dict[str, Any] = {"config": cfg, "runs": len(rs), "wall_s": statistics.median(walls)}
        srows = step_rows.get(cfg, [])
        for st in STAGES:
            xs = [float(s[st]) for s in srows if st == "denoise_ms" or int(s["preview"])]
            row[f"{st}_p50"] = percentile(xs, 50) if xs else 0.0
            row[f"{st}_p95"] = percentile(xs, 95) if xs else 0.0
        row["previews"] = statistics.median(int(r["previews"]) for r in rs)
        made = max(1, sum(int(r["previews"]) for r in rs))
        row["bytes_per_preview"] = sum(int(r["bytes"]) for r in rs) / made  # a clip's preview: all its frames
        # a clip's previews send several frames each; older CSVs have no frames_sent: one frame per preview
        row["frames_per_preview"] = sum(int(r.get("frames_sent") or r["previews"]) for r in rs) / made
        per_frame = [float(s["decode_ms_per_frame"]) for s in srows if int(s["preview"]) and s.get("decode_ms_per_frame")]
        row["decode_ms_per_frame_p50"] = percentile(per_frame, 50) if per_frame else row["decode_ms_p50"]
        ov = [float(r["overhead_pct"]) for r in rs if r.get("overhead_pct") not in (None, "")]
        pair = [float(r["pair_overhead_pct"]) for r in rs if r.get("pair_overhead_pct") not in (None, "")]
        row["overhead_pct"] = statistics.median(ov) if ov else None
        row["overhead_iqr"] = (percentile(ov, 75) - percentile(ov, 25)) if ov else None
        row["pair_overhead_pct"] = statistics.median(pair) if pair else None
        out.append(row)
    return out


def table(rows: list[dict[str, Any]], meta: str) -> str:
    """A fixed-width table: per configuration, stage medians/p95 (ms per preview) and overhead."""
    clips = any(r["previews"] and r.get("frames_per_preview", 1) > 1 for r in rows)  # a clip's previews: frames too
    cw = max([30] + [len(str(r["config"])) + 1 for r in rows])  # a clip's names are longer: the column fits them
    head = f"{'config':<{cw}}{'runs':>5}{'wall s':>9}{'denoise':>9}{'decode':>15}{'resize':>13}{'sync+xfer':>11}" \
           f"{'encode':>13}{'KB/prev':>9}" + (f"{'frames':>7}{'ms/frame':>9}" if clips else "") + f"{'overhead %':>17}"
    lines = [meta, head, "-" * len(head)]
    for r in rows:
        ov = "" if r["overhead_pct"] is None else f"{r['overhead_pct']:+.1f} ±{r['overhead_iqr'] / 2:.1f}"
        if r["config"] == "none" and r["pair_overhead_pct"] is not None:
            ov = f"vs direct {r['pair_overhead_pct']:+.2f}"
        lines.append(
            f"{r['config']:<{cw}}{r['runs']:>5}{r['wall_s']:>9.2f}{r['denoise_ms_p50']:>9.1f}"
            f"{r['decode_ms_p50']:>8.1f}/{r['decode_ms_p95']:<6.1f}{r['resize_ms_p50']:>6.2f}/{r['resize_ms_p95']:<6.2f}"
            f"{r['sync_ms_p50'] + r['transfer_ms_p50']:>11.2f}{r['encode_ms_p50']:>6.2f}/{r['encode_ms_p95']:<6.2f}"
            f"{r['bytes_per_preview'] / 1024:>9.1f}"
            + (f"{r['frames_per_preview']:>7.1f}{r['decode_ms_per_frame_p50']:>9.1f}" if clips else "") + f"{ov:>17}")
    lines.append("denoise: median ms per step; decode, resize, sync+xfer, encode: median/p95 ms per preview; "
                 "KB/prev: KiB per preview" + ("; frames: per preview, ms/frame: median decode ms per frame shown"
                                              if clips else "")
                 + "; overhead: median wall vs the median no-preview baseline, ± half the IQR")
    return "\n".join(lines)


def mode_ratios(rows: list[dict[str, Any]]) -> str:
    """Per decoder and interval measured in both modes: overlap's overhead as a fraction of sync's."""
    by = {r["config"]: r for r in rows}
    lines = []
    for name, r in by.items():
        if not name.endswith("/sync"):
            continue
        o = by.get(name[: -len("/sync")] + "/overlap")
        if o is None or r["overhead_pct"] is None or o["overhead_pct"] is None:
            continue
        s_ov, o_ov = r["overhead_pct"], o["overhead_pct"]
        ratio = f"{o_ov / s_ov:.2f}" if s_ov > 0 else "n/a (sync overhead <= 0)"
        lines.append(f"  {name[: -len('/sync')]:<28} sync {s_ov:+7.1f} %   overlap {o_ov:+7.1f} %   overlap/sync {ratio}")
    return ("overhead, overlap against sync:\n" + "\n".join(lines)) if lines else ""

"""The GPU check's table: its rows from measured sweeps (measure.Measured), and the table as text.

A row is label, ratio, figure, previews A/B, skipped A/B. An overhead is summary.txt's, with its interval; the
ratio beside it is 1 + that overhead, so both say the same thing.
"""
from __future__ import annotations

import statistics

from previewlab.bench.gpu.measure import Measured
from previewlab.preview.record.run import RunRecord

HEAD = ["check (A / B)", "ratio", "figure", "previews A/B", "skipped A/B"]
NOTE = ("ratio: 1 + the overhead (wall time), or as said; previews, skipped: median per run (B: the baselines, or "
        "the arm named)\noverhead: as in the bench's summary.txt, the median over the runs of wall time against the "
        "no-preview baseline run beside each, [the interval that holds the true median with 95 % probability] (its "
        "level when fewer runs reach 95 %), n=1 without one")


def _counts(m: Measured, a: str, b: str) -> list[str]:
    def previews(r: RunRecord) -> float:
        return r.totals.previews

    def skipped(r: RunRecord) -> float:
        return r.totals.skipped
    return [f"{m.median(a, previews)}/{m.median(b, previews)}", f"{m.median(a, skipped)}/{m.median(b, skipped)}"]


def wall_row(label: str, m: Measured, arm: str) -> list[str]:
    """An arm's overhead over its no-preview baselines."""
    e = m.overhead(arm)
    return [label, f"{1 + e.value / 100:.3f}", f"overhead {e.signed()}"] + _counts(m, arm, "none")


def _per_preview(m: Measured, arm: str) -> tuple[float, float]:
    """(transfer + encode ms per preview, bytes per frame): the summary's medians over the previews."""
    r = m.summary[arm]
    return r.stages.transfer_ms.p50 + r.stages.encode_ms.p50, r.bytes_per_preview / max(r.frames_per_preview, 1)


def image_rows(m: Measured, nvjpeg_why: str) -> list[list[str]]:
    """The rows of the image model's sweep (measure with direct=True over arms.ARMS, and arms.NVJPEG_ARMS
    unless nvjpeg_why says why they could not run)."""
    engine = m.overhead("none", "vs_direct")
    rows = [["engine, decoder none / bare diffusers call", f"{1 + engine.value / 100:.3f}",
             f"overhead {engine.signed(2)}"] + _counts(m, "none", "direct"),
            wall_row("taesd every step, overlap / no previews", m, "taesd/overlap")]
    s, o = m.overhead("vae/sync"), m.overhead("vae/overlap")
    ratio = f"{o.value / s.value:.3f}" if s.value > 0 else "n/a"  # a ratio of overheads means nothing when sync costs nothing
    rows.append(["vae every step: overlap overhead / sync overhead", ratio, f"overlap {o.signed()}, sync {s.signed()}"]
                + _counts(m, "vae/overlap", "vae/sync"))
    rows.append(wall_row("latent2rgb every step, overlap / no previews", m, "latent2rgb/overlap"))
    rows.append(wall_row("autopilot taesd, budget 10 % / no previews", m, "autopilot"))
    label = "nvjpeg / turbojpeg, transfer+encode per preview"
    if nvjpeg_why:
        rows.append([label, "-", f"not run: {nvjpeg_why}", "-", "-"])
    else:
        (nv_ms, nv_b), (tj_ms, tj_b) = _per_preview(m, "nvjpeg/sync"), _per_preview(m, "turbojpeg/sync")
        rows.append([label, f"{nv_ms / tj_ms:.3f}", f"{nv_ms:.2f} vs {tj_ms:.2f} ms, "
                     f"bytes/frame x{nv_b / max(tj_b, 1):.2f}"] + _counts(m, "nvjpeg/sync", "turbojpeg/sync"))
    label = "nvjpeg every step, overlap / no previews"
    if nvjpeg_why:
        rows.append([label, "-", f"not run: {nvjpeg_why}", "-", "-"])
    else:
        row = wall_row(label, m, "nvjpeg/overlap")
        row[2] += f", transfer+encode {_per_preview(m, 'nvjpeg/overlap')[0]:.2f} ms/preview"
        rows.append(row)
    return rows


def clip_rows(m: Measured, label: str) -> list[list[str]]:
    """The clip's rows (arms.VIDEO_ARMS): each against no previews, with its decode ms per preview (the
    summary's median) and the frames a run sent."""
    rows = []
    for arm, what in (("taesd/first", "taesd first frame"), ("taesd/all", "taesd whole clip"),
                      ("latent2rgb/all", "latent2rgb whole clip")):
        row = wall_row(f"{label}: {what} every step, overlap / no previews", m, arm)
        sent = m.median(arm, lambda r: r.totals.frames_sent)
        row[2] += f", decode {m.summary[arm].stages.decode_ms.p50:.1f} ms/preview, {sent} frames sent"
        rows.append(row)
    return rows


def xl_row(m: Measured, label: str) -> list[str]:
    """decode_at preview against full (arms.xl_arms): the ratio of their walls as their overheads over the same
    baselines give it, and per TAESD preview each side's median decode ms and on-path ms and the size made.
    Raises ValueError when a side made no TAESD preview."""
    ratio = (100 + m.overhead("taesd/at-preview").value) / (100 + m.overhead("taesd/at-full").value)
    (p_dec, p_path, p_px), (f_dec, f_path, f_px) = (_taesd(m, "taesd/at-preview"), _taesd(m, "taesd/at-full"))
    return [label, f"{ratio:.3f}", f"decode {p_dec:.2f} vs {f_dec:.2f} ms/preview at {p_px} vs {f_px} px, on-path "
            f"{p_path:.2f} vs {f_path:.2f} ms/preview"] + _counts(m, "taesd/at-preview", "taesd/at-full")


def _taesd(m: Measured, arm: str) -> tuple[float, float, str]:
    """Medians over the arm's TAESD previews of (decode ms, on-path ms), and the size the decoder made (px)."""
    rows = m.preview_steps(arm, "taesd")
    if not rows:
        raise ValueError(f"{arm}: no taesd preview was made")
    sizes = sorted({f"{r.decode_width}x{r.decode_height}" for r in rows})
    return statistics.median(r.decode_ms for r in rows), statistics.median(r.on_path_ms for r in rows), "/".join(sizes)


def missing(label: str, what: str, e: Exception) -> list[str]:
    """The row of a check that could not be measured here (its model not built, or its runs failed): why."""
    return [f"{label}: {what}", "-", f"{type(e).__name__}: {str(e)[:120]}", "-", "-"]


def table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [HEAD] + rows) for i in range(len(HEAD))]

    def fmt(r: list[str]) -> str:  # text columns left, figures right
        return "  ".join(c.ljust(w) if i in (0, 2) else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
    return "\n".join([fmt(HEAD), "-" * (sum(widths) + 2 * (len(widths) - 1))] + [fmt(r) for r in rows] + [NOTE])

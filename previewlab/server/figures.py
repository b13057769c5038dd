"""The figures the page shows, computed here from the runs in the data folder with the one analysis every
surface renders (preview/judging/advice.py): each run's own figures and its pair's overhead, its configuration's verdict,
the baselines' noise and the advice. The page formats what it is sent and computes no statistic of its own.

A run is read when first seen and kept by id; it is read again when a listing names it (or it just ended) and its
meta.json changed, and dropped when the run is removed: a listing costs one stat per listed run and a scan of the
folder's names, not a stat of every run (Figures.keyed). The analysis of a run takes the runs of the same settings
(analysis.cost_key), in the order they ran.
"""
from __future__ import annotations

import math
import os
import sys
import threading
from dataclasses import dataclass
from typing import Any, Collection

from previewlab.preview.judging.advice import DEFAULT_BUDGET_PCT, Analysis, Surface, analyze, said
from previewlab.preview.judging.answers import answers
from previewlab.preview.judging.estimates import NOISE_LIMIT_PCT
from previewlab.preview.judging.fidelity import Fidelities
from previewlab.preview.judging.progress import settle_line
from previewlab.preview.judging.stages import on_path_share_pct
from previewlab.preview.names import DECODER_NAMES
from previewlab.preview.judging.analysis import Entry, cost_key, entry, overhead_pct, paired
from previewlab.preview.record.run import RunRecord

from previewlab.server.data import fidelity_files
from previewlab.server.data.store import Store


def finite(x: Any) -> Any:
    """A figure as JSON can carry it: a number that is not finite (a hand-edited meta.json's NaN) as null, in
    lists and mappings too, so one odd run never fails a listing (the app answers JSON without NaN)."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [finite(v) for v in x]
    return x


def shared(meta: dict[str, Any]) -> dict[str, Any]:
    """meta with its short strings interned: the runs of a folder repeat their model, device, versions, prompt
    and scheduler, and each cached run kept its own copies (with slotted records: 4.8 KB a cached run down to 1.8 KB, 500 runs of the tiny model)."""
    return {k: shared(v) if isinstance(v, dict) else sys.intern(v) if isinstance(v, str) and len(v) < 256 else v
            for k, v in meta.items()}


def page_more(n: int) -> str:
    """How the page gets n more pairs."""
    return f"measure {n} more pair{'s' if n > 1 else ''} for the 95 % level"


PAGE_LABELS = {"decoder": "Decoder", "every": "Every N steps", "decode_at": "Decoder stops at",
               "preview_max": "Preview size"}


def page_how(setting: str, value: object) -> str:
    """How the page measures a setting."""
    return f"measure it: {PAGE_LABELS.get(setting, setting)} {value}, then Measure overhead"


PAGE = Surface(page_more, "measure more baselines (the measure button), stop other jobs on this machine, or start "
                          "the server with fewer torch threads than cores", page_how)


@dataclass(frozen=True)
class Known:
    stamp: int            # meta.json's mtime_ns when it was read
    entry: Entry | None   # None: no totals yet (running, failed, interrupted) or damaged
    key: tuple[Any, ...]  # its settings (analysis.cost_key), for grouping without recomputing it


class Figures:
    """The data folder's ended runs as the analysis reads them, kept between requests (store: where they are)."""

    def __init__(self, store: Store, has_taesd: bool = True, noise_limit: float = NOISE_LIMIT_PCT,
                 surface: Surface = PAGE) -> None:
        """has_taesd: the model has TAE weights, so the advice may name taesd; noise_limit: the baselines' spread,
        percent, past which the machine is NOISY (serve --noise-limit); surface: how the advice words a measure
        (PAGE; a script's page: digest.WATCH, which has no Measure button)."""
        self.store = store
        self.noise_limit = noise_limit
        self.surface = surface
        self.decoders = tuple(d for d in DECODER_NAMES if has_taesd or d != "taesd")
        self._known: dict[str, Known] = {}
        self._lock = threading.Lock()  # the disk thread (listings) and the writer (a run's end) both read

    def entries(self, listed: Collection[str] = ()) -> list[Entry]:
        """Every ended run of the data folder, oldest first (keyed())."""
        return [e for _, e in self.keyed(listed)]

    def keyed(self, listed: Collection[str] = ()) -> list[tuple[tuple[Any, ...], Entry]]:
        """Every ended run of the data folder, oldest first. A run is read when first seen, and again when
        `listed` names it (the runs a page lists, the run that just ended) and its meta.json changed or it had
        no figures: a listing stats what it lists, never the whole folder (issue 56: 3.8 s at 100,000 runs). A
        hand edit of a run's meta.json is read when that run is next listed. Reading yields to a running model
        (the store's pacer, as the exports do)."""
        listed = set(listed)
        with self._lock:
            ids = self.store.ids()
            if len(self._known) > len(ids) or any(rid not in self._known for rid in listed):
                present = set(ids)
                for gone in [rid for rid in self._known if rid not in present]:
                    del self._known[gone]
            tick = self.store.pacer.ticks(lambda: bool(self.store.open_runs()))
            out: list[tuple[tuple[Any, ...], Entry]] = []
            for rid in ids:
                k = self._known.get(rid)
                if k is None or rid in listed:
                    k = self._refresh(rid, k)
                    tick()
                if k is not None and k.entry is not None:
                    out.append((k.key, k.entry))
            return out

    def _refresh(self, rid: str, k: Known | None) -> Known | None:
        """Run rid as its meta.json now says, read again only when it changed or gave no figures."""
        try:
            stamp = os.stat(self.store.root / rid / "meta.json").st_mtime_ns
        except OSError:
            self._known.pop(rid, None)
            return None
        if k is not None and k.stamp == stamp and k.entry is not None:
            return k
        e = self._read(rid)
        k = self._known[rid] = Known(stamp, e, cost_key(e.record.meta) if e is not None else ())
        return k

    def _read(self, rid: str) -> Entry | None:
        meta = self.store.ended_meta(rid)
        if meta is None:
            return None
        if not isinstance(meta.get("totals"), dict):
            return None  # running, failed before its totals, or interrupted: nothing measured to judge
        try:
            rec = RunRecord.from_json(shared(meta))
        except (ValueError, TypeError):
            return None  # a meta.json the listing names damaged: no figure is made of it
        return entry(rec, str(meta.get("status", "")), changed=bool(meta.get("changes")),
                     damaged=bool(meta.get("damaged")))

    def groups(self, listed: Collection[str] = ()) -> dict[tuple[Any, ...], list[Entry]]:
        """The ended runs by their settings (analysis.cost_key), each oldest first."""
        out: dict[tuple[Any, ...], list[Entry]] = {}
        for key, e in self.keyed(listed):
            out.setdefault(key, []).append(e)
        return out

    def like(self, rid: str) -> tuple[Entry | None, list[Entry]]:
        """Run rid's entry and the runs of its settings, oldest first (rid among them)."""
        every = self.keyed((rid,))
        mine = next((key for key, e in every if e.record.run_id == rid), None)
        if mine is None:
            return None, []
        group = [e for key, e in every if key == mine]
        return next(e for e in group if e.record.run_id == rid), group

    def analysis(self, rid: str, budget: float = DEFAULT_BUDGET_PCT) -> dict[str, Any] | None:
        """The analysis of the runs of rid's settings, rid's configuration the one in use, with the settings'
        group (group_of); None: no such run."""
        me, group = self.like(rid)
        if me is None:
            return None
        current = me.name if me.role == "config" else None
        a = analyze(group, budget, current, self.noise_limit, self.surface, self.decoders, self.fidelity(me))
        return finite({**a.to_json(), "group": group_of(me)})

    def fidelity(self, me: Entry) -> Fidelities:
        """The page's fidelity pass over the settings of run `me` (its group, target and preview size), where one
        ran (server/data/fidelity_files.py)."""
        return fidelity_files.read(self.store.root, me.record.meta)

    def answers(self) -> dict[str, dict[str, Any]]:
        """Every ended run's cells of the answer's columns (preview/judging/answers.py), by run id: its pair and
        its configuration's overhead and verdict from the analysis of its settings' runs, as the bench's
        runs.csv has them."""
        out: dict[str, dict[str, Any]] = {}
        for group in self.groups().values():
            out.update(answers(group, analyze(group, noise_limit=self.noise_limit, surface=self.surface,
                                              decoders=self.decoders).findings))
        return out

    def of_runs(self, metas: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The listed runs, each ended one with its `figures` (run_figures)."""
        groups = self.groups([str(m.get("run_id")) for m in metas])
        by_id = {e.record.run_id: (key, e) for key, group in groups.items() for e in group}
        judged: dict[tuple[Any, ...], tuple[Analysis, dict[str, tuple[Entry, Entry]]]] = {}
        out = []
        for m in metas:
            found = by_id.get(str(m.get("run_id")))
            if found is None:
                out.append(m)
                continue
            key, me = found
            if key not in judged:
                group = groups[key]
                judged[key] = (analyze(group, noise_limit=self.noise_limit, surface=self.surface, decoders=self.decoders),
                               {r.record.run_id: (r, b) for ps in paired(group).values() for r, b in ps})
            a, pairs = judged[key]
            out.append({**m, "figures": finite(run_figures(me, a, pairs.get(me.record.run_id)))})
        return out

    def of_run(self, rid: str, budget: float = DEFAULT_BUDGET_PCT) -> dict[str, Any]:
        """A run's figures and its settings' analysis, for its `done` message ({} while it has none)."""
        me, group = self.like(rid)
        if me is None:
            return {}
        a = analyze(group, budget, me.name if me.role == "config" else None, self.noise_limit, self.surface,
                    self.decoders, self.fidelity(me))
        pair = next(((r, b) for ps in paired(group).values() for r, b in ps if r.record.run_id == rid), None)
        return finite({"figures": run_figures(me, a, pair), "analysis": {**a.to_json(), "group": group_of(me)}})


def group_of(e: Entry) -> str:
    """The settings a run is measured with, as one string (analysis.cost_key): the page updates the figures of
    the listed runs of one group from a newer analysis of it."""
    return "|".join(map(str, cost_key(e.record.meta)))


def run_figures(e: Entry, a: Analysis, pair: tuple[Entry, Entry] | None) -> dict[str, Any]:
    """One run's figures as the run list, This run and the comparison show them: its own costs, its role, its
    pair's overhead (against the baseline right before it), and its configuration's verdict over all its pairs."""
    t, steps = e.record.totals, max(1, e.record.totals.steps_run or e.record.meta.steps)
    peak = t.peak_mem_mb if t.mem_source and t.peak_mem_mb > 0 else None
    out: dict[str, Any] = {
        "group": group_of(e), "role": "warm-up" if e.role == "warmup" else "baseline" if e.role == "baseline" else "preview",
        "steady": e.steady, "why": e.why, "config": e.name,
        "wall_s": t.wall_s, "wall_per_step": t.wall_s * 1e3 / steps, "denoise_per_step": t.denoise_ms / steps,
        # the previews' share of the denoising path (stages.py), and that path's ms (denoising and previews)
        "preview_on_path": t.on_path_ms, "on_path_share_pct": on_path_share_pct(t.on_path_ms, t.denoise_ms),
        "denoising_path_ms": t.denoise_ms + t.on_path_ms,
        # a clip's preview sends several frames: KiB a frame is over the frames sent (a record from before
        # frames_sent counts one a preview)
        "previews": t.previews,
        "kb_per_frame": t.bytes / (t.frames_sent or t.previews) / 1024 if t.previews else 0.0,
        "decode_ms": t.decode_ms, "encode_ms": t.encode_ms, "peak_mem_mb": peak, "busy_pct": t.busy_pct,
        "pair": None, "mem_over_mb": None, "finding": None, "noisy": bool(a.noise and a.noise.noisy),
        # how much the picture still changed (judging/progress.py), the line under the cost chart
        "settle_step": t.settle_step, "last_final_ssim": t.last_final_ssim,
        "settle_line": settle_line(e.record.meta, t)}
    if pair is not None:
        r, b = pair
        x = overhead_pct(r.record, b.record)
        out["pair"] = {"baseline": b.record.run_id, "overhead_pct": x, "said": f"{x:+.1f} %"}
        bt = b.record.totals
        if peak is not None and bt.mem_source == t.mem_source and bt.peak_mem_mb > 0:
            out["mem_over_mb"] = peak - bt.peak_mem_mb
    f = a.finding(e.name) if e.role == "config" else None
    if f is not None:
        out["finding"] = f.to_json(said(f.overhead, a.more))
    return out

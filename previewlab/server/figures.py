"""The figures the page shows, computed here from the runs in the data folder with the one analysis every
surface renders (preview/judging/advice.py): each run's own figures and its pair's overhead, its configuration's verdict,
the baselines' noise and the advice. The page formats what it is sent and computes no statistic of its own.

A run is read when first seen and kept by id; it is read again when a listing names it (or it just ended) and its
meta.json changed, and dropped when the run is removed: a listing costs one stat per listed run and a scan of the
folder's names, not a stat of every run (Figures.keyed). The analysis of a run takes the runs of the same settings
(analysis.cost_key), in the order they ran. A run's figures leave here typed, as a RunFigures
(server/core/run_figures.py), and become JSON only where they are sent.
"""
from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass
from typing import Any, Collection

from previewlab.preview.judging.advice import DEFAULT_BUDGET_PCT, Analysis, analyze
from previewlab.preview.judging.answers import answers
from previewlab.preview.judging.estimates import NOISE_LIMIT_PCT
from previewlab.preview.judging.fidelity import Fidelities
from previewlab.preview.judging.surface import Surface
from previewlab.preview.names import DECODER_NAMES
from previewlab.preview.judging.analysis import Entry, cost_key, entry, paired
from previewlab.preview.record.run import RunRecord

from previewlab.server.core.run_figures import RunFigures, finite, run_figures
from previewlab.server.data import fidelity_files
from previewlab.server.data.store import Store


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
        """Run rid as the analysis reads it: its end the writer still holds, else its meta.json's."""
        end = self.store.pending(rid)
        if end is not None:  # meta.json could not take it yet: the end as it will be written
            return entry(RunRecord(end.meta, end.totals), end.status, changed=bool(end.changes)) if end.totals else None
        meta = self.store.meta_or_none(rid)
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
        """/analysis: the analysis of the runs of rid's settings (of_run), as JSON; None: no such run."""
        judged = self.of_run(rid, budget)
        return judged.analysis_json() if judged is not None else None

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

    def of_run(self, rid: str, budget: float = DEFAULT_BUDGET_PCT) -> RunFigures | None:
        """A run's figures: the analysis of the runs of its settings, its configuration the one in use, and its
        pair, for its `done` message and /analysis (None: no such run, or none with figures yet)."""
        me, group = self.like(rid)
        if me is None:
            return None
        a = analyze(group, budget, me.name if me.role == "config" else None, self.noise_limit, self.surface,
                    self.decoders, self.fidelity(me))
        pair = next(((r, b) for ps in paired(group).values() for r, b in ps if r.record.run_id == rid), None)
        return RunFigures(me, a, pair)

"""Where the page's fidelity passes are kept in the data folder: one folder per settings they judge, under
`fidelity/`, each with the pass's fidelity.csv and finals.csv (preview/judging/fidelity.py writes and reads them).

A pass judges what a preview shows of runs of one model, size, steps, batch, guidance and task (the runs measured
together: analysis.cost_key), at one target (x0 or latents) and one preview size: the folder's name is a digest
of those, so a pass of other settings never judges these runs. A new pass of the same settings replaces the last.
"""
from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path
from typing import Sequence

from previewlab.preview.judging import fidelity
from previewlab.preview.judging.analysis import cost_key
from previewlab.preview.judging.fidelity import Fidelities, Final, Sample
from previewlab.preview.record.run import RunMeta

FOLDER = "fidelity"  # never a run id (store.ids lists only RUN_ID's names)


def key_of(meta: RunMeta) -> str:
    """The settings a pass judges, as one line: the runs' cost key, the target and the preview's largest side."""
    p = meta.preview
    shown = (p.target, p.preview_max) if p is not None else ("auto", 0)
    return "|".join(map(str, (*cost_key(meta), *shown)))


def folder_of(root: Path, meta: RunMeta) -> Path:
    return root / FOLDER / hashlib.sha256(key_of(meta).encode()).hexdigest()[:16]


def write(root: Path, meta: RunMeta, samples: Sequence[Sample], finals: Sequence[Final]) -> Path:
    """The pass's samples for meta's settings, whole, with the key they judge beside them. Raises OSError."""
    folder = folder_of(root, meta)
    folder.mkdir(parents=True, exist_ok=True)
    fidelity.write(folder, samples, finals)
    (folder / "settings.txt").write_text(key_of(meta) + "\n")
    return folder


def read(root: Path, meta: RunMeta) -> Fidelities:
    """The figures of the pass over meta's settings (no figures: none ran, or its files are not a pass's)."""
    p = meta.preview
    try:
        got = fidelity.read(folder_of(root, meta), synthetic=meta.synthetic)
    except (ValueError, OSError):
        return fidelity.NONE
    # judged at this run's target and preview size: a configuration of the same runs with others is not measured
    return replace(got, shown=(p.target, p.preview_max)) if p is not None else got

"""Hidden device syncs in the step callback: one overlap run with live decoder switches, under torch's sync
debug mode, counting the synchronizing operations issued from previewlab's per-step code.

The waits a host copy needs (the encode thread's, the final image's) live in stopwatch.py and engine.py and are
not counted: they are the design. Anything from the meter, the overlap, the decoders or the frames is a hidden
sync that stalls the denoising loop.
"""
from __future__ import annotations

import warnings
from dataclasses import replace
from typing import Any

import torch

from preview.engine import Controls, Previewer, Run, generate
from preview.models import Model
from preview.records import StepRow
from preview.settings import PreviewSettings, RunSettings

STEP_CODE = ("meter.py", "overlap.py", "decoders.py", "frames.py", "controls.py", "previewer.py", "taesd.py")


def hidden_syncs(model: Model, base: RunSettings) -> tuple[Run | None, list[str]]:
    """(the run, one line per sync issued from per-step code). CUDA only: elsewhere ([], None)."""
    if model.device.type != "cuda":
        return None, []
    controls = Controls(PreviewSettings(decoder="latent2rgb", mode="overlap"))
    switches = {3: "vae", 6: "taesd", 9: "latent2rgb"}  # each decoder built mid-run: its constants too

    def on_row(row: StepRow) -> None:
        if row.step in switches and (model.taesd is not None or switches[row.step] != "taesd"):
            controls.set(decoder=switches[row.step])

    found: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            run = generate(model, replace(base, preview=controls.get()), run_id="syncs", controls=controls,
                           on_row=on_row, previewer=Previewer(model))
        finally:
            torch.cuda.set_sync_debug_mode("default")
    for w in caught:
        where: Any = w.filename or ""
        if "synchroniz" in str(w.message) and where.replace("\\", "/").split("/")[-1] in STEP_CODE:
            found.append(f"{where.split('/')[-1]}:{w.lineno}")
    return run, found


def row(model: Model, base: RunSettings) -> list[str]:
    label = "hidden syncs in the step callback (overlap, live switches)"
    if model.device.type != "cuda":
        return [label, "-", "not run: no CUDA device", "-", "-"]
    try:
        run, found = hidden_syncs(model, base)
    except Exception as e:
        return [label, "-", f"not run: {type(e).__name__}: {str(e)[:100]}", "-", "-"]
    assert run is not None
    what = "none" if not found else f"{len(found)}: " + ", ".join(sorted(set(found)))[:120]
    return [label, str(len(found)), what, f"{run.record.previews}/-", f"{run.record.skipped}/-"]

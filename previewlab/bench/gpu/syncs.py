"""Hidden device syncs in the step callback: one overlap run with live decoder switches, under torch's sync
debug mode, counting the synchronizing operations issued from previewlab's per-step code.

The waits a host copy needs (the encode thread's, the final image's) live in stopwatch.py and engine.py and are
not counted: they are the design. Anything issued while per-step code is on the stack is a hidden sync that
stalls the denoising loop. torch reports a sync at the innermost Python frame, which is often torch's own
(F.interpolate) or diffusers' (a VAE, AutoencoderTiny): so a sync counts when any frame on the stack is
previewlab's per-step code, and it is named by the innermost such frame.
"""
from __future__ import annotations

import contextlib
import sys
import warnings
from dataclasses import replace
from pathlib import PurePath
from typing import Any, Iterator

import torch

from previewlab.preview.controls import Controls
from previewlab.preview.decoding.previewer import Previewer
from previewlab.preview.call.engine import Run, RunContext, generate
from previewlab.preview.record.kept_events import Gathered
from previewlab.preview.models.unscaling import constant
from previewlab.preview.models import Model
from previewlab.preview.record.records import StepRow
from previewlab.preview.settings import PreviewSettings, RunSettings

STEP_CODE = ("meter.py", "preview_maker.py", "stages.py", "sync.py", "row_ledger.py", "overlap.py", "decoders.py",
             "stops.py", "rgb_decoder.py", "tae_decoder.py", "vae_decoder.py", "vae_memory.py", "frames.py",
             "controls.py", "previewer.py", "taesd.py", "latent_spaces.py", "unscaling.py", "latent_formats.py",
             "targets.py", "streams.py", "encoders.py", "clips.py", "taehv.py", "fit.py")
PACKAGE = "preview"


def step_frame(frame: Any) -> str | None:
    """"file.py:line" of the innermost previewlab frame on the stack from `frame` when it is per-step code;
    None when there is none, or when it is one of the designed waits (stopwatch.py, engine.py)."""
    while frame is not None:
        path = PurePath(frame.f_code.co_filename)
        if PACKAGE in path.parts[-3:-1]:  # preview/ or one of its rooms (preview/pipeline/, preview/models/ ...)
            return f"{path.name}:{frame.f_lineno}" if path.name in STEP_CODE else None
        frame = frame.f_back
    return None


@contextlib.contextmanager
def caught_syncs() -> Iterator[list[str]]:
    """Collects one "file.py:line" per synchronizing-operation warning issued with per-step code on the stack
    (the warning's stack, read when it is shown, on whichever thread issued it)."""
    found: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        shown = warnings.showwarning

        def show(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
            if "synchroniz" not in str(message):
                return shown(message, category, filename, lineno, file, line)
            where = step_frame(sys._getframe(1))
            if where is not None:
                found.append(where)

        warnings.showwarning = show
        yield found


def device_buffer_constant(model: Model) -> None:
    """What a live switch to FLUX.2's vae decoder builds: a constant from a buffer already on the device (its
    batch-norm statistics, on cuda:0), asked for on the device as the pipeline names it (often just "cuda").
    The SD1.5 model of the check has no such buffer, so this builds one the same way."""
    buffer = torch.ones(1, 4, 1, 1, device=model.device)
    constant(buffer, torch.device(model.device.type), model.dtype)


# after step k, these changes: each decoder built mid-run (its constants too)
IMAGE_SWITCHES: dict[int, dict[str, Any]] = {3: {"decoder": "vae"}, 6: {"decoder": "taesd"}, 9: {"decoder": "latent2rgb"}}
# a clip's too, and every frames choice: middle and N read a prefix, show picked frames, latent2rgb picks latent ones
CLIP_SWITCHES: dict[int, dict[str, Any]] = {2: {"frames": "middle"}, 4: {"decoder": "taesd", "frames": 8},
                                            6: {"decoder": "vae", "frames": "middle"},
                                            8: {"decoder": "latent2rgb", "frames": 3}}


def hidden_syncs(model: Model, base: RunSettings,
                 switches: dict[int, dict[str, Any]] = IMAGE_SWITCHES) -> tuple[Run | None, list[str]]:
    """(the run, one line per sync issued from per-step code). CUDA only: elsewhere ([], None).
    The switches are live changes after those steps; then a device-buffer constant as FLUX.2's vae builds."""
    if model.device.type != "cuda":
        return None, []
    controls = Controls(PreviewSettings(decoder="latent2rgb", mode="overlap"))

    class Switches(Gathered):  # the live changes, told as each row comes
        def row(self, row: StepRow) -> None:
            super().row(row)
            change = switches.get(row.step)
            if change and (model.taesd is not None or change.get("decoder") != "taesd"):
                controls.set(**change)

    with caught_syncs() as found:
        torch.cuda.set_sync_debug_mode("warn")
        try:
            run = generate(RunContext(model, replace(base, preview=controls.get()), "syncs", controls=controls,
                                      previewer=Previewer(model)), Switches())
            device_buffer_constant(model)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return run, found


def row(model: Model, base: RunSettings, label: str = "hidden syncs in the step callback (overlap, live switches)",
        switches: dict[int, dict[str, Any]] = IMAGE_SWITCHES) -> list[str]:
    if model.device.type != "cuda":
        return [label, "-", "not run: no CUDA device", "-", "-"]
    try:
        run, found = hidden_syncs(model, base, switches)
    except Exception as e:
        return [label, "-", f"not run: {type(e).__name__}: {str(e)[:100]}", "-", "-"]
    assert run is not None
    what = "none" if not found else f"{len(found)}: " + ", ".join(sorted(set(found)))[:120]
    return [label, str(len(found)), what, f"{run.record.totals.previews}/-", f"{run.record.totals.skipped}/-"]

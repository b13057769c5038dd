"""A unit of a sweep on one machine: one configuration with its own interleaved baselines and warm-up, run in one
process on one device from a model loaded there, as `previewlab bench` runs a sweep on one machine.

Nothing here knows Ray: bench/cluster.py hands these functions to its nodes. What goes out (UnitJob) and what
comes back (UnitResult, NodeReport, Facts) are frozen records, so they cross processes and machines by pickle.
"""
from __future__ import annotations

import gc
import importlib.metadata
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from previewlab.bench.rows import SweepRow, SweepStep
from previewlab.bench.plan import Plan

if TYPE_CHECKING:
    from previewlab.preview.models import Model


@dataclass(frozen=True)
class Load:
    """How a unit loads its model on its node: the bench's model flags, one variant of them."""
    model: str
    taesd: str | None = None
    device: str = "auto"
    dtype: str = "float32"
    seed: int = 0
    offload: str = "none"
    channels_last: bool = False
    variant: str | None = None
    config: str | None = None


@dataclass(frozen=True)
class Facts:
    """What the driver needs of a model to plan a sweep it does not load itself: its defaults and its names."""
    name: str
    label: str          # the model's name for reports, synthetic said
    described: str      # its latent space (LatentSpace.describe)
    synthetic: bool
    video: bool
    default_size: int
    num_frames: int
    fps: float
    temporal: int       # a clip's frames per latent frame
    device: str         # where it loaded (the node's)
    load_s: float


@dataclass(frozen=True)
class UnitJob:
    """One unit to run: its index in the sweep, the model to load, the plan narrowed to it (Plan.units), the
    configuration names' prefix (a model variant's label) and torch's CPU threads (None: torch's own)."""
    index: int
    load: Load
    plan: Plan
    label: str = ""
    threads: int | None = None
    video: bool = False  # the model makes clips (a clip's configuration names its frames)

    @property
    def name(self) -> str:
        """The unit's configuration as runs.csv names it (its baselines' name where it has none, 'direct' for
        the bare call)."""
        n = self.plan.narrow
        if n is None:  # a plan not cut into units: its baselines' name
            return self.label + self.plan.name(replace(self.plan.settings.preview, decoder="none"))
        c = n.config
        if c is None and not self.plan.direct:
            c = replace(self.plan.settings.preview, decoder="none")
        return self.label + self.plan.name(c, self.video, n.setup)


@dataclass(frozen=True)
class UnitResult:
    """A finished unit: its runs and their steps in the order they ran, where it ran, and its model's load time."""
    index: int
    node: str
    device: str
    runs: tuple[SweepRow, ...]
    steps: tuple[SweepStep, ...]
    load_s: float


@dataclass(frozen=True)
class NodeReport:
    """What a node can run: the devices torch sees there, its GPUs' names, and why the sweep's model or TAE
    cannot load there ('' when it can); previewlab's version there."""
    devices: tuple[str, ...]
    gpus: tuple[str, ...]
    missing: str
    version: str


def load_model(a: Load) -> Model:
    """The variant's model, loaded on this machine. Raises ModelError (one line)."""
    from previewlab.preview.models import load

    return load(a.model, taesd=a.taesd, device=a.device, dtype=a.dtype, seed=a.seed, offload=a.offload,
                channels_last=a.channels_last, variant=a.variant, config=a.config)


def run_unit(job: UnitJob, node: str) -> UnitResult:
    """Loads the job's model here, runs its unit (bench/sweep.py's measured) and frees the model. Raises
    ModelError where the model cannot load here."""
    import torch

    from previewlab.bench.sweep import measured

    if job.threads is not None:
        torch.set_num_threads(job.threads)
    model = load_model(job.load)
    runs: list[SweepRow] = []
    steps: list[SweepStep] = []
    try:
        with tempfile.TemporaryDirectory(prefix="previewlab-unit-") as d:  # each run's final image, as a run writes it
            for row, rows in measured(model, job.plan, Path(d) / "final.png", job.label, node=node):
                runs.append(row)
                steps += rows
        device = runs[0].device if runs else model.device.type
        return UnitResult(job.index, node, device, tuple(runs), tuple(steps), model.load_s)
    finally:
        dev = model.device
        del model
        gc.collect()
        if dev.type == "cuda":
            torch.cuda.empty_cache()  # a reused worker leaves nothing of this unit on the device


def look(model: str, taesd: str | None) -> NodeReport:
    """This machine: the devices torch sees, its GPUs' names, and why `model` (or the TAE) is not here."""
    import torch

    from previewlab.preview.models import KNOWN, allowed_devices, model_refusal
    from previewlab.preview.models.names import model_here

    gpus = tuple(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())) \
        if torch.cuda.is_available() else ()
    missing = "" if model in KNOWN or model.startswith("synthetic:") else (model_refusal(model) or model_here(model))
    if not missing and taesd is not None and not Path(taesd).exists():
        missing = f"--taesd: no such file or folder: {taesd}"
    return NodeReport(tuple(allowed_devices()[1:]), gpus, missing, importlib.metadata.version("previewlab"))


"""One analysis of a set of runs: each configuration's overhead against the no-preview runs beside it, the
baselines' noise, and where a preview's time goes. The bench's summary, its report, the server's page and a
watch's summary all render what this module finds (advice.py then says what to set); none computes its own.

A configuration's overhead is taken pair by pair, as the bench interleaves its runs: each steady run against the
steady no-preview baseline of the same work (same_work) right before it, or, where that is none, the one right
after it (a counterbalanced
series runs B A, then A B, so the order's own effect cancels over the pairs; the bench's direct call, which runs
first, is always against the one right after it), 100 * (its wall / the baseline's - 1). A baseline serves one run
with previews at most, so no two pairs share one. Each pair carries its baseline's noise as well as the run's, and
slow drift on a loaded machine cancels inside a pair. The runs are in the order they ran. No torch here.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Callable, Literal, Protocol, Sequence, TypeVar

from previewlab.preview.judging.estimates import NOISE_LIMIT_PCT, Estimate, Noise, estimate, noise_of, verdict
from previewlab.preview.judging.stages import parts as mean_parts
from previewlab.preview.judging.stages import stage_sums
from previewlab.preview.record.run import RunMeta, RunRecord
from previewlab.preview.settings import PreviewSettings

Role = Literal["warmup", "baseline", "config", "direct"]
# What decides a step's cost: runs that agree on these are measured against each other (a prompt or a seed
# does not change what a step costs)
COST_FIELDS = ("model", "device", "dtype", "width", "height", "steps", "batch", "num_frames", "guidance", "task",
               "strength")


class Measured(Protocol):
    """A run as the analysis reads it: the bench's SweepRow, or an Entry of the server's or a watch's runs."""
    @property
    def name(self) -> str: ...      # its configuration's name: every run of one configuration has the same
    @property
    def role(self) -> Role: ...
    @property
    def steady(self) -> bool: ...   # statistics are taken over it (no warm-up, no first run after the load)
    @property
    def record(self) -> RunRecord: ...


@dataclass(frozen=True, slots=True)
class Entry:
    """A run of the server's data folder or of a watch, as the analysis reads it (Measured)."""
    name: str
    role: Role
    steady: bool
    record: RunRecord
    why: str = ""  # not steady: why it is left out of the figures


def config_name(p: PreviewSettings | None, clip: bool = False, at: bool = False, size: bool = False) -> str:
    """A configuration's name in the CSVs, the summary and on the page: decoder/interval/mode, the target when
    not auto, for a clip (clip: a video model) the frames a preview shows, where the decoder stops (at), and
    the preview's largest side where one is set (size: the bench sets it for a whole sweep, so leaves it out)."""
    if p is None:
        return "direct"
    if p.decoder == "none":
        return "none"
    every = f"auto{p.budget:g}%" if p.budget > 0 else f"every{p.every}"
    shown = "" if p.target == "auto" else f"/{p.target}"
    frames = f"/frames-{p.frames}" if clip else ""
    where = f"/at-{p.decode_at}" if at else ""
    most = f"/max{p.preview_max}" if size and p.preview_max > 0 else ""
    return f"{p.decoder}/{every}/{p.mode}{shown}{frames}{where}{most}"


def name_of(p: PreviewSettings | None, num_frames: int = 1) -> str:
    """The name the server's and a watch's runs give a configuration (config_name with every axis a run can
    change: a clip's frames, where the decoder stops, the preview's size)."""
    return config_name(p, clip=num_frames > 1, at=p is not None and p.decode_at != "preview", size=True)


def cost_key(meta: RunMeta) -> tuple[Any, ...]:
    """What a run's denoising costs depend on (COST_FIELDS): runs with the same key are measured together."""
    return tuple(getattr(meta, k) for k in COST_FIELDS)


# a wall time outside this range is no measurement of a diffusion run (a hand-edited or damaged meta.json): it
# would make an overhead of 1e300 % or a division by zero, so such a run is left out of the figures
PLAUSIBLE_WALL_S = (1e-4, 1e7)


def entry(record: RunRecord, status: str, changed: bool = False, damaged: bool = False) -> Entry:
    """A finished run of the server's or a watch's, with its role: no previews from start to end, a baseline;
    the first run after the model loaded, a warm-up. It is steady when it ran whole (done, not damaged, every
    step it was asked, a plausible wall time) with one configuration throughout (a live change makes it two). A
    stopped run is left out: its wall is part of a run, and a pair compares whole runs."""
    p, t = record.meta.preview, record.totals
    name = name_of(p, record.meta.num_frames)
    role: Role = "warmup" if t.first_run else "baseline" if name == "none" and t.previews == 0 else "config"
    lo, hi = PLAUSIBLE_WALL_S
    why = ("the first run after the model loaded (a warm-up)" if t.first_run else
           "damaged" if damaged else
           f"stopped at step {t.steps_run} of {record.meta.steps}: part of a run, not comparable with a whole one"
           if status == "stopped" or t.status == "stopped" else
           f"it ended {status}" if status != "done" else
           "no step ran" if t.steps_run <= 0 else
           f"its wall time, {t.wall_s!r} s, is no measurement" if not lo <= t.wall_s <= hi else
           "its settings changed during the run" if changed else "")
    return Entry(name, role, not why, record, why)


M = TypeVar("M", bound=Measured)


def same_work(a: RunRecord, b: RunRecord) -> bool:
    """Two runs whose denoising does the same work (cost_key, and the same scheduler where both name one): only
    such runs pair. A sweep's run setups (its schedulers, step counts) sit side by side in its order."""
    return cost_key(a.meta) == cost_key(b.meta) and (a.totals.scheduler == b.totals.scheduler
                                                     or "" in (a.totals.scheduler, b.totals.scheduler))


def paired(runs: Sequence[M]) -> dict[str, list[tuple[M, M]]]:
    """Per configuration, each steady run with the steady baseline it is paired with (the module's rule)."""
    taken: set[int] = set()  # a baseline serves one run of a configuration: two pairs never share one

    def base(j: int, i: int) -> bool:  # a free steady baseline of run i's own work (a sweep's setups differ)
        return 0 <= j < len(runs) and runs[j].role == "baseline" and runs[j].steady and j not in taken and \
            same_work(runs[j].record, runs[i].record)

    out: dict[str, list[tuple[M, M]]] = {}
    for i, r in enumerate(runs):
        if r.role not in ("config", "direct") or not r.steady:
            continue
        if r.role == "direct":  # against the baseline right after it, which then serves no other run
            if base(i + 1, i):
                taken.add(i + 1)
                out.setdefault(r.name, []).append((r, runs[i + 1]))
            continue
        j = i - 1 if base(i - 1, i) else i + 1
        if base(j, i):
            taken.add(j)
            out.setdefault(r.name, []).append((r, runs[j]))
    return out


def overhead_pct(run: RunRecord, base: RunRecord) -> float:
    """A run's overhead against its baseline: 100 * (its wall / the baseline's - 1)."""
    return 100 * (run.totals.wall_s / base.totals.wall_s - 1)


def baseline_noise(runs: Sequence[Measured], limit_pct: float = NOISE_LIMIT_PCT) -> Noise | None:
    """The spread of the steady baselines, per variant and run setup (each has its own `none`, as
    '[float16 ...] none' or 'none/euler/8steps'), the noisiest group named; None with fewer than two baselines
    in any group, where no spread can be judged."""
    groups: dict[str, list[float]] = {}
    for r in runs:
        if r.role == "baseline" and r.steady:
            groups.setdefault(r.name, []).append(r.record.totals.wall_s)
    return noise_of(groups, limit_pct)


def slowdown(e: Estimate | None) -> float | None:
    """A slowdown's median where it counts (its interval holds at the 95 % level and lies above 0), else None."""
    return e.value if e is not None and e.sure and e.lo is not None and e.lo > 0 else None


@dataclass(frozen=True)
class Finding:
    """One configuration's figures: its settings (its first run's), its steady runs, its overhead over its
    pairs, where a preview's time goes (ms a preview: decode, resize, transfer, encode, slower denoising), the
    previews a run made and the steps it ran (medians over its runs), and its ms a preview off the denoising's
    own time (decode, resize, transfer and encode: the stage times it recorded), each run's figure one sample:
    what orders decoders by their measured cost."""
    name: str
    preview: PreviewSettings
    device: str               # the runs' device type: overlap has a side stream only on cuda, xpu and mps
    runs: int
    overhead: Estimate | None  # None: no run of it has a steady baseline beside it
    parts: dict[str, float]
    pairs: tuple[tuple[str, str], ...] = ()  # (run id, its baseline's run id)
    previews: float = 0.0      # previews a run made (median over its runs)
    steps: int = 0             # steps a run ran (median over its runs)
    preview_ms: Estimate | None = None  # ms a preview, over its runs that made one; None: none made one
    image_side: int = 0        # the image's longer side, px: a smaller preview than it is a lever
    slower: Estimate | None = None  # ms a step the denoising slowed, each pair's run against its baseline

    @property
    def slower_ms_per_step(self) -> float | None:
        """The denoising's slowdown, ms a step, where it counts (slowdown): what "slower denoising" is made of."""
        return slowdown(self.slower)

    @property
    def verdict(self) -> str:
        return verdict(self.overhead) if self.overhead is not None else "no baseline beside it"

    def dominant(self) -> tuple[str, float, float]:
        """The part that holds most of a preview's time: (its name, its ms, all parts' ms)."""
        name = max(self.parts, key=lambda k: self.parts[k])
        return name, self.parts[name], sum(self.parts.values())

    def to_json(self, said: str = "") -> dict[str, Any]:
        """said: its overhead and verdict in the words of the surface that shows it (surface.said)."""
        p = self.preview
        return {"name": self.name, "said": said, "decoder": p.decoder, "every": p.every, "budget": p.budget, "mode": p.mode,
                "preview_max": p.preview_max, "decode_at": p.decode_at, "device": self.device, "runs": self.runs,
                "overhead": self.overhead.to_json() if self.overhead else None, "verdict": self.verdict,
                "more_for_level": self.overhead.more_for_level if self.overhead else None,
                "parts": self.parts, "pairs": [list(x) for x in self.pairs], "previews": self.previews,
                "steps": self.steps, "preview_ms": self.preview_ms.to_json() if self.preview_ms else None,
                "slower": self.slower.to_json() if self.slower else None,
                "slower_ms_per_step": self.slower_ms_per_step}


def _per_step(r: RunRecord) -> float:
    return r.totals.denoise_ms / max(1, r.totals.steps_run or r.meta.steps)


def _preview_ms(r: RunRecord) -> float:
    """A run's ms a preview off the denoising (decode, resize, sync and transfer, encode); its previews > 0."""
    t = r.totals
    return (t.decode_ms + t.resize_ms + t.sync_ms + t.transfer_ms + t.encode_ms) / t.previews


def findings(runs: Sequence[Measured]) -> list[Finding]:
    """A Finding for each configuration that previews, in the order each first ran steadily."""
    pairs = paired(runs)
    by: dict[str, list[Measured]] = {}
    for r in runs:
        if r.role == "config" and r.steady and r.record.meta.preview is not None:
            by.setdefault(r.name, []).append(r)
    out = []
    for name, rs in by.items():
        ps = pairs.get(name, [])
        t = [r.record.totals for r in rs]
        made = sum(x.previews for x in t)
        # the denoising's slowdown counts only as a finding: its pairs' interval must be sure of it
        slower = estimate([_per_step(r.record) - _per_step(b.record) for r, b in ps]) if ps else None
        steps = [x.steps_run or r.record.meta.steps for x, r in zip(t, rs)]
        counted = slowdown(slower)
        slow = counted * sum(steps) / made if counted is not None and made else 0.0
        parts = {**mean_parts(stage_sums(t), made), "slower denoising": slow}
        ov = [overhead_pct(r.record, b.record) for r, b in ps]
        each = [_preview_ms(r.record) for r in rs if r.record.totals.previews > 0]
        meta = rs[0].record.meta
        preview = meta.preview
        assert preview is not None
        out.append(Finding(name, preview, meta.device, len(rs), estimate(ov) if ov else None, parts,
                           pairs=tuple((r.record.run_id, b.record.run_id) for r, b in ps),
                           previews=statistics.median(x.previews for x in t), steps=int(statistics.median(steps)),
                           preview_ms=estimate(each) if each else None, image_side=max(meta.width, meta.height),
                           slower=slower))
    return out


def direct_cost(runs: Sequence[Measured]) -> dict[str, Estimate]:
    """The engine's own cost over the bare pipeline, by the baselines' name (each run setup has its own): each
    direct call's baseline (the no-preview run right after it) against it, 100 * (baseline wall / call's wall
    - 1), over the pairs."""
    xs: dict[str, list[float]] = {}
    for ps in paired(runs).values():
        for r, b in ps:
            if r.role == "direct":
                xs.setdefault(b.name, []).append(overhead_pct(b.record, r.record))
    return {k: estimate(v) for k, v in xs.items()}


def per_run(runs: Sequence[Measured], of: Callable[[RunRecord], float | None]) -> dict[str, Estimate]:
    """Per configuration (the baselines' too), a figure of each steady run (of; None: the run has none) as one
    estimate over its runs: compare's wall, denoise, decode, bytes and memory figures."""
    xs: dict[str, list[float]] = {}
    for r in runs:
        if r.steady:
            x = of(r.record)
            if x is not None:
                xs.setdefault(r.name, []).append(float(x))
    return {k: estimate(v) for k, v in xs.items()}


def steady_baselines(runs: Sequence[Measured]) -> int:
    return sum(1 for r in runs if r.role == "baseline" and r.steady)

"""previewlab bench --resume: what a stopped sweep's folder still lacks.

A run is known by its key: the model, its configuration's name, its role, its repeat and its steps (a folder's
row and a plan's slot alike). The plan's pairs are matched against the folder's runs in the order they run, each
run matched once: a pair whose runs the folder holds both of is skipped, and kept. A pair held in part (a sweep
stopped between its two runs) runs whole: its lone run stays in the folder, and pairs with nothing, since the
resumed sweep's warm-ups (or its first run, a cold one) come between. The warm-ups run again, as the model is
loaded anew; where nothing is left, nothing runs. A cluster's units are written whole, so a unit is skipped
where the folder holds every run it would make.
"""
from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Iterable, Iterator

if TYPE_CHECKING:
    from previewlab.bench.rows import SweepRow
    from previewlab.bench.plan import Plan, Slot

Key = tuple[str, str, str, int, int]  # model, configuration name, role, repeat, steps
Held = Counter[Key]


def held(runs: Iterable[SweepRow]) -> Held:
    """The folder's measured runs by key (its warm-ups are run again, never matched)."""
    return Counter((r.record.meta.model, r.config.name, r.role, r.repeat, r.record.meta.steps)
                   for r in runs if r.role != "warmup")


def key(plan: Plan, slot: Slot, model: str, video: bool, label: str) -> Key:
    """A slot's key, named as runs.csv names its run (sweep.measured: label + plan.name)."""
    role, rep, p, setup = slot
    return model, label + plan.name(p, video, setup), role, rep, setup.steps or plan.settings.steps


def to_run(plan: Plan, runs: Held, model: str, video: bool, label: str) -> Iterator[Slot]:
    """The plan's slots less the pairs `runs` holds whole, in the plan's order (the module's rule)."""
    left = Counter(runs)
    todo: list[tuple[Slot, ...]] = []
    for group in plan.groups():
        if group[0][0] != "warmup":
            need = Counter(key(plan, s, model, video, label) for s in group)
            if all(left[k] >= n for k, n in need.items()):
                left -= need
                continue
        todo.append(group)
    if any(g[0][0] != "warmup" for g in todo):
        for group in todo:
            yield from group


def unit_held(plan: Plan, left: Held, model: str, video: bool, label: str) -> bool:
    """The folder holds every measured run of this unit (`left`: what earlier units have not matched; a unit
    matched takes its runs from it)."""
    need = Counter(key(plan, s, model, video, label) for s in plan.schedule() if s[0] != "warmup")
    if all(left[k] >= n for k, n in need.items()):
        left -= need
        return True
    return False

"""Where a step comes from: the seam between a pipeline's denoising loop and the meter.

A source hands the meter one `Step` at the end of each denoising step, and the meter answers whether the run
should stop. The meter never knows which source called it. Three sources:

- the step callback (`step_callback`): diffusers' `callback_on_step_end`, for the pipelines that have one;
- the scheduler's own `step` (`StepTap`): any pipeline whose loop steps a scheduler, with or without a callback;
- a Modular Diffusers loop block (preview/source/modular.py): `PreviewBlock`, in the pipeline's own block tree.

`StepTap` is also the one wrapper that keeps each step's x0 (targets.X0Tap) for every source.
"""
from __future__ import annotations

import ast
import copy
import functools
import inspect
import textwrap
import types
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Literal, Protocol

import torch

from previewlab.preview.source.targets import X0Tap

Source = Literal["callback", "scheduler", "modular"]
SOURCES: tuple[Source, ...] = ("callback", "scheduler", "modular")


@dataclass(frozen=True)
class Step:
    """One denoising step, as it ends. index: 0-based pipeline step (never a count of `scheduler.step` calls);
    total: the steps this call runs, as the source knows them; latents: the pipeline's own layout at the end of
    the step (packed tokens, (B, C, h, w), (B, C, T, h, w), ...), never copied; pipe: the pipeline (a Modular
    pipeline's components); height, width (px) and frames: the call's own, where the source can read them (a
    Modular loop's block_state), else None and the meter reads them from the latents."""
    index: int
    timestep: Any
    latents: torch.Tensor
    pipe: Any
    total: int
    height: int | None = None
    width: int | None = None
    frames: int | None = None


class OnStep(Protocol):
    def __call__(self, step: Step) -> bool: ...  # True: stop the run (where the loop can be stopped)


class CallbackSteps:
    """The steps of diffusers' callback_on_step_end: it is called once per loop iteration, and a PNDM or Heun loop
    iterates more often than it steps. Calls that do not end a pipeline step are not steps (plan()).

    chunked: the pipeline calls back from a loop inside another (per_chunk): each chunk, segment or free-init pass
    runs its own schedule and numbers its iterations from 0 again. Its steps are numbered across them, and their
    total is not known ahead (0), as the scheduler source does for Helios."""

    def __init__(self, chunked: bool = False) -> None:
        self.chunked = chunked
        self._ends: list[bool] = []
        self._index = 0

    def step(self, pipe: Any, i: int, t: Any, latents: torch.Tensor, fresh: bool = True) -> Step | None:
        """Loop iteration i's Step, or None when the step goes on in the next iteration. fresh: no step of this
        call was seen yet (a chunked loop's i == 0 is a new call only then)."""
        if i == 0 or not self._ends:
            calls = getattr(pipe, "_num_timesteps", None)
            self._ends = plan(getattr(pipe, "scheduler", None), calls if isinstance(calls, int) else None,
                              chunked=self.chunked)
            if fresh or not self.chunked:
                self._index = 0
        if i < len(self._ends) and not self._ends[i]:
            return None
        index, self._index = self._index, self._index + 1
        return Step(index, t, latents, pipe, 0 if self.chunked else max(sum(self._ends), index + 1))


def per_chunk(pipe: Any) -> bool:
    """Whether the pipeline calls its step callback from a loop inside another loop of its __call__ (AnyFlow FAR's
    chunks, SkyReels V2 diffusion forcing's segments, AnimateDiff's free-init passes, Helios' stages), read from its
    class's source's syntax tree; False where the source cannot be read."""
    cls: type = type(pipe)
    return _nested_callback(cls)


@functools.lru_cache(maxsize=None)
def _nested_callback(cls: type) -> bool:
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls.__call__)))
    except (OSError, TypeError, SyntaxError):
        return False

    def depths(node: ast.AST, loops: int) -> Iterator[int]:
        for child in ast.iter_child_nodes(node):
            if (isinstance(child, ast.Call) and isinstance(child.func, ast.Name)
                    and child.func.id == "callback_on_step_end"):
                yield loops
            yield from depths(child, loops + isinstance(child, (ast.For, ast.While)))
    return any(d >= 2 for d in depths(tree, 0))


def step_callback(on_step: OnStep) -> Callable[[Any, int, Any, dict[str, Any]], dict[str, Any]]:
    """diffusers' callback_on_step_end, driving `on_step` once per pipeline step; it returns the pipeline's kwargs
    untouched."""
    steps = CallbackSteps()

    def callback(pipe: Any, i: int, t: Any, kw: dict[str, Any]) -> dict[str, Any]:
        step = steps.step(pipe, i, t, kw["latents"])
        if step is not None and on_step(step):
            pipe._interrupt = True
        return kw
    return callback


def step_ends(calls: int, warmup: int, order: int) -> list[bool]:
    """Which of a loop's `calls` iterations end a pipeline step, by the rule diffusers' own loops count steps with
    (their progress bar): past the warm-up iterations, every order-th one, and the last."""
    return [k + 1 == calls or (k + 1 > warmup and (k + 1) % order == 0) for k in range(calls)]


def plan(scheduler: Any, calls: int | None = None, chunked: bool = False) -> list[bool]:
    """Which of a loop's iterations end a pipeline step, from the schedule the pipeline has set (host metadata: its
    length, the steps asked, the scheduler's order). The warm-up is the schedule's extra entries: PNDM's schedule
    for 2 steps is [501, 1, 1], its first step two iterations; Heun's (order 2) has an entry per half step. calls:
    the loop's own count where the pipeline says it (img2img runs the schedule's tail), else the schedule's length
    from its begin index. chunked: the loop runs inside another (per_chunk), so `calls` may count every chunk's
    iterations (AnyFlow FAR's _num_timesteps: chunks x steps) and says nothing of one loop's warm-up."""
    timesteps = getattr(scheduler, "timesteps", None)
    length = len(timesteps) if timesteps is not None else 0
    asked = getattr(scheduler, "num_inference_steps", None)
    order = max(1, int(getattr(scheduler, "order", 1) or 1))
    # the warm-up is counted on the iterations the loop runs, where the pipeline says them, as its progress bar
    # counts it: SANA-Sprint's SCM schedule for 2 steps has 3 entries and its loop runs the first 2, no warm-up
    base = calls if calls is not None and not chunked else length
    warmup = max(base - asked * order, 0) if isinstance(asked, int) and asked > 0 else 0
    if calls is None:
        calls = length - int(getattr(scheduler, "begin_index", None) or 0)
    return step_ends(calls, warmup, order)


def cpu_schedule(scheduler: Any, steps: int) -> list[float]:
    """The run's timestep values from a CPU copy of the scheduler, so reading one never waits for the device.
    [] when the schedule depends on the call (FLUX's resolution-dependent shift needs `mu`): rows then say -1."""
    sched = copy.deepcopy(scheduler)
    try:
        sched.set_timesteps(steps, device="cpu")
        return [float(t) for t in sched.timesteps][:steps]
    except Exception:
        return []


class StepTap:
    """Wraps one scheduler's `step` for one pipeline call (install ... remove): keeps each step's x0 for the
    previews (x0), and, with on_step, is the step source of a pipeline that has no step callback.

    The wrapper keeps `step`'s signature (pipelines read it to decide whether to pass `eta` and `generator`) and is
    bound to the scheduler instance, so a deep copy (LTX-2's audio_scheduler) steps its own state and is never
    reported. Only this scheduler is reported, and only on latents of 3 or more dimensions: a prior's scheduler
    steps embeddings. The step's output is returned untouched: the run is bit-identical to a plain call."""

    def __init__(self, scheduler: Any, x0: X0Tap | None = None, on_step: OnStep | None = None,
                 pipe: Any = None, chunked: bool = False) -> None:
        """chunked: the pipeline denoises its output chunk by chunk (Helios), setting the schedule anew for each:
        steps are numbered across chunks, and their total is not known ahead (0)."""
        self.sched, self.x0, self.on_step, self.pipe, self.chunked = scheduler, x0, on_step, pipe, chunked
        self._planned: Any = None    # the timesteps tensor the plan was made for
        self.installed = False
        self._before: Any = None     # an instance-level `step` that was there before ours
        self._ends: list[bool] = []  # per call of this call's schedule: does it end a pipeline step
        self._calls = 0
        self._index = 0
        self._total = 0

    def install(self) -> None:
        if self.installed or not callable(getattr(self.sched, "step", None)):
            return
        sched, tap = self.sched, self
        own = type(sched).step
        before = vars(sched).get("step")

        @functools.wraps(own)
        def step(this: Any, *args: Any, **kwargs: Any) -> Any:
            if this is not tap.sched:  # a deep copy of the scheduler (LTX-2's audio one): its own step, unseen
                return own(this, *args, **kwargs)
            out = before(*args, **kwargs) if before is not None else own(this, *args, **kwargs)
            tap._stepped(args, kwargs, out)
            return out

        self._before = before
        sched.step = types.MethodType(step, sched)  # an instance attribute over the class's method
        self.installed = True
        self._index = 0
        self._ends = []
        if self.on_step is not None:
            self._plan()

    def remove(self) -> None:
        if self.installed:
            if self._before is not None:
                self.sched.step = self._before
            else:
                del self.sched.step
            self.installed = False
        if self.x0 is not None:
            self.x0.forget()

    def _plan(self) -> None:
        """The call's steps, from the schedule the pipeline has set (host metadata: its length, the steps asked,
        the scheduler's order): how many, and which calls end one."""
        self._planned = getattr(self.sched, "timesteps", None)
        self._calls = 0
        self._ends = plan(self.sched)
        self._total = sum(self._ends)

    def _tail(self, timestep: Any) -> None:
        """img2img runs the tail of the schedule, and a scheduler without a begin index does not say where it
        starts; the loop's first timestep does, where it is an element of the schedule itself (the loop iterates
        a slice of scheduler.timesteps): its offset in the schedule's storage, an address, so no device read."""
        ts = self._planned
        if not (isinstance(timestep, torch.Tensor) and isinstance(ts, torch.Tensor) and timestep.dim() == 0
                and ts.dim() == 1 and timestep.device == ts.device and timestep.dtype == ts.dtype):
            return
        if timestep.untyped_storage().data_ptr() != ts.untyped_storage().data_ptr():
            return
        at = (timestep.data_ptr() - ts.data_ptr()) // ts.element_size()
        begin = int(getattr(self.sched, "begin_index", None) or 0)
        if begin < at < len(ts):
            self._ends = plan(self.sched, len(ts) - at)
            self._total = sum(self._ends)

    def _stepped(self, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        model_output = args[0] if len(args) > 0 else kwargs.get("model_output")
        sample = args[2] if len(args) > 2 else kwargs.get("sample")
        timestep = args[1] if len(args) > 1 else kwargs.get("timestep")
        if self.x0 is not None and isinstance(model_output, torch.Tensor) and isinstance(sample, torch.Tensor):
            self.x0.keep(model_output, sample, out)
        if self.on_step is None or not isinstance(sample, torch.Tensor) or sample.dim() < 3:
            return
        if self.chunked and getattr(self.sched, "timesteps", None) is not self._planned:
            self._plan()  # the next chunk's schedule
        if self._calls == 0 and not self.chunked:
            self._tail(timestep)
        k = self._calls
        self._calls += 1
        if k < len(self._ends) and not self._ends[k]:
            return  # the step goes on in the next call (PNDM's warm-up, Heun's first order)
        latents = out[0] if isinstance(out, tuple) else getattr(out, "prev_sample", out)
        index, self._index = self._index, self._index + 1
        total = 0 if self.chunked else max(self._total, index + 1)
        if self.on_step(Step(index, timestep, latents, self.pipe, total)):
            self.stop()

    def stop(self) -> None:
        """Ask the loop to stop, where it reads `interrupt` (classic pipelines that have a callback do)."""
        if self.pipe is not None and hasattr(type(self.pipe), "interrupt"):
            self.pipe._interrupt = True

"""The step source of a Modular Diffusers pipeline: previewlab's block in its denoising loop.

A Modular pipeline's denoising is a `LoopSequentialPipelineBlocks` (Flux3DenoiseLoopWrapper, ...) whose
`sub_blocks` run once per step, the scheduler's step inside the last of them. A block appended there runs at
the end of every step and reads `latents`, `height`, `width` and `num_frames` from the loop's `block_state`.

`pipe.blocks` returns a deep copy, so a block inserted into it changes nothing: `attach` inserts into the
pipeline's own tree (`pipe._blocks`), or finds the `PreviewBlock` a user inserted into the blocks before
`init_pipeline()`, the ecosystem's own way:

    blocks = Flux3AutoBlocks()
    blocks.sub_blocks["denoise"].sub_blocks["previewlab"] = PreviewBlock()
    pipe = blocks.init_pipeline(...)
    watch = previewlab.watch(pipe)      # feeds on that block

A loop that runs once per chunk (Helios, Wan-Animate 2) has its steps inside one sub-block: there, the
scheduler's step is the source (steps.StepTap), so that every step is seen.
"""
from __future__ import annotations

import inspect
from typing import Any, Iterator

from diffusers.modular_pipelines import InputParam, LoopSequentialPipelineBlocks, ModularPipelineBlocks

from previewlab.preview.source.steps import OnStep, Step

NAME = "previewlab"  # the key of previewlab's block in a loop's sub_blocks


class PreviewBlock(ModularPipelineBlocks):
    """previewlab's step in a denoising loop: hands each step's latents to the watch attached to it (nothing
    before one is). It changes no state: the loop's output is bit-identical to a run without it."""

    model_name = None

    def __init__(self) -> None:
        super().__init__()
        self.on_step: OnStep | None = None
        self.inserted: list[Any] = []  # the loops attach() put it in

    @property
    def description(self) -> str:
        return "previewlab: measures each step and previews its latents (reads latents, height, width, num_frames)"

    @property
    def inputs(self) -> list[InputParam]:
        return [InputParam(name) for name in ("latents", "height", "width", "num_frames")]

    @property
    def intermediate_outputs(self) -> list[Any]:
        return []

    def __call__(self, components: Any, block_state: Any, i: int | None = None, t: Any = None,
                 **loop: Any) -> tuple[Any, Any]:
        on_step = self.on_step
        if on_step is None or i is None:
            return components, block_state
        timesteps = getattr(block_state, "timesteps", None)
        asked = getattr(block_state, "num_inference_steps", None)
        total = asked if isinstance(asked, int) and asked > 0 else len(timesteps) if timesteps is not None else 0
        frames = getattr(block_state, "num_frames", None)
        if on_step(Step(int(i), t, block_state.latents, components, total, _int(block_state, "height"),
                        _int(block_state, "width"), frames if isinstance(frames, int) else None)):
            pass  # a Modular loop has no interrupt: the run goes on to its end (the watch says so)
        return components, block_state


def _int(state: Any, name: str) -> int | None:
    value = getattr(state, name, None)
    return value if isinstance(value, int) and value > 0 else None


def loops(blocks: Any) -> Iterator[Any]:
    """Every loop in a block tree, each once (an auto block's alternatives included)."""
    seen: set[int] = set()
    todo = [blocks]
    while todo:
        block = todo.pop()
        if id(block) in seen:
            continue
        seen.add(id(block))
        if isinstance(block, LoopSequentialPipelineBlocks):
            yield block
        todo.extend((getattr(block, "sub_blocks", None) or {}).values())


def per_step(loop: Any) -> bool:
    """The loop's iterations are denoising steps: its __call__ hands its sub-blocks the step index `i` (Helios's
    chunk loop hands `k`). Unreadable source: assume so. Read once per loop class: a server run attaches its
    block inside its timed span."""
    cls = type(loop)
    if cls not in _PER_STEP:
        try:
            text = inspect.getsource(cls.__call__)
            _PER_STEP[cls] = "loop_step(" not in text or "i=i" in text
        except (OSError, TypeError):
            _PER_STEP[cls] = True
    return _PER_STEP[cls]


_PER_STEP: dict[type, bool] = {}


def denoising(loop: Any) -> bool:
    """The loop steps a scheduler or runs a denoiser: a component it or its sub-blocks expect."""
    names = {spec.name for spec in loop.expected_components}
    return bool(names & {"scheduler", "transformer", "unet"})


def step_loops(pipe: Any) -> list[Any]:
    """The pipeline's own denoising loops that run once per step (not a copy: pipe.blocks is one)."""
    return [loop for loop in loops(pipe._blocks) if denoising(loop) and per_step(loop)]


def attach(pipe: Any, on_step: OnStep) -> PreviewBlock | None:
    """Feed `on_step` from a PreviewBlock in each of the pipeline's per-step denoising loops: the one a user
    inserted, else one inserted at their end. None when the pipeline has no such loop (a chunk loop: the
    scheduler's step is the source then)."""
    targets = step_loops(pipe)
    if not targets:
        return None
    found = next((b for loop in targets for b in loop.sub_blocks.values() if isinstance(b, PreviewBlock)), None)
    block = found or PreviewBlock()
    for loop in targets:
        if not any(b is block for b in loop.sub_blocks.values()):
            loop.sub_blocks[NAME] = block
            block.inserted.append(loop)
    block.on_step = on_step
    return block


def detach(pipe: Any, block: PreviewBlock) -> None:
    """Stop feeding the watch; remove the block from the loops where attach inserted it (a user's stays)."""
    block.on_step = None
    for loop in block.inserted:
        if loop.sub_blocks.get(NAME) is block:
            del loop.sub_blocks[NAME]
    block.inserted.clear()

"""Where a step comes from (preview/source/steps.py, preview/source/modular.py), on real diffusers classes.

The scheduler's step wrapper on real schedulers: it keeps `step`'s signature, steps a deep copy's own state and
never reports it, counts pipeline steps (PNDM: 3 calls, 2 steps), ignores a prior's embeddings and leaves the
scheduler as it was. Then watch() on each kind of hook, on tiny versions of real pipelines (tests/tiny_hooks.py):
PixArt-Sigma and IF (no step callback: the scheduler's step), FLUX.3 and Wan 2.2 (Modular: the loop block), LTX-2
with its audio (the scheduler's step on request, and the callback), HunyuanVideo 1.5, a PNDM-scheduled T2I-Adapter pipeline, StableUnCLIP
(a prior's scheduler beside the denoiser's) and Helios (a Modular loop per chunk: the scheduler's step): one row per step, a preview at every step
with latent2rgb and vae, an output bit-identical to a plain call's, and the run's record closed with its phases.
"""
from __future__ import annotations

import copy
import inspect
from typing import Any

import numpy as np
import pytest
import torch

from previewlab import watch as preview_watch
from previewlab.bench.survey.outputs import arrays
from previewlab.preview.decoding import decoders
from previewlab.preview.source.modular import NAME, PreviewBlock, step_loops
from previewlab.preview.source.sources import SourceError, source_of
from previewlab.preview.source.steps import Step, StepTap
from tests.tiny_hooks import Tiny, build

pytestmark = pytest.mark.filterwarnings("ignore")


def _sample(shape: tuple[int, ...] = (1, 4, 8, 8)) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(0))


# ----------------------------------------------------------------------------------------------- the wrapper


def collect(seen: list[Step]) -> Any:
    """An OnStep that keeps each step and never asks to stop."""
    def on_step(step: Step) -> bool:
        seen.append(step)
        return False
    return on_step


def test_the_wrapper_keeps_steps_signature_and_leaves_the_scheduler_as_it_was():
    from diffusers import DDPMScheduler

    sched: Any = DDPMScheduler()
    before = inspect.signature(sched.step)
    tap = StepTap(sched, on_step=lambda s: False)
    tap.install()
    # pipelines read this to decide whether to pass eta and generator (IF, StableUnCLIP)
    assert inspect.signature(sched.step) == before and "generator" in inspect.signature(sched.step).parameters
    tap.remove()
    assert "step" not in vars(sched) and sched.step.__func__ is DDPMScheduler.step


def test_a_deep_copy_steps_its_own_state_and_is_never_reported():
    from diffusers import FlowMatchEulerDiscreteScheduler

    sched: Any = FlowMatchEulerDiscreteScheduler()
    sched.set_timesteps(4)
    seen: list[Step] = []
    tap = StepTap(sched, on_step=collect(seen))
    tap.install()
    audio: Any = copy.deepcopy(sched)  # what LTX-2 does for its audio latents
    x = _sample()
    audio.step(x, audio.timesteps[0], x)
    audio.step(x, audio.timesteps[1], x)
    assert audio.step_index == 2 and sched.step_index is None  # the original's state is untouched
    assert seen == []
    sched.step(x, sched.timesteps[0], x)
    assert [s.index for s in seen] == [0] and sched.step_index == 1 and audio.step_index == 2
    tap.remove()


def test_pndm_counts_pipeline_steps_not_step_calls():
    from diffusers import PNDMScheduler

    sched: Any = PNDMScheduler(skip_prk_steps=True)
    sched.set_timesteps(2)
    assert len(sched.timesteps) == 3  # 3 calls of step for 2 steps
    seen: list[Step] = []
    tap = StepTap(sched, on_step=collect(seen))
    tap.install()
    x = _sample()
    outs = [sched.step(x * (k + 1), t, x).prev_sample for k, t in enumerate(sched.timesteps)]
    tap.remove()
    assert [(s.index, s.total) for s in seen] == [(0, 2), (1, 2)]
    # PLMS's first step takes two calls: the second redoes it from the same sample with both model outputs
    assert torch.equal(seen[0].latents, outs[1]) and not torch.equal(outs[0], outs[1])
    assert torch.equal(seen[1].latents, outs[2])


def test_heun_counts_a_step_per_two_calls():
    from diffusers import HeunDiscreteScheduler

    sched: Any = HeunDiscreteScheduler()
    sched.set_timesteps(3)
    assert len(sched.timesteps) == 5 and sched.order == 2
    seen: list[Step] = []
    tap = StepTap(sched, on_step=collect(seen))
    tap.install()
    x = _sample()
    outs = []
    for k, t in enumerate(sched.timesteps):
        outs.append(sched.step(x * (k + 1), t, x).prev_sample)
        ended = sched.state_in_first_order  # Heun's own word: the second-order half is done
        assert (k in (1, 3, 4)) == ended or k == 4
    tap.remove()
    assert [s.index for s in seen] == [0, 1, 2]
    assert [torch.equal(s.latents, outs[k]) for s, k in zip(seen, (1, 3, 4))] == [True] * 3


def test_a_priors_embeddings_are_not_steps():
    from diffusers import DDPMScheduler

    sched: Any = DDPMScheduler()
    sched.set_timesteps(2)
    seen: list[Step] = []
    tap = StepTap(sched, on_step=collect(seen))
    tap.install()
    sched.step(torch.randn(2, 32), sched.timesteps[0], torch.randn(2, 32))  # (B, D): an embedding
    tap.remove()
    assert seen == []


def test_sources_are_refused_in_one_line_where_a_pipeline_cannot_have_them():
    pixart = build("pixart_sigma").pipe
    assert source_of(pixart) == "scheduler"
    with pytest.raises(SourceError) as e:
        source_of(pixart, "callback")
    assert str(e.value) == ("source='callback': PixArtSigmaPipeline's __call__ has no callback_on_step_end that "
                            "hands over latents; use source='scheduler' (or 'auto')")
    with pytest.raises(SourceError) as e:
        source_of(pixart, "modular")
    assert "is not a Modular pipeline" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(SourceError) as e:
        source_of(pixart, "every")  # type: ignore[arg-type]
    assert str(e.value) == "source='every': allowed are auto, callback, scheduler, modular"


# ----------------------------------------------------------------------------------------------- watch() on each hook

# name -> (the source auto picks, the source asked, passes the watch as its callback)
HOOKS: dict[str, tuple[str, str, bool]] = {
    "pixart_sigma": ("scheduler", "auto", False),
    "if": ("scheduler", "auto", False),    # pixel space
    "flux3_modular": ("modular", "auto", False),
    "wan22_modular": ("modular", "auto", False),
    "ltx2_audio": ("scheduler", "scheduler", False),  # has a callback; the scheduler's step on request
    "ltx2_audio_callback": ("callback", "auto", True),
    "hunyuan15": ("scheduler", "auto", False),
    "pndm_adapter": ("scheduler", "auto", False),   # 3 step calls for 2 steps
    "stable_unclip": ("scheduler", "auto", False),  # its prior's scheduler steps embeddings too
    "helios_modular": ("scheduler", "auto", False),  # a loop per chunk: every step of both chunks
    # packed by a module-level _unpack_latents that also takes the pipeline's patch size (once refused as spatial)
    "krea2_modular": ("modular", "auto", False),
    # FLUX.2's VAE, its latents patchified in place (B, 4C, h/2, w/2) rather than as tokens (once a ValueError)
    "ernie_image_modular": ("modular", "auto", False),
}
CHUNKS = {"helios_modular": 2}  # steps are numbered across the chunks of a clip


@pytest.fixture(scope="module")
def tinies() -> dict[str, Tiny]:
    return {}


def tiny_of(tinies: dict[str, Tiny], name: str) -> Tiny:
    base = name.removesuffix("_callback")
    if base not in tinies:
        tinies[base] = build(base)
    return tinies[base]


_calls = iter(range(10**6))


def plain(t: Tiny, **extra: Any) -> list[np.ndarray]:
    """One call. The global generator is seeded anew for each: the call's own generator must make its noise
    (a step wrapper that hid `generator` from IF's scheduler would leave it to the global one)."""
    torch.manual_seed(next(_calls))
    with torch.inference_mode():
        return arrays(t.pipe(**{**t.kwargs(), **extra}))


@pytest.mark.slow
@pytest.mark.parametrize("name", list(HOOKS))
def test_watch_previews_every_kind_of_hook_bit_identically(tinies, name):
    t = tiny_of(tinies, name)
    picked, asked, as_callback = HOOKS[name]
    ref = plain(t)
    steps = t.kwargs()["num_inference_steps"] * CHUNKS.get(name, 1)
    for decoder in ("none", "latent2rgb", "vae"):
        w = preview_watch(t.pipe, decoder=decoder, mode="sync", size=(t.height, t.width), source=asked)
        try:
            assert w.source == picked
            extra = dict(callback_on_step_end=w, callback_on_step_end_tensor_inputs=w.tensor_inputs) if as_callback else {}
            out = plain(t, **extra)
            rows, record = w.rows, w.record
        finally:
            w.remove()
        assert all(np.array_equal(a, b) for a, b in zip(ref, out)) and len(ref) == len(out), (name, decoder)
        assert [r.step for r in rows] == list(range(1, steps + 1)), (name, decoder)
        made = [r.preview for r in rows]
        assert made == ([0] * steps if decoder == "none" else [1] * steps), (name, decoder, [r.event for r in rows])
        assert all("failed" not in r.event for r in rows)
        assert record is not None and record.totals.status == "done" and record.totals.steps_run == steps
        # the phases and the steps' stages lie inside the call's wall time
        assert record.totals.other_ms >= 0, (name, decoder, record)
    # the hooks are gone: the scheduler's own step, no previewlab block left in a Modular loop
    assert "step" not in vars(t.pipe.scheduler)
    if picked == "modular":
        assert all(NAME not in loop.sub_blocks for loop in step_loops(t.pipe))


def test_pixel_space_previews_say_there_is_no_decoder(tinies):
    t = tiny_of(tinies, "if")
    w = preview_watch(t.pipe, decoder="vae", mode="sync", size=(t.height, t.width))
    try:
        plain(t)
        rows = w.rows
    finally:
        w.remove()
    assert w.model.space.pixel and rows[0].event.startswith("pixel space: the latents are the image")
    assert rows[0].decode_width == t.width


def test_the_scheduler_source_counts_the_tail_img2img_runs(tinies):
    """IF img2img runs the last half of a 4-step schedule on a DDPM scheduler that has no begin index: the watch
    counts the 2 steps the loop runs (from where its first timestep sits in the schedule), and closes the run
    after its last, though a pixel-space pipeline has no final decode to close it."""
    from diffusers import IFImg2ImgPipeline

    t = tiny_of(tinies, "if")
    pipe: Any = IFImg2ImgPipeline(**t.pipe.components)
    pipe.set_progress_bar_config(disable=True)
    image = torch.rand(1, 3, t.height, t.width, generator=torch.Generator().manual_seed(1)) * 2 - 1

    def call() -> list[np.ndarray]:
        kw = {**t.kwargs(), "image": image, "strength": 0.5, "num_inference_steps": 4}  # a fresh generator
        kw.pop("height", None), kw.pop("width", None)
        with torch.inference_mode():
            return arrays(pipe(**kw))
    ref = call()
    w = preview_watch(pipe, decoder="latent2rgb", mode="sync")
    try:
        out = call()
        rows, record = w.rows, w.record
    finally:
        w.remove()
    assert all(np.array_equal(a, b) for a, b in zip(ref, out))
    assert [r.step for r in rows] == [1, 2] and [r.preview for r in rows] == [1, 1]
    assert record is not None and record.totals.status == "done" and record.totals.steps_run == 2


def test_the_scheduler_source_sees_the_latents_the_vae_decodes(tinies):
    """The last step's latents, as the scheduler's step hands them on, decode to the pipeline's own image."""
    t = tiny_of(tinies, "pixart_sigma")
    w = preview_watch(t.pipe, decoder="none", mode="sync", size=(t.height, t.width))
    seen: list[Step] = []
    on_step = w.step_tap.on_step
    assert on_step is not None
    w.step_tap.on_step = lambda s: collect(seen)(s) or on_step(s)
    try:
        out = plain(t)
    finally:
        w.remove()
    vae = decoders.build("vae", w.model)
    assert vae is not None
    with torch.inference_mode():
        image = vae(seen[-1].latents, t.height, t.width)
    mine = image.permute(0, 2, 3, 1).float().numpy()
    assert np.abs(mine - out[0]).max() < 1e-5


def test_a_block_a_user_inserted_before_init_pipeline_feeds_the_watch(tinies):
    """Modular Diffusers' own way: a block in the loop's sub_blocks before init_pipeline(). pipe.blocks is a copy:
    a block put there changes nothing, and the watch finds the user's block, not a copy of its own."""
    t = tiny_of(tinies, "flux3_modular")
    pipe = t.pipe
    loop = step_loops(pipe)[0]
    copied = step_loops_of(pipe.blocks)
    assert copied and all(c is not loop for c in copied)
    copied[0].sub_blocks["mine"] = PreviewBlock()
    assert "mine" not in loop.sub_blocks  # inserting into pipe.blocks does nothing
    mine = PreviewBlock()
    loop.sub_blocks["mine"] = mine  # the pipeline's own tree, as blocks.sub_blocks[...] before init_pipeline()
    try:
        w = preview_watch(pipe, decoder="latent2rgb", mode="sync", size=(t.height, t.width))
        assert w._block is mine and NAME not in loop.sub_blocks
        plain(t)
        rows = w.rows
        w.remove()
        assert [r.preview for r in rows] == [1, 1]
        assert loop.sub_blocks.get("mine") is mine and mine.on_step is None  # the user's block stays, detached
    finally:
        del loop.sub_blocks["mine"]


def step_loops_of(blocks: Any) -> list[Any]:
    from previewlab.preview.source.modular import denoising, loops, per_step

    return [lp for lp in loops(blocks) if denoising(lp) and per_step(lp)]


def test_the_callback_and_the_engine_count_pipeline_steps_with_pndm(tiny):
    """SD1.5's own scheduler is PNDM: its loop calls the step callback 4 times for 3 steps. A row is a step."""
    from diffusers import PNDMScheduler

    from previewlab.preview.call.engine import RunContext, generate
    from previewlab.preview.settings import PreviewSettings, RunSettings

    pipe, own = tiny.pipe, tiny.pipe.scheduler
    pipe.scheduler = PNDMScheduler.from_config(own.config, skip_prk_steps=True)
    calls: list[int] = []
    w = preview_watch(pipe, decoder="latent2rgb", mode="sync")
    try:
        def callback(p: Any, i: int, t: Any, kw: dict[str, Any]) -> dict[str, Any]:
            calls.append(i)
            return w.callback_fn(p, i, t, kw)

        with torch.inference_mode():
            pipe(prompt="a cat", num_inference_steps=3, width=64, height=64, callback_on_step_end=callback,
                 callback_on_step_end_tensor_inputs=w.tensor_inputs, output_type="np")
        rows = w.rows
        s = RunSettings(steps=3, width=64, height=64, preview=PreviewSettings(decoder="latent2rgb"))
        run = generate(RunContext(tiny, s, "pndm"))
    finally:
        w.remove()
        pipe.scheduler = own
    assert calls == [0, 1, 2, 3]
    assert [r.step for r in rows] == [1, 2, 3] and [r.preview for r in rows] == [1, 1, 1]
    assert [r.step for r in run.rows] == [1, 2, 3]
    assert run.record.totals.status == "done" and run.record.totals.steps_run == 3


@pytest.mark.slow
@pytest.mark.parametrize("name", ["if", "hunyuan15"])
def test_the_engine_runs_a_pipeline_without_a_step_callback(tinies, name):
    """The server's and the bench's engine: a pipeline without a callback (HunyuanVideo 1.5), or in pixel space
    (IF), runs with the scheduler's step as its step source."""
    from previewlab.preview.call.script_pipe import model_of
    from previewlab.preview.call.engine import RunContext, generate
    from previewlab.preview.settings import PreviewSettings, RunSettings

    t = tiny_of(tinies, name)
    model = model_of(t.pipe, None)
    s = RunSettings(steps=3, width=64, height=64, prompt="a fox", num_frames=model.num_frames,
                    preview=PreviewSettings(decoder="latent2rgb", mode="sync"))
    run = generate(RunContext(model, s, name))
    assert [r.step for r in run.rows] == [1, 2, 3] and [r.preview for r in run.rows] == [1, 1, 1]
    assert run.record.totals.status == "done" and run.image is not None and run.image.shape == (64, 64, 3)
    assert "step" not in vars(t.pipe.scheduler)


def test_a_modular_pipelines_packed_latents_are_unpacked_by_its_own_code():
    """FLUX.1 as a Modular pipeline: its loop's latents are packed 2x2 tokens, and the pipeline class has no
    _unpack_latents; its package's own (modular_pipelines/flux/decoders.py) unpacks them."""
    from diffusers.modular_pipelines import FluxAutoBlocks

    from previewlab.preview.models import load
    from previewlab.preview.models.reading import latent_space

    flux = load("synthetic:tiny-flux1", device="cpu")
    blocks: Any = FluxAutoBlocks()
    pipe = blocks.init_pipeline()
    pipe.update_components(**{k: v for k, v in flux.pipe.components.items() if v is not None})
    for loop in step_loops(pipe):
        loop.set_progress_bar_config(disable=True)
    space = latent_space(pipe)
    assert (space.family, space.packing) == ("flux1", "packed") and space.unpack is not None
    assert space.unpack.__module__ == "diffusers.modular_pipelines.flux.decoders"
    w = preview_watch(pipe, decoder="latent2rgb", mode="sync")
    try:
        with torch.inference_mode():
            pipe(prompt="a fox", num_inference_steps=2, height=64, width=64, output="images",
                 generator=torch.Generator().manual_seed(0))
        rows = w.rows
    finally:
        w.remove()
    assert w.source == "modular" and [r.preview for r in rows] == [1, 1] and all(not r.event for r in rows)


@pytest.mark.slow  # 2.6 s here: the quick loop leaves it out
def test_a_diffusion_decoder_pipeline_previews_its_first_stage_latents(tinies):
    """LTX-2.5 has no VAE: a diffusion model (its diffusion_decoder) makes the video from LTX-2.3's latents. The
    watch previews those latents with LTX-2.3's latent2rgb factors at every step, bit-identically, says which
    stage it shows, and refuses decoder vae in one line (it was refused whole as having no VAE)."""
    from previewlab.preview.decoding.contract import DecoderError
    from previewlab.preview.models.reading import latent_space

    t = tiny_of(tinies, "ltx25_modular")
    space = latent_space(t.pipe)
    assert (space.family, space.channels, space.packing, space.video) == ("ltx2_3", 128, "ltx", True)
    assert "LTX2VideoDiffusionDecoderModel, a diffusion model, makes the final image" in space.describe()
    ref = plain(t)
    w = preview_watch(t.pipe, decoder="latent2rgb", mode="sync", size=(t.height, t.width))
    try:
        out = plain(t)
        rows, record = w.rows, w.record
    finally:
        w.remove()
    assert all(np.array_equal(a, b) for a, b in zip(ref, out)) and len(ref) == len(out)
    assert [(r.step, r.preview, r.event) for r in rows] == [(1, 1, ""), (2, 1, "")]
    assert record is not None and record.meta.space == space.describe()
    with pytest.raises(DecoderError) as e:
        preview_watch(t.pipe, decoder="vae", size=(t.height, t.width))
    assert str(e.value).startswith("decoder vae: LTX25ModularPipeline has no VAE (") and "\n" not in str(e.value)


def test_the_survey_does_not_count_a_decoder_the_pipeline_cannot_have():
    from previewlab.bench.survey.results import NOT_APPLICABLE, verdict

    assert verdict({"none": "pass", "latent2rgb": "pass", "vae": NOT_APPLICABLE + "no VAE"}) == "pass"
    assert verdict({"none": "pass", "latent2rgb": "failed: x", "vae": NOT_APPLICABLE + "no VAE"}) == (
        "failed: [latent2rgb] x")


def test_the_warm_up_is_counted_on_the_iterations_the_loop_runs():
    """SANA-Sprint's SCM schedule for 2 steps has 3 entries and its loop runs the first 2 (it says 2): both end a
    step, as its progress bar counts them (the first was taken for a warm-up: 1 row for 2 steps). PNDM's schedule
    for 2 steps, [501, 1, 1], is all iterated: its first step takes two."""
    from diffusers import PNDMScheduler, SCMScheduler

    from previewlab.preview.source.steps import plan

    scm = SCMScheduler()
    scm.set_timesteps(2)
    assert len(scm.timesteps) == 3 and plan(scm, 2) == [True, True]
    pndm = PNDMScheduler(skip_prk_steps=True)
    pndm.set_timesteps(2)
    assert plan(pndm, len(pndm.timesteps)) == [False, True, True] == plan(pndm)

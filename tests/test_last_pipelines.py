"""The last pipelines of issue 58, each built exactly as its diffusers fast test builds it (tests/diffusers_dummies.py:
the test class's get_dummy_components and get_dummy_inputs) and watched as a user's script watches it:
`watch(pipe, decoder=...)`, no size=, the call's own height= and width= as the test passes them.

For each decoder that applies: one row per step, a preview at every step (latent2rgb, vae), no failed preview, and
the output bit-identical to a plain call's; where a decoder does not apply, watch() refuses it in one line, before
the call. Bria Fibo's and LTX Condition's sizes come from the call (its tokens do not say them), AnyFlow FAR's
steps are counted per chunk, Allegro's VAE is handed whole tiles of latent frames, and the Stable Cascade prior,
which has no VAE, previews by latent2rgb.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest
import torch

from previewlab import watch
from previewlab.preview.decoding.contract import DecoderError
from tests import diffusers_dummies as dd



def _build(pipeline: str, components: Callable[[], dict[str, Any]]) -> Any:
    import diffusers

    pipe = getattr(diffusers, pipeline)(**components())
    pipe.to("cpu")
    for part in pipe.components.values():  # modules made from configs are in training mode (dropout): eval,
        if isinstance(part, torch.nn.Module):  # as a user's loaded model is
            part.eval()
    pipe.set_progress_bar_config(disable=True)
    return pipe


def _out(pipe: Any, kw: dict[str, Any], w: Any = None) -> np.ndarray:
    if w is not None:
        kw.update(callback_on_step_end=w, callback_on_step_end_tensor_inputs=w.tensor_inputs)
    torch.manual_seed(0)
    first = pipe(**kw)[0]  # images, frames or (the prior's) image_embeddings
    return np.asarray(first.cpu() if isinstance(first, torch.Tensor) else first)


def _previews(pipeline: str, components: Callable[[], dict[str, Any]], inputs: Callable[[], dict[str, Any]],
              steps: int, decoders: tuple[str, ...] = ("none", "latent2rgb", "vae")) -> Any:
    """Watch the pipeline with each decoder; assert rows, previews and outputs. Returns the pipeline."""
    pipe = _build(pipeline, components)
    plain = _out(pipe, inputs())
    for decoder in decoders:
        w = watch(pipe, decoder=decoder, mode="sync")
        try:
            out = _out(pipe, inputs(), w)
            rows, record = w.rows, w.record
        finally:
            w.remove()
        assert np.array_equal(out, plain), f"{pipeline} {decoder}: the watched call changed its output"
        assert [r.step for r in rows] == list(range(1, steps + 1)), f"{pipeline} {decoder}: {len(rows)} rows"
        failed = [r.event for r in rows if "failed" in r.event]
        assert not failed, f"{pipeline} {decoder}: {failed[0]}"
        if decoder != "none":
            assert all(r.preview for r in rows), f"{pipeline} {decoder}: no preview at some step"
        assert record is not None
    return pipe


@pytest.mark.slow  # the test's own pipeline, called four times: over 2 s on one thread
def test_bria_fibo_reads_its_size_from_the_call():
    """Its tokens, one per latent pixel (B, h*w, 16), say no size: the call's height= and width= do (it failed:
    latent2rgb "einsum(): subscript c has size 16 ... previously seen size 4", a square guessed as 2x2 patches)."""
    _previews("BriaFiboPipeline", dd.bria_fibo_components, dd.bria_fibo_inputs, steps=2)


@pytest.mark.slow  # the test's own pipeline, called four times: over 2 s on one thread
def test_bria_fibo_edit_reads_its_size_from_the_call():
    """192 x 336 px, not square (it failed at step 1: "shape '[1, 16, 16, 4, 2, 2]' is invalid for input of size
    4032")."""
    _previews("BriaFiboEditPipeline", dd.bria_fibo_edit_components, dd.bria_fibo_edit_inputs, steps=2)


def test_ltx_condition_reads_its_clip_size_from_the_call():
    """Its transformer is called with video_coords, not the latent height and width: the call's height= and
    width= say the clip's size (it failed at step 1 with every decoder: "its packed clip latents do not say the
    clip's size; pass size=(height, width)")."""
    _previews("LTXConditionPipeline", dd.ltx_condition_components, dd.ltx_condition_inputs, steps=2)


def test_allegro_decodes_whole_tiles_of_latent_frames():
    """Its VAE decodes only whole tiles of 24 frames (6 latent frames): a preview hands it a whole tile, or the
    whole clip where that is shorter, as its own decode reads it (it failed: "Trying to create tensor with
    negative dimension -1: [-1, 3, 24, 320, 320]"). The test's clip (2 latent frames of 2x2) is smaller than one
    tile, so its own decode gives a blank clip, and so do the previews: the same as the final frames."""
    pipe = _previews("AllegroPipeline", dd.allegro_components, dd.allegro_inputs, steps=2)
    from previewlab.preview.models.reading import latent_space

    assert latent_space(pipe).tile_t == 6


@pytest.mark.slow  # the test's own pipeline, called four times: over 2 s on one thread
def test_anyflow_far_counts_steps_per_chunk():
    """3 chunks of 2 steps: 6 rows (it recorded none: its _num_timesteps counts every chunk's steps, which was
    taken for one loop's warm-up)."""
    _previews("AnyFlowFARPipeline", dd.anyflow_far_components, dd.anyflow_far_inputs, steps=6)


@pytest.mark.slow  # the test's own pipeline, called four times: over 2 s on one thread
def test_stable_cascade_prior_previews_without_a_vae():
    """No VAE: none and latent2rgb (stage C's factors) preview it; decoder vae is refused before the call, in one
    line."""
    pipe = _previews("StableCascadePriorPipeline", dd.cascade_prior_components, dd.cascade_prior_inputs, steps=2,
                     decoders=("none", "latent2rgb"))
    with pytest.raises(DecoderError) as refused:
        watch(pipe, decoder="vae")
    assert str(refused.value).startswith("decoder vae: StableCascadePriorPipeline has no VAE (")
    assert "\n" not in str(refused.value)

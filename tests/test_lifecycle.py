"""The measured call's one lifecycle (preview/call/lifecycle.py), through the adapters that feed it."""
from __future__ import annotations

import pytest
import torch

from previewlab import watch as preview_watch
from previewlab.preview.models import synthetic_pipeline
from tests.golden_sweep import TickClock  # 1 ms a reading; `t`: the last reading, read without a tick


@pytest.fixture()
def pipe():
    return synthetic_pipeline("synthetic:tiny")  # a plain StableDiffusionPipeline of tiny components


def test_a_final_decode_in_slices_runs_from_its_first_slice_to_its_last(pipe, tmp_path):
    """A VAE that decodes a batch one image at a time (enable_slicing) calls its decoder once per image. The
    call's final decode is all of them: from the first slice's start to the last one's end (it once kept only
    the last slice in a watch, and only the first in a Modular run)."""
    clock = TickClock()
    w = preview_watch(pipe, decoder="none", mode="sync", clock=clock)
    spans: list[list[float]] = []
    vae = pipe.vae
    vae.enable_slicing()
    # registered after the watch's hooks, so each reads the clock as the watch's hook just left it
    pre = vae.decoder.register_forward_pre_hook(lambda *a: spans.append([clock.t]))
    post = vae.decoder.register_forward_hook(lambda *a: spans[-1].append(clock.t))
    try:
        image = pipe("a cat", num_inference_steps=2, height=64, width=64, num_images_per_prompt=2,
                     generator=torch.Generator().manual_seed(3), callback_on_step_end=w).images[0]
        w.save(image, tmp_path / "out.png")
    finally:
        pre.remove()
        post.remove()
        vae.disable_slicing()
        w.remove()
    assert len(spans) == 2  # one decoder forward per image
    (first_start, _), (last_start, last_end) = spans
    ms = w.records[-1].totals.final_decode_ms
    # it starts at the first slice and ends inside the last one: longer than the gap between their starts
    assert (last_start - first_start) * 1e3 < ms <= (last_end - first_start) * 1e3


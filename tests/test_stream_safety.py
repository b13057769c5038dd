"""Previews never change the user's modules, and a built decoder makes no constants (no hidden copies)."""
from __future__ import annotations

import pytest
import torch

from previewlab.preview.decoding import decoders
from previewlab.preview.decoding.vae_decoder import vae_decoder
from previewlab.preview.decoding.vae_memory import fp32_decoder
from previewlab.preview.call.callback import Watch
from previewlab.preview.call.engine import RunContext, generate
from previewlab.preview.models import load
from previewlab.preview.settings import PreviewSettings, RunSettings


@pytest.fixture(scope="module")
def xl16():
    m = load("synthetic:tiny-xl", device="cpu", dtype="float16")
    assert m.pipe.vae.config.force_upcast  # SDXL's VAE overflows in float16: its pipeline decodes in float32
    return m


def snapshot(module: torch.nn.Module) -> dict[str, tuple[int, torch.dtype, torch.Tensor]]:
    return {k: (p.data_ptr(), p.dtype, p.detach().clone()) for k, p in module.state_dict().items()}


def assert_unchanged(before, module: torch.nn.Module) -> None:
    after = snapshot(module)
    assert after.keys() == before.keys()
    for k, (ptr, dtype, value) in before.items():
        # same storage: a cast in place frees the float16 memory that another stream may still read
        assert after[k][0] == ptr and after[k][1] == dtype, k
        assert torch.equal(after[k][2], value), k


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["sync", "overlap"])
def test_engine_previews_leave_the_float16_vae_alone(xl16, mode):
    vae = xl16.pipe.vae
    before = snapshot(vae)
    s = RunSettings(steps=3, width=64, height=64, preview=PreviewSettings(decoder="vae", mode=mode))
    run = generate(RunContext(xl16, s, "t"))
    assert run.record.totals.previews == 3
    assert vae.dtype == torch.float16
    assert_unchanged(before, vae)
    copy = fp32_decoder(xl16.pipe)
    assert copy.decoder.conv_in.weight.dtype == torch.float32
    assert run.record.totals.vae_copy_mb == pytest.approx(copy.bytes / 2**20) and run.record.totals.vae_copy_mb > 0
    # the copy decodes what the float16 VAE would, in float32
    lat = torch.randn(1, 4, 8, 8, dtype=torch.float16)
    ours = vae_decoder(xl16)(lat, 16, 16)
    with torch.no_grad():
        theirs = vae.to(torch.float32).decode(lat.float() / vae.config.scaling_factor).sample
        vae.to(torch.float16)
    assert ours.dtype == torch.float32 and torch.allclose(ours, theirs, atol=1e-3)


def test_callback_previews_leave_the_users_vae_alone(xl16):
    vae = xl16.pipe.vae
    before = snapshot(vae)
    w = Watch(xl16.pipe, decoder="vae", mode="overlap")
    try:
        xl16.pipe(prompt="a cat", num_inference_steps=3, width=64, height=64, callback_on_step_end=w,
                  callback_on_step_end_tensor_inputs=w.tensor_inputs, output_type="latent")
        rec = w.record
    finally:
        w.remove()
    assert rec is not None and rec.totals.previews == 3
    assert_unchanged(before, vae)


@pytest.fixture(scope="module")
def xl_stats():
    """An SDXL-family VAE that publishes latents_mean/std, as some fine-tunes do."""
    m = load("synthetic:tiny-xl", device="cpu")
    m.pipe.vae.register_to_config(latents_mean=[0.1, -0.2, 0.3, 0.0], latents_std=[1.1, 0.9, 1.0, 1.2])
    return m


@pytest.mark.parametrize("name", ["latent2rgb", "vae"])
def test_built_decoders_make_no_constants_per_call(xl_stats, name, monkeypatch):
    assert xl_stats.pipe.vae.config.latents_mean is not None
    decode = decoders.build(name, xl_stats)
    assert decode is not None
    made: list[object] = []
    real = torch.tensor

    def counting(*a, **kw):
        made.append(a)
        return real(*a, **kw)

    monkeypatch.setattr(torch, "tensor", counting)
    lat = torch.randn(1, 4, 8, 8)
    with torch.inference_mode():
        for _ in range(3):
            decode(lat, 16, 16)
    # a torch.tensor(..., device=cuda) per call is a blocking host-to-device copy on a GPU
    assert made == []

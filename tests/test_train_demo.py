"""The demo model's training script: scenes and their checker, the parts, and a --quick run end to end."""
from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image, ImageFilter

from previewlab.bench.demo import checker, parts as demo_parts
from previewlab.preview.models import demo_scenes as scenes
from tests.conftest import previewlab_here



def test_caption_reads_as_the_issue_writes_it():
    s = scenes.Scene((scenes.Obj("red", "circle", "left"), scenes.Obj("blue", "square", "right")), "plain", "yellow")
    assert s.caption == "a red circle on the left and a blue square on the right, on a yellow background"


def test_training_scenes_are_seeded_and_never_held_out():
    a = [scenes.random_scene(random.Random(3)).caption for _ in range(1)]
    assert a == [scenes.random_scene(random.Random(3)).caption]
    rng = random.Random(0)
    drawn = [scenes.random_scene(rng) for _ in range(3000)]
    assert not {s.caption for s in drawn} & scenes.HELD_OUT_CAPTIONS
    assert {len(s.objects) for s in drawn} == {1, 2, 3} and {s.background for s in drawn} == set(scenes.BACKGROUNDS)
    held = scenes.held_out()
    assert len(held) == 50 and all(len(s.objects) == 1 for s in held)
    assert np.array_equal(scenes.draw(drawn[0]), scenes.draw(drawn[0]))


@pytest.mark.slow
def test_checker_reads_drawn_scenes_back():
    held = scenes.held_out()
    assert checker.figures(checker.judge(held, [scenes.draw(s) for s in held])) == {
        "color": 100.0, "position": 100.0, "shape": 100.0}
    rng = random.Random(1)
    jittered = [s for s in (scenes.random_scene(rng) for _ in range(200)) if len(s.objects) == 1]
    assert checker.figures(checker.judge(jittered, [scenes.draw(s) for s in jittered])) == {
        "color": 100.0, "position": 100.0, "shape": 100.0}


def test_checker_tolerates_a_blurred_picture():
    """Generated pictures are softer than drawn ones; a blur of 2 px must not change what the checker reads."""
    held = scenes.held_out()
    blurred = [np.asarray(Image.fromarray(scenes.draw(s)).filter(ImageFilter.GaussianBlur(2))) for s in held]
    figs = checker.figures(checker.judge(held, blurred))
    assert min(figs.values()) >= 96, figs


def test_checker_finds_several_objects():
    s = scenes.Scene((scenes.Obj("red", "circle", "left"), scenes.Obj("black", "triangle", "top"),
                      scenes.Obj("orange", "square", "bottom")), "ground")
    found = {(f.color, f.shape, f.position) for f in checker.find_objects(scenes.draw(s))}
    assert found == {("red", "circle", "left"), ("black", "triangle", "top"), ("orange", "square", "bottom")}


def test_checker_on_a_blank_image_finds_nothing():
    blank = np.full((128, 128, 3), 128, np.uint8)
    v = checker.judge(scenes.held_out()[:1], [blank])[0]
    assert v.found is None and not (v.color or v.position or v.shape)


def test_tokenizer_keeps_every_word_whole(tmp_path):
    from transformers import CLIPTokenizer

    tok = demo_parts.tokenizer()
    for w in scenes.words():
        assert tok.convert_ids_to_tokens(tok(w).input_ids) == ["<|startoftext|>", w + "</w>", "<|endoftext|>"]
    tok.save_pretrained(tmp_path)
    again = CLIPTokenizer.from_pretrained(tmp_path)
    caption = scenes.held_out()[0].caption
    assert again(caption).input_ids == tok(caption).input_ids and again.model_max_length == 77


def test_taesd_starts_as_latent2rgb():
    from previewlab.preview.models.taesd import Decoder

    torch.manual_seed(0)
    factors, bias = torch.randn(4, 3) * 0.3, torch.tensor([0.1, -0.2, 0.05])
    dec = demo_parts.taesd_from_latent2rgb(factors, bias)
    z = torch.randn(2, 4, 16, 16)
    with torch.no_grad():
        rgb = torch.einsum("bchw,cr->brhw", torch.tanh(z / 3) * 3, factors) + bias.view(1, 3, 1, 1)
        want = torch.nn.functional.interpolate((rgb + 1) / 2, scale_factor=8, mode="nearest")
        assert torch.allclose(dec(z), want, atol=1e-5)
    Decoder().load_state_dict(dec.state_dict())  # madebyollin's layout, unchanged


@pytest.fixture(scope="module")
def quick(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("demo")
    # one torch thread: the test runs beside another worker on two cores, where two threads spin-wait for each
    # other (train.py's docstring: 9 s a VAE step instead of 1.2 s); CI took 59 s to 113 s with two
    p = previewlab_here("train-demo", "--quick", "--out", str(out), "--seed", "0", "--threads", "1")
    assert p.returncode == 0, p.stderr[-3000:]
    assert "unet: loss" in p.stdout
    return out


@pytest.mark.slow
def test_quick_training_lowers_every_loss(quick):
    from previewlab.bench.demo.train import Report

    report = Report(**json.loads((quick / "training.json").read_text()))
    windows = report.windows()
    assert set(windows) == {"vae", "unet", "taesd"}
    for name, (first, last) in windows.items():
        # TAESD starts as the fitted latent2rgb, already close: its quick run gains ~20 %, the others ~50 %
        assert last < 0.9 * first, (name, first, last)
    assert report.megabytes <= 25 and report.scaling_factor > 0


@pytest.mark.slow
def test_quick_model_loads_and_generates(quick):
    from diffusers import StableDiffusionPipeline
    from safetensors import safe_open

    with safe_open(str(quick / "unet" / "diffusion_pytorch_model.safetensors"), "pt") as f:
        assert f.get_tensor(next(iter(f.keys()))).dtype == torch.float16  # on disk
    pipe = StableDiffusionPipeline.from_pretrained(str(quick), local_files_only=True)
    assert pipe.unet.dtype == torch.float32  # diffusers loads into float32 unless told otherwise
    pipe.set_progress_bar_config(disable=True)
    out = pipe("a red circle on the left, on a white background", num_inference_steps=2, output_type="np",
               generator=torch.Generator().manual_seed(0)).images
    side = demo_parts.QUICK.size  # the pipeline's default size is the trained one (sample_size)
    assert out.shape == (1, side, side, 3) and np.isfinite(out).all()
    assert pipe.vae.config.scaling_factor != 0.18215


@pytest.mark.slow
def test_quick_preview_decoders_load(quick):
    from previewlab.preview.models import load_taesd

    dec, kind = load_taesd(str(quick / "taesd_decoder.safetensors"))
    assert kind == "madebyollin"
    with torch.no_grad():
        img = dec(torch.randn(1, 4, 16, 16))
    assert img.shape == (1, 3, 128, 128)
    l2r = json.loads((quick / "latent2rgb.json").read_text())
    assert np.array(l2r["factors"]).shape == (4, 3) and len(l2r["bias"]) == 3


@pytest.mark.slow
def test_fp16_weights_barely_move_pixels(quick):
    report = json.loads((quick / "training.json").read_text())
    assert set(report["fp16_levels"]) == {"vae", "taesd"}
    assert max(report["fp16_levels"].values()) < 1.0  # mean 8-bit levels


@pytest.mark.slow
def test_check_runs_on_the_quick_model(quick, tmp_path):
    from previewlab.bench.demo.check import check

    figs, verdicts = check(quick, steps=2, grid=tmp_path / "grid.png")
    assert len(verdicts) == 50 and set(figs) == {"color", "position", "shape"}
    side = demo_parts.QUICK.size
    assert Image.open(tmp_path / "grid.png").size == (10 * side, 5 * side)  # 50 images, 10 to a row


@pytest.mark.slow
def test_training_is_seeded_and_reproducible(tmp_path):
    """The same seed trains the same model (loss curves, weights, factors, bit for bit); another seed does not.
    A micro plan of a few steps per part, so the whole pipeline of parts runs three times in seconds."""
    from safetensors.torch import load_file

    from previewlab.bench.demo.train import train

    micro = demo_parts.Plan(size=64, scenes=64, vae_steps=4, vae_batch=2, unet_steps=4, unet_batch=4, taesd_steps=2,
                            taesd_batch=2, warmup=1)
    a, b, c = (train(micro, tmp_path / name, seed=seed, threads=1) for name, seed in (("a", 0), ("b", 0), ("c", 1)))
    assert a.losses == b.losses and a.losses != c.losses
    for part in ("unet/diffusion_pytorch_model.safetensors", "vae/diffusion_pytorch_model.safetensors",
                 "taesd_decoder.safetensors"):
        wa, wb = load_file(str(tmp_path / "a" / part)), load_file(str(tmp_path / "b" / part))
        assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa), part
    assert (tmp_path / "a" / "latent2rgb.json").read_text() == (tmp_path / "b" / "latent2rgb.json").read_text()

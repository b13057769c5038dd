"""A Modular Diffusers pipeline folder (modular_model_index.json) as --model: loaded, run by the engine the
server and the bench share (preview/call/modular_run.py), and by the bench's command line.

The folder is a real one: tiny-xl's SDXL components in StableDiffusionXLAutoBlocks, saved with
ModularPipeline.save_pretrained and loaded back with ModularPipeline.from_pretrained(local_files_only=True).
"""
from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from previewlab.preview.call.engine import RunContext, generate
from previewlab.preview.call.call_args import TaskError
from previewlab.preview.models import ModelError, load
from previewlab.preview.settings import PreviewSettings, RunSettings
from previewlab.preview.source.sources import is_modular
from tests.conftest import previewlab_here

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture(scope="module")
def modular_model(modular_folder: Path) -> Any:  # modular_folder: tests/conftest.py
    return load(str(modular_folder), device="cpu")


def plain_u8(model: Any, settings: RunSettings) -> np.ndarray:
    """The pipeline's own image for these settings, called as a user calls it, without previewlab."""
    gen = torch.Generator("cpu").manual_seed(settings.seed)
    with torch.inference_mode():
        images = model.pipe(prompt=settings.prompt, num_inference_steps=settings.steps, height=settings.height,
                            width=settings.width, generator=gen, output_type="np", output="images")
    return np.asarray((np.clip(images[0], 0, 1) * 255).round().astype(np.uint8))


def test_a_modular_folder_loads_as_a_modular_pipeline(modular_model):
    assert is_modular(modular_model.pipe) and type(modular_model.pipe).__name__ == "StableDiffusionXLModularPipeline"
    assert modular_model.family == "sdxl" and not modular_model.synthetic


@pytest.mark.slow
@pytest.mark.parametrize(("decoder", "mode"), [("latent2rgb", "sync"), ("vae", "overlap"), ("none", "sync")])
def test_the_engine_runs_a_modular_pipeline_with_previews_and_its_own_image(modular_model, decoder, mode):
    s = RunSettings(steps=3, width=64, height=64, prompt="a red fox", seed=4,
                    preview=PreviewSettings(decoder=decoder, mode=mode))
    run = generate(RunContext(modular_model, s, "m"))
    assert [r.step for r in run.rows] == [1, 2, 3]
    assert [r.preview for r in run.rows] == [0 if decoder == "none" else 1] * 3
    assert all("failed" not in r.event for r in run.rows)
    t = run.record.totals
    assert t.status == "done" and t.text_encode_ms > 0 and t.final_decode_ms > 0 and t.other_ms >= 0
    # the run's image is the pipeline's own, bit for bit: the loop block changes nothing it computes
    assert run.image is not None and np.array_equal(run.image, plain_u8(modular_model, s))


def test_a_modular_pipeline_refuses_image_to_image_in_one_line(modular_model):
    s = RunSettings(steps=2, width=64, height=64, init="20261130-120000-001", strength=0.5)
    with pytest.raises(TaskError) as e:
        generate(RunContext(modular_model, s, "m", init_image=object()))
    assert str(e.value) == ("StableDiffusionXLModularPipeline: a Modular pipeline runs text to image in the server "
                            "and the bench, not image to image yet; use watch() in your own script")


def test_a_broken_modular_folder_is_refused_in_one_line(tmp_path, modular_folder):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "modular_model_index.json").write_text((modular_folder / "modular_model_index.json").read_text()
                                                  .replace(str(modular_folder), str(tmp_path / "gone")))
    with pytest.raises(ModelError) as e:
        load(str(bad), device="cpu")
    gone = tmp_path / "gone"
    assert str(e.value) == (f"--model {bad}: cannot load its Modular pipeline's scheduler, text_encoder, "
                            f"text_encoder_2, tokenizer, tokenizer_2, unet, vae (its modular_model_index.json looks "
                            f"for them in {gone})")


@pytest.mark.slow
def test_the_bench_measures_a_modular_folder(modular_folder, tmp_path):
    p = previewlab_here("bench", "--model", str(modular_folder), "--decoders", "none,latent2rgb", "--every", "1",
                        "--steps", "2", "--width", "64", "--height", "64", "--repeats", "1", "--warmup", "0",
                        "--modes", "sync", "--out", str(tmp_path))
    assert p.returncode == 0, p.stderr
    runs = list(csv.DictReader((tmp_path / "runs.csv").open()))
    steps = list(csv.DictReader((tmp_path / "steps.csv").open()))
    assert {r["decoder"] for r in runs} == {"none", "latent2rgb"} and all(r["status"] == "done" for r in runs)
    made = [r for r in steps if r["decoder"] == "latent2rgb"]
    assert made and all(r["preview"] == "1" for r in made)

"""The pipeline survey (bench/survey) on a tests folder laid out as diffusers' is: its cases found by reading the
files, and a case run in a worker process of its own, watched with each decoder and compared bit for bit."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from previewlab.bench.survey.__main__ import main

# a pipeline without a step callback: a real diffusers pipeline whose __call__ takes no callback_on_step_end
# (as PixArt's and IF's), on the synthetic tiny SD's components; and one with it
TEST_FILE = '''
import torch
from diffusers import StableDiffusionPipeline

from previewlab.preview.models import synthetic_pipeline


class NoCallbackSD(StableDiffusionPipeline):
    def __call__(self, prompt, num_inference_steps=2, height=64, width=64, generator=None, output_type="np"):
        return super().__call__(prompt=prompt, num_inference_steps=num_inference_steps, height=height, width=width,
                                generator=generator, output_type=output_type)


class TinyMixin:
    def get_dummy_components(self):
        return dict(synthetic_pipeline("synthetic:tiny").components)

    def get_dummy_inputs(self, device, seed=0):
        return {"prompt": "a cat", "num_inference_steps": 2, "height": 64, "width": 64,
                "generator": torch.Generator(device).manual_seed(seed), "output_type": "np"}


class TinyNoCallbackFastTests(TinyMixin):
    pipeline_class = NoCallbackSD


class TinySDFastTests(TinyMixin):
    pipeline_class = StableDiffusionPipeline


class _TinyBase(TinyMixin):
    pipeline_class = StableDiffusionPipeline
'''


@pytest.fixture
def tests_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "diffusers" / "tests"
    (folder / "pipelines" / "tiny").mkdir(parents=True)
    for init in (folder, folder / "pipelines", folder / "pipelines" / "tiny"):
        (init / "__init__.py").write_text("")
    (folder / "pipelines" / "tiny" / "test_tiny.py").write_text(TEST_FILE)
    return folder


def test_the_cases_are_the_test_classes_that_make_a_pipeline(tests_folder, capsys):
    assert main(["--tests", str(tests_folder.parent), "--list", "--only", "pipelines/tiny"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "classic  TinyNoCallbackFastTests (NoCallbackSD)  pipelines/tiny/test_tiny.py",
        "classic  TinySDFastTests (StableDiffusionPipeline)  pipelines/tiny/test_tiny.py"]  # _TinyBase: private
    with pytest.raises(SystemExit) as e:
        main(["--tests", str(tests_folder / "pipelines")])
    assert e.value.code == 2 and "has no pipelines/ folder: pass diffusers' tests folder" in capsys.readouterr().err


@pytest.mark.slow
def test_a_pipeline_without_a_step_callback_passes_watched_bit_for_bit(tests_folder, tmp_path, capsys):
    out, results = tmp_path / "survey.txt", tmp_path / "survey.jsonl"
    assert main(["--tests", str(tests_folder), "--only", "TinyNoCallback", "--out", str(out), "--json",
                 str(results), "--timeout", "60"]) == 0
    (line,) = results.read_text().splitlines()
    r = json.loads(line)
    # the scheduler's step was its step source; two steps counted on its own progress bar; each decoder's watched
    # output the plain call's, bit for bit, with a row and (latent2rgb, vae) a preview at every step
    assert (r["kind"], r["result"], r["source"], r["steps"]) == ("no callback", "pass", "scheduler", 2), r
    assert r["decoders"] == {"none": "pass", "latent2rgb": "pass", "vae": "pass"}
    text = out.read_text()
    assert text.startswith("# previewlab pipeline survey (issue 32)") and "TinyNoCallbackFastTests" in text
    assert "[1/1] no callback TinyNoCallbackFastTests (NoCallbackSD): pass" in capsys.readouterr().out

"""Single-file checkpoints, offline: an SD1.5 file in the original key layout loads with the shipped configs and
tokenizer, every weight arrives, and it generates; files that need more than is shipped say what to pass."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from previewlab.preview.models import single_file, ModelError, load, synthetic_pipeline
from tests.ldm_checkpoint import ldm_state_dict


@pytest.fixture(scope="module")
def sd15_file(tmp_path_factory):
    """synthetic:sd15 (SD1.5's real architecture, random weights) as an fp16 single file, as A1111 keeps one."""
    pipe = synthetic_pipeline("synthetic:sd15")
    path = tmp_path_factory.mktemp("ckpt") / "sd15-synthetic.safetensors"
    save_file(ldm_state_dict(pipe), str(path))
    return pipe, path


@pytest.mark.slow
def test_sd15_single_file_loads_every_weight_offline_and_generates(sd15_file):
    ref, path = sd15_file
    m = load(str(path), device="cpu")
    assert m.family == "sd15" and not m.synthetic and type(m.pipe).__name__ == "StableDiffusionPipeline"
    for part in ("unet", "vae", "text_encoder"):
        got, want = getattr(m.pipe, part).state_dict(), getattr(ref, part).state_dict()
        assert got.keys() == want.keys(), part
        for k, v in want.items():
            # the file holds fp16: each weight comes back as its fp16 rounding, in the shape diffusers uses
            assert torch.equal(got[k], v.half().float()), f"{part}.{k}"
    # the shipped tokenizer is CLIP's own: these are the ids OpenAI's CLIP gives
    assert m.pipe.tokenizer("a photo of a cat").input_ids == [49406, 320, 1125, 539, 320, 2368, 49407]
    assert m.pipe.scheduler.config.prediction_type == "epsilon" and m.pipe.vae.config.scaling_factor == 0.18215
    image = m.pipe("a red circle", num_inference_steps=1, height=64, width=64, output_type="np").images
    assert image.shape == (1, 64, 64, 3) and bool(torch.isfinite(torch.from_numpy(image)).all())


@pytest.mark.slow
def test_config_folder_stands_in_for_the_shipped_configs(sd15_file, tmp_path):
    """--config: the user's own folder (here: the shipped v1 configs with another scheduler) is the one used."""
    _, path = sd15_file
    folder = single_file.assemble("v1", tmp_path / "mine")
    cfg = folder / "scheduler" / "scheduler_config.json"
    cfg.write_text(json.dumps({**json.loads(cfg.read_text()), "_class_name": "DDIMScheduler"}))
    (folder / "model_index.json").write_text(json.dumps(
        {**json.loads((folder / "model_index.json").read_text()), "scheduler": ["diffusers", "DDIMScheduler"]}))
    m = load(str(path), device="cpu", config=str(folder))
    assert type(m.pipe.scheduler).__name__ == "DDIMScheduler"


@pytest.mark.parametrize("kind,parts", [("v2", {"unet": 865_910_724, "text_encoder": 340_387_840}),
                                        ("xl_base", {"unet": 2_567_463_684, "text_encoder": 123_060_480,
                                                     "text_encoder_2": 694_659_840})])
@pytest.mark.slow
def test_shipped_configs_build_the_real_architectures(kind, parts, tmp_path):
    """SD 2.1 and SDXL have no test file (gigabytes); their configs build, on the meta device, the parameter
    counts the released models have."""
    from diffusers import UNet2DConditionModel
    from transformers import AutoConfig, CLIPTextModel, CLIPTextModelWithProjection

    folder = single_file.assemble(kind, tmp_path / kind)
    with torch.device("meta"):
        for part, count in parts.items():
            if part == "unet":
                model = UNet2DConditionModel.from_config(UNet2DConditionModel.load_config(folder / part))
            else:
                cls = CLIPTextModelWithProjection if part == "text_encoder_2" else CLIPTextModel
                model = cls(AutoConfig.from_pretrained(folder / part))
            assert sum(p.numel() for p in model.parameters()) == count, part


def test_checkpoint_that_needs_a_t5_tokenizer_asks_for_config(tmp_path):
    path = tmp_path / "flux1-schnell.safetensors"
    save_file({"double_blocks.0.img_attn.norm.key_norm.scale": torch.zeros(4)}, str(path))
    with pytest.raises(ModelError, match=r"flux-schnell checkpoint needs a T5 tokenizer.*pass --config"):
        load(str(path), device="cpu")


@pytest.mark.parametrize("name,why", [("missing.safetensors", "no such file"),
                                      ("garbage.safetensors", "not a readable checkpoint")])
def test_bad_single_files_get_one_line(name, why, tmp_path):
    path = tmp_path / name
    if name.startswith("garbage"):
        path.write_bytes(b"\x00" * 64)
    with pytest.raises(ModelError, match=why) as e:
        load(str(path), device="cpu")
    assert "\n" not in str(e.value)


def test_config_is_only_for_single_files(tmp_path):
    with pytest.raises(ModelError, match="--config .*only for a single-file checkpoint"):
        load(str(tmp_path), device="cpu", config=str(tmp_path))

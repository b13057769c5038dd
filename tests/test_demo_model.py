"""The shipped demo model: it loads as a real model would (a local diffusers folder, its TAESD file, its own
latent2rgb factors), it paints what a caption asks for, and every report carries its label. watch() on the
user's own pipeline of the same folder finds its TAESD and factors as the server does."""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import load_file, save_file

from previewlab import watch as preview_watch
from previewlab.bench.demo import checker
from previewlab.preview.models import demo_scenes as scenes
from previewlab.bench.demo.check import generate as check_images
from previewlab.preview.record.csv_writer import to_csv_text
from previewlab.preview.decoding.contract import DecoderError
from previewlab.preview.decoding.decoders import DECODERS, check_name
from previewlab.preview.decoding.stops import WHOLE
from previewlab.preview.frames import Frame
from previewlab.preview.call.engine import RunContext, generate
from previewlab.preview.record.kept_events import Gathered
from previewlab.preview.models import DEMO_DIR, DEMO_NOTE, Model, ModelError, load
from previewlab.preview.models.latent_formats import LATENT_RGB, latent2rgb
from previewlab.preview.models.taesd import Decoder as TaeDecoder
from previewlab.preview.record.run import RUN_COLUMNS
from previewlab.preview.settings import PreviewSettings, RunSettings

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def demo() -> Model:
    return load("demo", device="cpu")


def test_ships_within_25_mb_as_safetensors_and_loads_like_a_real_model(demo):
    files = [f for f in DEMO_DIR.rglob("*") if f.is_file()]
    assert sum(f.stat().st_size for f in files) <= 25 * 2**20
    weights = [f for f in files if f.suffix in (".bin", ".ckpt", ".pth", ".pt", ".safetensors")]
    assert weights and all(f.suffix == ".safetensors" for f in weights)
    assert type(demo.pipe).__name__ == "StableDiffusionPipeline" and demo.family == "sd15"
    assert not demo.synthetic and demo.note == DEMO_NOTE and demo.default_size == 128
    assert demo.taesd_kind == "madebyollin" and demo.taesd is not None
    fit = json.loads((DEMO_DIR / "latent2rgb.json").read_text())
    assert demo.latent_rgb is not None and [list(r) for r in demo.latent_rgb[0]] == fit["factors"]


@pytest.mark.slow  # 2.6 s here: the quick loop leaves it out
def test_paints_the_color_and_place_a_held_out_caption_asks_for(demo):
    """Ten captions never drawn in training, at the run defaults (20 steps, guidance 7.5): the checker finds
    the named color in most of them. (The full figures over 50 captions are in the README.)"""
    held = scenes.held_out()[:10]
    images = check_images(demo.pipe, [s.caption for s in held], steps=20, guidance=7.5, seed=0)
    figures = checker.figures(checker.judge(held, images))
    assert figures["color"] >= 60, figures


@pytest.mark.slow
@pytest.mark.parametrize("decoder", ["latent2rgb", "taesd", "vae"])
def test_every_decoder_previews_a_picture_and_the_record_says_demo(demo, decoder, tmp_path):
    told = Gathered()
    settings = RunSettings(prompt="a red circle in the center, on a blue background", steps=6, width=128, height=128,
                           preview=PreviewSettings(decoder=decoder, target="x0", mode="sync"))
    run = generate(RunContext(demo, settings, "demo"), told)
    frames = told.frames
    assert run.record.meta.model_note == DEMO_NOTE and run.record.meta.synthetic is False
    assert len(frames) == 6 and all(r.event == "" for r in run.rows)
    side = 16 if decoder == "latent2rgb" else 128
    assert frames[-1].width == side
    # a picture, not noise: the last preview's center is red-ish and its border blue-ish
    img = np.asarray(Image.open(io.BytesIO(frames[-1].data)).convert("RGB").resize((128, 128))).astype(float)
    center, border = img[48:80, 48:80].mean((0, 1)), np.concatenate([img[:16], img[-16:]]).mean((0, 1))
    assert center[0] > center[2] and border[2] > border[0], (decoder, center, border)
    runs_csv = to_csv_text([run.record], RUN_COLUMNS)  # what the bench's runs.csv holds
    assert [r["model_note"] for r in csv.DictReader(io.StringIO(runs_csv))] == [DEMO_NOTE]


def test_demo_is_the_default_of_make_serve_and_the_server():
    from previewlab.server.cli import parser

    assert parser().parse_args([]).model == "demo"
    assert "--model demo" in (ROOT / "Makefile").read_text()


def test_missing_weights_say_how_to_make_them(monkeypatch, tmp_path):
    from previewlab.preview.models import demo

    monkeypatch.setattr(demo, "DEMO_DIR", tmp_path / "nothing")
    with pytest.raises(ModelError, match="--model demo: model_index.json, taesd_decoder.safetensors, latent2rgb.json missing from .* "
                       "previewlab train-demo"):
        load("demo", device="cpu")


# -- what the demo folder ships, found by watch() on the user's own pipeline as by the server (issue 23, 11) ----

class Frames:
    """RunEvents that keep the frames a watch makes."""

    def __init__(self) -> None:
        self.frames: list[Frame] = []

    def started(self, meta: Any) -> None: ...
    def row(self, row: Any) -> None: ...
    def frame(self, frame: Frame) -> None: self.frames.append(frame)
    def error(self, run_id: str, message: str) -> None: raise AssertionError(message)
    def ended(self, end: Any) -> None: ...


def users_pipe() -> Any:
    """The demo folder loaded the way a user's own script loads a diffusers folder."""
    from diffusers import StableDiffusionPipeline

    pipe = StableDiffusionPipeline.from_pretrained(str(DEMO_DIR), local_files_only=True)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def same_weights(module: Any, path: Path) -> bool:
    file, state = load_file(str(path)), module.state_dict()
    return state.keys() == file.keys() and all(torch.equal(state[k].cpu(), file[k]) for k in file)


def folder_factors() -> list[list[float]]:
    return json.loads((DEMO_DIR / "latent2rgb.json").read_text())["factors"]


def decode(model: Model, decoder: str, latents: torch.Tensor) -> torch.Tensor:
    """One preview of `latents` (1, 4, 16, 16) at 128 px, as the engine makes it: RGB in [0, 1]."""
    build = DECODERS[check_name(decoder)].build
    assert build is not None
    return build(model, lambda note: None, WHOLE)(latents, 128, 128)


@pytest.fixture(scope="module")
def pipe() -> Any:
    return users_pipe()


def test_watch_on_the_demo_folder_previews_with_the_taesd_it_ships(demo, pipe):
    w = preview_watch(pipe, decoder="taesd", mode="sync", target="x0", encoder="png")
    try:
        assert w.model.taesd is not None and same_weights(w.model.taesd, DEMO_DIR / "taesd_decoder.safetensors")
        latents = torch.randn(1, 4, 16, 16, generator=torch.Generator().manual_seed(0))
        assert torch.equal(decode(w.model, "taesd", latents), decode(demo, "taesd", latents))  # the server's preview
        events = Frames()
        w.attach(events)
        pipe("a red circle in the center, on a blue background", num_inference_steps=3, height=128, width=128,
             guidance_scale=3.0, output_type="np", generator=torch.Generator().manual_seed(0),
             callback_on_step_end=w, callback_on_step_end_tensor_inputs=w.tensor_inputs)
        assert [r.decoder for r in w.rows] == ["taesd"] * 3 and all(r.event == "" for r in w.rows)
        assert [(f.decoder, f.width) for f in events.frames] == [("taesd", 128)] * 3  # TAESD's full size, not 16 px
    finally:
        w.remove()


def test_watch_latent2rgb_uses_the_folders_own_factors_not_sd15s(demo, pipe):
    w = preview_watch(pipe, decoder="latent2rgb")
    try:
        assert w.model.latent_rgb is not None and [list(r) for r in w.model.latent_rgb[0]] == folder_factors()
        latents = torch.randn(1, 4, 16, 16, generator=torch.Generator().manual_seed(1))
        mine = decode(w.model, "latent2rgb", latents)
        assert torch.equal(mine, decode(demo, "latent2rgb", latents))
        assert not torch.allclose(mine, latent2rgb(LATENT_RGB["sd15"], torch.device("cpu"), torch.float32)(latents))
    finally:
        w.remove()


def test_the_demo_folder_given_by_path_loads_its_taesd_and_factors_as_demo_does():
    model = load(str(DEMO_DIR), device="cpu")
    assert model.taesd is not None and model.taesd_kind == "madebyollin"
    assert same_weights(model.taesd, DEMO_DIR / "taesd_decoder.safetensors")
    assert model.latent_rgb is not None and [list(r) for r in model.latent_rgb[0]] == folder_factors()


def test_a_taesd_given_overrides_the_one_the_folder_ships(pipe, tmp_path):
    torch.manual_seed(5)
    mine = tmp_path / "taesd_decoder.safetensors"
    save_file(TaeDecoder(4).state_dict(), str(mine))  # the real TAESD layout, random weights
    w = preview_watch(pipe, decoder="taesd", taesd=str(mine))
    try:
        assert w.model.taesd is not None and same_weights(w.model.taesd, mine)
        assert not same_weights(w.model.taesd, DEMO_DIR / "taesd_decoder.safetensors")
    finally:
        w.remove()


def folder_without_extras(tmp_path: Path) -> Path:
    """The demo folder's components, linked, without its TAE and latent2rgb.json."""
    folder = tmp_path / "plain"
    folder.mkdir()
    for part in DEMO_DIR.iterdir():
        if part.name not in ("taesd_decoder.safetensors", "latent2rgb.json"):
            (folder / part.name).symlink_to(part)
    return folder


def test_a_folder_that_ships_neither_previews_with_its_familys_factors_and_refuses_taesd(tmp_path):
    from diffusers import StableDiffusionPipeline

    pipe = StableDiffusionPipeline.from_pretrained(str(folder_without_extras(tmp_path)), local_files_only=True)
    w = preview_watch(pipe)
    try:
        assert w.model.taesd is None and w.model.latent_rgb is None  # latent2rgb takes SD1.5's
    finally:
        w.remove()
    with pytest.raises(DecoderError, match="decoder taesd needs TAE weights for sd15: pass taesd=PATH"):
        preview_watch(pipe, decoder="taesd")


def test_a_folders_latent2rgb_json_of_the_wrong_width_is_refused_in_one_line(tmp_path):
    from diffusers import StableDiffusionPipeline

    folder = folder_without_extras(tmp_path)
    (folder / "latent2rgb.json").write_text(json.dumps({"factors": folder_factors()[:3], "bias": [0, 0, 0]}))
    pipe = StableDiffusionPipeline.from_pretrained(str(folder), local_files_only=True)
    with pytest.raises(ModelError, match=r"latent2rgb.json: 3 rows of factors, but the latent space has 4 channels"):
        preview_watch(pipe)


def _demo_tokenizer() -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(DEMO_DIR / "tokenizer"))


def demo_pieces(prompt: str) -> list[str]:
    """The prompt as the demo tokenizer's normalizer and its first pre-tokenizer (the Split of its tokenizer.json)
    cut it, before the byte-level step: the pieces the page checks against the words the model learnt."""
    from tokenizers import Regex, pre_tokenizers

    spec = json.loads((DEMO_DIR / "tokenizer" / "tokenizer.json").read_text())
    split = pre_tokenizers.Split(Regex(spec["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"]), "removed",
                                 invert=True)
    normal = _demo_tokenizer().backend_tokenizer.normalizer.normalize_str(prompt)
    return [piece for piece, _ in split.pre_tokenize_str(normal)]


def test_the_pages_words_are_the_ones_the_demo_tokenizer_learnt():
    """Issue 45, item 19: the page names the words of a prompt the demo model ignores, from the words the hello
    sends and its own split. Both are the tokenizer's: each word is one token of it, anything else is spelt out
    or read as the end-of-text token, and the page's split is the tokenizer's pattern less its special tokens."""
    import re

    tok = _demo_tokenizer()
    learnt = scenes.vocabulary()["words"]
    assert learnt == scenes.words()
    for word in learnt:
        ids = tok(word, add_special_tokens=False).input_ids
        assert tok.convert_ids_to_tokens(ids) == [f"{word}</w>"], word
    for other in ("🙂", ".", "dog", "middle", "b", "3"):  # "b" is a token, but no caption held it
        (piece,) = demo_pieces(other)
        assert piece not in learnt
    assert tok.unk_token_id in tok("🙂", add_special_tokens=False).input_ids
    page = (Path(__file__).resolve().parents[1] / "previewlab" / "web" / "controls.js").read_text()
    found = re.search(r"^const PIECES = /(.+)/gu;$", page, re.M)
    spec = json.loads((DEMO_DIR / "tokenizer" / "tokenizer.json").read_text())
    assert found and spec["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] == (
        r"<\|startoftext\|>|<\|endoftext\|>|" + found[1])
    assert demo_pieces("A  RED circle's 🙂, then") == ["a", "red", "circle", "'s", "🙂,", "then"]

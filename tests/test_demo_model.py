"""The shipped demo model: it loads as a real model would (a local diffusers folder, its TAESD file, its own
latent2rgb factors), it paints what a caption asks for, and every report carries its label."""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from previewlab.bench.demo import scenes
from previewlab.bench.demo.check import generate as check_images
from previewlab.preview.csv_writer import to_csv_text
from previewlab.preview.engine import Frame, generate
from previewlab.preview.models import DEMO_DIR, DEMO_NOTE, Model, load
from previewlab.preview.records import RUN_COLUMNS
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


def test_paints_the_color_and_place_a_held_out_caption_asks_for(demo):
    """Ten captions never drawn in training, at the run defaults (20 steps, guidance 7.5): the checker finds
    the named color in most of them. (The full figures over 50 captions are in the README.)"""
    held = scenes.held_out()[:10]
    images = check_images(demo.pipe, [s.caption for s in held], steps=20, guidance=7.5, seed=0)
    figures = scenes.figures(scenes.judge(held, images))
    assert figures["color"] >= 60, figures


@pytest.mark.parametrize("decoder", ["latent2rgb", "taesd", "vae"])
def test_every_decoder_previews_a_picture_and_the_record_says_demo(demo, decoder, tmp_path):
    frames: list[Frame] = []
    settings = RunSettings(prompt="a red circle in the center, on a blue background", steps=6, width=128, height=128,
                           preview=PreviewSettings(decoder=decoder, target="x0", mode="sync"))
    run = generate(demo, settings, run_id="demo", on_frame=frames.append)
    assert run.record.model_note == DEMO_NOTE and run.record.synthetic == 0
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
    from previewlab.preview import models

    monkeypatch.setattr(models, "DEMO_DIR", tmp_path / "nothing")
    with pytest.raises(models.ModelError, match="--model demo: model_index.json, taesd_decoder.safetensors, latent2rgb.json missing from .* "
                       "previewlab train-demo"):
        load("demo", device="cpu")

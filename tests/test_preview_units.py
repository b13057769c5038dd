"""Schedule, latent2rgb arithmetic, decoders' shapes and ranges, encoders, preview sizing."""
from __future__ import annotations

import io
import logging

import numpy as np
import pytest
import torch
from PIL import Image

from previewlab.preview.decoding import decoders, encoders
from previewlab.preview.decoding.contract import DecoderError

from previewlab.preview.models.latent_formats import LATENT_RGB, latent2rgb
from previewlab.preview.frames import preview_size, to_uint8_hwc
from previewlab.preview.settings import PreviewSettings, RunSettings, SettingsError, should_preview


def test_schedule_is_one_based_modulo():
    assert [s for s in range(1, 11) if should_preview(s, 1)] == list(range(1, 11))
    assert [s for s in range(1, 11) if should_preview(s, 3)] == [3, 6, 9]
    assert [s for s in range(1, 11) if should_preview(s, 10)] == [10]
    assert [s for s in range(1, 5) if should_preview(s, 5)] == []


def test_latent2rgb_matches_hand_computed_pixel():
    # one pixel with latent (1, 0, 0, 0) picks row 0 of the SD1.5 table; (0, 0, 0, 1) picks row 3
    lat = torch.zeros(1, 4, 1, 2)
    lat[0, 0, 0, 0] = 1.0
    lat[0, 3, 0, 1] = 1.0
    out = latent2rgb(LATENT_RGB["sd15"], torch.device("cpu"), torch.float32)(lat)
    want0 = [(0.3512 + 1) / 2, (0.2297 + 1) / 2, (0.3227 + 1) / 2]
    want1 = [(-0.2120 + 1) / 2, (-0.2616 + 1) / 2, (-0.7177 + 1) / 2]
    assert out.shape == (1, 3, 1, 2)
    assert torch.allclose(out[0, :, 0, 0], torch.tensor(want0), atol=1e-6)
    assert torch.allclose(out[0, :, 0, 1], torch.tensor(want1), atol=1e-6)


def test_latent2rgb_sdxl_bias_and_clamp():
    lat = torch.zeros(1, 4, 1, 1)
    out = latent2rgb(LATENT_RGB["sdxl"], torch.device("cpu"), torch.float32)(lat)
    assert torch.allclose(out[0, :, 0, 0], torch.tensor([(0.1084 + 1) / 2, (-0.0175 + 1) / 2, (-0.0011 + 1) / 2]))
    big = latent2rgb(LATENT_RGB["sd15"], torch.device("cpu"), torch.float32)(torch.full((1, 4, 1, 1), 100.0))
    assert big.min() >= 0 and big.max() <= 1


@pytest.mark.parametrize("name,scale", [("latent2rgb", 1), ("taesd", 2), ("vae", 2)])
def test_decoder_shapes_and_ranges(tiny, tiny_xl, name, scale):
    for model in (tiny, tiny_xl):
        lat = torch.randn(1, 4, 32, 32, generator=torch.Generator().manual_seed(1)) * 3
        with torch.inference_mode():
            decode = decoders.build(name, model)
            assert decode is not None
            img = decode(lat, 32 * model.vae_scale_factor, 32 * model.vae_scale_factor)
        assert img.shape == (1, 3, 32 * scale, 32 * scale)
        assert img.dtype == torch.float32
        assert float(img.min()) >= 0.0 and float(img.max()) <= 1.0
        assert float(img.std()) > 0  # not a constant picture


def test_unknown_decoder_lists_valid_names(tiny):
    with pytest.raises(DecoderError, match="allowed are none, latent2rgb, taesd, vae"):
        decoders.build("vqgan", tiny)


@pytest.mark.parametrize("name,fmt", [("turbojpeg", "JPEG"), ("pillow", "JPEG"), ("webp", "WEBP"), ("png", "PNG")])
def test_encoders_produce_decodable_images(name, fmt):
    rgb = (np.arange(48 * 32 * 3) % 251).astype(np.uint8).reshape(48, 32, 3)
    enc = encoders.get(name)
    assert enc.name == name  # the encoder that ran is the one asked for (CI installs libturbojpeg0)
    data = enc.encode(rgb, 80)
    img = Image.open(io.BytesIO(data))
    assert img.format == fmt and img.size == (32, 48)
    if name == "png":  # lossless
        assert np.array_equal(np.asarray(img), rgb)


def test_turbojpeg_falls_back_to_pillow_once(caplog):
    missing = encoders.TurboJpeg("/nonexistent/libturbojpeg.so")
    with caplog.at_level(logging.WARNING, logger="previewlab"):
        a, b = missing(), missing()
    assert a.name == b.name == "pillow" and a.format == "jpeg"
    assert sum("falling back to Pillow" in r.message for r in caplog.records) == 1
    assert encoders.get("turbojpeg").name == "turbojpeg"  # the process's own factory is untouched


def test_registries_are_the_names_the_types_allow():
    from typing import get_args

    from previewlab.preview.decoding.decoders import DECODERS, cheaper
    from previewlab.preview.names import DecoderName
    from previewlab.preview.decoding.encoders import ENCODERS
    from previewlab.preview.names import EncoderName

    assert list(DECODERS) == list(get_args(DecoderName)) and list(ENCODERS) == list(get_args(EncoderName))
    assert cheaper("vae", has_taesd=True) == "taesd" and cheaper("vae", has_taesd=False) == "latent2rgb"
    assert cheaper("latent2rgb", has_taesd=True) is None


def test_preview_size_and_uint8_conversion():
    assert preview_size(512, 256, 0) == (512, 256)
    assert preview_size(512, 256, 128) == (128, 64)
    assert preview_size(64, 64, 128) == (64, 64)
    img = torch.rand(3, 64, 32)
    u8 = to_uint8_hwc(img, 16)
    assert u8.shape == (16, 8, 3) and u8.dtype == torch.uint8
    full = to_uint8_hwc(torch.ones(3, 4, 4))
    assert int(full.min()) == 255


@pytest.mark.parametrize("kw,field", [
    (dict(every=0), "every"), (dict(every=True), "every"), (dict(quality=101), "quality"),
    (dict(decoder="nope"), "decoder"), (dict(encoder="gif"), "encoder"), (dict(preview_max=4), "preview_max"),
])
def test_preview_settings_reject_bad_values(kw, field):
    with pytest.raises(SettingsError, match=field):
        PreviewSettings(**kw)


@pytest.mark.parametrize("kw,field", [
    (dict(width=65), "width"), (dict(height=4096), "height"), (dict(steps=0), "steps"), (dict(prompt="x" * 3000), "prompt"),
])
def test_run_settings_reject_bad_values(kw, field):
    with pytest.raises(SettingsError, match=field):
        RunSettings(**kw)


def test_a_flood_of_sets_within_one_step_is_one_short_event():
    from previewlab.preview.controls import Controls
    from previewlab.preview.settings import PreviewSettings

    c = Controls(PreviewSettings(decoder="latent2rgb", every=1))
    for i in range(10_000):
        c.set(every=1 + i % 7, quality=1 + i % 100)
    c.set(decoder="taesd")
    event = c.take().text
    # the last value of each field wins; each changed field is named once
    assert event == f"set decoder=taesd every={1 + 9999 % 7} quality={1 + 9999 % 100}"
    assert c.get().every == 1 + 9999 % 7 and c.take().text == ""
    c.set(every=3)
    c.set(every=1 + 9999 % 7)  # changed and changed back within a step: nothing to say
    assert c.take().text == ""
    c.set(decoder="latent2rgb", note=False)  # the engine's own change says why elsewhere
    assert c.take().text == "" and c.get().decoder == "latent2rgb"


def test_csv_appender_refuses_a_file_with_another_header(tmp_path):
    """A runs.csv from an older version (one column fewer) is not appended to: its rows would read back shifted."""
    from previewlab.preview.record.csv_writer import CsvAppender, CsvSchemaError

    old = tmp_path / "runs.csv"
    old.write_text("run_id,model,device\nr1,m,cpu\n")
    with pytest.raises(CsvSchemaError, match="columns differ from this version's .*synthetic.*new folder"):
        CsvAppender(old, ("run_id", "model", "synthetic", "device"))
    assert old.read_text() == "run_id,model,device\nr1,m,cpu\n"  # untouched
    same = CsvAppender(old, ("run_id", "model", "device"))  # the same header appends
    same.append([{"run_id": "r2", "model": "m", "device": "cpu"}])
    same.close()
    assert old.read_text().splitlines()[-1] == "r2,m,cpu"

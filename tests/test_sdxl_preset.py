"""synthetic:sdxl is SDXL base 1.0's architecture, checked on the meta device (no memory, no weights: the real
one is 3.5 B random parameters, 13.9 GB in float32, about 100 s to build on 2 cores); tiny-xl-real-taesd keeps
TAESD's real architecture on SDXL's latents about a tiny pipeline, built for real."""
from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from previewlab.preview.decoding.stops import Cut, cut_for
from previewlab.preview.call.engine import RunContext, generate
from previewlab.preview.models import Model, load, sd_presets
from previewlab.preview.models.reading import latent_space
from previewlab.preview.models.taesd import upsample_factors
from previewlab.preview.settings import PreviewSettings, RunSettings

# Counted here on the meta device from single_file_configs/xl_base; the UNet's is SDXL base 1.0's published
# 2.6 B. The VAE's and CLIP ViT-L's are FACTS.md's SD1.5 figures: the same architectures.
SDXL_PARAMETERS = {"unet": 2_567_463_684, "vae": 83_653_863, "text_encoder": 123_060_480,
                   "text_encoder_2": 694_659_840}
TAESD_PARAMETERS = 2_445_063  # FACTS.md: AutoencoderTiny() with its defaults


def count(m: nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())


def built_on_meta(name: str, monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, int], Any, nn.Module, int, str]:
    scheduler = sd_presets._scheduler()  # its tables are built on the CPU: made before, outside the meta device
    monkeypatch.setattr(sd_presets, "_scheduler", lambda: scheduler)
    with torch.device("meta"):
        pipe, family, tae, size = sd_presets.build(name, 0)
    parts = {k: count(v) for k, v in pipe.components.items() if isinstance(v, nn.Module)}
    return parts, pipe, tae, size, family


def test_sdxl_is_sdxl_base_architecture(monkeypatch):
    parts, pipe, tae, size, family = built_on_meta("synthetic:sdxl", monkeypatch)
    assert parts == SDXL_PARAMETERS
    assert count(tae) == TAESD_PARAMETERS and family == "sdxl" and size == 1024
    assert type(pipe).__name__ == "StableDiffusionXLPipeline"
    assert pipe.vae.config.scaling_factor == 0.13025 and pipe.vae.config.force_upcast
    assert pipe.unet.config.cross_attention_dim == 2048
    assert latent_space(pipe).factor == 8


def test_sdxl_taesd_stops_one_stage_short_for_512_px_previews_of_1024(monkeypatch):
    _, _, tae, _, _ = built_on_meta("synthetic:sdxl", monkeypatch)
    factors = upsample_factors(tae.decoder.layers)  # type: ignore[union-attr,arg-type]
    assert factors == (2, 2, 2)
    assert cut_for("preview", factors, 1024, 512) == Cut(1, 2)
    assert cut_for("full", factors, 1024, 512) == Cut()


@pytest.fixture(scope="module")
def real_taesd() -> Model:
    return load("synthetic:tiny-xl-real-taesd", device="cpu")


def test_tiny_xl_real_taesd_has_taesd_on_sdxl_latents(real_taesd):
    assert real_taesd.taesd is not None and count(real_taesd.taesd) == TAESD_PARAMETERS
    assert real_taesd.family == "sdxl" and real_taesd.default_size == 1024
    assert real_taesd.space.factor == 8 and real_taesd.space.channels == 4
    assert count(real_taesd.pipe.unet) < 2_000_000  # tiny-xl's UNet (1.98 M): its wall time is not SDXL's


@pytest.mark.parametrize("decode_at, side", [("preview", 64), ("full", 128)])
def test_tiny_xl_real_taesd_decodes_at_the_preview_size(real_taesd, decode_at, side):
    """A 128 px image with 64 px previews: TAESD makes 64 px when it stops at the preview's size."""
    p = PreviewSettings(decoder="taesd", mode="sync", preview_max=64, decode_at=decode_at)
    run = generate(RunContext(real_taesd, RunSettings(steps=1, width=128, height=128, guidance=1.0, preview=p),
                              decode_at))
    assert [(r.decode_at, r.decode_width, r.preview_width) for r in run.rows] == [(decode_at, side, 64)]

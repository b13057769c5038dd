"""decode_at (issue 24): decoders that stop at the preview's size. A TAE leaves out its last upsampling stages
(the same weights, the graph cut), any decoder can take latents halved first (the full VAE's cheap choice); the
setting switches live, and each row says the size the decoder made beside the size sent. The real TAEF2 weights
keep a half-side decode within the issue's 28 dB of their whole decode."""
from __future__ import annotations

import json
from typing import Any

import pytest
import torch
from diffusers import AutoencoderTiny

from fake_device import FakeClock
from previewlab.bench import quality
from previewlab.preview.decoding import previewer as previewer_module
from previewlab.preview import models
from previewlab.preview.decoding import decoders, stops
from previewlab.preview.decoding.clips import pick
from previewlab.preview.controls import Controls
from previewlab.preview.decoding.stops import WHOLE, Cut, cut_for
from previewlab.preview.call.engine import RunContext, generate
from previewlab.preview.record.kept_events import Gathered
from previewlab.preview.timing.stopwatch import Stopwatch
from previewlab.preview.models.presets import TINY
from previewlab.preview.models.taehv import TAEHV
from previewlab.preview.models.taehv_files import Layout
from previewlab.preview.models.taesd import Decoder, _from_combined, cut, upsample_factors
from previewlab.preview.decoding.previewer import Previewer
from previewlab.preview.record.records import STEP_COLUMNS, StepRow
from previewlab.preview.settings import PreviewSettings, RunSettings, SettingsError
from previewlab.server.ws.protocol import ProtocolError, Set, parse

CUTS = [WHOLE, Cut(1, 2), Cut(2, 4), Cut(3, 8)]


def test_the_cut_is_the_most_last_stages_that_keep_the_preview_max():
    taesd = (2, 2, 2)
    assert cut_for("preview", taesd, 1024, 512) == Cut(1, 2)   # 512 shown at 512: no resize left
    assert cut_for("preview", taesd, 1024, 300) == Cut(1, 2)   # 512, then resized to 300; 256 would be too small
    assert cut_for("preview", taesd, 1024, 256) == Cut(2, 4)
    assert cut_for("preview", taesd, 1024, 64) == Cut(3, 8)    # never past the stages there are
    assert cut_for("preview", taesd, 1024, 0) == WHOLE         # preview_max 0: native, nothing changes
    assert cut_for("preview", taesd, 256, 512) == WHOLE        # a preview_max above the image
    assert cut_for("preview", (2,), 64, 16) == Cut(1, 2)       # a 1-stage TAE (synthetic:tiny's)
    assert cut_for("preview", (), 1024, 128) == WHOLE          # latent2rgb and the VAE have no stages to leave out
    assert cut_for("full", taesd, 1024, 128) == WHOLE
    assert cut_for("half_latents", (), 1024, 0) == Cut(half_latents=True)


def test_decode_at_is_a_closed_set_refused_in_one_line():
    assert PreviewSettings().decode_at == "preview"
    with pytest.raises(SettingsError) as e:
        PreviewSettings(decode_at="half")  # type: ignore[arg-type]
    assert str(e.value) == "decode_at='half': allowed are preview, full, half_latents"
    msg = parse(json.dumps({"type": "set", "decode_at": "full"}), defaults=RunSettings())
    assert isinstance(msg, Set) and msg.changes == {"decode_at": "full"}
    with pytest.raises(ProtocolError, match="decode_at='native': allowed are preview, full, half_latents"):
        parse(json.dumps({"type": "set", "decode_at": "native"}), defaults=RunSettings())


def test_a_cut_shares_the_weights_and_leaves_out_the_last_upsamples():
    dec = Decoder(32, True)  # TAEF2's layout
    z = torch.randn(1, 32, 5, 7)  # a non-square latent
    with torch.inference_mode():
        for c in CUTS:
            layers = cut(dec, c.stages)
            assert {id(p) for p in layers.parameters()} == {id(p) for p in dec.parameters()}
            assert layers(z).shape == (1, 3, 40 // c.scale, 56 // c.scale)
            assert upsample_factors(layers) == (2,) * (3 - c.stages)
    assert upsample_factors(dec) == (2, 2, 2)
    with pytest.raises(ValueError, match="stages=4: this decoder has 3 upsampling stages"):
        cut(dec, 4)


@pytest.fixture(scope="module")
def tiny_presets() -> dict[str, models.Model]:
    return {name: models.load(name, device="cpu") for name in TINY}


@pytest.mark.parametrize("name", TINY)
def test_every_image_family_with_a_tae_decodes_at_each_reduction(tiny_presets, name):
    """SD3, FLUX.1 (packed latents) and FLUX.2 (packed, patchified) through the product's decoder: their TAEs
    have all three stages, so 64 px decodes at 64, 32, 16 and 8 px; the Previewer picks the cut per preview_max."""
    m = tiny_presets[name]
    latents = torch.randn(m.space.callback_shape(64, 64))
    prev = Previewer(m)
    with torch.inference_mode():
        for c in CUTS:
            decode = decoders.build("taesd", m, cut=c)
            assert decode is not None
            assert decode(latents, 64, 64).shape == (1, 3, 64 // c.scale, 64 // c.scale), (name, c)
        half = decoders.build("taesd", m, cut=Cut(half_latents=True))
        assert half is not None and half(latents, 64, 64).shape == (1, 3, 32, 32)
    for preview_max, c in ((0, WHOLE), (64, WHOLE), (40, WHOLE), (32, Cut(1, 2)), (8, Cut(3, 8))):
        assert prev.cut("taesd", PreviewSettings(preview_max=preview_max), 64, 64) == c, preview_max
    # a batch of 4 is shown as a 2 x 2 grid of 128 px: one more stage fits
    assert prev.cut("taesd", PreviewSettings(preview_max=32), 64, 64, batch=4) == Cut(2, 4)
    assert prev.cut("vae", PreviewSettings(preview_max=8), 64, 64) == WHOLE  # the VAE is only ever halved


def test_a_diffusers_autoencoder_tiny_cut_equals_madebyollins_layout_with_the_same_weights(tiny):
    """Two code paths that must agree: diffusers' AutoencoderTiny (its decoder's clamp, its layers cut) and
    madebyollin's layout loaded with the same weights (its Clamp module, our cut)."""
    torch.manual_seed(0)
    ae: Any = AutoencoderTiny()  # the real TAESD architecture: three upsampling stages
    ae.eval()
    mine = Decoder()
    mine.load_state_dict(_from_combined(ae.state_dict(), "decoder"))
    as_diffusers = models.Model(**{**tiny.__dict__, "taesd": ae, "taesd_kind": "diffusers"})
    as_madebyollin = models.Model(**{**tiny.__dict__, "taesd": mine.eval(), "taesd_kind": "madebyollin"})
    assert stops.upsample_factors("taesd", as_diffusers) == stops.upsample_factors("taesd", as_madebyollin)
    z = torch.randn(1, 4, 4, 6) * 2
    with torch.inference_mode():
        for c in CUTS + [Cut(half_latents=True)]:
            a, b = (decoders.build("taesd", m, cut=c) for m in (as_diffusers, as_madebyollin))
            assert a is not None and b is not None
            x, y = a(z, 32, 48), b(z, 32, 48)
            side = (16, 24) if c.half_latents else (32 // c.scale, 48 // c.scale)
            assert x.shape == y.shape == (1, 3, *side) and torch.allclose(x, y, atol=1e-5), c


@pytest.mark.slow
@pytest.mark.parametrize("channels,patch", [(16, 1), (48, 2)])  # taew2_1 / taehv / taecvx, taew2_2
def test_taehv_leaves_out_its_last_spatial_upsamples_keeping_every_frame(channels, patch):
    torch.manual_seed(0)
    full = TAEHV(Layout(channels, patch, (1, 2, 2))).eval()
    z = torch.randn(1, 3, channels, 4, 6)  # NTCHW, 3 latent frames
    with torch.inference_mode():
        whole = full(z)
        assert whole.shape == (1, 9, 3, 32 * patch, 48 * patch)
        for c in CUTS:
            small = full.smaller(c.stages)
            assert {id(p) for p in small.parameters()} == {id(p) for p in full.parameters()}
            assert small(z).shape == (1, 9, 3, 32 * patch // c.scale, 48 * patch // c.scale)
        assert torch.equal(full.smaller(0)(z), whole)


def test_a_video_tae_previews_a_clip_at_the_preview_size():
    """TAEHV through the product's clip decode: Wan 2.1's latents (B, C, T, h, w), a cut per preview."""
    m = models.load("synthetic:tiny-wan21", device="cpu")
    z = torch.randn(1, m.space.channels, 2, 8, 8)  # 2 latent frames of a 64 px clip: 5 frames
    first = pick("first", 2, m.space.temporal, 16.0, causal=True)
    every = pick("all", 2, m.space.temporal, 16.0, causal=True)
    prev = Previewer(m)
    assert prev.cut("taesd", PreviewSettings(preview_max=16), 64, 64) == Cut(2, 4)
    with torch.inference_mode():
        for c in CUTS:
            clip = prev.clip("taesd", c)
            assert clip is not None
            assert clip(z, 64, 64, first).shape == (1, 1, 3, 64 // c.scale, 64 // c.scale)
            assert clip(z, 64, 64, every).shape == (1, 5, 3, 64 // c.scale, 64 // c.scale)
        vae = prev.clip("vae", Cut(half_latents=True))
        assert vae is not None and vae(z, 64, 64, first).shape == (1, 1, 3, 32, 32)


def test_decode_at_switches_live_and_each_row_records_the_decoded_and_the_sent_size(tiny):
    """synthetic:tiny: 64 px images, latents at 1/2, a 1-stage TAESD. With preview_max 32 the preview cut
    decodes at 32 px; full decodes at 64 and the resize makes 32; half_latents decodes 16 px latents."""
    controls = Controls(PreviewSettings(decoder="taesd", mode="sync", preview_max=32))
    switches: dict[int, dict[str, Any]] = {1: {"decode_at": "full"}, 2: {"decode_at": "half_latents"}, 3: {"decoder": "vae"},
                4: {"decode_at": "preview", "preview_max": 0}}

    class Switches(Gathered):
        def row(self, row: StepRow) -> None:
            super().row(row)
            if row.step in switches:
                controls.set(**switches[row.step])

    run = generate(RunContext(tiny, RunSettings(steps=5, width=64, height=64), "d", controls=controls), Switches())
    rows = run.rows
    assert [r.decode_at for r in rows] == ["preview", "full", "half_latents", "half_latents", "preview"]
    assert [r.decoder for r in rows] == ["taesd", "taesd", "taesd", "vae", "vae"]
    assert [(r.decode_width, r.decode_height) for r in rows] == [(32, 32), (64, 64), (32, 32), (32, 32), (64, 64)]
    assert [r.preview_width for r in rows] == [32, 32, 32, 32, 64]  # the resize did only what was left
    assert rows[1].event == "set decode_at=full" and rows[4].event == "set preview_max=0 decode_at=preview"
    assert {"decode_at", "decode_width", "decode_height"} <= set(STEP_COLUMNS)


def test_the_sides_the_autopilot_may_trade_are_the_ones_that_decode_fewer_pixels(tiny_xl):
    prev = Previewer(tiny_xl)  # its TAESD: the real architecture's 3 upsampling stages are stood in by factors
    prev._factors["taesd"] = (2, 2, 2)
    at = PreviewSettings(decoder="taesd", preview_max=512)
    assert prev.sides("taesd", at, 1024, 1024) == (512, 256, 128)  # each a stage fewer; none under 128 px
    assert prev.sides("taesd", at.changed(preview_max=0), 512, 512) == (512, 256, 128)
    assert prev.sides("taesd", at, 768, 768) == (512, 256, 128)  # 768 decodes whole, 384, then 192
    assert prev.sides("taesd", at, 1024, 1024, smallest=256) == (512, 256)
    assert prev.sides("taesd", at.changed(preview_max=64), 1024, 1024) == (64,)  # small already
    assert prev.sides("taesd", at.changed(decode_at="full"), 1024, 1024) == (512,)  # the user asked for full
    assert prev.sides("taesd", at.changed(decode_at="half_latents"), 1024, 1024) == (512,)
    for name in ("vae", "latent2rgb"):  # no stage to leave out: a smaller preview would only send fewer pixels
        assert prev.sides(name, at, 1024, 1024) == (512,)
    # a batch's 2x2 grid is 2048 px wide: 512 px leaves two of the 3 stages out already, 256 the third
    assert prev.sides("taesd", at, 1024, 512, batch=4) == (512, 256)


@pytest.mark.slow
def test_the_autopilot_decodes_smaller_before_it_widens_the_interval(tiny, monkeypatch):
    """The real engine with a clock on which the UNet takes 100 s a step and TAESD's upsampling stage 120 s
    (so the host's own milliseconds, which a busy machine stretches, do not count): a 10 % budget affords a
    whole preview only every 9 steps, so once two are measured the autopilot cuts the stage (the 64 px image's
    preview at 32 px), measures that, and then previews every step; each decision is on its row."""
    monkeypatch.setattr(previewer_module, "SMALLEST_SIDE", 32)  # synthetic:tiny's images are 64 px
    clock = FakeClock()

    def takes(module: torch.nn.Module, ms: float) -> Any:
        return module.register_forward_hook(lambda *_: clock.block_until(clock() + ms / 1e3))

    ups = [m for m in tiny.taesd.decoder.modules() if isinstance(m, torch.nn.Upsample)]
    assert len(ups) == 1  # a cut decoder replaces it with an identity: the hook runs only in a whole decode
    hooks = [takes(tiny.pipe.unet, 100_000.0), takes(ups[0], 120_000.0)]
    try:
        s = RunSettings(steps=40, width=64, height=64,
                        preview=PreviewSettings(decoder="taesd", mode="sync", budget=10))
        prev = Previewer(tiny)
        run = generate(RunContext(tiny, s, "px", clock=clock, stopwatch=Stopwatch(clock=clock), previewer=prev))
    finally:
        for h in hooks:
            h.remove()
    # what it learned is kept for later runs under the size it was measured at
    assert set(prev.cost_ms) == {"taesd decode_at=preview preview_max=0", "taesd decode_at=preview preview_max=32"}
    assert prev.cost_ms["taesd decode_at=preview preview_max=0"] > 100_000 > 1_000 > \
        prev.cost_ms["taesd decode_at=preview preview_max=32"]
    rows = run.rows
    notes = [(r.step, r.event) for r in rows if r.event]
    traded = [i for i, e in notes if "smaller previews first: 32 px, was 64 px" in e]
    assert len(traded) == 1 and notes[0][0] < traded[0] and notes[0][1].startswith("autopilot: every "), notes
    made = [r for r in rows if r.preview]
    before = [r for r in made if r.step < traded[0]]
    after = [r for r in made if r.step > traded[0]]
    assert [(r.decode_width, r.preview_width) for r in before] == [(64, 64)] * 2  # the two that measured it
    assert len(after) >= 10 and all((r.decode_width, r.preview_width) == (32, 32) for r in after)
    assert any(i > traded[0] and e == "autopilot: every 1" for i, e in notes)  # then the interval follows
    assert all(r.decoder == "taesd" and r.decode_at == "preview" for r in made)


def test_with_compile_every_size_the_autopilot_may_trade_for_is_compiled_before_the_run(tiny, monkeypatch):
    """A compile inside a measured preview would make that size look dear to the autopilot: with a budget, each
    cut of its sides is warmed (compiled) ahead of the run's clock. (torch.compile itself is left out here: what
    is checked is which cuts are warmed.)"""
    monkeypatch.setattr(previewer_module, "SMALLEST_SIDE", 32)
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: fn)
    s = RunSettings(steps=2, width=64, height=64, preview=PreviewSettings(decoder="taesd", mode="sync", budget=10))
    prev = Previewer(tiny, compile=True)
    generate(RunContext(tiny, s, "c", previewer=prev))
    assert set(prev.compile_ms) == {("taesd", WHOLE), ("taesd", Cut(1, 2))}
    fixed = Previewer(tiny, compile=True)  # no budget: only the cut the settings name
    generate(RunContext(tiny, RunSettings(steps=2, width=64, height=64,
                                          preview=PreviewSettings(decoder="taesd", mode="sync")),
                        "f", previewer=fixed))
    assert set(fixed.compile_ms) == {("taesd", WHOLE)}


@pytest.mark.slow
def test_the_real_taef2_half_side_decode_is_within_28_db_of_its_whole_decode_resized():
    """The issue's target, on the real weights and a photo (a 256 px crop of grace_hopper.jpg, encoded by the real
    TAEF2 encoder), through the quality bench: every cut the size it says, and 1/2 at 28 dB or more."""
    rows = {(r.decoder, r.at): r for r in quality.taef2_rows(side=256, repeats=1)}
    sizes = {at: (r.width, r.height) for (d, at), r in rows.items() if d == "taesd"}
    assert sizes == {"whole": (256, 256), "1/2": (128, 128), "1/4": (64, 64), "1/8": (32, 32),
                     "half latents": (128, 128)}
    half = rows[("taesd", "1/2")]
    print({at: r.psnr_db for (d, at), r in rows.items() if d == "taesd"})
    assert half.psnr_db is not None and half.psnr_db >= 28
    assert rows[("taesd", "whole")].psnr_db is None and rows[("latent2rgb", "whole")].width == 32


def test_the_quality_command_refuses_a_bad_side_in_one_line(capsys):
    with pytest.raises(SystemExit) as e:
        quality.main(["--side", "100"])
    assert e.value.code == 2
    assert capsys.readouterr().err == "quality: --side 100: must be a multiple of 8 from 64 to 512 (the encoder's 1/8), or 0\n"


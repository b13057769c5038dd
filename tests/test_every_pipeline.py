"""watch() on the pipelines users run: img2img, inpaint, ControlNet, FLUX Fill and Kontext, Qwen-Image, Sana,
Lumina 2, Chroma, VAEs of unusual widths and the video pipelines (Wan, CogVideoX, AnimateDiff, LTX-Video's text- and
image-to-video) (tests/tiny_pipes.py), each read from its VAE, not from its class.

For each: decoders none, latent2rgb (a family's factors, or fitted ones) and vae give preview rows; the final image
is bit-identical to a plain call's; the vae decoder fed the last latents gives exactly the pipeline's own image.
Then a batch of 3 as one grid frame or its first image.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from previewlab import watch as preview_watch
from previewlab.preview.decoding import decoders
from previewlab.preview.decoding.contract import DecoderError
from previewlab.preview.decoding.vae_decoder import vae_decoder
from previewlab.preview.frames import Frame
from previewlab.preview.models import fit
from previewlab.preview.models.reading import latent_space
from tests.tiny_pipes import Tiny, build

# name -> the latent space each must be read as: (family, channels, factor, packing, unscale)
SPACES: dict[str, tuple[str | None, int, int, str, str]] = {
    "sd15_img2img": ("sd15", 4, 8, "spatial", "scale"),
    "sd15_inpaint": ("sd15", 4, 8, "spatial", "scale"),
    "sd15_controlnet": ("sd15", 4, 8, "spatial", "scale"),
    "sdxl_img2img": ("sdxl", 4, 8, "spatial", "scale"),
    "sdxl_controlnet": ("sdxl", 4, 8, "spatial", "scale"),
    "sd3_img2img": ("sd3", 16, 8, "spatial", "scale_shift"),
    "sd3_4ch": (None, 4, 2, "spatial", "scale_shift"),      # SD3 with a 4-channel VAE: unnamed, fitted factors
    "flux_img2img": ("flux1", 16, 8, "packed", "scale_shift"),
    "flux_fill": ("flux1", 16, 8, "packed", "scale_shift"),
    "flux_kontext": ("flux1", 16, 8, "packed", "scale_shift"),
    "flux_1ch": (None, 1, 2, "packed", "scale_shift"),      # FLUX with a 1-channel VAE: unnamed
    "chroma": ("flux1", 16, 8, "packed", "scale_shift"),
    "lumina2": ("flux1", 16, 8, "spatial", "scale_shift"),  # Lumina 2 decodes with FLUX.1's VAE
    "sana": (None, 8, 4, "spatial", "scale"),               # AutoencoderDC: unnamed, fitted factors
    "qwenimage": ("wan21", 16, 8, "packed", "inv_std"),     # Wan 2.1's VAE, frame 0 of (B, C, T, h, w)
}
NAMES = list(SPACES)
# clips: their previews show the first latent frame; (family, channels, factor, frames first, 3-D VAE)
VIDEOS: dict[str, tuple[str | None, int, int, bool, bool]] = {
    "wan": ("wan21", 16, 8, False, True),        # AutoencoderKLWan, ComfyUI's Wan21 factors
    "cogvideox": ("cogvideox", 16, 8, True, True),  # (B, T, C, h, w), as its prepare_latents makes them; fitted
    "animatediff": ("sd15", 4, 8, False, False),  # SD1.5's 2-D VAE, frame by frame
    "ltx": ("ltxv", 128, 32, False, True),       # packed as tokens, unpacked to (B, C, T, h, w); ComfyUI's LTXV factors
    "ltx_i2v": ("ltxv", 128, 32, False, True),   # LTXImageToVideoPipeline: the same packing and VAE
}


@pytest.fixture(scope="module")
def tinies() -> dict[str, Tiny]:
    return {}


def tiny_of(tinies: dict[str, Tiny], name: str) -> Tiny:
    if name not in tinies:
        tinies[name] = build(name)
    return tinies[name]


def call(t: Tiny, cb: Any = None, **extra: Any) -> Any:
    kw = {**t.kwargs(), **extra}
    if cb is not None:
        kw.update(callback_on_step_end=cb, callback_on_step_end_tensor_inputs=cb.tensor_inputs)
    with torch.inference_mode():
        out = t.pipe(**kw)
    return out.frames if hasattr(out, "frames") else out.images  # a clip: (B, T, H, W, 3)


def watched(t: Tiny, **settings: Any) -> tuple[Any, list[Any], list[Frame], Any]:
    """One watched call, sync mode unless asked: (output, rows, frames, record)."""
    w = preview_watch(t.pipe, **{"mode": "sync", "size": (t.height, t.width), **settings})
    frames: list[Frame] = []
    w.attach(_Frames(frames))
    try:
        out = call(t, w)
        return out, w.rows, frames, w.record
    finally:
        w.remove()


@pytest.mark.parametrize("name", NAMES)
def test_the_latent_space_is_read_from_the_vae(tinies, name):
    space = latent_space(tiny_of(tinies, name).pipe)
    assert (space.family, space.channels, space.factor, space.packing, space.unscale) == SPACES[name]
    assert "\n" not in space.describe() and space.describe().startswith(space.name + ": ")


def test_a_transformer_in_pixel_space_previews_as_the_image(tinies):
    """PRX Pixel: no VAE, a transformer of 3 channels denoises the picture (it was refused as having no VAE)."""
    t = tiny_of(tinies, "prx_pixel")
    space = latent_space(t.pipe)
    assert space.pixel and (space.channels, space.factor, space.vae) == (3, 1, "none (pixel space)")
    plain = call(t)
    for decoder in ("latent2rgb", "vae"):
        out, rows, frames, _ = watched(t, decoder=decoder)
        assert np.array_equal(out, plain), f"{decoder}: the watched call changed the image"
        assert [(r.step, r.preview) for r in rows] == [(1, 1), (2, 1)] and len(frames) == 2
        assert rows[0].event.startswith(f"pixel space: the latents are the image, so {decoder} shows them")


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_none_latent2rgb_and_vae_preview_without_changing_the_image(tinies, name):
    t = tiny_of(tinies, name)
    plain = call(t)
    fitted = SPACES[name][0] is None
    for decoder in ("none", "latent2rgb", "vae"):
        out, rows, frames, _ = watched(t, decoder=decoder)
        assert np.array_equal(out, plain), f"{name} {decoder}: the watched call changed the image"
        assert [r.step for r in rows] == [1, 2]
        if decoder == "none":
            assert all(r.preview == 0 for r in rows) and not frames
            continue
        assert [r.preview for r in rows] == [1, 1] and len(frames) == 2
        side = t.width // SPACES[name][2] if decoder == "latent2rgb" else t.width
        assert all(f.width == side and f.data[:2] == b"\xff\xd8" for f in frames)
        events = [r.event for r in rows]
        if decoder == "latent2rgb" and fitted:  # once per VAE per process: this run fitted them
            assert events[0].startswith("latent2rgb factors fitted for unnamed from this preview's VAE decode in ")
            assert "R² " in events[0] and events[1] == ""
        else:
            assert events == ["", ""], f"{name} {decoder}: a preview failed: {events}"


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_the_vae_decoder_feeds_the_vae_what_the_pipelines_own_decode_does(tinies, name):
    t = tiny_of(tinies, name)
    plain = call(t)
    latents = call(t, output_type="latent")  # the last step's latents, as the callback sees them
    w = preview_watch(t.pipe, decoder="vae", size=(t.height, t.width))
    try:
        with torch.inference_mode():
            raw = vae_decoder(w.model)(latents, t.height, t.width)  # [-1, 1], as vae.decode returns
        ours = t.pipe.image_processor.postprocess(raw, output_type="np")
    finally:
        w.remove()
    assert ours.shape == plain.shape and np.array_equal(ours, plain)


def test_the_fit_recovers_known_factors():
    """Latents made from a known linear map, each latent pixel an 8x8 block of the image: the fit finds it."""
    g = torch.Generator().manual_seed(3)
    z = torch.randn(1, 6, 12, 10, generator=g)
    factors = torch.randn(6, 3, generator=g) * 0.2
    bias = torch.tensor([0.1, -0.2, 0.05])
    image = (torch.einsum("bchw,cr->brhw", z, factors) + bias.view(1, 3, 1, 1)).repeat_interleave(8, 2)
    image = image.repeat_interleave(8, 3)
    (got, got_bias), r2 = fit.solve(z, image)
    assert torch.allclose(torch.tensor(got), factors, atol=1e-3) and torch.allclose(torch.tensor(got_bias), bias, atol=1e-3)
    assert r2 > 0.9999
    # a picture that has nothing to do with the latents is explained by nothing: R² near 0
    _, r2_noise = fit.solve(z, torch.randn(1, 3, 96, 80, generator=g))
    assert r2_noise < 0.2


@pytest.mark.parametrize("name", ["sd3_4ch", "sana"])
def test_factors_are_fitted_once_per_vae_from_its_own_decode(name):
    t = build(name)  # a fresh VAE: nothing fitted for it yet
    latents = call(t, output_type="latent")
    w = preview_watch(t.pipe, decoder="latent2rgb", size=(t.height, t.width))
    notes: list[str] = []
    try:
        assert fit.cached(t.pipe.vae) is None
        with torch.inference_mode():
            first, second = (decoders.build("latent2rgb", w.model, notes.append) for _ in range(2))
            assert first is not None and second is not None
            rgb = first(latents, t.height, t.width)
            made = fit.cached(t.pipe.vae)
            assert made is not None and len(made.factors[0]) == SPACES[name][1] and notes == [made.note("unnamed")]
            again = second(latents, t.height, t.width)
    finally:
        w.remove()
    factor = SPACES[name][2]
    assert rgb.shape == (1, 3, t.height // factor, t.width // factor) and torch.equal(rgb, again)
    assert notes[1] == f"latent2rgb factors for unnamed fitted earlier in this process (R² {made.r2:.3f})"


def test_a_batch_of_three_previews_as_one_grid_or_its_first_image(tinies):
    t = tiny_of(tinies, "sdxl_batch")
    plain = call(t)
    assert plain.shape[0] == 3
    for how, cells, mode in (("grid", 2, "sync"), ("grid", 2, "overlap"), ("first", 1, "overlap")):
        for decoder, side in (("latent2rgb", 8), ("vae", 64)):  # 3 images: a 2 x 2 grid, the fourth cell black
            out, rows, frames, record = watched(t, decoder=decoder, batch_preview=how, mode=mode)
            assert np.array_equal(out, plain)
            assert [r.batch for r in rows] == [3, 3] and [r.preview for r in rows] == [1, 1]
            assert all((f.width, f.height) == (cells * side, cells * side) for f in frames), (how, decoder)
            assert all((r.preview_width, r.preview_height) == (cells * side, cells * side) for r in rows)
            assert record is not None and record.meta.batch == 3


class _Frames:
    """A RunEvents that keeps the frames."""

    def __init__(self, frames: list[Frame]) -> None:
        self.frames = frames

    def started(self, meta: Any) -> None: ...
    def row(self, row: Any) -> None: ...
    def error(self, run_id: str, message: str) -> None: ...
    def ended(self, end: Any) -> None: ...

    def frame(self, frame: Frame) -> None:
        self.frames.append(frame)


def test_taesd_is_refused_before_the_run_where_no_tae_fits(tinies, tmp_path):
    from previewlab.preview.models import ModelError
    from previewlab.preview.models.taesd import Decoder

    t = tiny_of(tinies, "flux_1ch")
    with pytest.raises(DecoderError) as e:
        preview_watch(t.pipe, decoder="taesd")
    assert str(e.value).startswith("decoder taesd: no TAE fits latent space unnamed: 1 channels at 1/2, packed 2x2 "
                                   "(FluxPipeline._unpack_latents)")
    assert "a TAE must take its 1 latent channels" in str(e.value) and "\n" not in str(e.value)
    torch.save(Decoder(4).state_dict(), tmp_path / "taesd_decoder.pth")  # a real TAESD layout, 4 channels
    with pytest.raises(ModelError) as m:
        preview_watch(t.pipe, taesd=str(tmp_path / "taesd_decoder.pth"))
    assert f"--taesd {tmp_path / 'taesd_decoder.pth'}: a TAE for 4 latent channels, but the model's latent space is " \
           "unnamed: 1 channels" in str(m.value)


@pytest.mark.parametrize("name", ["flux_1ch", "lumina2"])
def test_a_local_folder_of_any_pipeline_loads_and_runs_in_the_engine(tinies, tmp_path, name):
    """DiffusionPipeline.from_pretrained(local_files_only=True) on a saved folder: the class comes from its
    model_index.json, and the run records the latent space it read."""
    from previewlab.preview.call.engine import RunContext, generate
    from previewlab.preview.models import load
    from previewlab.preview.settings import PreviewSettings, RunSettings

    t = tiny_of(tinies, name)
    t.pipe.save_pretrained(tmp_path / name)
    model = load(str(tmp_path / name), device="cpu")
    assert type(model.pipe).__name__ == type(t.pipe).__name__ and model.family == SPACES[name][0]
    size = 64  # the server's smallest side
    run = generate(RunContext(model, RunSettings(steps=2, width=size, height=size, guidance=1.0,
                                                 preview=PreviewSettings(decoder="latent2rgb", mode="sync")), "f"))
    assert run.record.totals.status == "done" and run.record.totals.previews == 2 and run.image is not None
    assert run.record.meta.family == (SPACES[name][0] or "unnamed") and run.record.meta.space == model.space.describe()
    fitted = [r.event for r in run.rows if r.event.startswith("latent2rgb factors fitted")]
    assert len(fitted) == (1 if SPACES[name][0] is None else 0)


@pytest.mark.slow
@pytest.mark.parametrize("name", VIDEOS)
def test_a_clip_previews_its_first_latent_frame_without_changing_the_clip(tinies, name):
    t = tiny_of(tinies, name)
    space = latent_space(t.pipe)
    assert space.video and (space.family, space.channels, space.factor, space.frames_first, space.frames) == VIDEOS[name]
    plain = call(t)
    for decoder in ("none", "latent2rgb", "vae"):
        out, rows, frames, _ = watched(t, decoder=decoder)
        assert np.array_equal(out, plain), f"{name} {decoder}: the watched call changed the clip"
        assert [r.preview for r in rows] == ([0, 0] if decoder == "none" else [1, 1])
        assert all(r.event == "" or r.event.startswith("latent2rgb factors fitted") for r in rows), rows[0].event
        side = t.width // VIDEOS[name][2] if decoder == "latent2rgb" else t.width
        assert all((f.width, f.height) == (side, side) for f in frames)
    # the vae decoder on the last latents' first frame gives the clip's first frame, as the pipeline decodes it
    # (a causal 3-D VAE decodes the first latent frame alone; AnimateDiff's 2-D VAE decodes frames one by one)
    latents = call(t, output_type="latent")
    w = preview_watch(t.pipe, decoder="vae")
    try:
        with torch.inference_mode():
            image = decoders.build("vae", w.model)(latents, t.height, t.width)  # type: ignore[misc]
    finally:
        w.remove()
    first = torch.from_numpy(plain[0, 0]).permute(2, 0, 1)
    assert image.shape == (1, 3, t.height, t.width)
    diff = (image[0] - first).abs()
    if name == "cogvideox":
        # CogVideoX's VAE lets the first frames see the next latent frame: the first latent frame alone is an
        # approximation of the clip's first frame (docs/video.md: what a first-frame preview of CogVideoX shows)
        assert float(diff.mean()) < 0.02, float(diff.mean())
    elif name.startswith("ltx"):
        # LTX-Video's VAE decoder is not causal in time (decoder_causal false): a frame sees latent frames far
        # ahead (in this tiny VAE frame 0 still changes with latent frame 7), and a prefix pads past its end with
        # copies of its last frame. So the first latent frame alone only approximates the clip's first frame: on
        # these random weights mean difference 0.114, max 0.54, 16.8 dB PSNR (ltx_i2v: 0.112, 16.9 dB). Random
        # weights mix frames as strongly as pixels; a trained decoder on a smooth clip may do better, unmeasured
        # here. test_ltx_decodes_as_its_pipeline_does holds the whole clip to the pipeline's own.
        assert 0.05 < float(diff.mean()) < 0.15, float(diff.mean())
    else:
        assert float(diff.max()) < 1e-4, float(diff.max())


def test_ltx_decodes_as_its_pipeline_does(tinies):
    """LTX-Video, read from its pipeline: tokens unpacked by its own _unpack_latents, the VAE's latents_mean /
    latents_std buffers, the decode timestep its timestep-conditioned VAE takes. The vae decoder's whole clip is
    the pipeline's own clip; decoder taesd is refused in one line (no published TAE fits)."""
    from previewlab.preview.decoding import clips

    t = tiny_of(tinies, "ltx")
    space = latent_space(t.pipe)
    assert (space.family, space.packing, space.unscale, space.factor, space.temporal) == (
        "ltxv", "ltx", "mean_std_buffers", 32, 8)
    assert (space.patch, space.patch_t, space.timestep) == (1, 1, True)
    plain = call(t)
    latents = call(t, output_type="latent")  # (B, T*h*w, C): 2 latent frames of 2 x 2 tokens
    assert latents.shape == (1, 8, 128) and space.latent_frames(latents, t.height, t.width) == 2
    w = preview_watch(t.pipe, decoder="vae", size=(t.height, t.width))
    try:
        with torch.inference_mode():
            clip = decoders.build_clip("vae", w.model)
            assert clip is not None
            whole = clip(latents, t.height, t.width, clips.pick("all", 2, space.temporal, 0.0, causal=True))
    finally:
        w.remove()
    ours = whole[0].permute(0, 2, 3, 1).numpy()  # (F, H, W, 3) in [0, 1]
    assert ours.shape == plain[0].shape == (9, t.height, t.width, 3)
    assert np.allclose(ours, plain[0], atol=1e-6, rtol=0), float(np.abs(ours - plain[0]).max())
    with pytest.raises(DecoderError) as e:
        preview_watch(t.pipe, decoder="taesd")
    assert str(e.value) == ("decoder taesd: no published TAE fits LTX-Video 0.9's latents (madebyollin's taeltx_2 is "
                            "for LTX-2's VAE, another latent space of the same 128 channels); use latent2rgb or vae")


def test_a_video_pipeline_runs_in_the_engine_and_its_final_image_is_the_first_frame(tinies):
    from previewlab.preview.call.script_pipe import model_of
    from previewlab.preview.call.engine import RunContext, generate
    from previewlab.preview.settings import PreviewSettings, RunSettings

    t = tiny_of(tinies, "wan")
    model = model_of(t.pipe, None)
    run = generate(RunContext(model, RunSettings(steps=2, width=64, height=64, guidance=1.0,
                                                 preview=PreviewSettings(decoder="vae", mode="sync")), "w"))
    assert run.record.totals.status == "done" and run.record.totals.previews == 2 and run.image is not None
    assert run.image.shape == (64, 64, 3) and run.record.meta.family == "wan21"
    assert run.record.meta.space.startswith("wan21: 16 channels at 1/8, a clip (B, C, T, h, w), 4 frames per latent "
                                       "frame after the first, decoded as latents / (1 / latents_std) + "
                                       "latents_mean by AutoencoderKLWan")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["wan", "qwenimage"])
def test_the_video_tae_previews_wan_latents_from_a_published_layout(tinies, tmp_path, name):
    """decoder taesd with madebyollin/taehv's taew2_1 layout (random weights): on Wan and on Qwen-Image, whose
    VAE is Wan 2.1's. The TAE takes the model's own latents (as madebyollin's TAEs do), one latent frame, one frame."""
    from previewlab.preview.models import ModelError
    from previewlab.preview.models.taehv import TAEHV
    from previewlab.preview.models.taehv_files import Layout

    t = tiny_of(tinies, name)
    torch.manual_seed(0)
    torch.save({f"decoder.{k.removeprefix('decoder.')}": v for k, v in TAEHV(Layout(16, 1, (1, 2, 2))).state_dict().items()},
               tmp_path / "taew2_1.pth")
    plain = call(t)
    out, rows, frames, _ = watched(t, decoder="taesd", taesd=str(tmp_path / "taew2_1.pth"))
    assert np.array_equal(out, plain) and [r.preview for r in rows] == [1, 1] and [r.event for r in rows] == ["", ""]
    assert all((f.width, f.height) == (t.width, t.height) for f in frames)
    latents = call(t, output_type="latent")
    w = preview_watch(t.pipe, decoder="taesd", taesd=str(tmp_path / "taew2_1.pth"), size=(t.height, t.width))
    try:
        with torch.inference_mode():
            shown = decoders.build("taesd", w.model)(latents, t.height, t.width)  # type: ignore[misc]
            # the model's own latents as the pipeline hands them: the clip's first latent frame, or Qwen-Image's
            # packed sequence through its own _unpack_latents (B, C, 1, h, w); frames before channels for TAEHV
            own = (latents[:, :, :1] if latents.dim() == 5 else
                   type(t.pipe)._unpack_latents(latents, t.height, t.width, t.pipe.vae_scale_factor))
            direct = w.model.taesd(own.transpose(1, 2))[:, 0]  # type: ignore[misc]
    finally:
        w.remove()
    assert shown.shape == (1, 3, t.height, t.width) and torch.equal(shown, direct)
    # a TAE of another family or width is refused before the run
    torch.save({f"decoder.{k.removeprefix('decoder.')}": v for k, v in TAEHV(Layout(48, 2, (1, 2, 2))).state_dict().items()},
               tmp_path / "taew2_2.pth")
    with pytest.raises(ModelError, match="a TAE for wan22, but the model is wan21; use the wan21 one "
                                         r"\(taew2_1.pth from github.com/madebyollin/taehv\)"):
        preview_watch(t.pipe, taesd=str(tmp_path / "taew2_2.pth"))


def test_a_grid_puts_each_image_in_its_own_cell_and_leaves_the_rest_black():
    from previewlab.preview.frames import grid

    images = torch.rand(3, 3, 4, 6, generator=torch.Generator().manual_seed(1))
    g = grid(images)
    assert g.shape == (3, 8, 12)
    cells = [g[:, 0:4, 0:6], g[:, 0:4, 6:12], g[:, 4:8, 0:6], g[:, 4:8, 6:12]]
    assert all(torch.equal(cells[i], images[i]) for i in range(3)) and not cells[3].any()
    assert torch.equal(grid(images[:1]), images[0])


def test_wan_style_unscaling_matches_the_pipeline_in_bfloat16():
    """Qwen-Image casts latents_std to the latents' dtype, then takes 1 / std there: the same constants here."""
    t = build("qwenimage")
    t.pipe.to(dtype=torch.bfloat16)
    plain = call(t)
    latents = call(t, output_type="latent")
    w = preview_watch(t.pipe, decoder="vae", size=(t.height, t.width))
    try:
        with torch.inference_mode():
            raw = vae_decoder(w.model)(latents, t.height, t.width)
        ours = t.pipe.image_processor.postprocess(raw, output_type="np")
    finally:
        w.remove()
    assert np.array_equal(ours, plain)


def test_ltx_unscaling_matches_the_pipeline_in_bfloat16():
    """LTX unscales its float32 latents with the VAE's buffers cast up to float32, then casts to the text
    encoder's dtype and the VAE's: a cast to bfloat16 first would round them twice."""
    from previewlab.preview.decoding import clips

    t = build("ltx")
    t.pipe.to(dtype=torch.bfloat16)
    plain = call(t, output_type="pt")
    latents = call(t, output_type="latent")
    assert latents.dtype == torch.float32 and t.pipe.vae.latents_std.dtype == torch.bfloat16
    w = preview_watch(t.pipe, decoder="vae", size=(t.height, t.width))
    try:
        with torch.inference_mode():
            clip = decoders.build_clip("vae", w.model)
            assert clip is not None
            whole = clip(latents, t.height, t.width, clips.pick("all", 2, 8, 0.0, causal=True))
    finally:
        w.remove()
    assert torch.equal(whole, plain)


@pytest.mark.slow
def test_a_compiled_latent2rgb_never_fits_its_factors_to_the_warm_up_zeros():
    from previewlab.preview.decoding.previewer import Previewer

    t = build("sd3_4ch")  # an unnamed space: its factors are fitted
    w = preview_watch(t.pipe, decoder="latent2rgb", size=(t.height, t.width))
    try:
        prev = Previewer(w.model, compile=True)
        assert prev.warm("latent2rgb", t.height, t.width) == 0.0 and fit.cached(t.pipe.vae) is None
    finally:
        w.remove()


def test_a_loop_inside_a_loop_numbers_its_steps_across_passes(tinies):
    """AnimateDiff with FreeInit runs its whole schedule once per pass, calling back with i from 0 again each time
    (as AnyFlow FAR's chunks and SkyReels V2's segments do): every step of every pass is a row of its own, each
    previewed, and the clip is unchanged. Before, each pass's steps folded onto the first pass's rows."""
    t = tiny_of(tinies, "animatediff")
    t.pipe.enable_free_init(num_iters=2, use_fast_sampling=False)
    try:
        plain = call(t)
        out, rows, frames, record = watched(t, decoder="latent2rgb")
    finally:
        t.pipe.disable_free_init()
    assert np.array_equal(out, plain)
    assert [r.step for r in rows] == [1, 2, 3, 4] and [r.preview for r in rows] == [1, 1, 1, 1]
    assert len(frames) == 4 and record is not None  # the call closed: its final decode ended it


def _cascade_out(t: Tiny, cb: Any = None) -> np.ndarray:
    kw = t.kwargs()
    if cb is not None:
        kw.update(callback_on_step_end=cb, callback_on_step_end_tensor_inputs=cb.tensor_inputs)
    with torch.inference_mode():
        out = t.pipe(**kw)
    images = getattr(out, "images", None)
    return np.asarray(images if images is not None else out.image_embeddings)  # the prior's: its latents


@pytest.mark.parametrize("name", ["cascade_prior", "cascade_decoder", "cascade_combined"])
def test_stable_cascade_previews_each_stage_with_its_own_factors(tinies, name):
    """Stable Cascade (once refused as having no VAE): the prior's stage C latents by ComfyUI's SC_Prior factors
    (no VAE: decoder vae refused in one line); the decoder's stage B latents by SC_B's factors or its Paella VQ-GAN,
    alone or inside the combined pipeline, which hands the watch to its decoder_pipe. Outputs unchanged."""
    t = tiny_of(tinies, name)
    space = latent_space(t.pipe)
    prior = name == "cascade_prior"
    assert (space.family, space.channels, space.factor) == (("cascade_c", 16, 43) if prior else ("cascade_b", 4, 4))
    plain = _cascade_out(t)
    for decoder in ("latent2rgb",) if prior else ("latent2rgb", "vae"):
        w = preview_watch(t.pipe, decoder=decoder, mode="sync")
        try:
            out = _cascade_out(t, w)
            rows, record = w.rows, w.record
        finally:
            w.remove()
        assert np.array_equal(out, plain), f"{name} {decoder}: the watched call changed its output"
        assert [(r.step, r.preview, r.event) for r in rows] == [(1, 1, ""), (2, 1, "")], (name, decoder)
        assert record is not None
    if prior:
        with pytest.raises(DecoderError, match="^decoder vae: StableCascadePriorPipeline has no VAE "):
            preview_watch(t.pipe, decoder="vae")


def test_stable_cascades_vqgan_decodes_what_the_decoder_pipeline_decodes(tinies):
    t = tiny_of(tinies, "cascade_decoder")
    plain = _cascade_out(t)  # output_type "np": its VQ-GAN's image clamped to [0, 1]
    with torch.inference_mode():
        latents = t.pipe(**{**t.kwargs(), "output_type": "latent"}).images
    w = preview_watch(t.pipe, decoder="vae")
    try:
        with torch.inference_mode():
            raw = vae_decoder(w.model)(latents, 48, 48)  # [-1, 1], as a VAE's
    finally:
        w.remove()
    ours = ((raw + 1) / 2).clamp(0, 1).permute(0, 2, 3, 1).float().numpy()
    assert ours.shape == plain.shape and np.abs(ours - plain).max() < 1e-6

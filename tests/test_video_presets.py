"""The synthetic video presets: each loads through models.load as its own family, with its clip defaults and its
family's TAE; a real 2-step run hands the step callback latents in the family's layout; the real-size Wan 2.1
1.3B is its published architecture (on the meta device: no weights); a local video folder gets its clip defaults
from its own pipeline."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from previewlab.preview.models import Model, load, tae_channels
from previewlab.preview.models.families import CHANNELS, Family
from previewlab.preview.models.presets import PRESETS, TINY_VIDEO, parameter_counts
from previewlab.preview.models.video_presets import clip_defaults

CPU = torch.device("cpu")
# diffusers' Mochi rotary embedding asks for a float32 CPU autocast, which torch declines with a warning
pytestmark = pytest.mark.filterwarnings("ignore:In CPU autocast:UserWarning")

# name -> (family, frames, fps, spatial factor, temporal factor): the real families' compression, and the rates of
# diffusers' examples
EXPECTED: dict[str, tuple[Family, int, float, int, int]] = {
    "synthetic:tiny-wan21": ("wan21", 5, 16.0, 8, 4),
    "synthetic:tiny-wan22": ("wan22", 5, 24.0, 16, 4),
    "synthetic:tiny-hunyuanvideo": ("hunyuanvideo", 5, 15.0, 8, 4),
    "synthetic:tiny-cogvideox": ("cogvideox", 9, 8.0, 8, 4),
    "synthetic:tiny-mochi": ("mochi", 7, 30.0, 8, 6),
    "synthetic:tiny-ltxv": ("ltxv", 9, 24.0, 32, 8),
}


@pytest.fixture(scope="module")
def models() -> dict[str, Model]:
    return {name: load(name, device="cpu") for name in TINY_VIDEO}


@pytest.fixture(scope="module")
def latents(models) -> dict[str, list[torch.Tensor]]:
    return {name: run(model) for name, model in models.items()}


def run(model: Model) -> list[torch.Tensor]:
    """The step callback's latents of a 2-step run of the model's default clip."""
    seen: list[torch.Tensor] = []

    def callback(p: Any, step: int, t: Any, kw: dict[str, Any]) -> dict[str, Any]:
        seen.append(kw["latents"].clone())
        return kw

    size = model.default_size
    model.pipe(prompt="a cat", negative_prompt="blurry", height=size, width=size, num_frames=model.num_frames,
               num_inference_steps=2, output_type="latent", callback_on_step_end=callback,
               callback_on_step_end_tensor_inputs=["latents"], generator=torch.Generator().manual_seed(0))
    return seen


def test_the_tiny_video_presets_are_the_video_families():
    assert set(TINY_VIDEO) == set(EXPECTED)
    assert {PRESETS[n].family for n in TINY_VIDEO} == {"wan21", "wan22", "hunyuanvideo", "cogvideox", "mochi", "ltxv"}


@pytest.mark.parametrize("name", TINY_VIDEO)
def test_a_tiny_video_preset_runs_in_its_familys_layout(models, latents, name):
    model = models[name]
    family, frames, fps, spatial, temporal = EXPECTED[name]
    space = model.space
    assert space.family == family and space.video and model.synthetic
    assert (model.num_frames, model.fps, model.default_size) == (frames, fps, 64)
    seen = latents[name]
    t, h = (frames - 1) // temporal + 1, model.default_size // spatial
    c = CHANNELS[family]
    # LTX-Video packs them as tokens (patches 1 x 1 x 1): (B, T*h*w, C)
    layout = (1, t, c, h, h) if family == "cogvideox" else (1, t * h * h, c) if family == "ltxv" else (1, c, t, h, h)
    assert len(seen) == 2 and all(z.shape == layout for z in seen), [tuple(z.shape) for z in seen]
    assert space.frames_first == (family == "cogvideox")
    assert space.latent_frames(seen[-1], model.default_size, model.default_size) == t
    # the VAE's statistics are not the identity, so a preview that left out the unscale would differ
    own = type(model.pipe)._unpack_latents(seen[-1], t, h, h, 1, 1) if family == "ltxv" else seen[-1]
    first = own[:, 0] if space.frames_first else own[:, :, 0]
    z = space.vae_input(model.pipe, CPU, torch.float32)(seen[-1], model.default_size, model.default_size)
    assert z.shape == (1, c, 1, h, h) and (z[:, :, 0] - first).abs().max() > 0.05


@pytest.mark.parametrize("name", [n for n in TINY_VIDEO if PRESETS[n].tae is not None])
def test_a_tiny_video_presets_tae_decodes_its_latents_to_the_clip(models, latents, name):
    """The TAE takes the family's channels and, from the callback's latents (NTCHW, as TAEHV takes them), makes
    the whole clip at the image size: its patch and stages match the VAE's compression."""
    model = models[name]
    family, frames, _, _, _ = EXPECTED[name]
    assert model.taesd is not None and model.taesd_kind == "madebyollin"
    assert tae_channels(model.taesd) == CHANNELS[family]
    z = latents[name][-1]
    ntchw = z if model.space.frames_first else z.permute(0, 2, 1, 3, 4)
    with torch.inference_mode():
        clip = model.taesd(ntchw)
    size = model.default_size
    assert clip.shape == (1, frames, 3, size, size) and 0 <= float(clip.min()) <= float(clip.max()) <= 1


@pytest.mark.parametrize("name", ["synthetic:tiny-mochi", "synthetic:tiny-ltxv"])
def test_mochi_and_ltxv_have_no_tae(models, name):
    """Neither has a published TAE: madebyollin's taeltx_2 is for LTX-2's VAE, not LTX-Video 0.9's."""
    from previewlab.preview.decoding.contract import DecoderError
    from previewlab.preview.decoding.decoders import build

    model = models[name]
    assert model.taesd is None and model.taesd_kind == "none" and PRESETS[name].tae is None
    with pytest.raises(DecoderError) as e:
        build("taesd", model)
    assert "\n" not in str(e.value) and str(e.value).endswith("use latent2rgb or vae")
    if name == "synthetic:tiny-ltxv":
        assert "no published TAE fits LTX-Video 0.9's latents (madebyollin's taeltx_2 is for LTX-2's" in str(e.value)


def test_image_models_are_one_frame():
    model = load("synthetic:tiny-sd3", device="cpu")
    assert (model.num_frames, model.fps) == (1, 0.0)


def test_clip_defaults_are_the_pipelines_own(models):
    """num_frames from each pipeline's __call__ default (CogVideoX's None: its transformer's sample_frames, 9
    in the tiny one) and the family's rate."""
    got = {name: clip_defaults(models[name].pipe, EXPECTED[name][0]) for name in TINY_VIDEO}
    assert got == {"synthetic:tiny-wan21": (81, 16.0), "synthetic:tiny-wan22": (81, 24.0),
                   "synthetic:tiny-hunyuanvideo": (129, 15.0), "synthetic:tiny-cogvideox": (9, 8.0),
                   "synthetic:tiny-mochi": (19, 30.0), "synthetic:tiny-ltxv": (161, 24.0)}


def test_a_local_video_folder_gets_its_pipelines_clip_defaults(models, tmp_path):
    """Through DiffusionPipeline.from_pretrained: CogVideoX's num_frames default is None, and the pipeline reads
    its transformer's sample_frames (9 in the tiny one) in its place."""
    models["synthetic:tiny-cogvideox"].pipe.save_pretrained(tmp_path / "cogvideox")
    model = load(str(tmp_path / "cogvideox"), device="cpu")
    assert model.space.family == "cogvideox" and not model.synthetic and model.taesd is None
    assert (model.num_frames, model.fps) == (9, 8.0)


@pytest.mark.parametrize("name,family,defaults", [("synthetic:tiny-wan21", "wan21", (81, 16.0)),
                                                    ("synthetic:tiny-hunyuanvideo", "hunyuanvideo", (129, 15.0))])
def test_a_real_wan_or_hunyuanvideo_folder_loads_as_any_local_folder(models, tmp_path, name, family, defaults):
    """Issue 22: a Wan or HunyuanVideo folder on disk. Wan's transformer keeps modules in float32, which diffusers
    loads only with accelerate (low_cpu_mem_usage): without it the load failed."""
    models[name].pipe.save_pretrained(tmp_path / family)
    model = load(str(tmp_path / family), device="cpu")
    assert model.space.family == family and not model.synthetic and (model.num_frames, model.fps) == defaults
    with torch.inference_mode():
        out = model.pipe(prompt="a fox", num_inference_steps=1, height=64, width=64, num_frames=5, guidance_scale=1.0,
                         output_type="np").frames
    assert np.asarray(out).shape[:2] == (1, 5)


def test_wan21_1_3b_is_the_published_architecture():
    """Wan-AI/Wan2.1-T2V-1.3B-Diffusers' transformer config and the Wan 2.1 VAE, built on the meta device."""
    counts = parameter_counts("synthetic:wan21-1.3b")
    assert 1.25e9 <= counts["transformer"] <= 1.45e9 and 1.0e8 <= counts["vae"] <= 1.5e8, counts
    with torch.device("meta"):
        pipe = PRESETS["synthetic:wan21-1.3b"].build()
    cfg = pipe.transformer.config
    published = dict(patch_size=(1, 2, 2), num_attention_heads=12, attention_head_dim=128, in_channels=16,
                     out_channels=16, text_dim=4096, freq_dim=256, ffn_dim=8960, num_layers=30, cross_attn_norm=True,
                     qk_norm="rms_norm_across_heads", eps=1e-6, image_dim=None, added_kv_proj_dim=None,
                     rope_max_seq_len=1024)
    assert {k: tuple(cfg[k]) if k == "patch_size" else cfg[k] for k in published} == published
    vae = pipe.vae.config
    assert (vae.base_dim, vae.z_dim, list(vae.dim_mult), vae.num_res_blocks, list(vae.temperal_downsample)) == (
        96, 16, [1, 2, 4, 4], 2, [False, True, True])
    assert vae.latents_std[0] == 2.8184 and vae.latents_mean[0] == -0.7571
    assert pipe.text_encoder.config.d_model == cfg.text_dim  # the stand-in's width is what the transformer takes
    assert PRESETS["synthetic:wan21-1.3b"].family == "wan21" and PRESETS["synthetic:wan21-1.3b"].fps == 16.0


@pytest.mark.slow
def test_a_synthetic_video_preset_starts_with_latent2rgb_because_its_tae_paints_black(models, make_app, tmp_path):
    """Issue 35, item 4: a random-weight TAEHV paints a near-black clip that does not visibly move, which reads
    as broken; latent2rgb shows the latents' own motion. So the server's default decoder for a synthetic clip
    model is latent2rgb, and its hello says why; an image model with a TAESD still starts with it."""
    import io

    from PIL import Image

    from previewlab.preview.controls import Controls
    from previewlab.preview.decoding.decoders import SYNTHETIC_CLIP_NOTE
    from previewlab.preview.call.engine import RunContext, generate
    from previewlab.preview.record.kept_events import Gathered
    from previewlab.preview.settings import MAX_NUM_FRAMES, PreviewSettings, RunSettings

    for i, (name, model) in enumerate(models.items()):
        srv, _ = make_app(tmp_path / str(i), model=model)  # one server per data folder
        hello = srv.hello()
        assert hello["defaults"]["decoder"] == "latent2rgb", name
        assert hello["decoder_note"] == (SYNTHETIC_CLIP_NOTE if model.taesd is not None else ""), name
    srv, _ = make_app(tmp_path / "image")  # synthetic:tiny, an image model with a TAESD
    assert srv.hello()["defaults"]["decoder"] == "taesd" and srv.hello()["decoder_note"] == ""

    wan = models["synthetic:tiny-wan21"]
    shown: dict[str, np.ndarray] = {}
    for decoder in ("taesd", "latent2rgb"):
        told = Gathered()
        s = RunSettings(steps=2, width=wan.default_size, height=wan.default_size, guidance=1.0,
                        num_frames=wan.num_frames, fps=wan.fps, max_frames=MAX_NUM_FRAMES,
                        preview=PreviewSettings(decoder=decoder, frames="all", encoder="png"))
        generate(RunContext(wan, s, decoder, controls=Controls(s.preview)), told)
        f, at, clip = told.frames[-1], 0, []
        for n in f.sizes:
            clip.append(np.asarray(Image.open(io.BytesIO(f.data[at:at + n])).convert("RGB"), dtype=np.float32))
            at += n
        shown[decoder] = np.stack(clip)  # (frames, h, w, 3) in [0, 255]

    def motion(x: np.ndarray) -> float:
        return float(np.abs(np.diff(x, axis=0)).mean())

    assert shown["taesd"].mean() < 10 and motion(shown["taesd"]) < 2  # near black, near still (2.4 and 0.4 here)
    assert shown["latent2rgb"].mean() > 50 and motion(shown["latent2rgb"]) > 20  # 112 and 93 here

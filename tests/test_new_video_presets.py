"""The synthetic presets of the newer video families (issue 46): HunyuanVideo 1.5, LTX-2 and LTX-2.3, the real
diffusers pipeline classes with tiny transformers and the real VAE classes at their real latent channels and
compression. Each reads as its own family, runs 2 steps through generate() (the server's and the bench's path) with
latent2rgb and its family's TAE previewing every frame, and through watch() (a user's own call: HunyuanVideo 1.5 has
no step callback, so the watch steps on the scheduler; LTX-2's is passed its callback) leaving the clip
bit-identical. They are not in TINY_VIDEO, whose tests drive each pipeline through callback_on_step_end."""
from __future__ import annotations

import io
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from previewlab import watch
from previewlab.preview.call.call_args import takes
from previewlab.preview.controls import Controls
from previewlab.preview.call.engine import RunContext, generate
from previewlab.preview.models import Model, load, tae_channels
from previewlab.preview.models.families import CHANNELS, Family
from previewlab.preview.models.presets import PRESETS, TINY_VIDEO
from previewlab.preview.models.taehv_files import FAMILY_FILES
from previewlab.preview.models.video_presets import FPS, clip_defaults
from previewlab.preview.names import DecoderName
from previewlab.preview.record.kept_events import Gathered
from previewlab.preview.settings import MAX_NUM_FRAMES, PreviewSettings, RunSettings

pytestmark = pytest.mark.filterwarnings("ignore")

# name -> (family, latent channels, frames, spatial factor, temporal factor): the real models' latents
NEW: dict[str, tuple[Family, int, int, int, int]] = {
    "synthetic:tiny-hunyuanvideo15": ("hunyuanvideo15", 32, 5, 16, 4),
    "synthetic:tiny-ltx2": ("ltx2", 128, 9, 32, 8),
    "synthetic:tiny-ltx2_3": ("ltx2_3", 128, 9, 32, 8),
}
LATENT_FRAMES = 2  # 5 frames at 4x and 9 frames at 8x are 1 + 1 latent frames
@pytest.fixture(scope="module")
def models() -> dict[str, Model]:
    return {name: load(name, device="cpu") for name in NEW}


def settings(model: Model, decoder: DecoderName) -> RunSettings:
    size = model.default_size
    return RunSettings(steps=2, width=size, height=size, guidance=1.0, num_frames=model.num_frames, fps=model.fps,
                       max_frames=MAX_NUM_FRAMES, preview=PreviewSettings(decoder=decoder, frames="all", mode="sync"))


def plain(model: Model, s: RunSettings, **extra: Any) -> np.ndarray:
    """The pipeline's own clip for a run's settings, (frames, H, W, 3) in [0, 1]: the arguments generate() passes
    that the pipeline takes (HunyuanVideo 1.5's guidance is its guider's, not a call argument)."""
    kw = dict(prompt=s.prompt, num_inference_steps=s.steps, height=s.height, width=s.width, num_frames=s.num_frames,
              guidance_scale=s.guidance, generator=torch.Generator("cpu").manual_seed(s.seed), output_type="np")
    with torch.inference_mode():
        return np.asarray(model.pipe(**takes(model.pipe, kw), **extra).frames)[0]


def test_the_new_presets_are_registered_apart_from_tiny_video():
    assert {PRESETS[n].family for n in NEW} == {"hunyuanvideo15", "ltx2", "ltx2_3"}
    assert not set(NEW) & set(TINY_VIDEO)


@pytest.mark.parametrize("name", NEW)
def test_a_new_preset_reads_as_its_family_at_the_real_latent_shape(models, name):
    model, (family, channels, frames, spatial, temporal) = models[name], NEW[name]
    space = model.space
    assert (space.family, space.channels, space.factor, space.temporal) == (family, channels, spatial, temporal)
    assert CHANNELS[family] == channels and space.video and model.synthetic
    assert (model.num_frames, model.fps, model.default_size) == (frames, FPS[family], 64)
    assert model.taesd is not None and model.taesd_kind == "madebyollin" and tae_channels(model.taesd) == channels
    vae, transformer = model.pipe.vae, model.pipe.transformer.config
    if family == "hunyuanvideo15":
        assert type(vae).__name__ == "AutoencoderKLHunyuanVideo15" and space.unscale == "scale"
        assert vae.config.scaling_factor == 1.03682  # the released VAE's
        assert (transformer.in_channels, transformer.out_channels) == (2 * channels + 1, channels)
    else:  # LTX-2.3 is told from LTX-2 by its transformer alone: one VAE class, one latent shape
        assert type(vae).__name__ == "AutoencoderKLLTX2Video" and (space.packing, space.unscale) == (
            "ltx", "mean_std_buffers")
        assert not torch.equal(vae.latents_std, torch.ones(channels))  # a left-out unscale would show
        assert transformer.cross_attn_mod == transformer.audio_cross_attn_mod == (family == "ltx2_3")


@pytest.mark.slow
@pytest.mark.parametrize("name", NEW)
def test_a_two_step_run_previews_every_frame_with_latent2rgb_and_the_tae(models, name):
    """generate(), the server's and the bench's run: a preview at each step showing the whole clip, latent2rgb
    its latent frames at latent resolution, the TAE every frame at the image's size, each a whole JPEG."""
    model, (_, _, frames, spatial, _) = models[name], NEW[name]
    size = model.default_size
    runs: tuple[tuple[DecoderName, int, int], ...] = (("latent2rgb", LATENT_FRAMES, size // spatial),
                                                      ("taesd", frames, size))
    for decoder, shown, side in runs:
        told = Gathered()
        run = generate(RunContext(model, settings(model, decoder), f"{name}-{decoder}"), told)
        assert run.record.totals.status == "done" and run.record.meta.num_frames == frames
        assert [(r.step, r.preview, r.frames, r.latent_frames) for r in told.rows] == [
            (1, 1, shown, LATENT_FRAMES), (2, 1, shown, LATENT_FRAMES)], decoder
        assert all((r.preview_width, r.preview_height) == (side, side) and not r.event for r in told.rows), decoder
        for frame in told.frames:
            assert frame.frames == shown and len(frame.sizes) == shown and sum(frame.sizes) == len(frame.data)
            at = 0
            for n in frame.sizes:
                Image.open(io.BytesIO(frame.data[at:at + n])).verify()  # every frame a whole picture
                at += n
        assert run.image is not None and run.image.shape == (size, size, 3) and run.image.std() > 1


@pytest.mark.slow
@pytest.mark.parametrize("name", NEW)
def test_a_runs_final_image_is_the_pipelines_own_first_frame(models, name):
    """LTX-2 returns its latent output unpacked and denormalized: the final decode once unscaled it again (about 100
    levels off); it now decodes the last step's latents, as the pipeline itself did."""
    model = models[name]
    s = settings(model, "latent2rgb")
    run = generate(RunContext(model, s, name), Gathered())
    first = np.round(plain(model, s)[0] * 255).astype(int)
    assert run.image is not None and np.abs(run.image.astype(int) - first).max() <= 1


@pytest.mark.slow
@pytest.mark.parametrize("name", NEW)
def test_watch_previews_a_users_call_and_leaves_the_clip_unchanged(models, name, tmp_path):
    """A user's watch, the TAE loaded from madebyollin's file name for the family: HunyuanVideo 1.5 has no step
    callback, so the watch steps on the scheduler; LTX-2 takes it as its callback."""
    model, (family, _, frames, _, _) = models[name], NEW[name]
    s = settings(model, "taesd")
    clean = plain(model, s)
    tae = tmp_path / f"{FAMILY_FILES[family]}.pth"
    torch.save(model.taesd.state_dict(), tae)
    watches: tuple[tuple[DecoderName, int], ...] = (("latent2rgb", LATENT_FRAMES), ("taesd", frames))
    for decoder, shown in watches:
        w = watch(model.pipe, decoder=decoder, mode="sync", frames="all", taesd=str(tae) if decoder == "taesd" else None)
        try:
            assert w.source == ("scheduler" if family == "hunyuanvideo15" else "callback")
            extra = dict(callback_on_step_end=w, callback_on_step_end_tensor_inputs=w.tensor_inputs) if (
                w.source == "callback") else {}
            out = plain(model, s, **extra)
            rows, record = w.rows, w.record
        finally:
            w.remove()
        assert np.array_equal(out, clean), decoder
        assert [(r.step, r.preview, r.frames, r.latent_frames) for r in rows] == [
            (1, 1, shown, LATENT_FRAMES), (2, 1, shown, LATENT_FRAMES)], decoder
        assert record is not None and record.totals.status == "done"


def test_clip_defaults_are_the_pipelines_own(models):
    """HunyuanVideo 1.5's __call__ defaults to 121 frames; LTX2Pipeline's num_frames defaults to None, which it
    makes 121 for a checkpoint without a duration head (LTX-2.0, 2.3): a local LTX-2 folder read 1."""
    got = {name: clip_defaults(models[name].pipe, NEW[name][0]) for name in NEW}
    assert got == {"synthetic:tiny-hunyuanvideo15": (121, 15.0), "synthetic:tiny-ltx2": (121, 24.0),
                   "synthetic:tiny-ltx2_3": (121, 24.0)}

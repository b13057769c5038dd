"""Which frames a clip preview shows and what its decoder reads for them (preview/decoding/clips.py), and the ground it
stands on: a causal decoder's prefix decode is exactly the start of the whole clip's decode."""
from __future__ import annotations

from typing import Any

import pytest
import torch

from previewlab.preview.decoding import clips
from previewlab.preview.models.taehv import TAEHV
from previewlab.preview.models.taehv_files import Layout
from previewlab.preview.names import check_frames
from previewlab.preview.settings import PreviewSettings, RunSettings, SettingsError


def test_a_wan_clip_of_81_frames():
    """Wan 2.1's default clip: 81 frames are 21 latent frames (1 + 20 x 4), at 16 fps."""
    first = clips.pick("first", 21, 4, 16.0, causal=True)
    assert first.reads == (0,) and first.shown == (0,) and first.length == 81 and first.fps == 0.0
    middle = clips.pick("middle", 21, 4, 16.0, causal=True)
    # frame 40 is in latent frame 10 (frames 37..40): the decoder reads latent frames 0..10
    assert middle.shown == (40,) and middle.reads == tuple(range(11))
    every = clips.pick("all", 21, 4, 16.0, causal=True)
    assert every.reads == tuple(range(21)) and every.shown == tuple(range(81)) and every.fps == pytest.approx(16.0)
    eight = clips.pick(8, 21, 4, 16.0, causal=True)
    assert eight.shown == (0, 11, 23, 34, 46, 57, 69, 80) and len(eight.reads) == 21
    assert eight.fps == pytest.approx(8 / (81 / 16))  # eight frames over the clip's 5.06 s


def test_latent2rgb_reads_only_the_latent_frames_it_shows():
    middle = clips.pick("middle", 21, 4, 16.0, causal=False)
    assert middle.reads == (10,) and middle.shown == (0,) and middle.length == 21
    every = clips.pick("all", 21, 4, 16.0, causal=False)
    assert every.reads == tuple(range(21)) and every.fps == pytest.approx(21 / (81 / 16))
    three = clips.pick(3, 21, 4, 16.0, causal=False)
    assert three.reads == (0, 10, 20) and three.shown == (0, 1, 2)
    assert clips.pick(50, 5, 4, 16.0, causal=False).reads == (0, 1, 2, 3, 4)  # more than the clip has: all of it


def test_an_image_is_one_frame_whatever_is_asked():
    for choice in ("first", "middle", "all", 8):
        p = clips.pick(choice, 1, 1, 0.0, causal=True)
        assert p.reads == (0,) and p.shown == (0,) and p.fps == 0.0


def test_the_frames_setting_takes_names_and_counts_and_refuses_the_rest():
    assert PreviewSettings(frames="8").frames == 8  # type: ignore[arg-type]  # a command line's digits
    assert PreviewSettings(frames=2).frames == 2 and PreviewSettings(frames="all").frames == "all"
    for bad, says in ((1, "from 2 to 256"), (257, "from 2 to 256"), ("last", "allowed are first, middle, all"),
                      (True, "allowed are"), (2.5, "allowed are")):
        with pytest.raises(SettingsError, match=says):
            PreviewSettings(frames=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="frames=0"):
        check_frames("frames", 0)
    # digits a browser could send that int() would choke on, or take: one line each, never a crash
    for odd in ("²", "٣", "9" * 5000, "08x"):
        with pytest.raises(SettingsError, match="allowed are first, middle, all or a number of frames") as e:
            PreviewSettings(frames=odd)  # type: ignore[arg-type]
        assert len(str(e.value)) < 200


def test_an_image_model_takes_one_frame_and_a_video_model_its_range():
    with pytest.raises(SettingsError, match="this model makes images; only 1 is allowed"):
        RunSettings(num_frames=5)
    assert RunSettings(num_frames=81, fps=16, max_frames=257).num_frames == 81
    with pytest.raises(SettingsError, match="num_frames=300: must be from 1 to 257"):
        RunSettings(num_frames=300, max_frames=257)
    with pytest.raises(SettingsError, match="fps=-1"):
        RunSettings(fps=-1)
    # Wan rounds 80 frames up to 81, CogVideoX and Mochi round down: the clip asked is the clip made, or refused
    with pytest.raises(SettingsError, match=r"num_frames=80: a clip of this model is 1 \+ k x 4 frames .* the "
                                            r"nearest: 77 and 81"):
        RunSettings(num_frames=80, max_frames=257, frame_step=4)
    assert RunSettings(num_frames=19, max_frames=257, frame_step=6).num_frames == 19  # Mochi: 1 + 3 x 6


def test_a_video_server_defaults_to_a_clip_its_work_limit_allows():
    from previewlab.server.ws.options import fitting_frames

    # Wan's own 81 frames at 512 px and 20 steps are 424 M pixel-steps, over the default 64 M: 9 frames fit
    assert fitting_frames(81, 4, 20 * 512 * 512, 64 * 1024 * 1024) == 9
    assert 9 * 20 * 512 * 512 <= 64 * 1024 * 1024 < 13 * 20 * 512 * 512
    assert fitting_frames(81, 4, 20 * 64 * 64, 64 * 1024 * 1024) == 81  # it fits: the model's own
    assert fitting_frames(81, 4, 20 * 512 * 512, 0) == 81               # no limit
    assert fitting_frames(129, 4, 20 * 2048 * 2048, 1000) == 5          # never under two latent frames


def test_a_wan_vae_prefix_decode_is_the_start_of_the_whole_clip():
    """What lets `first` and `middle` decode a prefix: Wan's causal 3-D VAE decodes the first n latent frames
    into exactly the first 1 + 4(n - 1) frames of the whole clip's decode."""
    from diffusers import AutoencoderKLWan

    torch.manual_seed(0)
    vae: Any = AutoencoderKLWan(base_dim=3, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
                           temperal_downsample=[False, True, True])
    vae.eval()
    z = torch.randn(1, 16, 3, 4, 4)
    with torch.inference_mode():
        whole = vae.decode(z).sample
        prefix = vae.decode(z[:, :, :2].clone()).sample
    assert whole.shape[2] == 9 and prefix.shape[2] == 5
    assert torch.allclose(prefix, whole[:, :, :5], atol=1e-5)
    assert not torch.allclose(whole[:, :, 5:], whole[:, :, 4:5].expand_as(whole[:, :, 5:]), atol=1e-3)


def test_a_taehv_prefix_decode_is_the_start_of_the_whole_clip():
    torch.manual_seed(0)
    tae = TAEHV(Layout(16, 1, (1, 2, 2))).eval()
    for p in tae.parameters():
        p.data *= 1.7  # frames spread over [0, 1] rather than sit at one value
    z = torch.randn(1, 4, 16, 3, 3)
    with torch.inference_mode():
        whole, prefix = tae(z), tae(z[:, :2])
    assert whole.shape[1] == 13 and prefix.shape[1] == 5
    assert torch.equal(prefix, whole[:, :5])
    assert float((whole[:, 5:] - whole[:, 4:5]).abs().max()) > 1e-3


def test_a_bad_frames_value_on_the_wire_is_an_error_message_not_a_dead_session():
    import json

    from previewlab.server.ws.protocol import ProtocolError, Set, parse

    for odd in ("²", "9" * 5000, 1, "last"):
        with pytest.raises(ProtocolError, match="frames="):
            parse(json.dumps({"type": "set", "frames": odd}), defaults=RunSettings())
    ok = parse(json.dumps({"type": "set", "frames": 8}), defaults=RunSettings())
    assert isinstance(ok, Set) and ok.changes == {"frames": 8}


def test_cogvideox_prefixes_are_odd():
    """CogVideoX's VAE and taecvx handle the first frame apart only for an odd number of latent frames."""
    # 9 frames are 3 latent frames: the middle (frame 4) is in latent frame 1, and 2 frames would be an even prefix
    assert clips.pick("middle", 3, 4, 8.0, causal=True, odd=True).reads == (0, 1, 2)
    assert clips.pick("middle", 3, 4, 8.0, causal=True).reads == (0, 1)
    # 49 frames are 13 latent frames: the middle (frame 24) is in latent frame 6, a prefix of 7, odd already
    assert clips.pick("middle", 13, 4, 8.0, causal=True, odd=True).reads == tuple(range(7))
    assert clips.pick("first", 13, 4, 8.0, causal=True, odd=True).reads == (0,)

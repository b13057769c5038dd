"""TAEHV, previewlab's own decoder of madebyollin's video TAE: the published layouts load from .pth and
.safetensors, the variant comes from the keys, and the reference's published behaviour holds: warm-up frames
trimmed at the start (4k + 1 frames out of k + 1 latent frames for Wan and HunyuanVideo), frames in [0, 1],
the cheaper-preview switches. (The decode of every published file against madebyollin's own code:
tests/test_tae_reference.py.)"""
from __future__ import annotations

import pytest
import torch

from previewlab.preview.models.taehv import TAEHV, load_taehv
from previewlab.preview.models.taehv_files import Layout, layout_of
from previewlab.preview.models.taesd import TaeError

# name -> (latent channels, patch, strides per stage): madebyollin's published files
PUBLISHED = {
    "taew2_1": (16, 1, (1, 2, 2)),
    "taehv": (16, 1, (1, 2, 2)),
    "taew2_2": (48, 2, (1, 2, 2)),
    "taecvx": (16, 1, (1, 2, 2)),
    "taeltx_2": (128, 4, (2, 2, 2)),
}


def published_state(name: str) -> dict[str, torch.Tensor]:
    """A state dict in the published files' layout (decoder.N.*, plus encoder keys this decoder leaves out),
    random weights scaled so the frames spread over [0, 1] rather than sit at one value."""
    channels, patch, strides = PUBLISHED[name]
    torch.manual_seed(0)
    model = TAEHV(Layout(channels, patch, strides))
    state = {f"decoder.{k.removeprefix('decoder.')}": v * 1.7 for k, v in model.state_dict().items()}
    state["encoder.0.weight"] = torch.zeros(64, 3 * patch ** 2, 3, 3)
    return state


@pytest.mark.slow
@pytest.mark.parametrize("name", PUBLISHED)
def test_published_layouts_load_from_both_file_types_and_decode_alike(name, tmp_path):
    from safetensors.torch import save_file

    state = published_state(name)
    torch.save(state, tmp_path / f"{name}.pth")
    save_file(state, str(tmp_path / f"{name}.safetensors"))
    channels, patch, strides = PUBLISHED[name]
    a, b = load_taehv(tmp_path / f"{name}.pth"), load_taehv(tmp_path / f"{name}.safetensors")
    assert layout_of(state, f"{name}.pth") == Layout(channels, patch, strides, cogvideox=name == "taecvx")
    x = torch.randn(1, 3, channels, 2, 3)
    with torch.inference_mode():
        ya, yb = a(x), b(x)
    assert torch.equal(ya, yb)
    t_up = 1
    for s in strides:
        t_up *= s
    assert ya.shape == (1, 3 * t_up - (t_up - 1), 3, 2 * 8 * patch, 3 * 8 * patch)
    assert float(ya.min()) >= 0 and float(ya.max()) <= 1 and float(ya.std()) > 0.01


def test_frames_are_trimmed_at_the_start_and_cogvideox_keeps_an_even_input():
    wan = load_taehv(published_state("taew2_1"))
    cvx = TAEHV(layout_of(published_state("taecvx"), "taecvx.pth")).load(published_state("taecvx"))
    with torch.inference_mode():
        counts = [wan(torch.randn(1, t, 16, 4, 4)).shape[1] for t in (1, 2, 3, 5)]
        # the first latent frame is one frame: a causal decoder decodes it alone, and the same as in a clip
        x = torch.randn(1, 3, 16, 4, 4)
        assert torch.allclose(wan(x[:, :1])[:, 0], wan(x)[:, 0], atol=1e-5)  # up to the batched convs' rounding
        even = cvx(torch.randn(1, 2, 16, 4, 4)).shape[1]
    assert counts == [1, 5, 9, 17] and even == 8


def test_the_switches_make_fewer_frames_and_pixels_from_the_same_weights():
    state = published_state("taew2_1")
    full = load_taehv(state)
    cheap = load_taehv(state, time_upscale=(False, False, False), space_upscale=(True, True, False))
    x = torch.randn(1, 3, 16, 4, 4)
    with torch.inference_mode():
        assert full(x).shape == (1, 9, 3, 32, 32)
        assert cheap(x).shape == (1, 3, 3, 16, 16)  # one frame per latent frame, half the side


def test_a_file_that_is_not_a_taehv_decoder_is_one_line(tmp_path):
    from previewlab.preview.models.taesd import Decoder

    with pytest.raises(TaeError) as e:
        load_taehv({f"decoder.{k}": v for k, v in Decoder(16).state_dict().items()})
    assert str(e.value).startswith("not a madebyollin TAEHV decoder") and "\n" not in str(e.value)


@pytest.mark.parametrize("layout", [Layout(16, 1, (1, 2, 2)), Layout(48, 2, (1, 2, 2)),
                                    Layout(16, 1, (1, 2, 2), cogvideox=True)], ids=["wan21", "wan22", "cogvideox"])
@pytest.mark.slow
def test_keeping_the_frames_shown_is_the_whole_decode_s_frames_from_less_work(layout):
    """issue 24: the time grow's frames that a preview does not show are never made, exactly."""
    torch.manual_seed(0)
    net = TAEHV(layout).eval()
    last = net.decoder[-1]
    seen: list[int] = []
    hook = last.register_forward_hook(lambda mod, args, out: seen.append(int(args[0].shape[0])))
    try:
        with torch.inference_mode():
            for t in (1, 2, 3):
                x = torch.randn(2, t, layout.channels, 3, 4)
                whole = net(x)
                frames = int(whole.shape[1])
                for keep in ([0], [frames - 1], [frames // 2], [0, frames - 1], list(range(frames)), [frames + 5],
                             [3, 1]):
                    seen.clear()
                    part = net(x, keep=keep)
                    clamped = [min(k, frames - 1) for k in keep]
                    assert torch.allclose(part, whole[:, clamped], atol=1e-5), (t, keep)
                    # the last conv ran on the frames kept, not on every frame the grows made (the warm-up too)
                    made = 4 * t  # what the whole decode's last conv runs on: the trimmed warm-up frames too
                    everything = clamped == list(range(frames)) and frames == made
                    assert seen == [2 * (made if everything else len(keep))], (t, keep, seen)
            small = net.smaller(1)  # a cut keeps the same frames at half the side
            x = torch.randn(1, 2, layout.channels, 3, 4)
            assert torch.allclose(small(x, keep=[4]), small(x)[:, [4]], atol=1e-5)
            with pytest.raises(ValueError, match="keep: name at least one frame"):
                net(x, keep=[])
    finally:
        hook.remove()
    # a decoder whose last grow is switched off (one frame per frame there): the same, from the same weights
    late = TAEHV(layout, time_upscale=(True, True, False)).eval()
    with torch.inference_mode():
        x = torch.randn(1, 3, layout.channels, 3, 4)
        whole = late(x)
        assert torch.allclose(late(x, keep=[0, int(whole.shape[1]) - 1]), whole[:, [0, -1]], atol=1e-5)

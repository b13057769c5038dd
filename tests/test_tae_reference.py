"""Issue 46: every TAE madebyollin published decodes as the reference decodes. Seeded random weights of each
published layout are saved under the reference file's own name and loaded twice: by madebyollin's code (tests/
reference/, MIT, unchanged), which picks the variant from that name as it does for the real file, and by
previewlab's loader. The frames agree within 1e-3 in [0, 1] units, in count and size."""
from __future__ import annotations

from typing import Any

import pytest
import torch

from previewlab.preview.models.families import Family
from previewlab.preview.models.taehv import load_taehv
from previewlab.preview.models.taesd import TaeError, load_tae
from tests.reference import taehv_ref, taesd_ref

# each published TAEHV file -> the reference constructor's arguments that build its layout (the reference
# itself then reads the file by name; a wrong guess here fails its load)
TAEHV_FILES: dict[str, dict[str, Any]] = {
    "taehv": {},
    "taew2_1": {},
    "taecvx": {},
    "taew2_2": dict(patch_size=2, latent_channels=48),
    "taehv1_5": dict(patch_size=2, latent_channels=32),
    "taeltx_2": dict(patch_size=4, latent_channels=128, encoder_time_downscale=(True, True, True),
                     decoder_time_upscale=(True, True, True)),
    "taeltx2_3": dict(patch_size=4, latent_channels=128, encoder_time_downscale=(True, True, True),
                      decoder_time_upscale=(True, True, True)),
    "taeh3": dict(patch_size=2, latent_channels=24),
    "taehv1_5_super": dict(patch_size=2, latent_channels=32, arch_variant="super"),
    "taew2_2_super": dict(patch_size=2, latent_channels=48, arch_variant="super"),
}


def saved(tmp_path, name: str, seed: int) -> tuple[Any, str]:
    """Random weights of `name`'s layout in tmp_path/<name>.pth, and the reference model loaded from it."""
    torch.manual_seed(seed)
    blank = taehv_ref.TAEHV(checkpoint_path=None, **TAEHV_FILES[name])
    for p in blank.decoder.parameters():  # spread the frames over [0, 1] rather than at one value
        p.data.mul_(1.5)
    path = str(tmp_path / f"{name}.pth")
    torch.save(blank.state_dict(), path)
    return taehv_ref.TAEHV(checkpoint_path=path).eval(), path


@pytest.mark.slow
@pytest.mark.parametrize("name", TAEHV_FILES)
def test_every_taehv_file_decodes_as_the_reference_does(name, tmp_path):
    ref, path = saved(tmp_path, name, seed=len(name))
    ours = load_taehv(path)
    frames = 10 if name == "taeh3" else 3  # H3's chunks of five latent frames: two of them
    torch.manual_seed(1)
    x = torch.randn(1, frames, ref.latent_channels, 4, 6)
    with torch.inference_mode():
        want = ref.decode_video(x, parallel=True, show_progress_bar=False)
        got = ours(x)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert float(want.std()) > 0.01  # a picture, not a constant
    assert float((got - want).abs().max()) < 1e-3


def test_h3_makes_the_reference_frame_count():
    """The reference decodes 22 frames from 10 H3 latent frames (previewlab once made 37)."""
    ref = taehv_ref.TAEHV(checkpoint_path=None, **TAEHV_FILES["taeh3"])
    state = {f"decoder.{k}": v for k, v in ref.decoder.state_dict().items()}
    ours = load_taehv(state, name="taeh3.pth")
    with torch.inference_mode():
        assert ours(torch.randn(1, 10, 24, 2, 2)).shape[1] == 22


def test_a_super_decoder_is_whole_only_and_the_base_one_cuts():
    """A Super decoder upsamples inside its convs: no stage a preview can leave out, said in one line."""
    ref = taehv_ref.TAEHV(checkpoint_path=None, **TAEHV_FILES["taew2_2_super"])
    ours = load_taehv({f"decoder.{k}": v for k, v in ref.decoder.state_dict().items()}, name="taew2_2_super.pth")
    assert ours.smaller(0) is ours
    with pytest.raises(ValueError, match="no stage can be left out"):
        ours.smaller(1)


def test_taesana_decodes_as_the_reference_does(tmp_path):
    torch.manual_seed(5)
    blank = taesd_ref.TAESD(encoder_path=None, decoder_path=None, latent_channels=32, arch_variant="f32")
    enc, dec = tmp_path / "taesana_encoder.pth", tmp_path / "taesana_decoder.pth"
    torch.save(blank.encoder.state_dict(), enc)
    torch.save(blank.decoder.state_dict(), dec)
    ref = taesd_ref.TAESD(encoder_path=str(enc), decoder_path=str(dec)).eval()  # its variant from the name
    ours, families = load_tae(dec)
    x = torch.randn(1, 32, 2, 3)
    with torch.inference_mode():
        want, got = ref.decoder(x).clamp(0, 1), ours(x).clamp(0, 1)
    assert families == ("sana",) and got.shape == want.shape == (1, 3, 64, 96)
    assert float((got - want).abs().max()) < 1e-3



@pytest.mark.parametrize("channels,variant", [(4, None), (16, None), (32, "flux_2"), (32, "f32")])
def test_every_taesd_layout_is_the_references_layer_for_layer(channels, variant):
    """The layer order is the published files' keys (N.* of one nn.Sequential): each decoder (and encoder; there
    is no F32 one here) has the reference's layers in its order, and its state dict the same keys and shapes."""
    from previewlab.preview.models.taesd import Decoder, Encoder, F32Decoder

    ref = taesd_ref.TAESD(encoder_path=None, decoder_path=None, latent_channels=channels, arch_variant=variant)
    gn = variant == "flux_2"
    pairs = [(F32Decoder(channels) if variant == "f32" else Decoder(channels, gn), ref.decoder)]
    if variant != "f32":
        pairs.append((Encoder(channels, gn), ref.encoder))
    for ours, theirs in pairs:
        assert [type(m).__name__ for m in ours] == [type(m).__name__ for m in theirs]
        assert [(k, v.shape) for k, v in ours.state_dict().items()] == [
            (k, v.shape) for k, v in theirs.state_dict().items()]

def test_a_file_of_none_of_the_layouts_names_what_was_expected(tmp_path):
    with pytest.raises(TaeError, match="expected taehv, taew2_1.*taeh3, taehv1_5_super") as e:
        load_taehv({"decoder.7.conv.weight": torch.zeros(1)})
    assert "\n" not in str(e.value)
    with pytest.raises(TaeError, match="taef2_ or taesana_decoder") as e2:
        load_tae({"1.weight": torch.zeros(128, 8, 3, 3)})
    assert "\n" not in str(e2.value)


# the family each published file is for (madebyollin/taehv's README and ComfyUI's latent_formats.py)
FILE_FAMILY: dict[str, Family] = {
    "taehv": "hunyuanvideo", "taew2_1": "wan21", "taecvx": "cogvideox", "taew2_2": "wan22", "taehv1_5": "hunyuanvideo15",
    "taeltx_2": "ltx2", "taeltx2_3": "ltx2_3", "taeh3": "minimaxh3", "taehv1_5_super": "hunyuanvideo15",
    "taew2_2_super": "wan22"}


@pytest.mark.slow
@pytest.mark.parametrize("name", TAEHV_FILES)
def test_every_taehv_file_is_taken_for_its_own_family_only(name, tmp_path):
    """--taesd with a published file: the model of its family takes it; a model of another family of the same
    channels is refused in one line naming the file's family; the synthetic presets build its layout."""
    from previewlab.preview.models.families import CHANNELS
    from previewlab.preview.models.loading import LoadError, load_taesd
    from previewlab.preview.models.taehv_files import TAE_LAYOUTS, layout_of
    from previewlab.preview.models.taesd import read_state

    _, path = saved(tmp_path, name, seed=3)
    family = FILE_FAMILY[name]
    load_taesd(path, family=family)
    others = [f for f, c in CHANNELS.items() if c == CHANNELS[family] and f != family and f in TAE_LAYOUTS]
    for other in others:
        with pytest.raises(LoadError, match=f"a TAE for {family}, but the model is {other}") as e:
            load_taesd(path, family=other)
        assert "\n" not in str(e.value)
    if "super" not in name:
        assert layout_of(read_state(path), f"{name}.pth") == TAE_LAYOUTS[family]

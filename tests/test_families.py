"""Model families: detection, latent layouts against diffusers' own helpers, real TAEF2 weights on a photo,
madebyollin TAE loading, and the synthetic presets of the newer families."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from previewlab.preview.models.families import FamilyError
from previewlab.preview.models.reading import latent_space
from previewlab.preview.models.latent_formats import LATENT_RGB, latent2rgb
from previewlab.preview.models.presets import TINY, PresetError, build_preset, parameter_counts
from previewlab.preview.models.taesd import Decoder, TaeError, load_tae

DATA = Path(__file__).parent / "data" / "taef2"
CPU = torch.device("cpu")


def to_vae_space(latents: torch.Tensor, pipe: Any, height: int, width: int) -> torch.Tensor:
    """One conversion, callback latents -> vae.decode's input, as a preview's decode makes it."""
    return latent_space(pipe).vae_input(pipe, latents.device, latents.dtype)(latents, height, width)


def to_tae_space(latents: torch.Tensor, pipe: Any, height: int, width: int) -> torch.Tensor:
    """One conversion, callback latents -> a TAE's (and latent2rgb's) input."""
    return latent_space(pipe).tae_input(pipe, latents.device, latents.dtype)(latents, height, width)


@pytest.fixture(scope="module")
def presets() -> dict[str, Any]:
    return {name: build_preset(name, seed=0) for name in TINY}


@pytest.fixture(scope="module")
def photo_and_latents() -> tuple[torch.Tensor, torch.Tensor]:
    """grace_hopper.jpg (public domain, shipped by matplotlib), the largest centred crop in multiples of 16
    (512x592), as (1, 3, H, W) in [0, 1], and its latents from the real TAEF2 encoder."""
    import matplotlib
    from PIL import Image

    im = Image.open(Path(matplotlib.get_data_path()) / "sample_data" / "grace_hopper.jpg").convert("RGB")
    w, h = im.size
    cw, ch = w // 16 * 16, h // 16 * 16
    left, top = (w - cw) // 2, (h - ch) // 2
    x = torch.from_numpy(np.array(im.crop((left, top, left + cw, top + ch)))).permute(2, 0, 1)[None].float() / 255
    encoder, families = load_tae(DATA / "taef2_encoder.pth", "encoder")
    assert families == ("flux2",)
    with torch.inference_mode():
        return x, encoder(x)


def psnr_db(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(10 * torch.log10(1 / ((a - b) ** 2).mean()))


@pytest.mark.slow  # 3.9 s with its photo here: the quick loop leaves it out
def test_real_taef2_round_trip_of_a_photo(photo_and_latents):
    x, z = photo_and_latents
    assert z.shape == (1, 32, x.shape[2] // 8, x.shape[3] // 8)
    decoder, families = load_tae(DATA / "taef2_decoder.pth")
    assert families == ("flux2",)
    with torch.inference_mode():
        y = decoder(z).clamp(0, 1)
        db = psnr_db(y, x)
        print(f"TAEF2 encode/decode of grace_hopper {x.shape[3]}x{x.shape[2]}: {db:.2f} dB PSNR")
        assert db >= 30
        # the mid-block GroupNorm branch is part of the architecture: without it the same weights fail (on a
        # 256x256 corner, to save time; the decoder's receptive field is bounded)
        from previewlab.preview.models.taesd import Block

        for block in decoder.modules():
            if isinstance(block, Block):
                block.pool = None
        assert psnr_db(decoder(z[..., :32, :32]).clamp(0, 1), x[..., :256, :256]) < 25


@pytest.mark.slow
def test_flux2_latent2rgb_correlates_with_the_photo(photo_and_latents):
    x, z = photo_and_latents
    rgb = latent2rgb(LATENT_RGB["flux2"], CPU, torch.float32)(z)
    small = torch.nn.functional.avg_pool2d(x, 8)
    assert rgb.shape == small.shape
    r = [float(torch.corrcoef(torch.stack([rgb[0, c].flatten(), small[0, c].flatten()]))[0, 1]) for c in range(3)]
    print("flux2 latent2rgb vs photo/8, Pearson R G B:", " ".join(f"{v:.3f}" for v in r))
    assert min(r) >= 0.8


def test_latent2rgb_factor_tables_have_a_row_per_channel():
    from previewlab.preview.models.families import CHANNELS

    assert {family: len(f) for family, (f, bias) in LATENT_RGB.items()} == {
        f: c for f, c in CHANNELS.items() if f in LATENT_RGB}
    assert set(CHANNELS) - set(LATENT_RGB) == {"cogvideox", "sana"}  # none in ComfyUI: fitted
    assert LATENT_RGB["ltx2"][0][57] == (0.060246, 0.069787, 0.072833)  # ComfyUI's LTXAV, row 58
    assert all(len(r) == 3 for f, bias in LATENT_RGB.values() for r in f + (bias,))


def test_ltxv_reads_its_tokens_and_statistics_as_its_pipeline_does():
    """LTX-Video's packed tokens, at a size that is not square (2 x 3 latent pixels): the latent
    frames from the sequence length and the size, the clip by the pipeline's own _unpack_latents, the VAE input
    by its _denormalize_latents with the VAE's buffers; latent2rgb with ComfyUI's LTXV factors."""
    from diffusers import LTXPipeline

    from previewlab.preview.decoding import decoders
    from previewlab.preview.decoding.rgb_decoder import has_factors
    from previewlab.preview.models import load

    model = load("synthetic:tiny-ltxv", device="cpu")
    pipe, space = model.pipe, model.space
    assert space.family == "ltxv" and model.family == "ltxv" and space.channels == 128
    height, width = 64, 96  # 2 x 3 latent pixels, one token each
    clip = torch.randn(2, 128, 3, 2, 3)  # (B, C, T, h, w): 3 latent frames
    packed = LTXPipeline._pack_latents(clip, 1, 1)
    assert packed.shape == (2, 3 * 2 * 3, 128) == space.callback_shape(height, width, batch=2, latent_frames=3)
    assert space.latent_frames(packed, height, width) == 3
    assert torch.equal(space.clip_of(packed, height, width), clip.transpose(1, 2))
    vae = pipe.vae
    assert not torch.equal(vae.latents_std, torch.ones(128))  # the tiny VAE's statistics are not the identity
    own = LTXPipeline._denormalize_latents(LTXPipeline._unpack_latents(packed, 3, 2, 3, 1, 1), vae.latents_mean,
                                           vae.latents_std, vae.config.scaling_factor)
    assert torch.equal(to_vae_space(packed, pipe, height, width), own[:, :, :1])  # the first latent frame
    assert torch.equal(to_tae_space(packed, pipe, height, width), clip[:, :, 0])
    with pytest.raises(FamilyError, match="hands 18 tokens, not whole latent frames of 2x2 tokens for a 64x64 px"):
        space.latent_frames(packed, 64, 64)
    # ComfyUI's class LTXV: 128 rows of R, G, B and a bias (its first and last rows, as published)
    factors, bias = LATENT_RGB["ltxv"]
    assert len(factors) == 128 and all(len(r) == 3 for r in factors)
    assert factors[0] == (1.1202e-02, -6.3815e-04, -1.0021e-02)
    assert factors[-1] == (-1.4605e-02, -6.7032e-03, 3.9675e-03)
    assert bias == (-0.0571, -0.1657, -0.2512)
    assert has_factors(model)
    rgb = decoders.build("latent2rgb", model)
    assert rgb is not None
    f, b = torch.tensor(factors), torch.tensor(bias).view(1, 3, 1, 1)
    expected = ((torch.einsum("bchw,cr->brhw", clip[:, :, 0], f) + b + 1) / 2).clamp(0, 1)
    assert torch.allclose(rgb(packed, height, width), expected, atol=1e-6)


def test_flux2_unpack_matches_flux2_pipeline(presets):
    from diffusers import Flux2Pipeline

    pipe = presets["synthetic:tiny-flux2"][0]
    height, width = 64, 96  # not square: a swapped height and width fails
    vae_latents = torch.randn(2, 32, height // 8, width // 8)
    # the pipeline's own encode side: patchify, normalise with the batch-norm statistics, pack
    bn, eps = pipe.vae.bn, pipe.vae.config.batch_norm_eps
    mean, std = bn.running_mean.view(1, -1, 1, 1), torch.sqrt(bn.running_var.view(1, -1, 1, 1) + eps)
    patched = (Flux2Pipeline._patchify_latents(vae_latents) - mean) / std
    packed = Flux2Pipeline._pack_latents(patched)
    assert packed.shape == (2, (height // 16) * (width // 16), 128)
    # the pipeline's own decode side, step for step
    ids = Flux2Pipeline._prepare_latent_ids(patched)
    unpacked = Flux2Pipeline._unpack_latents_with_ids(packed, ids)
    expected = Flux2Pipeline._unpatchify_latents(unpacked * std + mean)
    got = latent_space(pipe).vae_input(pipe, CPU, torch.float32)(packed, height, width)
    assert torch.equal(got, expected)
    assert torch.allclose(got, vae_latents, atol=1e-5)
    tae = latent_space(pipe).tae_input(pipe, CPU, torch.float32)(packed, height, width)
    assert torch.equal(tae, Flux2Pipeline._unpatchify_latents(unpacked)) and tae.shape == vae_latents.shape


def test_flux1_unpack_matches_flux_pipeline(presets):
    from diffusers import FluxPipeline

    pipe = presets["synthetic:tiny-flux1"][0]
    height, width = 96, 64
    model_latents = torch.randn(2, 16, height // 8, width // 8)
    packed = FluxPipeline._pack_latents(model_latents, 2, 16, height // 8, width // 8)
    expected = FluxPipeline._unpack_latents(packed, height, width, pipe.vae_scale_factor)
    tae = to_tae_space(packed, pipe, height, width)
    assert torch.equal(tae, expected) and torch.equal(tae, model_latents)
    cfg = pipe.vae.config
    assert (cfg.scaling_factor, cfg.shift_factor) == (0.3611, 0.1159)
    assert torch.equal(to_vae_space(packed, pipe, height, width), expected / cfg.scaling_factor + cfg.shift_factor)


def test_sd3_unscale_is_the_pipelines_formula(presets):
    pipe = presets["synthetic:tiny-sd3"][0]
    z = torch.randn(1, 16, 8, 12)
    assert torch.equal(to_tae_space(z, pipe, 64, 96), z)
    assert torch.equal(to_vae_space(z, pipe, 64, 96), z / 1.5305 + 0.0609)


@pytest.mark.parametrize("name", TINY)
def test_preset_runs_and_its_latents_decode(presets, name):
    pipe, family, tae, size = presets[name]
    assert latent_space(pipe).family == family
    seen: list[torch.Tensor] = []

    def callback(p: Any, step: int, t: Any, kw: dict[str, Any]) -> dict[str, Any]:
        seen.append(kw["latents"].clone())
        return kw

    common = dict(prompt="a cat", height=size, width=size, num_inference_steps=2)
    final = pipe(**common, output_type="latent", callback_on_step_end=callback,
                 callback_on_step_end_tensor_inputs=["latents"], generator=torch.Generator().manual_seed(1)).images
    assert len(seen) == 2 and torch.equal(seen[-1], final)
    space = latent_space(pipe)
    with torch.inference_mode():
        z = space.vae_input(pipe, CPU, torch.float32)(seen[-1], size, size)
        assert z.shape == (1, space.channels, size // 8, size // 8)
        image = pipe.vae.decode(z, return_dict=False)[0]
        assert image.shape == (1, 3, size, size)
        t = space.tae_input(pipe, CPU, torch.float32)(seen[-1], size, size)
        assert t.shape == z.shape and tae(t).shape == (1, 3, size, size)
        # the pipeline's own decode of the same run gives the same picture
        own = pipe(**common, output_type="pt", generator=torch.Generator().manual_seed(1)).images
    assert torch.equal(own, (image / 2 + 0.5).clamp(0, 1))


@pytest.mark.parametrize("name", TINY)
def test_conversions_make_no_tensors_and_read_nothing_back(presets, name, monkeypatch):
    """Constants are built with the closures, once: a call only reshapes and does arithmetic (on a GPU a
    torch.tensor(..., device=cuda) or an .item() in the step loop is a hidden sync)."""
    pipe, _, _, size = presets[name]
    space = latent_space(pipe)
    convert = [space.vae_input(pipe, CPU, torch.float32), space.tae_input(pipe, CPU, torch.float32)]
    z = pipe(prompt="a cat", height=size, width=size, num_inference_steps=1, output_type="latent").images

    def forbidden(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a conversion built a tensor or read one back")

    for target in ("tensor", "as_tensor", "from_numpy", "zeros", "ones", "full", "arange"):
        monkeypatch.setattr(torch, target, forbidden)
    for method in ("item", "tolist", "cpu", "numpy"):
        monkeypatch.setattr(torch.Tensor, method, forbidden)
    for c in convert:
        assert c(z, size, size).shape == (1, space.channels, size // 8, size // 8)


def test_detects_sd15_sdxl_and_flux1_vae_pipelines(presets):
    from diffusers import AutoencoderKL, ZImagePipeline

    from previewlab.preview.models import synthetic_pipeline

    assert latent_space(synthetic_pipeline("synthetic:tiny")).family == "sd15"
    assert latent_space(synthetic_pipeline("synthetic:tiny-xl")).family == "sdxl"
    # Z-Image shares FLUX.1's VAE, and its callback latents are not packed: (B, 16, h, w)
    z_image = ZImagePipeline(scheduler=None, vae=presets["synthetic:tiny-flux1"][0].vae, text_encoder=None,
                             tokenizer=None, transformer=None)
    space = latent_space(z_image)
    assert space.family == "flux1" and space.packing == "spatial"
    z = torch.randn(1, 16, 8, 8)
    assert torch.equal(to_tae_space(z, z_image, 64, 64), z)
    # the same pipeline with a 4-channel VAE (as diffusers' own SD3 tests build one) is an unnamed latent space,
    # read from that VAE, not refused
    vae4 = AutoencoderKL(block_out_channels=(32, 32), norm_num_groups=8, scaling_factor=1.5035, shift_factor=0.0609)
    odd = latent_space(ZImagePipeline(scheduler=None, vae=vae4, text_encoder=None, tokenizer=None, transformer=None))
    assert (odd.family, odd.channels, odd.factor, odd.packing, odd.unscale) == (None, 4, 2, "spatial", "scale_shift")
    assert odd.describe() == ("unnamed: 4 channels at 1/2, spatial (B, C, h, w), decoded as latents / scaling_factor "
                              "+ shift_factor by AutoencoderKL")


def test_pipelines_with_nothing_to_preview_are_refused_in_one_line(presets):
    from diffusers import AutoencoderOobleck, FluxPipeline, LongCatAudioDiTPipeline, PixArtAlphaPipeline
    from diffusers.models.transformers.transformer_longcat_audio_dit import LongCatAudioDiTTransformer

    def refused(pipe: Any) -> str:
        with pytest.raises(FamilyError) as e:
            latent_space(pipe)
        assert "\n" not in str(e.value)
        return str(e.value)

    assert refused(object()).startswith("object has no step callback")
    pixart = PixArtAlphaPipeline(tokenizer=None, text_encoder=None, vae=presets["synthetic:tiny-sd3"][0].vae,
                                 transformer=None, scheduler=None)
    # without a scheduler, a pipeline with no step callback has no step to preview from
    assert refused(pixart) == ("PixArtAlphaPipeline has no step callback, no Modular denoising loop and no "
                               "scheduler with a step method: previewlab has no step to preview from")
    # it hands its step callback to a pipeline of its own whose packed latents need the call's grid sizes: refused
    # before the call (the watch once raised inside it, in the inner pipeline's first callback)
    from diffusers import VisualClozePipeline

    flux = presets["synthetic:tiny-flux1"][0].components
    cloze = VisualClozePipeline(**{k: flux[k] for k in ("scheduler", "vae", "text_encoder", "tokenizer",
                                                         "text_encoder_2", "tokenizer_2", "transformer")})
    assert refused(cloze) == ("VisualClozePipeline denoises in its generation_pipe: VisualClozeGenerationPipeline packs "
                              "its latents and unpacks them with _unpack_latents(latents, sizes, vae_scale_factor), "
                              "which needs more than the image size: previewlab cannot unpack them")
    no_vae = FluxPipeline(**{**presets["synthetic:tiny-flux1"][0].components, "vae": None})
    assert refused(no_vae) == ("FluxPipeline has no VAE (no vae, movq or vqvae component) and does not denoise in pixel "
                               "space: previews need one or the other")
    sound = AutoencoderOobleck(encoder_hidden_size=8, downsampling_ratios=[2, 2], decoder_channels=8,
                               decoder_input_channels=4, audio_channels=1, channel_multiples=[1, 2])
    dit = LongCatAudioDiTTransformer(dit_dim=16, dit_depth=1, dit_heads=2, dit_text_dim=8, latent_dim=4)
    audio = LongCatAudioDiTPipeline(vae=sound, text_encoder=None, tokenizer=None, transformer=dit, scheduler=None)
    assert refused(audio) == ("LongCatAudioDiTPipeline makes audio (its VAE has audio_channels): previewlab previews "
                              "images, and audio has none to show")


def test_load_tae_reads_channels_variant_and_file_names(tmp_path):
    real = torch.load(DATA / "taef2_decoder.pth", weights_only=True)
    module, families = load_tae(real)
    assert families == ("flux2",) and any(k.endswith("pool.1.weight") for k in module.state_dict())
    f16 = Decoder(16).state_dict()
    assert load_tae(f16)[1] == ("sd3", "flux1")
    for name, family in (("taef1_decoder.pth", "flux1"), ("taesd3_decoder.pth", "sd3")):
        torch.save(f16, tmp_path / name)
        assert load_tae(tmp_path / name)[1] == (family,)
    from safetensors.torch import save_file

    save_file(Decoder().state_dict(), str(tmp_path / "taesdxl_decoder.safetensors"))
    assert load_tae(tmp_path / "taesdxl_decoder.safetensors")[1] == ("sdxl",)
    assert load_tae(Decoder().state_dict())[1] == ("sd15", "sdxl")


def test_load_tae_takes_the_combined_hub_layout(tmp_path):
    """taef2.safetensors on the hub: encoder.layers.N and decoder.layers.N-1 in one file."""
    from safetensors.torch import save_file

    dec = torch.load(DATA / "taef2_decoder.pth", weights_only=True)
    enc = torch.load(DATA / "taef2_encoder.pth", weights_only=True)
    combined = {f"decoder.layers.{int(k.split('.', 1)[0]) - 1}.{k.split('.', 1)[1]}": v for k, v in dec.items()}
    combined.update({f"encoder.layers.{k}": v for k, v in enc.items()})
    save_file(combined, str(tmp_path / "taef2.safetensors"))
    for part, original in (("decoder", dec), ("encoder", enc)):
        module, _ = load_tae(tmp_path / "taef2.safetensors", part)  # type: ignore[arg-type]
        assert all(torch.equal(v, original[k]) for k, v in module.state_dict().items())


def test_load_tae_refuses_what_it_does_not_know(tmp_path):
    no_gn_32 = Decoder(32).state_dict()
    with pytest.raises(TaeError, match="32 latent channels, TAESD layout"):
        load_tae(no_gn_32)
    partial = {k: v for k, v in Decoder(32, True).state_dict().items() if not k.startswith("19.")}
    with pytest.raises(TaeError, match="Missing key"):
        load_tae(partial)
    with pytest.raises(TaeError, match="no 64- or 256-wide first conv"):
        load_tae({"1.weight": torch.zeros(128, 32, 3, 3)})
    with pytest.raises(TaeError, match="32 latent channels, TAESD layout"):  # taesana's width, not its layers
        load_tae({"1.weight": torch.zeros(256, 32, 3, 3)})
    (tmp_path / "bad.pth").write_bytes(b"not a checkpoint")
    with pytest.raises(TaeError, match="not a readable checkpoint"):
        load_tae(tmp_path / "bad.pth")
    with pytest.raises(TaeError, match="no such file"):
        load_tae(tmp_path / "missing.pth")


def test_default_decoder_is_still_sd15_taesd():
    dec = Decoder()
    assert sum(p.numel() for p in dec.parameters()) == 1_222_531  # TAESD's decoder, madebyollin's README
    assert not any("pool" in k for k in dec.state_dict()) and dec.state_dict()["1.weight"].shape == (64, 4, 3, 3)


def test_unknown_preset_lists_the_known_ones():
    with pytest.raises(PresetError, match="synthetic:tiny-flux2"):
        build_preset("synthetic:nope")


def test_real_size_sd35_medium_counts_on_the_meta_device():
    counts = parameter_counts("synthetic:sd35-medium")
    # transformer: SD3.5 Medium's config; CLIP-L 123.7 M and CLIP-G 694.7 M with their projections
    assert counts == {"vae": 83_819_683, "text_encoder": 123_650_304, "text_encoder_2": 694_659_840,
                      "transformer": 2_243_171_520}
    assert sum(counts.values()) * 4 < 24 * 2**30 * 0.6  # float32 weights leave room in 24 GiB


@pytest.mark.parametrize("first", [False, True])
def test_a_clips_layout_is_read_from_where_the_vae_channels_sit(first):
    """A clip's step latents come (B, C, T, h, w) (Wan), (B, T, C, h, w) (CogVideoX; AnyFlow's rollout, whose
    prepare_latents names channels first) or channels last with conditioning channels after them (Kandinsky 5,
    which decodes [..., :C]): each becomes the same (B, T, C, h, w) clip, and its first frame the same image."""
    from previewlab.preview.models.latent_spaces import LatentSpace

    space = LatentSpace(family=None, channels=16, factor=8, packing="spatial", unscale="scale", vae="X",
                        frames=True, video=True, frames_first=first, temporal=4)
    clip = torch.randn(1, 3, 16, 2, 5)  # (B, T, C, h, w)
    layouts = {"channels first": clip.transpose(1, 2), "frames first": clip,
               "channels last": torch.cat([clip.permute(0, 1, 3, 4, 2), torch.randn(1, 3, 2, 5, 17)], dim=-1)}
    image = space.tae_input(_no_pipe(), torch.device("cpu"), torch.float32)
    for name, z in layouts.items():
        assert space.latent_frames(z, 16, 40) == 3, name
        assert torch.equal(space.clip_of(z, 16, 40), clip), name
        assert torch.equal(image(z, 16, 40), clip[:, 0]), name
    with pytest.raises(FamilyError, match="no axis of the VAE's 16 latent channels"):
        space.clip_of(torch.randn(1, 3, 4, 2, 5), 16, 40)


def test_latents_stacked_per_target_preview_the_first():
    """Marigold Intrinsics denoises one 4-channel latent per target stacked on the channels (8 for albedo and
    shading): a preview shows the first target's."""
    from previewlab.preview.models.latent_spaces import LatentSpace

    space = LatentSpace(family=None, channels=4, factor=8, packing="spatial", unscale="scale", vae="X")
    z = torch.randn(1, 8, 3, 3)
    assert torch.equal(space.tae_input(_no_pipe(), torch.device("cpu"), torch.float32)(z, 24, 24), z[:, :4])


def _no_pipe() -> Any:
    """A pipeline object with only the attribute tae_input reads for a spatial space (its vae_scale_factor)."""
    from types import SimpleNamespace

    return SimpleNamespace(vae_scale_factor=8)


def test_unpatched_tokens_and_a_stack_of_items_show_the_image_being_made():
    """Bria Fibo without do_patching hands a token per latent pixel, (B, h*w, C), and unpacks them itself with
    _unpack_latents_no_patch; JoyImage Edit hands (B, items, C, T, h, w), the references first and the image
    being made last."""
    from previewlab.preview.models.latent_spaces import LatentSpace

    z = torch.randn(1, 16, 2, 3)
    patched = LatentSpace(family=None, channels=16, factor=16, packing="packed", unscale="scale", vae="X",
                          frames=True, unpack=lambda *a: pytest.fail("the 2x2 unpack is for patched tokens"))
    tokens = z.permute(0, 2, 3, 1).reshape(1, 6, 16)
    pipe = _no_pipe()
    pipe.vae_scale_factor = 16
    assert torch.equal(patched.tae_input(pipe, torch.device("cpu"), torch.float32)(tokens, 32, 48), z)
    items = LatentSpace(family=None, channels=16, factor=8, packing="spatial", unscale="scale", vae="X", frames=True)
    stack = torch.stack([torch.randn(1, 16, 1, 2, 3), z.unsqueeze(2)], dim=1)
    assert torch.equal(items.tae_input(_no_pipe(), torch.device("cpu"), torch.float32)(stack, 16, 24), z)

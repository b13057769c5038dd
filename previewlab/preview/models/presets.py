"""Synthetic presets of the newer families (SD3, FLUX.1, FLUX.2, and the video families of video_presets.py and
new_video_presets.py): real diffusers pipeline classes with random seeded weights and tokenizers built offline, on
the CPU. Their pictures are noise; their shapes, latent layouts and decode paths are the real ones.

The tiny presets run 2-4 steps of a 64x64 image (or a 64 px clip of a few frames) in a couple of seconds on a
CPU, for tests. Each comes with its family's TAE in madebyollin's layout (random weights, the real
architecture): TAESD's decoder for an image family, TAEHV for a video one; Mochi and LTX-Video have none.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn

from previewlab.preview.models import new_video_presets, video_presets
from previewlab.preview.models.families import Family
from previewlab.preview.models.offline_tokenizers import clip_tokenizer, mistral_tokenizer, t5_tokenizer
from previewlab.preview.models.taehv import TAEHV
from previewlab.preview.models.taehv_files import TAE_LAYOUTS
from previewlab.preview.models.taesd import Decoder
from previewlab.preview.models.text_encoders import t5

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # transformers warns that torchvision is missing


class PresetError(ValueError):
    """An unknown preset name; the message lists the known ones."""


def _clip(hidden: int, projection: int | None = None, layers: int = 2, heads: int = 4, inter: int = 37,
          vocab: int = 1000, act: str = "gelu") -> Any:
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

    cfg = CLIPTextConfig(bos_token_id=0, eos_token_id=1, pad_token_id=1, vocab_size=vocab, hidden_size=hidden,
                         intermediate_size=inter, num_attention_heads=heads, num_hidden_layers=layers,
                         max_position_embeddings=77, projection_dim=projection or hidden, hidden_act=act)
    return CLIPTextModelWithProjection(cfg) if projection else CLIPTextModel(cfg)


def _vae16(scaling: float, shift: float, widths: tuple[int, ...] = (16,) * 4, layers: int = 1, groups: int = 8) -> Any:
    """FLUX.1 / SD3 VAE shape: 16 channels, no quant convs, four stages (factor 8, like their TAEs)."""
    from diffusers import AutoencoderKL

    return AutoencoderKL(latent_channels=16, block_out_channels=widths, layers_per_block=layers, norm_num_groups=groups,
                         down_block_types=("DownEncoderBlock2D",) * 4, up_block_types=("UpDecoderBlock2D",) * 4,
                         use_quant_conv=False, use_post_quant_conv=False, scaling_factor=scaling,
                         shift_factor=shift, sample_size=64)


def _flow_scheduler(dynamic: bool) -> Any:
    from diffusers import FlowMatchEulerDiscreteScheduler

    if not dynamic:  # SD3's scheduler_config.json
        return FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=3.0)
    # FLUX.1-dev's scheduler_config.json: the shift follows the image's token count
    return FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=3.0, use_dynamic_shifting=True,
                                           base_shift=0.5, max_shift=1.15, base_image_seq_len=256,
                                           max_image_seq_len=4096)


def _tiny_sd3() -> Any:
    from diffusers import SD3Transformer2DModel, StableDiffusion3Pipeline

    # CLIP-L and CLIP-G stand-ins: hidden 32 + 32 concatenated, padded to T5's width (joint_attention_dim)
    transformer = SD3Transformer2DModel(sample_size=8, patch_size=2, in_channels=16, out_channels=16, num_layers=2,
                                        attention_head_dim=8, num_attention_heads=2, joint_attention_dim=64,
                                        caption_projection_dim=16, pooled_projection_dim=64, pos_embed_max_size=16)
    return StableDiffusion3Pipeline(
        transformer=transformer, scheduler=_flow_scheduler(False), vae=_vae16(1.5305, 0.0609),
        text_encoder=_clip(32, 32), tokenizer=clip_tokenizer(), text_encoder_2=_clip(32, 32),
        tokenizer_2=clip_tokenizer(), text_encoder_3=t5(64), tokenizer_3=t5_tokenizer())


def _sd35_medium() -> Any:
    """SD3.5 Medium's architecture (stabilityai/stable-diffusion-3.5-medium configs: transformer 24 layers, 24
    heads of 64, dual attention in layers 0-12, RMS qk-norm; CLIP-L, CLIP-G, the SD3 VAE) without T5-XXL:
    its 4.8 B parameters (19 GB in float32) would not fit 24 GiB of RAM. diffusers runs SD3 without
    text_encoder_3 (zeros in T5's place), so the joint sequence has 77 text tokens where T5 gives 256."""
    from diffusers import SD3Transformer2DModel, StableDiffusion3Pipeline

    transformer = SD3Transformer2DModel(sample_size=128, patch_size=2, in_channels=16, out_channels=16, num_layers=24,
                                        attention_head_dim=64, num_attention_heads=24, joint_attention_dim=4096,
                                        caption_projection_dim=1536, pooled_projection_dim=2048,
                                        pos_embed_max_size=384, dual_attention_layers=tuple(range(13)),
                                        qk_norm="rms_norm")
    clip_l = _clip(768, 768, layers=12, heads=12, inter=3072, vocab=49408, act="quick_gelu")
    clip_g = _clip(1280, 1280, layers=32, heads=20, inter=5120, vocab=49408)
    vae = _vae16(1.5305, 0.0609, widths=(128, 256, 512, 512), layers=2, groups=32)
    return StableDiffusion3Pipeline(
        transformer=transformer, scheduler=_flow_scheduler(False), vae=vae, text_encoder=clip_l,
        tokenizer=clip_tokenizer(), text_encoder_2=clip_g, tokenizer_2=clip_tokenizer(), text_encoder_3=None,
        tokenizer_3=None)


def _tiny_flux1() -> Any:
    from diffusers import FluxPipeline, FluxTransformer2DModel

    # 64 input channels: 16 latent channels packed 2x2; RoPE axes add up to the head width
    transformer = FluxTransformer2DModel(patch_size=1, in_channels=64, num_layers=1, num_single_layers=1,
                                         attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32,
                                         pooled_projection_dim=32, guidance_embeds=True, axes_dims_rope=(4, 6, 6))
    return FluxPipeline(scheduler=_flow_scheduler(True), vae=_vae16(0.3611, 0.1159), text_encoder=_clip(32),
                        tokenizer=clip_tokenizer(), text_encoder_2=t5(32), tokenizer_2=t5_tokenizer(),
                        transformer=transformer)


def _mistral3(hidden: int) -> Any:
    """Mistral3ForConditionalGeneration, tiny. 30 text layers: Flux2Pipeline stacks hidden states 10, 20, 30."""
    from transformers import (Mistral3Config, Mistral3ForConditionalGeneration, MistralConfig,
                              PixtralVisionConfig)

    text = MistralConfig(vocab_size=64, hidden_size=hidden, intermediate_size=32, num_hidden_layers=30,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=8, max_position_embeddings=512)
    vision = PixtralVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                                 image_size=32, patch_size=8)
    return Mistral3ForConditionalGeneration(Mistral3Config(text_config=text, vision_config=vision,
                                                           image_token_index=10, spatial_merge_size=2))


def _tiny_flux2() -> Any:
    from diffusers import AutoencoderKLFlux2, Flux2Pipeline, Flux2Transformer2DModel

    vae: Any = AutoencoderKLFlux2(latent_channels=32, block_out_channels=(16,) * 4, layers_per_block=1,
                             norm_num_groups=8, sample_size=64)
    # A fresh BatchNorm holds mean 0 and variance 1, which would hide a missing de-normalisation: give it
    # statistics of the size a trained VAE has.
    vae.bn.running_mean.normal_(0.0, 0.5)
    vae.bn.running_var.uniform_(0.5, 2.0)
    # 128 input channels: 32 latent channels patchified 2x2; joint_attention_dim = 3 stacked hidden states
    transformer = Flux2Transformer2DModel(patch_size=1, in_channels=128, num_layers=1, num_single_layers=1,
                                          attention_head_dim=16, num_attention_heads=2, joint_attention_dim=48,
                                          timestep_guidance_channels=32, mlp_ratio=2.0, axes_dims_rope=(4, 4, 4, 4))
    return Flux2Pipeline(scheduler=_flow_scheduler(True), vae=vae, text_encoder=_mistral3(16),
                         tokenizer=mistral_tokenizer(), transformer=transformer)


@dataclass(frozen=True)
class Preset:
    """A synthetic model: how to build its pipeline, its family, its TAE (None: the family has no published
    one), its default size (px, square), and for a clip its default length (frames) and playback rate (fps)."""
    build: Callable[[], Any]
    family: Family
    tae: Callable[[], nn.Module] | None
    size: int
    num_frames: int = 1  # 1: an image
    fps: float = 0.0     # 0: an image


def _taesd(channels: int, groupnorm: bool = False) -> Callable[[], nn.Module]:
    """madebyollin's TAESD-style decoder: latent channels, and the mid-block GroupNorm of TAEF2."""
    return functools.partial(Decoder, channels, groupnorm)


def _taehv(family: Family) -> Callable[[], nn.Module]:
    """previewlab's TAEHV in the layout of the family's published file, random weights (build_preset seeds them)."""
    return functools.partial(TAEHV, TAE_LAYOUTS[family])


def _video(build: Callable[[], Any], family: Family, frames: int, size: int = 64) -> Preset:
    tae = _taehv(family) if family in TAE_LAYOUTS else None
    return Preset(build, family, tae, size, frames, video_presets.FPS[family])


PRESETS: dict[str, Preset] = {
    "synthetic:tiny-sd3": Preset(_tiny_sd3, "sd3", _taesd(16), 64),
    "synthetic:tiny-flux1": Preset(_tiny_flux1, "flux1", _taesd(16), 64),
    "synthetic:tiny-flux2": Preset(_tiny_flux2, "flux2", _taesd(32, True), 64),
    # real size: 3.1 B parameters in all, 12.6 GB in float32 (parameter_counts); transformer 2.24 B
    "synthetic:sd35-medium": Preset(_sd35_medium, "sd3", _taesd(16), 1024),
    # clips of 1 + 4k frames (Mochi: 1 + 6k): 2 latent frames (CogVideoX 3), 64 px
    "synthetic:tiny-wan21": _video(video_presets.tiny_wan21, "wan21", 5),
    "synthetic:tiny-wan22": _video(video_presets.tiny_wan22, "wan22", 5),
    "synthetic:tiny-hunyuanvideo": _video(video_presets.tiny_hunyuanvideo, "hunyuanvideo", 5),
    "synthetic:tiny-cogvideox": _video(video_presets.tiny_cogvideox, "cogvideox", 9),
    "synthetic:tiny-mochi": _video(video_presets.tiny_mochi, "mochi", 7),
    # 9 frames are 1 + 8: 2 latent frames at LTX-Video's 8x, 64 px (two 32 px latent pixels a side)
    "synthetic:tiny-ltxv": _video(video_presets.tiny_ltxv, "ltxv", 9),
    # the newer families at their real latent channels and compression: HunyuanVideo 1.5 (32 channels, 16x / 4x)
    # 5 frames, 2 latent frames of 4 x 4; LTX-2 and LTX-2.3 (128 channels, 32x / 8x) 9 frames, as LTX-Video
    "synthetic:tiny-hunyuanvideo15": _video(new_video_presets.tiny_hunyuanvideo15, "hunyuanvideo15", 5),
    "synthetic:tiny-ltx2": _video(new_video_presets.tiny_ltx2, "ltx2", 9),
    "synthetic:tiny-ltx2_3": _video(new_video_presets.tiny_ltx2_3, "ltx2_3", 9),
    # real size (parameter_counts): transformer 1,418,996,800, VAE 126,892,531, the one-layer UMT5 stand-in
    # 197,048,320; 7.0 GB in float32. 9 frames (3 latent frames) at 128 px, on 2 CPU cores (torch 2.13): about 7 s
    # a step without guidance, 13 s with it (two transformer calls); at 160 px 9 s and 19 s
    "synthetic:wan21-1.3b": _video(video_presets.wan21_1_3b, "wan21", 9, 128),
}
TINY = ("synthetic:tiny-sd3", "synthetic:tiny-flux1", "synthetic:tiny-flux2")  # for tests: seconds on a CPU
# the tiny video presets whose pipelines take callback_on_step_end, which their tests drive them through; the tiny
# HunyuanVideo 1.5 (no callback), LTX-2 and LTX-2.3 have tests/test_new_video_presets.py
TINY_VIDEO = ("synthetic:tiny-wan21", "synthetic:tiny-wan22", "synthetic:tiny-hunyuanvideo", "synthetic:tiny-cogvideox",
              "synthetic:tiny-mochi", "synthetic:tiny-ltxv")


def preset(name: str) -> Preset:
    """The preset of a name. Raises PresetError listing the known names."""
    if name not in PRESETS:
        raise PresetError(f"unknown synthetic model {name!r}; allowed are {', '.join(PRESETS)}")
    return PRESETS[name]


def build_preset(name: str, seed: int = 0) -> tuple[Any, Family, nn.Module | None, int]:
    """(pipeline on the CPU in float32, family, its TAE decoder in eval mode or None, default size in px).
    Weights are deterministic for a seed. Raises PresetError for an unknown name."""
    spec = preset(name)
    torch.manual_seed(seed)
    pipe = spec.build()
    for part in pipe.components.values():
        if isinstance(part, nn.Module):
            part.eval()  # built from configs they are in training mode, and T5's dropout would make runs differ
    pipe.set_progress_bar_config(disable=True)
    tae = spec.tae().eval().requires_grad_(False) if spec.tae is not None else None
    return pipe, spec.family, tae, spec.size


def parameter_counts(name: str) -> dict[str, int]:
    """Parameters per component of a preset, built on the meta device: no memory, no weights."""
    spec = preset(name)
    with torch.device("meta"):
        pipe = spec.build()
    return {part: sum(p.numel() for p in m.parameters()) for part, m in pipe.components.items()
            if isinstance(m, nn.Module)}

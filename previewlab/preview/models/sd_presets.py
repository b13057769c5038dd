"""Synthetic presets of the SD1.5 and SDXL families: real diffusers pipeline classes with random seeded weights
and a CLIP tokenizer built offline, on the CPU. Their pictures are noise; their costs are real.

tiny and tiny-xl run a 64 px image in seconds on a CPU, for tests; small is a mid-size SD1.5; sd15 and sdxl are
the real architectures. Each comes with a diffusers AutoencoderTiny of as many stages as its VAE (TAESD's real
architecture for four).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import torch

from previewlab.preview.models import single_file
from previewlab.preview.models.families import Family
from previewlab.preview.models.model import ModelError
from previewlab.preview.models.offline_tokenizers import clip_tokenizer

# (pipeline on the CPU, family, its AutoencoderTiny, default size in px)
Built = tuple[Any, Family, Any, int]


def _scheduler() -> Any:
    from diffusers import EulerDiscreteScheduler

    # SD1.5's training schedule; Euler is what most local UIs default to.
    return EulerDiscreteScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                                  num_train_timesteps=1000, steps_offset=1, timestep_spacing="leading")


def _clip(hidden: int, layers: int, heads: int, inter: int, vocab: int = 1000, **kw: Any) -> Any:
    from transformers import CLIPTextConfig

    return CLIPTextConfig(bos_token_id=0, eos_token_id=2, pad_token_id=1, vocab_size=vocab, hidden_size=hidden,
                          intermediate_size=inter, num_attention_heads=heads, num_hidden_layers=layers,
                          max_position_embeddings=77, layer_norm_eps=1e-5, **kw)


def _vae(widths: tuple[int, ...], norm_groups: int = 32) -> Any:
    from diffusers import AutoencoderKL

    n = len(widths)
    return AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4, block_out_channels=widths,
                         layers_per_block=2, norm_num_groups=norm_groups, sample_size=64,
                         down_block_types=("DownEncoderBlock2D",) * n, up_block_types=("UpDecoderBlock2D",) * n,
                         scaling_factor=0.18215)


def _taesd(stages: int) -> Any:
    from diffusers import AutoencoderTiny

    if stages == 4:
        return AutoencoderTiny()  # the real TAESD architecture, 2,445,063 parameters
    # As many upsampling stages as the VAE has, or the preview is the wrong size.
    return AutoencoderTiny(encoder_block_out_channels=(32,) * stages, decoder_block_out_channels=(32,) * stages,
                           num_encoder_blocks=(1,) * stages, num_decoder_blocks=(1,) * stages)


def _unet(widths: tuple[int, ...], cross_dim: int, **kw: Any) -> Any:
    from diffusers import UNet2DConditionModel

    n = len(widths)
    down: tuple[str, ...]
    up: tuple[str, ...]
    if n == 2:
        down, up = ("DownBlock2D", "CrossAttnDownBlock2D"), ("CrossAttnUpBlock2D", "UpBlock2D")
    else:
        down = ("CrossAttnDownBlock2D",) * (n - 1) + ("DownBlock2D",)
        up = ("UpBlock2D",) + ("CrossAttnUpBlock2D",) * (n - 1)
    return UNet2DConditionModel(sample_size=64, in_channels=4, out_channels=4, layers_per_block=2,
                                block_out_channels=widths, down_block_types=down, up_block_types=up,
                                cross_attention_dim=cross_dim, **kw)


def _sd15_pipeline(unet: Any, vae: Any, clip: Any) -> Any:
    """An SD1.5-family pipeline of these parts; its text encoder is made here, after them (the seeded weights
    depend on the order: the UNet, the VAE, the TAE, the text encoder)."""
    from diffusers import StableDiffusionPipeline
    from transformers import CLIPTextModel

    return StableDiffusionPipeline(vae=vae, text_encoder=CLIPTextModel(clip), unet=unet, tokenizer=clip_tokenizer(),
                                   scheduler=_scheduler(), safety_checker=None, feature_extractor=None,
                                   requires_safety_checker=False)


def _tiny() -> Built:
    unet, vae, taesd = _unet((32, 64), 32), _vae((32, 64)), _taesd(2)
    return _sd15_pipeline(unet, vae, _clip(32, 5, 4, 37)), "sd15", taesd, 64


def _small() -> Built:
    unet, vae, taesd = _unet((64, 128, 256, 256), 256, attention_head_dim=8), _vae((32, 64, 128, 128)), _taesd(4)
    return _sd15_pipeline(unet, vae, _clip(256, 4, 4, 1024)), "sd15", taesd, 256


def _sd15() -> Built:
    unet = _unet((320, 640, 1280, 1280), 768, attention_head_dim=8)
    vae, taesd = _vae((128, 256, 512, 512)), _taesd(4)
    clip = _clip(768, 12, 12, 3072, vocab=49408, hidden_act="quick_gelu")
    return _sd15_pipeline(unet, vae, clip), "sd15", taesd, 512


def _tiny_xl(real_taesd: bool) -> Built:
    from diffusers import StableDiffusionXLPipeline
    from transformers import CLIPTextModel, CLIPTextModelWithProjection

    unet = _unet((32, 64), 64, attention_head_dim=(2, 4), use_linear_projection=True,
                 addition_embed_type="text_time", addition_time_embed_dim=8, transformer_layers_per_block=(1, 2),
                 projection_class_embeddings_input_dim=80, norm_num_groups=1)
    # tiny-xl-real-taesd: TAESD's real architecture on SDXL's latents at 1024 px (4 channels at 1/8: a tiny VAE
    # of 4 stages), everything else tiny-xl's. A TAESD preview costs what it costs on SDXL (its decoder, the
    # latents' size); the run's wall time is not SDXL's. On 2 CPU cores a real SDXL UNet step at 1024 px
    # takes about 3 minutes and the real VAE's final decode 4 (synthetic:sdxl)
    vae, taesd = (_vae((16,) * 4, norm_groups=8), _taesd(4)) if real_taesd else (_vae((32, 64)), _taesd(2))
    cfg = _clip(32, 5, 4, 37, hidden_act="gelu", projection_dim=32)
    pipe = StableDiffusionXLPipeline(vae=vae, text_encoder=CLIPTextModel(cfg), text_encoder_2=CLIPTextModelWithProjection(cfg),
                                     tokenizer=clip_tokenizer(), tokenizer_2=clip_tokenizer(), unet=unet,
                                     scheduler=_scheduler())
    return pipe, "sdxl", taesd, 1024 if real_taesd else 64


def _sdxl() -> Any:
    """SDXL base 1.0's architecture, built from the configs shipped for its single files (single_file_configs/
    xl_base): the UNet (2,567,463,684 parameters), CLIP ViT-L (123,060,480), OpenCLIP bigG with its projection
    (694,659,840) and the VAE (83,653,863; scaling 0.13025, force_upcast), counted on the meta device. 3.47 B
    random parameters, 13.9 GB in float32. On a shared 2-core CPU: built in 97 s (13.4 GiB peak), a UNet step at
    1024 px 170-220 s without CFG, the VAE's decode at 1024 px 236 s (17.6 GiB peak)."""
    from diffusers import AutoencoderKL, StableDiffusionXLPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

    def config(part: str) -> Path:
        return single_file.CONFIGS / "xl_base" / part / "config.json"

    return StableDiffusionXLPipeline(
        vae=AutoencoderKL.from_config(json.loads(config("vae").read_text())),
        text_encoder=CLIPTextModel(CLIPTextConfig.from_json_file(config("text_encoder"))),
        text_encoder_2=CLIPTextModelWithProjection(CLIPTextConfig.from_json_file(config("text_encoder_2"))),
        tokenizer=clip_tokenizer(), tokenizer_2=clip_tokenizer(),
        unet=UNet2DConditionModel.from_config(json.loads(config("unet").read_text())), scheduler=_scheduler())


BUILDS: dict[str, Callable[[], Built]] = {
    "synthetic:tiny": _tiny,
    "synthetic:tiny-xl": lambda: _tiny_xl(real_taesd=False),
    "synthetic:small": _small,
    "synthetic:sd15": _sd15,
    "synthetic:sdxl": lambda: (_sdxl(), "sdxl", _taesd(4), 1024),  # TAESDXL has TAESD's architecture
    "synthetic:tiny-xl-real-taesd": lambda: _tiny_xl(real_taesd=True),
}
SD_PRESETS = tuple(BUILDS)
# SDXL at 1024 px for the bench's measurements: its real architecture (3.5 B random weights, minutes a step on a
# CPU), and tiny-xl with TAESD's real decoder on SDXL's 1024 px latents; docs/gpu-check.md describes both
BENCH_PRESETS = ("synthetic:sdxl", "synthetic:tiny-xl-real-taesd")


def build(name: str, seed: int = 0) -> Built:
    """(pipeline on the CPU in float32, family, its AutoencoderTiny, default size in px) of a name in
    SD_PRESETS; the weights are deterministic for a seed. Raises ModelError for any other name."""
    if name not in BUILDS:
        raise ModelError(f"unknown SD preset {name!r}; allowed are {', '.join(SD_PRESETS)}")
    torch.manual_seed(seed)
    return BUILDS[name]()

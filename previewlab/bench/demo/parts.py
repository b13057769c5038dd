"""The demo model's parts, built from the same diffusers and transformers classes that real SD1.5 models use,
the plan that sizes them, and how they are written. Training lives in bench/demo/train.py; the scenes in
preview/models/demo_scenes.py."""
from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from previewlab.preview.models.demo_scenes import words


@dataclass(frozen=True)
class Plan:
    """Sizes and step counts. The defaults are the full run, sized for about 50 minutes on 2 quiet CPU cores
    (per-step costs in bench/demo/train.py's docstring); QUICK is the test's throwaway model."""
    size: int = 128           # pixels. 256 costs 4x per UNet and TAESD sample: a quarter of the samples in the hour
    scenes: int = 10_000      # drawn and encoded once for the UNet: ~12 epochs of its samples
    vae_steps: int = 1000     # fresh scenes every step; 1000 keep shapes (round trip 90 %) and leave the UNet more
    vae_batch: int = 8        # measured: 8 at 5e-4 reached 16 at 1e-3's loss on 60 % of the images
    vae_lr: float = 5e-4
    kl_weight: float = 1e-6   # per latent value against the per-pixel L1: weak, as SD's VAE (latents stay sharp)
    unet_steps: int = 2600    # the picture's quality is mostly the UNet's: 2100 steps drew 48 % of shapes, 2600 66 %
    unet_batch: int = 64      # small models on a CPU: per-step overhead dominates below ~64
    unet_lr: float = 5e-4
    object_weight: float = 4.0  # extra loss weight on latent pixels that objects cover (see train_unet)
    drop_caption: float = 0.1   # captions replaced by "" so classifier-free guidance has an unconditional model
    taesd_steps: int = 240
    taesd_batch: int = 8
    taesd_lr: float = 5e-4
    warmup: int = 50          # linear warm-up steps of every part, then cosine decay to 5 %


# 64 px and a few dozen steps a part: the test checks that every part learns and the result loads, not how well
QUICK = Plan(size=64, scenes=320, vae_steps=30, vae_batch=4, unet_steps=60, unet_batch=16, taesd_steps=16, taesd_batch=4,
             warmup=5)

# SD1.5's noise schedule with SD 2.x's v-prediction. Measured here with epsilon-prediction after 300 UNet steps:
# the x0 implied at t=999 had 8.5x the latents' variance in error (epsilon errors are multiplied by
# sqrt((1 - alpha_bar) / alpha_bar) = 14.6 there), and the samples were coloured blotches. v-prediction asks for
# x0 directly where the noise dominates. Euler and previewlab's x0 previews read prediction_type from the config.
BETAS = dict(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", num_train_timesteps=1000,
             prediction_type="v_prediction")


def tokenizer() -> Any:
    """A CLIPTokenizer whose vocabulary holds every caption word whole ("red</w>"), built offline.

    BPE needs a merge per step from characters to the word; merges apply by rank across all words, so the
    longest words' chains come first and no shorter word's merge can split them (tests check every word is one
    token). Characters stay in the vocabulary, so an unknown word still tokenizes, letter by letter."""
    from transformers import CLIPTokenizer

    ws = words()
    chars = sorted(set("".join(ws)))
    tokens = ["<|startoftext|>", "<|endoftext|>"] + chars + [c + "</w>" for c in chars]
    merges: list[tuple[str, str]] = []
    for w in sorted(ws, key=lambda w: (-len(w), w)):
        parts = list(w[:-1]) + [w[-1] + "</w>"]
        acc = parts[0]
        for p in parts[1:]:
            merges.append((acc, p))
            acc += p
            tokens.append(acc)
    vocab = {t: i for i, t in enumerate(dict.fromkeys(tokens))}
    unique: Any = list(dict.fromkeys(merges))  # tuples, whatever transformers' annotation says (str lists fail)
    return CLIPTokenizer(vocab=vocab, merges=unique, unk_token="<|endoftext|>",
                         bos_token="<|startoftext|>", eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                         model_max_length=77)


def text_encoder(vocab_size: int) -> Any:
    """A small CLIPTextModel: 26 words need no more than 2 layers of 128."""
    from transformers import CLIPTextConfig, CLIPTextModel

    cfg = CLIPTextConfig(vocab_size=vocab_size, hidden_size=128, intermediate_size=512, num_attention_heads=4,
                         num_hidden_layers=2, max_position_embeddings=77, hidden_act="quick_gelu",
                         bos_token_id=0, eos_token_id=1, pad_token_id=1)
    return CLIPTextModel(cfg)


def vae(size: int) -> Any:
    """AutoencoderKL, 4 latent channels at 1/8 (4 stages, 3 downsamples, as SD1.5's). The full-resolution stage
    costs most, so it is the narrowest: SD1.5's (128, 256, 512, 512) over 8, one resnet per block."""
    from diffusers import AutoencoderKL

    vae: Any = AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(16, 32, 64, 64),
                        layers_per_block=1, norm_num_groups=8, sample_size=size,
                        down_block_types=("DownEncoderBlock2D",) * 4, up_block_types=("UpDecoderBlock2D",) * 4)
    # The posterior starts at std 0.05, not 1: with SD's weak KL term the std only shrinks as fast as the
    # reconstruction pushes it, and a short run would leave latents that are half noise (measured: std 0.96
    # against a spread of 1.7 after 60 steps), which the UNet would then have to learn.
    with torch.no_grad():  # quant_conv (1x1) makes the moments: channels 0-3 the mean, 4-7 the log-variance
        vae.quant_conv.weight[4:].zero_()
        vae.quant_conv.bias[4:].fill_(-6.0)
    return vae


def unet(size: int) -> Any:
    """UNet2DConditionModel with SD1.5's block layout (cross-attention in the top three stages) at 1/10 of its
    widths, one layer per block. sample_size makes the pipeline's default image size the trained one."""
    from diffusers import UNet2DConditionModel

    return UNet2DConditionModel(sample_size=size // 8, in_channels=4, out_channels=4, layers_per_block=1,
                                block_out_channels=(32, 64, 128, 128),
                                down_block_types=("CrossAttnDownBlock2D",) * 3 + ("DownBlock2D",),
                                up_block_types=("UpBlock2D",) + ("CrossAttnUpBlock2D",) * 3,
                                cross_attention_dim=128, attention_head_dim=8, norm_num_groups=8)


def noise_scheduler() -> Any:
    from diffusers import DDPMScheduler

    return DDPMScheduler(**BETAS)


def sampler() -> Any:
    """Euler, as most local UIs default to. "trailing" starts at the last trained timestep, so few-step runs
    (the test's 2 steps) start from noise the model knows; SD1.5's "leading" would start 2 steps at t=501."""
    from diffusers import EulerDiscreteScheduler

    return EulerDiscreteScheduler(**BETAS, steps_offset=1, timestep_spacing="trailing")


def taesd_from_latent2rgb(factors: torch.Tensor, bias: torch.Tensor) -> nn.Sequential:
    """madebyollin's TAESD decoder (preview.taesd.Decoder, 4 channels), initialised to compute latent2rgb:
    latents (B, 4, h, w) -> the fitted colors, upsampled 8x (nearest), in [0, 1].

    Why: distilling from scratch takes far longer than the CPU budget gives. Here channels 0-3 carry the
    latents' positive parts and 4-7 their negative parts through the ReLUs, every block starts as the identity
    (its last conv is zero, its skip is the identity), the upsampling convs pass channels 0-7 on, and the last
    conv mixes them with the latent2rgb factors. Training then only has to learn edges and shading.
    factors: (4, 3), bias: (3,), both for images in [-1, 1]."""
    from previewlab.preview.models.taesd import Block, Decoder

    dec = Decoder()
    with torch.no_grad():
        first, last = dec[1], dec[-1]
        assert isinstance(first, nn.Conv2d) and isinstance(last, nn.Conv2d)
        assert first.bias is not None and last.bias is not None
        first.weight[:8].zero_()
        first.bias[:8].zero_()
        for c in range(4):
            first.weight[c, c, 1, 1], first.weight[4 + c, c, 1, 1] = 1.0, -1.0
        for layer in dec:
            if isinstance(layer, Block):
                tail = layer.conv[-1]
                assert isinstance(tail, nn.Conv2d) and tail.bias is not None
                tail.weight.zero_()
                tail.bias.zero_()
            elif isinstance(layer, nn.Conv2d) and layer.bias is None:  # the conv after each upsample
                layer.weight[:8].zero_()
                for c in range(8):
                    layer.weight[c, c, 1, 1] = 1.0
        # Clamp maps x to 3 tanh(x / 3), about x for |x| < 1.5: the scaled latents' usual range.
        last.weight.zero_()
        last.weight[:, 0:4, 1, 1] = factors.T / 2   # [-1, 1] -> [0, 1]: (rgb + 1) / 2
        last.weight[:, 4:8, 1, 1] = -factors.T / 2
        last.bias.copy_((bias + 1) / 2)
    return dec


@torch.no_grad()
def fp16_effect(vae: Any, dec: nn.Module, z: torch.Tensor) -> dict[str, float]:
    """How far rounding the weights to fp16 moves decoded pixels, in mean 8-bit levels (computed in float32,
    so only the stored precision differs): the VAE and TAESD on latents z as the UNet sees them."""
    def rounded(m: Any) -> Any:
        m = copy.deepcopy(m)
        for p in m.parameters():
            p.copy_(p.half().float())
        return m

    scale = vae.config.scaling_factor
    pairs = {"vae": (lambda m: (m.decode(z / scale).sample + 1) / 2, vae), "taesd": (lambda m: m(z), dec)}
    return {name: round(float((f(m).clamp(0, 1) - f(rounded(m)).clamp(0, 1)).abs().mean() * 255), 4)
            for name, (f, m) in pairs.items()}


def save(out: Path, vae: Any, te: Any, tok: Any, unet: Any, dec: nn.Module, factors: torch.Tensor,
         bias: torch.Tensor, r2: list[float]) -> float:
    """Write the model folder; returns its megabytes. The UNet, VAE and TAESD go to disk in fp16 (cast in place:
    call this last): it halves their size, and the rounding moves decoded pixels by well under one 8-bit level
    (fp16_effect). A plain from_pretrained computes in float32, as trained."""
    from diffusers import StableDiffusionPipeline
    from diffusers.utils import logging as dlogging
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    dlogging.set_verbosity_error()  # its warning about casting with .to() is for loading, not for saving
    # The text encoder stays float32 (2 MB): transformers loads a model in the dtype it was saved in, diffusers
    # loads into float32, so an fp16 text encoder would hand a plain from_pretrained's float32 UNet fp16 inputs.
    pipe: Any = StableDiffusionPipeline(vae=vae.half(), text_encoder=te.float(), tokenizer=tok, unet=unet.half(),
                                        scheduler=sampler(), safety_checker=None, feature_extractor=None,
                                        requires_safety_checker=False)
    pipe.save_pretrained(str(out), safe_serialization=True)
    save_file({k: v.half().contiguous() for k, v in dec.state_dict().items()}, str(out / "taesd_decoder.safetensors"))
    l2r = {"space": "latents as the UNet sees them (VAE latents times scaling_factor)",
           "formula": "rgb = latent . factors + bias per pixel (latent channels as rows; R, G, B as columns), "
                      "then (rgb + 1) / 2 clamped to [0, 1]",
           "factors": [[round(v, 5) for v in row] for row in factors.tolist()],
           "bias": [round(v, 5) for v in bias.tolist()], "r2": r2}
    (out / "latent2rgb.json").write_text("{\n" + ",\n".join(f" {json.dumps(k)}: {json.dumps(v)}"
                                                              for k, v in l2r.items()) + "\n}\n")
    return round(sum(f.stat().st_size for f in out.rglob("*") if f.is_file()) / 2**20, 2)

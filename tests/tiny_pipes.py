"""Tiny versions of real diffusers pipeline classes, one per latent layout previewlab must read: random seeded
weights, built from configs on the CPU, tokenizers built offline. Their pictures are noise; their latent shapes,
packings, VAE statistics and decode paths are the real pipelines' own.

Every VAE keeps a scaling factor other than 1 and, where its family has one, a shift other than 0 (Qwen-Image, Wan:
a per-channel mean and std that are not 0 and 1), so that a preview that leaves out an unscale shows. Input
images (img2img, inpaint, control, fill, Kontext, edit) are made from a seeded torch.rand at the call's size.
Pictures are 64 px where the VAE downsamples 8x (an 8 x 8 latent; 32 px works too, a 4 x 4 one), 32 px for the
VAEs of factor 2 and 4 (flux_1ch, sd3_4ch, sana). Every call but qwenimage_edit's takes well under a second on
one thread; qwenimage_edit's takes about 5 s, nearly all of it the VAE encoding the reference image, which the
pipeline resizes to about 1024 x 1024 px whatever its size.

The video pipelines make 64 px clips of a few frames: wan 5 frames (2 latent frames, latents (B, C, T, h, w)),
cogvideox 9 (3 latent frames, held frames first: (B, T, C, h, w)), animatediff 4 (SD1.5 latents per frame,
(B, C, F, h, w)), ltx and ltx_i2v 9 (2 latent frames at 8x, packed as (B, T*h*w, C) tokens). Their
output_type="np" frames are (B, F, H, W, 3).

    tiny = build("flux_fill")
    out = tiny.pipe(**tiny.kwargs(), callback_on_step_end=cb, callback_on_step_end_tensor_inputs=["latents"])

The img2img kwargs ask strength=1.0: with num_inference_steps=2 a smaller strength runs one step only
(int(2 * strength) steps), and every call here runs two. The image is still encoded by the VAE.
"""
from __future__ import annotations

import os
import string
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch
from PIL import Image
from torch import nn

from previewlab.preview.models.offline_tokenizers import clip_tokenizer, t5_tokenizer

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


@dataclass
class Tiny:
    name: str
    pipe: Any  # on the CPU, float32, eval(), progress bar disabled
    kwargs: Callable[[], dict]  # fresh call kwargs each time (a fresh generator seeded 0), output_type="np"
    height: int
    width: int


PROMPT = "a red fox in the snow"


# ----------------------------------------------------------------------------------------------- inputs


def _image(size: int, seed: int = 1) -> Image.Image:
    """A deterministic RGB picture: seeded noise over a smooth gradient."""
    g = torch.Generator("cpu").manual_seed(seed)
    noise = torch.rand(size, size, 3, generator=g)
    ramp = torch.linspace(0, 1, size)
    base = torch.stack([ramp[None, :].expand(size, size), ramp[:, None].expand(size, size),
                        torch.full((size, size), 0.5)], dim=-1)
    pixels = (0.5 * noise + 0.5 * base).clamp(0, 1).mul(255).round().to(torch.uint8).numpy()
    return Image.fromarray(pixels)  # H x W x 3 uint8: RGB


def _mask(size: int) -> Image.Image:
    """White (repaint) in the centre half, black (keep) around it."""
    m = np.zeros((size, size), dtype=np.uint8)
    m[size // 4: 3 * size // 4, size // 4: 3 * size // 4] = 255
    return Image.fromarray(m)  # H x W uint8: L


def _generator() -> torch.Generator:
    return torch.Generator("cpu").manual_seed(0)


def _call(size: int, guidance: float | None, **extra: Any) -> Callable[[], dict]:
    def kwargs() -> dict:
        kw: dict[str, Any] = dict(prompt=PROMPT, height=size, width=size, num_inference_steps=2,
                                  generator=_generator(), output_type="np")
        if guidance is not None:
            kw["guidance_scale"] = guidance
        for key, value in extra.items():
            kw[key] = value() if callable(value) else value  # images are made afresh each call
        return kw
    return kwargs


# ----------------------------------------------------------------------------------------------- tokenizers

CHARS = list(string.ascii_lowercase + string.digits)
PUNCT = list(".,:;!?'\"()-/")


def _wordpiece(specials: list[str], words: list[str], *, pad: str, unk: str, bos: str | None = None,
               eos: str | None = None, add_bos: bool = False, padding_side: str = "right",
               pieces: tuple[str, ...] = ()) -> Any:
    """A WordPiece tokenizer (tokenizers library) in a PreTrainedTokenizerFast: whole words where the vocabulary
    has them, else letters; newlines and punctuation are tokens of their own, spaces are dropped. `pieces` are
    split out whole before that (added tokens), wherever they occur."""
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab: dict[str, int] = {}
    for t in specials + ["\n"] + PUNCT + CHARS + ["##" + c for c in CHARS] + words:
        vocab.setdefault(t, len(vocab))
    tok = Tokenizer(models.WordPiece(vocab=vocab, unk_token=unk, max_input_chars_per_word=100))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"[^\S\n]+"), behavior="removed"),
        pre_tokenizers.Split(Regex(r"\n"), behavior="isolated"),
        pre_tokenizers.Punctuation(behavior="isolated")])
    tok.add_special_tokens(specials)
    tok.add_tokens(list(pieces))
    if add_bos and bos is not None:
        tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
                                                           special_tokens=[(bos, vocab[bos])])
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=pad, unk_token=unk, bos_token=bos,
                                   eos_token=eos, padding_side=padding_side, model_max_length=4096)


# Qwen2's special tokens. Ids 0..6 here; the text encoder's config names the vision ones.
QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                 "<|image_pad|>", "<|video_pad|>", "<unk>"]
# The words of QwenImagePipeline's prompt template, whole: its first 34 tokens (prompt_template_encode_start_idx,
# which the pipeline drops) are then exactly the system part and "<|im_start|>user\n", as with Qwen2's tokenizer;
# with "'s" and ")," as single tokens (as Qwen2's BPE has them) QwenImageEditPipeline's template has 64 tokens
# before <|vision_start|>, its prompt_template_encode_start_idx.
QWEN_WORDS = ("system describe the image by detailing color shape size texture quantity text spatial "
              "relationships of objects and background user assistant key features input then explain how "
              "s instruction should alter or modify generate a new that meets requirements while maintaining "
              "consistency with original where appropriate").split()


def qwen2_tokenizer() -> Any:
    """Qwen2's special tokens, no BOS, <|endoftext|> as padding: what QwenImagePipeline's encode_prompt uses."""
    return _wordpiece(QWEN_SPECIALS, QWEN_WORDS, pad="<|endoftext|>", unk="<unk>", eos="<|im_end|>",
                      pieces=("'s", "),"))


def gemma_tokenizer() -> Any:
    """Gemma's special tokens at Gemma's ids (<pad> 0, <eos> 1, <bos> 2, <unk> 3) and a BOS before every
    sequence, as GemmaTokenizerFast does. Sana and Lumina 2 set padding_side="right" themselves."""
    return _wordpiece(["<pad>", "<eos>", "<bos>", "<unk>"], [], pad="<pad>", unk="<unk>", bos="<bos>",
                      eos="<eos>", add_bos=True)


# ----------------------------------------------------------------------------------------------- text encoders


def _clip(hidden: int = 32, projection: bool = False) -> Any:
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

    cfg = CLIPTextConfig(bos_token_id=0, eos_token_id=1, pad_token_id=1, vocab_size=100, hidden_size=hidden,
                         intermediate_size=37, num_attention_heads=4, num_hidden_layers=2,
                         max_position_embeddings=77, projection_dim=hidden, hidden_act="gelu")
    return CLIPTextModelWithProjection(cfg) if projection else CLIPTextModel(cfg)


def _t5(d_model: int = 32) -> Any:
    from transformers import T5Config, T5EncoderModel

    return T5EncoderModel(T5Config(vocab_size=100, d_model=d_model, d_kv=8, d_ff=37, num_layers=2, num_heads=4,
                                   relative_attention_num_buckets=8, pad_token_id=0, eos_token_id=1))


def _umt5(d_model: int = 32) -> Any:  # Wan's text encoder is UMT5 (per-layer relative attention biases)
    from transformers import UMT5Config, UMT5EncoderModel

    return UMT5EncoderModel(UMT5Config(vocab_size=100, d_model=d_model, d_kv=8, d_ff=37, num_layers=2, num_heads=4,
                                       relative_attention_num_buckets=8, pad_token_id=0, eos_token_id=1))


def _gemma2(hidden: int = 16) -> Any:
    from transformers import Gemma2Config, Gemma2Model

    # eager attention: Gemma 2 caps its attention logits (soft-capping), which SDPA does not do
    cfg: dict[str, Any] = dict(vocab_size=100, hidden_size=hidden, intermediate_size=32, num_hidden_layers=2,
                               num_attention_heads=2, num_key_value_heads=1, head_dim=8, max_position_embeddings=4096,
                               pad_token_id=0, eos_token_id=1, bos_token_id=2, attn_implementation="eager")
    return Gemma2Model(Gemma2Config(**cfg))


def _qwen25_vl(tok: Any, hidden: int = 32) -> Any:
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    ids = tok.convert_tokens_to_ids
    # head_dim 16: the multimodal RoPE sections (temporal, height, width) add up to head_dim / 2
    text = dict(vocab_size=len(tok), hidden_size=hidden, intermediate_size=32, num_hidden_layers=2,
                num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=4096,
                rope_scaling={"rope_type": "default", "type": "default", "mrope_section": [2, 3, 3]},
                rope_theta=1000000.0)
    vision = dict(depth=1, hidden_size=16, intermediate_size=16, num_heads=2, out_hidden_size=hidden,
                  patch_size=14, spatial_merge_size=2, temporal_patch_size=2, fullatt_block_indexes=[0])
    cfg = Qwen2_5_VLConfig(text_config=text, vision_config=vision, image_token_id=ids("<|image_pad|>"),
                           video_token_id=ids("<|video_pad|>"), vision_start_token_id=ids("<|vision_start|>"),
                           vision_end_token_id=ids("<|vision_end|>"))
    return Qwen2_5_VLForConditionalGeneration(cfg)


# ----------------------------------------------------------------------------------------------- VAEs


def _kl_vae(channels: int, widths: tuple[int, ...], scaling: float, shift: float | None, groups: int = 8,
            quant: bool = True) -> Any:
    """AutoencoderKL with len(widths) stages (vae_scale_factor 2 ** (len - 1))."""
    from diffusers import AutoencoderKL

    n = len(widths)
    return AutoencoderKL(in_channels=3, out_channels=3, latent_channels=channels, block_out_channels=widths,
                         layers_per_block=1, norm_num_groups=groups, down_block_types=("DownEncoderBlock2D",) * n,
                         up_block_types=("UpDecoderBlock2D",) * n, use_quant_conv=quant, use_post_quant_conv=quant,
                         scaling_factor=scaling, shift_factor=shift, sample_size=64)


def _sd_vae() -> Any:  # SD1.5 / SDXL: 4 channels, 4 stages (factor 8), quant convs, scaling only
    return _kl_vae(4, (16, 16, 32, 32), 0.18215, None)


def _sdxl_vae() -> Any:
    return _kl_vae(4, (16, 16, 32, 32), 0.13025, None)


def _flux_vae(channels: int = 16, widths: tuple[int, ...] = (16, 16, 32, 32), groups: int = 8) -> Any:
    return _kl_vae(channels, widths, 0.3611, 0.1159, groups=groups, quant=False)  # FLUX.1's factors


def _sd3_vae(channels: int = 16, widths: tuple[int, ...] = (16, 16, 32, 32), groups: int = 8) -> Any:
    return _kl_vae(channels, widths, 1.5305, 0.0609, groups=groups, quant=False)  # SD3's factors


# ----------------------------------------------------------------------------------------------- denoisers


def _sd_unet(in_channels: int = 4, cross: int = 32, xl: bool = False) -> Any:
    from diffusers import UNet2DConditionModel

    extra: dict[str, Any] = {}
    if xl:  # SDXL's added conditions: 6 time ids of 8 channels each plus the pooled text embedding (32)
        extra = dict(use_linear_projection=True, addition_embed_type="text_time", addition_time_embed_dim=8,
                     projection_class_embeddings_input_dim=6 * 8 + 32, transformer_layers_per_block=(1, 2))
    return UNet2DConditionModel(sample_size=8, in_channels=in_channels, out_channels=4, layers_per_block=1,
                                block_out_channels=(32, 64), down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
                                up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"), cross_attention_dim=cross,
                                attention_head_dim=(2, 4), norm_num_groups=8, **extra)


def _controlnet(cross: int = 32, xl: bool = False) -> Any:
    from diffusers import ControlNetModel

    extra: dict[str, Any] = {}
    if xl:
        extra = dict(use_linear_projection=True, addition_embed_type="text_time", addition_time_embed_dim=8,
                     projection_class_embeddings_input_dim=6 * 8 + 32, transformer_layers_per_block=(1, 2))
    # the conditioning embedding downsamples the control image 8x (three stride-2 convs), as the VAE does
    return ControlNetModel(in_channels=4, block_out_channels=(32, 64), layers_per_block=1,
                           down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"), cross_attention_dim=cross,
                           attention_head_dim=(2, 4), norm_num_groups=8,
                           conditioning_embedding_out_channels=(8, 8, 16, 16), **extra)


def _sd3_transformer(channels: int, patch: int) -> Any:
    from diffusers import SD3Transformer2DModel

    # joint_attention_dim: CLIP-L and CLIP-G (32 + 32) padded to T5's width; pooled: 32 + 32
    return SD3Transformer2DModel(sample_size=8, patch_size=patch, in_channels=channels, out_channels=channels,
                                 num_layers=1, attention_head_dim=8, num_attention_heads=2, joint_attention_dim=64,
                                 caption_projection_dim=16, pooled_projection_dim=64, pos_embed_max_size=16)


def _flux_transformer(in_channels: int, out_channels: int | None = None, guidance: bool = True) -> Any:
    from diffusers import FluxTransformer2DModel

    # RoPE axes (text/ids, height, width) add up to the head width 16
    return FluxTransformer2DModel(patch_size=1, in_channels=in_channels, out_channels=out_channels, num_layers=1,
                                  num_single_layers=1, attention_head_dim=16, num_attention_heads=2,
                                  joint_attention_dim=32, pooled_projection_dim=32, guidance_embeds=guidance,
                                  axes_dims_rope=(4, 6, 6))


# ----------------------------------------------------------------------------------------------- schedulers


def _euler() -> Any:
    from diffusers import EulerDiscreteScheduler

    return EulerDiscreteScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                                  num_train_timesteps=1000, steps_offset=1, timestep_spacing="leading")


def _flow(dynamic: bool) -> Any:
    from diffusers import FlowMatchEulerDiscreteScheduler

    if not dynamic:  # SD3
        return FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=3.0)
    return FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=3.0, use_dynamic_shifting=True,
                                           base_shift=0.5, max_shift=1.15, base_image_seq_len=256,
                                           max_image_seq_len=4096)


# ----------------------------------------------------------------------------------------------- families


def _sd15_parts(unet_in: int = 4) -> dict[str, Any]:
    return dict(vae=_sd_vae(), text_encoder=_clip(32), tokenizer=clip_tokenizer(), unet=_sd_unet(unet_in),
                scheduler=_euler(), safety_checker=None, feature_extractor=None, requires_safety_checker=False)


def _sdxl_parts() -> dict[str, Any]:
    return dict(vae=_sdxl_vae(), text_encoder=_clip(32), text_encoder_2=_clip(32, projection=True),
                tokenizer=clip_tokenizer(), tokenizer_2=clip_tokenizer(), unet=_sd_unet(cross=64, xl=True),
                scheduler=_euler())


def _sd3_parts(channels: int = 16, vae: Any = None, patch: int = 2) -> dict[str, Any]:
    return dict(transformer=_sd3_transformer(channels, patch), scheduler=_flow(False), vae=vae or _sd3_vae(channels),
                text_encoder=_clip(32, projection=True), tokenizer=clip_tokenizer(),
                text_encoder_2=_clip(32, projection=True), tokenizer_2=clip_tokenizer(),
                text_encoder_3=_t5(64), tokenizer_3=t5_tokenizer())


def _flux_parts(transformer: Any, vae: Any = None) -> dict[str, Any]:
    return dict(scheduler=_flow(True), vae=vae or _flux_vae(), text_encoder=_clip(32), tokenizer=clip_tokenizer(),
                text_encoder_2=_t5(32), tokenizer_2=t5_tokenizer(), transformer=transformer)


def sd15_img2img() -> Tiny:
    from diffusers import StableDiffusionImg2ImgPipeline

    pipe = StableDiffusionImg2ImgPipeline(**_sd15_parts())
    return _tiny("sd15_img2img", pipe, 64, 7.5, image=lambda: _image(64), strength=1.0)


def sd15_inpaint() -> Tiny:
    from diffusers import StableDiffusionInpaintPipeline

    # 9 input channels: latents 4, mask 1, masked-image latents 4
    pipe = StableDiffusionInpaintPipeline(**_sd15_parts(unet_in=9))
    return _tiny("sd15_inpaint", pipe, 64, 7.5, image=lambda: _image(64), mask_image=lambda: _mask(64))


def sd15_controlnet() -> Tiny:
    from diffusers import StableDiffusionControlNetPipeline

    pipe = StableDiffusionControlNetPipeline(controlnet=_controlnet(), **_sd15_parts())
    return _tiny("sd15_controlnet", pipe, 64, 7.5, image=lambda: _image(64, seed=2))


def sdxl_img2img() -> Tiny:
    from diffusers import StableDiffusionXLImg2ImgPipeline

    pipe = StableDiffusionXLImg2ImgPipeline(**_sdxl_parts())
    return _tiny("sdxl_img2img", pipe, 64, 5.0, image=lambda: _image(64), strength=1.0)


def sdxl_controlnet() -> Tiny:
    from diffusers import StableDiffusionXLControlNetPipeline

    pipe = StableDiffusionXLControlNetPipeline(controlnet=_controlnet(cross=64, xl=True), **_sdxl_parts())
    return _tiny("sdxl_controlnet", pipe, 64, 5.0, image=lambda: _image(64, seed=2))


def sdxl_batch() -> Tiny:
    from diffusers import StableDiffusionXLPipeline

    pipe = StableDiffusionXLPipeline(**_sdxl_parts())
    return _tiny("sdxl_batch", pipe, 64, 5.0, num_images_per_prompt=3)


def sd3_img2img() -> Tiny:
    from diffusers import StableDiffusion3Img2ImgPipeline

    pipe = StableDiffusion3Img2ImgPipeline(**_sd3_parts())
    return _tiny("sd3_img2img", pipe, 64, 5.0, image=lambda: _image(64), strength=1.0)


def sd3_4ch() -> Tiny:
    from diffusers import StableDiffusion3Pipeline

    # 4 latent channels, patch 1, a two-stage VAE (factor 2), as diffusers' own SD3 test has
    pipe = StableDiffusion3Pipeline(**_sd3_parts(4, vae=_sd3_vae(4, widths=(8, 16)), patch=1))
    return _tiny("sd3_4ch", pipe, 32, 5.0)


def flux_img2img() -> Tiny:
    from diffusers import FluxImg2ImgPipeline

    pipe = FluxImg2ImgPipeline(**_flux_parts(_flux_transformer(64)))
    return _tiny("flux_img2img", pipe, 64, 3.5, image=lambda: _image(64), strength=1.0)


def flux_fill() -> Tiny:
    from diffusers import FluxFillPipeline

    # in: packed latents 16*4, packed masked-image latents 16*4, the mask packed from 8x8 pixels (64*4); out 16*4
    pipe = FluxFillPipeline(**_flux_parts(_flux_transformer(64 + 64 + 256, out_channels=64)))
    return _tiny("flux_fill", pipe, 64, 30.0, image=lambda: _image(64), mask_image=lambda: _mask(64))


def flux_kontext() -> Tiny:
    from diffusers import FluxKontextPipeline

    pipe = FluxKontextPipeline(**_flux_parts(_flux_transformer(64)))
    # max_area and _auto_resize keep the picture (and the reference image) at 64 px, not Kontext's ~1 MP
    return _tiny("flux_kontext", pipe, 64, 2.5, image=lambda: _image(64), max_area=64 * 64, _auto_resize=False)


def flux_1ch() -> Tiny:
    from diffusers import FluxPipeline

    # one latent channel (4 once packed 2x2) and a two-stage VAE (factor 2), as in diffusers' own FLUX test
    pipe = FluxPipeline(**_flux_parts(_flux_transformer(4), vae=_flux_vae(1, widths=(8, 16), groups=4)))
    return _tiny("flux_1ch", pipe, 32, 3.5)


def chroma() -> Tiny:
    from diffusers import ChromaPipeline, ChromaTransformer2DModel

    transformer = ChromaTransformer2DModel(patch_size=1, in_channels=64, num_layers=1, num_single_layers=1,
                                           attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32,
                                           axes_dims_rope=(4, 6, 6), approximator_num_channels=8,
                                           approximator_hidden_dim=16, approximator_layers=1)
    pipe = ChromaPipeline(scheduler=_flow(True), vae=_flux_vae(), text_encoder=_t5(32), tokenizer=t5_tokenizer(),
                          transformer=transformer)
    return _tiny("chroma", pipe, 64, 4.0, negative_prompt="blurry")


def lumina2() -> Tiny:
    from diffusers import Lumina2Pipeline, Lumina2Transformer2DModel

    # head width 24 / 2 = 12 = RoPE axes 4 + 4 + 4; cap_feat_dim: Gemma 2's hidden size
    transformer = Lumina2Transformer2DModel(sample_size=8, patch_size=2, in_channels=16, hidden_size=24,
                                            num_layers=2, num_refiner_layers=1, num_attention_heads=2,
                                            num_kv_heads=1, multiple_of=16, axes_dim_rope=(4, 4, 4),
                                            axes_lens=(300, 64, 64), cap_feat_dim=16)
    # Lumina 2 uses FLUX.1's VAE; the pipeline fixes vae_scale_factor at 8, so it needs four stages
    pipe = Lumina2Pipeline(transformer=transformer, scheduler=_flow(False), vae=_flux_vae(), text_encoder=_gemma2(16),
                           tokenizer=gemma_tokenizer())
    return _tiny("lumina2", pipe, 64, 4.0, negative_prompt="blurry")


def sana() -> Tiny:
    from diffusers import AutoencoderDC, DPMSolverMultistepScheduler, SanaPipeline, SanaTransformer2DModel

    # DC-AE with three stages: vae_scale_factor 2 ** (3 - 1) = 4; linear attention in the last stage
    vae = AutoencoderDC(in_channels=3, latent_channels=8, attention_head_dim=4,
                        encoder_block_types=("ResBlock", "ResBlock", "EfficientViTBlock"),
                        decoder_block_types=("ResBlock", "ResBlock", "EfficientViTBlock"),
                        encoder_block_out_channels=(8, 16, 16), decoder_block_out_channels=(8, 16, 16),
                        encoder_layers_per_block=(1, 1, 1), decoder_layers_per_block=(1, 1, 1),
                        encoder_qkv_multiscales=((), (), (5,)), decoder_qkv_multiscales=((), (), (5,)),
                        downsample_block_type="conv", upsample_block_type="interpolate",
                        decoder_norm_types="rms_norm", decoder_act_fns="silu", scaling_factor=0.41407)
    transformer = SanaTransformer2DModel(in_channels=8, out_channels=8, num_attention_heads=2, attention_head_dim=8,
                                         num_layers=1, num_cross_attention_heads=2, cross_attention_head_dim=8,
                                         cross_attention_dim=16, caption_channels=16, sample_size=8, patch_size=1)
    # Sana's own scheduler: DPM-Solver++ on flow sigmas
    scheduler = DPMSolverMultistepScheduler(num_train_timesteps=1000, beta_schedule="linear", beta_start=0.0001,
                                            beta_end=0.02, algorithm_type="dpmsolver++", solver_order=2,
                                            prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=3.0,
                                            final_sigmas_type="zero", lower_order_final=True)
    pipe = SanaPipeline(tokenizer=gemma_tokenizer(), text_encoder=_gemma2(16), vae=vae, transformer=transformer,
                        scheduler=scheduler)
    # no resolution binning: it would resize to the nearest 1024-px aspect-ratio bin
    return _tiny("sana", pipe, 32, 4.5, negative_prompt="blurry", use_resolution_binning=False)



def prx_pixel() -> Tiny:
    from diffusers import FlowMatchEulerDiscreteScheduler, PRXPixelPipeline, PRXTransformer2DModel
    from transformers import Qwen3Config, Qwen3Model

    # pixel space, no VAE: a transformer of 3 input channels denoises the RGB picture (diffusers' own tiny test)
    transformer = PRXTransformer2DModel(patch_size=1, in_channels=3, context_in_dim=16, hidden_size=8, mlp_ratio=2.0,
                                        num_heads=2, depth=1, axes_dim=[2, 2], bottleneck_size=8,
                                        resolution_embeds=True)
    text = Qwen3Model(Qwen3Config(hidden_size=16, intermediate_size=16, num_hidden_layers=2, num_attention_heads=2,
                                  num_key_value_heads=2, vocab_size=256, max_position_embeddings=512))
    pipe = PRXPixelPipeline(transformer=transformer, scheduler=FlowMatchEulerDiscreteScheduler(), text_encoder=text,
                            tokenizer=qwen2_tokenizer(), prompt_max_tokens=16)
    # an empty prompt, as diffusers' test: its text cleaning needs ftfy for any other
    return _tiny("prx_pixel", pipe, 32, 1.0, prompt="", negative_prompt="", use_resolution_binning=False)


def _cascade_text() -> Any:
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection

    return CLIPTextModelWithProjection(CLIPTextConfig(bos_token_id=0, eos_token_id=2, projection_dim=32, hidden_size=32,
                                                      intermediate_size=37, num_attention_heads=4, num_hidden_layers=2,
                                                      pad_token_id=1, vocab_size=1000))


def _cascade_prior() -> Any:
    from diffusers import DDPMWuerstchenScheduler, StableCascadePriorPipeline, StableCascadeUNet

    # stage C: a StableCascadeUNet of 16 channels (its default) makes 16-channel latents at 1/42.67 of the image
    prior = StableCascadeUNet(conditioning_dim=128, block_out_channels=(128, 128), num_attention_heads=(2, 2),
                              down_num_layers_per_block=(1, 1), up_num_layers_per_block=(1, 1), switch_level=(False,),
                              clip_image_in_channels=768, clip_text_in_channels=32, clip_text_pooled_in_channels=32,
                              dropout=(0.1, 0.1))
    return StableCascadePriorPipeline(prior=prior, text_encoder=_cascade_text(), tokenizer=clip_tokenizer(),
                                      scheduler=DDPMWuerstchenScheduler(), feature_extractor=None, image_encoder=None)


def _cascade_decoder() -> Any:
    from diffusers import DDPMWuerstchenScheduler, StableCascadeDecoderPipeline, StableCascadeUNet
    from diffusers.pipelines.deprecated.wuerstchen.modeling_paella_vq_model import PaellaVQModel

    # stage B: a StableCascadeUNet of 4 channels; the Paella VQ-GAN decodes its latents (x its scale_factor) at 4x
    decoder = StableCascadeUNet(in_channels=4, out_channels=4, conditioning_dim=128, block_out_channels=[16, 32, 64, 128],
                                num_attention_heads=[-1, -1, 1, 2], down_num_layers_per_block=[1, 1, 1, 1],
                                up_num_layers_per_block=[1, 1, 1, 1], down_blocks_repeat_mappers=[1, 1, 1, 1],
                                up_blocks_repeat_mappers=[3, 3, 2, 2],
                                block_types_per_layer=[["SDCascadeResBlock", "SDCascadeTimestepBlock"]] * 2
                                + [["SDCascadeResBlock", "SDCascadeTimestepBlock", "SDCascadeAttnBlock"]] * 2,
                                switch_level=None, clip_text_pooled_in_channels=32, dropout=[0.1, 0.1, 0.1, 0.1])
    vqgan = PaellaVQModel(bottleneck_blocks=1, num_vq_embeddings=2)
    return StableCascadeDecoderPipeline(decoder=decoder, vqgan=vqgan, text_encoder=_cascade_text(),
                                        tokenizer=clip_tokenizer(), scheduler=DDPMWuerstchenScheduler(),
                                        latent_dim_scale=4.0)


def cascade_prior() -> Tiny:
    return _tiny("cascade_prior", _cascade_prior(), 128, 4.0)


def cascade_decoder() -> Tiny:
    # its image embeddings: a prior's 16-channel latents of a 128 px picture (3 x 3); 12 x 12 latents, 48 px
    embeds = lambda: torch.randn(1, 16, 3, 3, generator=_generator())  # noqa: E731
    pipe = _cascade_decoder()
    tiny = _tiny("cascade_decoder", pipe, 48, 0.0, image_embeddings=embeds)
    plain = tiny.kwargs

    def kwargs() -> dict:
        kw = plain()
        kw.pop("height"), kw.pop("width")  # its size follows the embeddings
        return kw
    tiny.kwargs = kwargs
    return tiny


def cascade_combined() -> Tiny:
    from diffusers import StableCascadeCombinedPipeline

    prior, decoder = _cascade_prior(), _cascade_decoder()
    pipe = StableCascadeCombinedPipeline(tokenizer=decoder.tokenizer, text_encoder=decoder.text_encoder,
                                         decoder=decoder.decoder, scheduler=decoder.scheduler, vqgan=decoder.vqgan,
                                         prior_prior=prior.prior, prior_text_encoder=prior.text_encoder,
                                         prior_tokenizer=prior.tokenizer, prior_scheduler=prior.scheduler)
    # 128 px: stage C latents of 3 x 3, stage B's of 12 x 12 (latent_dim_scale 4 here; 10.67 in the real one)
    pipe.decoder_pipe.register_to_config(latent_dim_scale=4.0)
    return _tiny("cascade_combined", pipe, 128, None, prior_guidance_scale=4.0, decoder_guidance_scale=0.0,
                 prior_num_inference_steps=2)

def _qwen_vae() -> Any:
    from diffusers import AutoencoderKLQwenImage

    # 16 channels and three spatial stages (vae_scale_factor 2 ** len(temperal_downsample) = 8), at 1/12 of the
    # real width. latents_mean / latents_std: the real model's per-channel statistics (the class defaults).
    return AutoencoderKLQwenImage(base_dim=8, z_dim=16, dim_mult=[1, 1, 2, 2], num_res_blocks=1,
                                  temperal_downsample=[False, True, True],
                                  latents_mean=[-0.7571, -0.7089, -0.9113, 0.1075, -0.1745, 0.9653, -0.1517, 1.5508,
                                                0.4134, -0.0715, 0.5517, -0.3632, -0.1922, -0.9497, 0.2503, -0.2921],
                                  latents_std=[2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743,
                                               3.2687, 2.1526, 2.8652, 1.5579, 1.6382, 1.1253, 2.8251, 1.916])


def _qwen_transformer() -> Any:
    from diffusers import QwenImageTransformer2DModel

    # in: 16 channels packed 2x2; head width 16 = RoPE axes 8 + 4 + 4; joint_attention_dim: Qwen2.5-VL's hidden size
    return QwenImageTransformer2DModel(patch_size=2, in_channels=64, out_channels=16, num_layers=2,
                                       attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32,
                                       guidance_embeds=False, axes_dims_rope=(8, 4, 4))


def qwenimage() -> Tiny:
    from diffusers import QwenImagePipeline

    tok = qwen2_tokenizer()
    pipe = QwenImagePipeline(scheduler=_flow(True), vae=_qwen_vae(), text_encoder=_qwen25_vl(tok), tokenizer=tok,
                             transformer=_qwen_transformer())
    # true CFG (a negative prompt and true_cfg_scale > 1); guidance_scale is for guidance-distilled models only
    return _tiny("qwenimage", pipe, 64, None, negative_prompt="blurry", true_cfg_scale=4.0)


def qwen2vl_processor(tok: Any) -> Any:
    """Qwen2VLProcessor with its image processor (the PIL one) and no video processor: the video processor needs
    torchvision, which is not installed, and QwenImageEditPipeline sends images only. The image processor
    resizes the prompt image to at most 112 x 112 px (64 patches of 14 px, 16 image tokens after the 2x2 merge)."""
    from transformers import Qwen2VLImageProcessorPil, Qwen2VLProcessor

    class ImageOnlyQwen2VLProcessor(Qwen2VLProcessor):
        @classmethod
        def get_attributes(cls) -> list[str]:
            return ["image_processor", "tokenizer"]

    processor = ImageOnlyQwen2VLProcessor(image_processor=Qwen2VLImageProcessorPil(min_pixels=56 * 56,
                                                                                   max_pixels=112 * 112),
                                          tokenizer=tok)
    processor.video_processor = None
    return processor


def qwenimage_edit() -> Tiny:
    from diffusers import QwenImageEditPipeline

    # The pipeline resizes the input image to about 1024 x 1024 px whatever its size (calculate_dimensions(1024 *
    # 1024, ratio)) before the VAE encodes it, so the reference image is 4096 packed tokens next to the 16 of the
    # 64 px picture that is made; its latents in the callback are the 16 only.
    tok = qwen2_tokenizer()
    pipe = QwenImageEditPipeline(scheduler=_flow(True), vae=_qwen_vae(), text_encoder=_qwen25_vl(tok), tokenizer=tok,
                                 processor=qwen2vl_processor(tok), transformer=_qwen_transformer())
    return _tiny("qwenimage_edit", pipe, 64, None, image=lambda: _image(64), negative_prompt="blurry",
                 true_cfg_scale=4.0)


# ----------------------------------------------------------------------------------------------- video


def wan() -> Tiny:
    from diffusers import AutoencoderKLWan, UniPCMultistepScheduler, WanPipeline, WanTransformer3DModel

    # Wan 2.1's VAE at 1/32 of its width: 16 channels, 8x in space (three spatial downsamples) and 4x in time (two
    # temporal ones); latents_mean / latents_std: the real model's per-channel statistics (the class defaults,
    # written out). 5 frames are 1 + 4 * 1: 2 latent frames.
    vae = AutoencoderKLWan(base_dim=3, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
                           temperal_downsample=[False, True, True],
                           latents_mean=[-0.7571, -0.7089, -0.9113, 0.1075, -0.1745, 0.9653, -0.1517, 1.5508,
                                         0.4134, -0.0715, 0.5517, -0.3632, -0.1922, -0.9497, 0.2503, -0.2921],
                           latents_std=[2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743,
                                        3.2687, 2.1526, 2.8652, 1.5579, 1.6382, 1.1253, 2.8251, 1.916])
    # patches 1 x 2 x 2; head width 12 = RoPE axes (time, height, width) 4 + 4 + 4; text_dim: UMT5's width
    transformer = WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=12,
                                        in_channels=16, out_channels=16, text_dim=32, freq_dim=256, ffn_dim=32,
                                        num_layers=2, cross_attn_norm=True, qk_norm="rms_norm_across_heads",
                                        rope_max_seq_len=32)
    # Wan 2.1's own scheduler: UniPC on flow sigmas, shifted
    scheduler = UniPCMultistepScheduler(num_train_timesteps=1000, prediction_type="flow_prediction",
                                        use_flow_sigmas=True, flow_shift=3.0, solver_order=2)
    pipe = WanPipeline(tokenizer=t5_tokenizer(), text_encoder=_umt5(32), transformer=transformer, vae=vae,
                       scheduler=scheduler)
    return _tiny("wan", pipe, 64, 5.0, negative_prompt="blurry", num_frames=5)


def cogvideox() -> Tiny:
    # the product's own tiny CogVideoX (preview/models/video_presets.py): CogVideoX-2b's VAE, narrow (16 channels,
    # 8x in space, 4x in time, scaling factor 1.15258426, no shift) and its DDIM v-prediction scheduler. 9 frames
    # are 1 + 4 * 2: 3 latent frames, which the pipeline holds frames first (B, T, C, h, w).
    from previewlab.preview.models.video_presets import tiny_cogvideox

    return _tiny("cogvideox", tiny_cogvideox(), 64, 6.0, negative_prompt="blurry", num_frames=9)


def ltx() -> Tiny:
    # the product's own tiny LTX-Video (preview/models/video_presets.py): 128 channels at 32x in space and 8x in
    # time, packed as tokens; its VAE's statistics are buffers, its decoder is timestep-conditioned and not causal.
    # 9 frames are 1 + 8: 2 latent frames.
    from previewlab.preview.models.video_presets import tiny_ltxv

    return _tiny("ltx", tiny_ltxv(), 64, 3.0, negative_prompt="blurry", num_frames=9)


def ltx_i2v() -> Tiny:
    # LTX-Video's image-to-video pipeline on the same components: the same packed latents, its first latent
    # frame the encoded image
    from diffusers import LTXImageToVideoPipeline

    from previewlab.preview.models.video_presets import tiny_ltxv

    pipe = LTXImageToVideoPipeline(**tiny_ltxv().components)
    return _tiny("ltx_i2v", pipe, 64, 3.0, negative_prompt="blurry", num_frames=9, image=lambda: _image(64))


def animatediff() -> Tiny:
    from diffusers import AnimateDiffPipeline, DDIMScheduler, MotionAdapter

    # The SD1.5 UNet and VAE with a motion adapter of the same block widths; the pipeline turns the UNet into a
    # UNetMotionModel. Latents are (B, C, F, h, w); the VAE decodes the frames one by one as pictures.
    adapter = MotionAdapter(block_out_channels=(32, 64), motion_layers_per_block=1, motion_norm_num_groups=8,
                            motion_num_attention_heads=2, motion_max_seq_length=32)
    # AnimateDiff's usual scheduler: DDIM on SD1.5's betas, linear
    scheduler = DDIMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="linear", clip_sample=False,
                              steps_offset=1, timestep_spacing="linspace")
    pipe = AnimateDiffPipeline(vae=_sd_vae(), text_encoder=_clip(32), tokenizer=clip_tokenizer(), unet=_sd_unet(),
                               motion_adapter=adapter, scheduler=scheduler, feature_extractor=None,
                               image_encoder=None)
    return _tiny("animatediff", pipe, 64, 7.5, negative_prompt="blurry", num_frames=4)


# ----------------------------------------------------------------------------------------------- registry


def _tiny(name: str, pipe: Any, size: int, guidance: float | None, **extra: Any) -> Tiny:
    for part in pipe.components.values():
        if isinstance(part, nn.Module):
            assert next(part.parameters()).dtype == torch.float32 and next(part.parameters()).device.type == "cpu"
            part.eval()  # built from configs they are in training mode
    pipe.set_progress_bar_config(disable=True)
    return Tiny(name=name, pipe=pipe, kwargs=_call(size, guidance, **extra), height=size, width=size)


def _seeded(builder: Callable[[], Tiny]) -> Callable[[], Tiny]:
    def build_seeded() -> Tiny:
        torch.manual_seed(0)  # weights are the same on every build
        return builder()
    build_seeded.__name__ = builder.__name__
    return build_seeded


BUILDERS: dict[str, Callable[[], Tiny]] = {b.__name__: _seeded(b) for b in (
    sd15_img2img, sd15_inpaint, sd15_controlnet,
    sdxl_img2img, sdxl_controlnet,
    sd3_img2img,
    flux_img2img, flux_fill, flux_kontext,
    qwenimage, qwenimage_edit,
    sana, lumina2, chroma, prx_pixel,
    cascade_prior, cascade_decoder, cascade_combined,
    flux_1ch, sd3_4ch,
    sdxl_batch,
    wan, cogvideox, animatediff, ltx, ltx_i2v,
)}


def build(name: str) -> Tiny:
    if name not in BUILDERS:
        raise KeyError(f"unknown tiny pipeline {name!r}; known are {', '.join(BUILDERS)}")
    return BUILDERS[name]()

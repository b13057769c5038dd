"""Synthetic presets of the video families (Wan 2.1, Wan 2.2 5B, HunyuanVideo, CogVideoX, Mochi, LTX-Video, and
HunyuanVideo 1.5, LTX-2 and LTX-2.3): the real diffusers 0.42.1 pipeline classes with random seeded weights and
tokenizers built offline, on the CPU.

The tiny presets keep each family's real VAE class at a small width, with its real latent channels and compression
(8x in space and 4x in time; Wan 2.2 and HunyuanVideo 1.5 16x / 4x, Mochi 8x / 6x, LTX-Video, LTX-2 and LTX-2.3
32x / 8x) and its real latent statistics (a scaling factor, or a per-channel mean and std), so a preview that leaves
out an unscale shows. They run 2 steps of a 64 px clip of a few frames in seconds on a CPU, for tests. Each
family's TAE is previewlab's TAEHV in the layout of madebyollin's published file (random weights); Mochi and
LTX-Video have none. HunyuanVideo15Pipeline has no step callback (previewlab steps on its scheduler), through which
the tests of presets.TINY_VIDEO drive every pipeline, so the three newer ones are tested in
tests/test_new_video_presets.py.

`wan21_1_3b` is Wan 2.1 T2V 1.3B's transformer and VAE at their real size, for costs a CPU or GPU can measure.
"""
from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import nn

from previewlab.preview.models.families import Family
from previewlab.preview.models.taehv import TAEHV, Layout

# Playback rate per family, frames per second: what diffusers' own examples export at (each pipeline's
# EXAMPLE_DOC_STRING, export_to_video(..., fps=)): Wan 2.1 16; HunyuanVideo 15; CogVideoX 8; LTX-Video 24 (its
# __call__'s frame_rate, 25 by default, only conditions the transformer's RoPE). Wan 2.2 TI2V 5B: 24 (its model
# card's diffusers example and Wan's own config, sample_fps). Mochi: 30 (diffusers' Mochi docs page; its
# EXAMPLE_DOC_STRING leaves export_to_video's default, 10). HunyuanVideo 1.5: 15 (its text-to-video example; the
# image-to-video one 24). LTX-2 and LTX-2.3: 24 (LTX2Pipeline's frame_rate default, which it exports at). MiniMax
# H3: 24 (MINIMAX_H3_FPS: "generates at a fixed 24 fps").
FPS: dict[Family, float] = {"wan21": 16.0, "wan22": 24.0, "hunyuanvideo": 15.0, "cogvideox": 8.0, "mochi": 30.0,
                            "ltxv": 24.0, "hunyuanvideo15": 15.0, "ltx2": 24.0, "ltx2_3": 24.0, "minimaxh3": 24.0}
DEFAULT_FPS = 24.0  # a clip of a family without a row: film's rate, the commonest among video models
# Clip length of a family whose pipeline's num_frames defaults to None with no transformer sample_frames to read:
# LTX2Pipeline then makes 121 frames for LTX-2 and LTX-2.3 (its fixed default for a checkpoint without a duration
# head; LTX-2.5's predicts a length)
NONE_FRAMES: dict[Family, int] = {"ltx2": 121, "ltx2_3": 121}

# madebyollin's published TAE per family (tests/test_taehv.py holds the same layouts): latent channels, the
# pixel-shuffle patch, the temporal stride of each decoder stage, CogVideoX's trim rule. Mochi has none.
TAE_LAYOUTS: dict[Family, Layout] = {
    "wan21": Layout(16, 1, (1, 2, 2)),               # taew2_1
    "wan22": Layout(48, 2, (1, 2, 2)),               # taew2_2: 16x in space, 2 of it the patch
    "hunyuanvideo": Layout(16, 1, (1, 2, 2)),        # taehv
    "cogvideox": Layout(16, 1, (1, 2, 2), cogvideox=True),  # taecvx
    "hunyuanvideo15": Layout(32, 2, (1, 2, 2)),      # taehv1_5
    "ltx2": Layout(128, 4, (2, 2, 2)),               # taeltx_2: every stage grows in time, 8x
    "ltx2_3": Layout(128, 4, (2, 2, 2)),             # taeltx2_3
    "minimaxh3": Layout(24, 2, (1, 2, 2), h3=True),  # taeh3: decoded in chunks of five latent frames
}

# Wan 2.1's VAE statistics (AutoencoderKLWan's defaults in diffusers 0.42.1, Wan2.1_VAE.pth's own)
WAN21_MEAN = [-0.7571, -0.7089, -0.9113, 0.1075, -0.1745, 0.9653, -0.1517, 1.5508, 0.4134, -0.0715, 0.5517,
              -0.3632, -0.1922, -0.9497, 0.2503, -0.2921]
WAN21_STD = [2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743, 3.2687, 2.1526, 2.8652, 1.5579,
             1.6382, 1.1253, 2.8251, 1.9160]
# Wan 2.2's 48-channel VAE statistics (Wan-AI/Wan2.2-TI2V-5B-Diffusers vae/config.json; Wan's vae2_2.py)
WAN22_MEAN = [-0.2289, -0.0052, -0.1323, -0.2339, -0.2799, 0.0174, 0.1838, 0.1557, -0.1382, 0.0542, 0.2813, 0.0891,
              0.1570, -0.0098, 0.0375, -0.1825, -0.2246, -0.1207, -0.0698, 0.5109, 0.2665, -0.2108, -0.2158, 0.2502,
              -0.2055, -0.0322, 0.1109, 0.1567, -0.0729, 0.0899, -0.2799, -0.1230, -0.0313, -0.1649, 0.0117, 0.0723,
              -0.2839, -0.2083, -0.0520, 0.3748, 0.0152, 0.1957, 0.1433, -0.2944, 0.3573, -0.0548, -0.1681, -0.0667]
WAN22_STD = [0.4765, 1.0364, 0.4514, 1.1677, 0.5313, 0.4990, 0.4818, 0.5013, 0.8158, 1.0344, 0.5894, 1.0901,
             0.6885, 0.6165, 0.8454, 0.4978, 0.5759, 0.3523, 0.7135, 0.6804, 0.5833, 1.4146, 0.8986, 0.5659,
             0.7069, 0.5338, 0.4889, 0.4917, 0.4069, 0.4999, 0.6866, 0.4093, 0.5709, 0.6065, 0.6415, 0.4944,
             0.5726, 1.2042, 0.5458, 1.6887, 0.3971, 1.0600, 0.3943, 0.5537, 0.5444, 0.4089, 0.7468, 0.7744]


def tae(family: Family) -> nn.Module:
    """The family's TAEHV decoder in madebyollin's published layout, random weights (seed them first), eval mode.
    Raises KeyError for a family without a published TAE (Mochi)."""
    return TAEHV(TAE_LAYOUTS[family]).eval().requires_grad_(False)


def clip_defaults(pipe: Any, family: Family | None) -> tuple[int, float]:
    """(default clip length in frames, playback rate in frames per second) of a video pipeline: the num_frames
    default of its own __call__ (CogVideoX's None means its transformer's sample_frames, as the pipeline reads
    it; LTX-2's None the family's NONE_FRAMES; 1 where __call__ takes no num_frames), and the family's rate (FPS,
    else DEFAULT_FPS)."""
    param = inspect.signature(type(pipe).__call__).parameters.get("num_frames")
    frames: Any = param.default if param is not None else 1
    if frames is None or frames is inspect.Parameter.empty:
        config = getattr(getattr(pipe, "transformer", None), "config", None)
        frames = getattr(config, "sample_frames", None) or (NONE_FRAMES.get(family, 1) if family is not None else 1)
    return int(frames), FPS.get(family, DEFAULT_FPS) if family is not None else DEFAULT_FPS


# ----------------------------------------------------------------------------------------------- parts


def _umt5(d_model: int, layers: int = 2, heads: int = 4, d_kv: int = 8, d_ff: int = 37, vocab: int = 1000) -> Any:
    """Wan's text encoder class: UMT5 (a relative attention bias in every layer), gated GELU as UMT5-XXL."""
    from transformers import UMT5Config, UMT5EncoderModel

    return UMT5EncoderModel(UMT5Config(vocab_size=vocab, d_model=d_model, d_kv=d_kv, d_ff=d_ff, num_layers=layers,
                                       num_heads=heads, relative_attention_num_buckets=32,
                                       feed_forward_proj="gated-gelu", pad_token_id=0, eos_token_id=1))


def _t5(d_model: int) -> Any:
    from transformers import T5Config, T5EncoderModel

    return T5EncoderModel(T5Config(vocab_size=1000, d_model=d_model, d_kv=8, d_ff=37, num_layers=2, num_heads=4,
                                   relative_attention_num_buckets=8, pad_token_id=0, eos_token_id=1))


def _wan_scheduler(shift: float) -> Any:
    from diffusers import UniPCMultistepScheduler

    # Wan's own scheduler_config.json: UniPC on flow sigmas, shifted (Wan 2.1 1.3B: 3.0; Wan 2.2 TI2V 5B: 5.0).
    # On the CPU even inside parameter_counts' meta device: UniPC copies its sigmas to the CPU as it is built.
    with torch.device("cpu"):
        return UniPCMultistepScheduler(num_train_timesteps=1000, prediction_type="flow_prediction",
                                       use_flow_sigmas=True, flow_shift=shift, solver_order=2)


def llama_tokenizer() -> Any:
    """A character-level WordLevel tokenizer with Llama 3's special tokens, standing in for HunyuanVideo's
    LlamaTokenizerFast: the pipeline pads and truncates to a fixed length, so ids do not change compute."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from previewlab.preview.models.offline_tokenizers import CHARS

    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
                "<unk>"]
    tok = Tokenizer(models.WordLevel(vocab={t: i for i, t in enumerate(specials + CHARS)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace(),
                                                 pre_tokenizers.Split(pattern="", behavior="isolated")])
    tok.add_special_tokens(specials)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>",
                                   unk_token="<unk>", pad_token="<|end_of_text|>", model_max_length=512)


# ----------------------------------------------------------------------------------------------- tiny presets


def tiny_wan21() -> Any:
    from diffusers import AutoencoderKLWan, WanPipeline, WanTransformer3DModel

    from previewlab.preview.models.offline_tokenizers import t5_tokenizer

    # Wan 2.1's VAE at 1/12 of its width: three spatial and two temporal downsamples (8x, 4x), its statistics
    vae = AutoencoderKLWan(base_dim=8, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
                           temperal_downsample=[False, True, True], latents_mean=WAN21_MEAN, latents_std=WAN21_STD)
    # patches 1 x 2 x 2; head width 12 = RoPE axes (time, height, width) 4 + 4 + 4; text_dim: UMT5's width
    transformer = WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=12,
                                        in_channels=16, out_channels=16, text_dim=32, freq_dim=256, ffn_dim=32,
                                        num_layers=2, cross_attn_norm=True, qk_norm="rms_norm_across_heads",
                                        rope_max_seq_len=32)
    return WanPipeline(tokenizer=t5_tokenizer(), text_encoder=_umt5(32), transformer=transformer, vae=vae,
                       scheduler=_wan_scheduler(3.0))


def tiny_wan22() -> Any:
    from diffusers import AutoencoderKLWan, WanPipeline, WanTransformer3DModel

    from previewlab.preview.models.offline_tokenizers import t5_tokenizer

    # Wan 2.2 TI2V 5B's VAE shape, narrow: 48 channels, residual blocks, pixels patchified 2x2 (12 input channels)
    # before three spatial downsamples: 16x in space, 4x in time; the decoder wider than the encoder, as its 256
    # is over 160; its 48 statistics
    vae = AutoencoderKLWan(base_dim=8, decoder_base_dim=16, z_dim=48, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
                           temperal_downsample=[False, True, True], is_residual=True, patch_size=2, in_channels=12,
                           out_channels=12, scale_factor_spatial=16, scale_factor_temporal=4,
                           latents_mean=WAN22_MEAN, latents_std=WAN22_STD)
    transformer = WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=12,
                                        in_channels=48, out_channels=48, text_dim=32, freq_dim=256, ffn_dim=32,
                                        num_layers=2, cross_attn_norm=True, qk_norm="rms_norm_across_heads",
                                        rope_max_seq_len=32)
    # expand_timesteps: Wan 2.2 TI2V 5B's model_index.json (a timestep per latent token)
    return WanPipeline(tokenizer=t5_tokenizer(), text_encoder=_umt5(32), transformer=transformer, vae=vae,
                       scheduler=_wan_scheduler(5.0), expand_timesteps=True)


def tiny_hunyuanvideo() -> Any:
    from diffusers import (AutoencoderKLHunyuanVideo, FlowMatchEulerDiscreteScheduler, HunyuanVideoPipeline,
                           HunyuanVideoTransformer3DModel)
    from transformers import CLIPTextConfig, CLIPTextModel, LlamaConfig, LlamaModel

    from previewlab.preview.models.offline_tokenizers import clip_tokenizer

    # HunyuanVideo's causal 3-D VAE, narrow: four stages (8x in space), 4x in time, its scaling factor 0.476986
    vae = AutoencoderKLHunyuanVideo(latent_channels=16, block_out_channels=(8, 8, 16, 16), layers_per_block=1,
                                    norm_num_groups=4, scaling_factor=0.476986, spatial_compression_ratio=8,
                                    temporal_compression_ratio=4)
    # head width 16 = RoPE axes (time, height, width) 4 + 6 + 6; text_embed_dim: the Llama's width; pooled: CLIP's
    transformer = HunyuanVideoTransformer3DModel(in_channels=16, out_channels=16, num_attention_heads=2,
                                                 attention_head_dim=16, num_layers=1, num_single_layers=1,
                                                 num_refiner_layers=1, patch_size=2, patch_size_t=1,
                                                 text_embed_dim=16, pooled_projection_dim=32,
                                                 rope_axes_dim=(4, 6, 6))
    # the pipeline pads the prompt to 256 + 95 template tokens and takes the third hidden state from the end
    llama = LlamaModel(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=1, head_dim=8,
                                   max_position_embeddings=512))
    clip = CLIPTextModel(CLIPTextConfig(bos_token_id=0, eos_token_id=1, pad_token_id=1, vocab_size=1000,
                                        hidden_size=32, intermediate_size=37, num_attention_heads=4,
                                        num_hidden_layers=2, max_position_embeddings=77, hidden_act="gelu"))
    # HunyuanVideo's scheduler_config.json: flow matching, shift 7
    return HunyuanVideoPipeline(text_encoder=llama, tokenizer=llama_tokenizer(), transformer=transformer, vae=vae,
                                scheduler=FlowMatchEulerDiscreteScheduler(shift=7.0), text_encoder_2=clip,
                                tokenizer_2=clip_tokenizer())


def tiny_cogvideox() -> Any:
    from diffusers import (AutoencoderKLCogVideoX, CogVideoXDDIMScheduler, CogVideoXPipeline,
                           CogVideoXTransformer3DModel)

    from previewlab.preview.models.offline_tokenizers import t5_tokenizer

    # CogVideoX-2b's VAE, narrow: 16 channels, four stages (8x in space), 4x in time, its scaling factor
    vae = AutoencoderKLCogVideoX(in_channels=3, out_channels=3, down_block_types=("CogVideoXDownBlock3D",) * 4,
                                 up_block_types=("CogVideoXUpBlock3D",) * 4, block_out_channels=(8, 8, 8, 8),
                                 latent_channels=16, layers_per_block=1, norm_num_groups=2,
                                 temporal_compression_ratio=4, scaling_factor=1.15258426)
    # inner width 4 x 8 = 32; 3-D sin-cos position embeddings sized for 8 x 8 latents of 9 frames (64 px);
    # text_embed_dim: T5's width
    transformer = CogVideoXTransformer3DModel(num_attention_heads=4, attention_head_dim=8, in_channels=16,
                                              out_channels=16, time_embed_dim=16, text_embed_dim=32, num_layers=1,
                                              sample_width=8, sample_height=8, sample_frames=9, patch_size=2,
                                              temporal_compression_ratio=4, max_text_seq_length=226)
    # CogVideoX-2b's own scheduler: DDIM, v-prediction, zero terminal SNR, trailing timesteps
    scheduler = CogVideoXDDIMScheduler(num_train_timesteps=1000, beta_start=0.00085, beta_end=0.012,
                                       beta_schedule="scaled_linear", clip_sample=False, set_alpha_to_one=True,
                                       prediction_type="v_prediction", rescale_betas_zero_snr=True,
                                       snr_shift_scale=3.0, timestep_spacing="trailing")
    return CogVideoXPipeline(tokenizer=t5_tokenizer(), text_encoder=_t5(32), vae=vae, transformer=transformer,
                             scheduler=scheduler)


def tiny_mochi() -> Any:
    from diffusers import AutoencoderKLMochi, FlowMatchEulerDiscreteScheduler, MochiPipeline, MochiTransformer3DModel

    from previewlab.preview.models.offline_tokenizers import t5_tokenizer

    # Mochi's VAE, narrow (its GroupNorms have 32 groups, so 32 channels is the least): 12 channels, 8x in space
    # and 6x in time (temporal expansions 1, 2, 3), its per-channel mean and std (the class defaults, Mochi's own)
    vae = AutoencoderKLMochi(encoder_block_out_channels=(32, 32, 32, 32), decoder_block_out_channels=(32, 32, 32, 32),
                             latent_channels=12, layers_per_block=(1, 1, 1, 1, 1),
                             add_attention_block=(False, False, False, False, False))
    transformer = MochiTransformer3DModel(patch_size=2, num_attention_heads=2, attention_head_dim=16, num_layers=1,
                                          pooled_projection_dim=16, in_channels=12, text_embed_dim=32,
                                          time_embed_dim=4, max_sequence_length=256)
    # genmo/mochi-1-preview's scheduler_config.json; the pipeline hands it its own sigmas
    return MochiPipeline(scheduler=FlowMatchEulerDiscreteScheduler(shift=1.0, invert_sigmas=True), vae=vae,
                         text_encoder=_t5(32), tokenizer=t5_tokenizer(), transformer=transformer)


def tiny_ltxv() -> Any:
    from diffusers import (AutoencoderKLLTXVideo, FlowMatchEulerDiscreteScheduler, LTXPipeline,
                           LTXVideoTransformer3DModel)

    from previewlab.preview.models.offline_tokenizers import t5_tokenizer

    # LTX-Video's VAE, narrow: 128 channels; pixels patchified 4x4, then three spatio-temporal stages: 32x in space,
    # 8x in time, as LTX-Video 0.9's (widths 128 to 512 there). Its decoder is not causal in time, as 0.9's is
    # not, and timestep-conditioned, as 0.9.1's is (0.9's takes no timestep): a decode without the pipeline's
    # `temb` raises.
    vae: Any = AutoencoderKLLTXVideo(latent_channels=128, block_out_channels=(8, 8, 8, 8),
                                     decoder_block_out_channels=(8, 8, 8, 8), layers_per_block=(1, 1, 1, 1, 1),
                                     decoder_layers_per_block=(1, 1, 1, 1, 1),
                                     spatio_temporal_scaling=(True, True, True, False),
                                     decoder_spatio_temporal_scaling=(True, True, True, False), patch_size=4,
                                     patch_size_t=1, encoder_causal=True, decoder_causal=False,
                                     timestep_conditioning=True, scaling_factor=1.0)
    # Its statistics are buffers (per_channel_statistics in Lightricks' checkpoints), zeros and ones when built
    # from a config: give them a trained VAE's spread, so a preview that left them out would show
    vae.latents_mean.normal_(0.0, 0.5)
    vae.latents_std.uniform_(0.5, 2.0)
    # patches 1 x 1 x 1 (LTX-Video 0.9): 128 features per token; inner width 4 x 8 = 32; caption_channels: T5's width
    transformer = LTXVideoTransformer3DModel(in_channels=128, out_channels=128, patch_size=1, patch_size_t=1,
                                             num_attention_heads=4, attention_head_dim=8, cross_attention_dim=32,
                                             num_layers=1, caption_channels=32)
    # LTX-Video's scheduler_config.json: flow matching, the shift following the token count, a terminal shift
    scheduler = FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=1.0, use_dynamic_shifting=True,
                                                base_shift=0.95, max_shift=2.05, base_image_seq_len=1024,
                                                max_image_seq_len=4096, shift_terminal=0.1)
    return LTXPipeline(scheduler=scheduler, vae=vae, text_encoder=_t5(32), tokenizer=t5_tokenizer(),
                       transformer=transformer)


# ----------------------------------------------------------------------------------------------- HunyuanVideo 1.5


def qwen25_vl_text(tok: Any, hidden: int = 16) -> Any:
    """HunyuanVideo 1.5's text encoder class, Qwen2.5-VL's text model, as diffusers' test makes it (two layers: the
    pipeline takes the third hidden state from the end). head_dim 8: the multimodal RoPE sections (temporal,
    height, width) add up to head_dim / 2."""
    from transformers import Qwen2_5_VLTextConfig, Qwen2_5_VLTextModel

    cfg: dict[str, Any] = dict(vocab_size=len(tok), hidden_size=hidden, intermediate_size=16, num_hidden_layers=2,
                               num_attention_heads=2, num_key_value_heads=2, rope_theta=1000000.0,
                               rope_scaling={"mrope_section": [1, 1, 2], "rope_type": "default", "type": "default"})
    return Qwen2_5_VLTextModel(Qwen2_5_VLTextConfig(**cfg))


def byt5(d_model: int = 32) -> Any:
    """HunyuanVideo 1.5's glyph encoder: a T5 encoder on ByT5's vocabulary (3 specials, 256 bytes, 125 extra ids).
    It encodes quoted text only; a prompt without any gets zeros."""
    from transformers import T5Config, T5EncoderModel

    return T5EncoderModel(T5Config(vocab_size=384, d_model=d_model, d_kv=8, d_ff=37, num_layers=2, num_heads=4,
                                   relative_attention_num_buckets=8, pad_token_id=0, eos_token_id=1))


def tiny_hunyuanvideo15() -> Any:
    from diffusers import (AutoencoderKLHunyuanVideo15, FlowMatchEulerDiscreteScheduler, HunyuanVideo15Pipeline,
                           HunyuanVideo15Transformer3DModel)
    from diffusers.guiders import ClassifierFreeGuidance
    from transformers import ByT5Tokenizer

    from previewlab.preview.models.offline_tokenizers import qwen_tokenizer

    # HunyuanVideo 1.5's VAE at 1/16 of its width (128, 256, 512, 1024, 1024 there), one layer a block: 32 channels,
    # 16x in space, 4x in time, its scaling factor 1.03682 (the class defaults, the released VAE's)
    vae = AutoencoderKLHunyuanVideo15(latent_channels=32, block_out_channels=(8, 16, 32, 64, 64), layers_per_block=1,
                                      spatial_compression_ratio=16, temporal_compression_ratio=4,
                                      scaling_factor=1.03682)
    # diffusers' test transformer at the real channels: in 65 = 32 latent + 32 image-condition latents + 1 mask
    # (zeros for text to video), out 32; head width 8 = RoPE axes 2 + 2 + 4; text widths: the Qwen's and ByT5's
    transformer = HunyuanVideo15Transformer3DModel(in_channels=65, out_channels=32, num_attention_heads=2,
                                                   attention_head_dim=8, num_layers=1, num_refiner_layers=1,
                                                   mlp_ratio=2.0, patch_size=1, patch_size_t=1, text_embed_dim=16,
                                                   text_embed_2_dim=32, image_embed_dim=12, rope_axes_dim=(2, 2, 4),
                                                   target_size=16, task_type="t2v")
    tok = qwen_tokenizer()
    # its guidance is a guider component, not a call argument: CFG 6 (the released text-to-video's)
    return HunyuanVideo15Pipeline(text_encoder=qwen25_vl_text(tok), tokenizer=tok, transformer=transformer, vae=vae,
                                  scheduler=FlowMatchEulerDiscreteScheduler(shift=7.0), text_encoder_2=byt5(32),
                                  tokenizer_2=ByT5Tokenizer(), guider=ClassifierFreeGuidance(guidance_scale=6.0))


# ----------------------------------------------------------------------------------------------- LTX-2, LTX-2.3


def gemma3(tok: Any, hidden: int = 16, layers: int = 2) -> Any:
    """LTX-2's text encoder class, Gemma3ForConditionalGeneration, tiny; the tokenizer must hold Gemma 3's image
    tokens, which its config names."""
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration

    ids = tok.convert_tokens_to_ids
    text = dict(vocab_size=len(tok), hidden_size=hidden, intermediate_size=32, num_hidden_layers=layers,
                num_attention_heads=2, num_key_value_heads=1, head_dim=8, query_pre_attn_scalar=8,
                max_position_embeddings=4096, sliding_window=64)
    vision = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=28,
                  patch_size=14)
    cfg = Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=4,
                       boi_token_index=ids("<start_of_image>"), eoi_token_index=ids("<end_of_image>"),
                       image_token_index=ids("<image_soft_token>"))
    return Gemma3ForConditionalGeneration(cfg)


def ltx2_parts(channels: int, tok: Any, ltx2_3: bool = False) -> dict[str, Any]:
    """LTX-2's text, audio and denoising parts, as diffusers' tests make them (tests/pipelines/ltx2/test_ltx2.py)
    with a Gemma 3 built here: video latents of `channels` channels, audio latents of 4 (2 channels x a mel axis
    the audio VAE compresses 4x), a mel audio VAE and a vocoder (16 kHz, stereo). ltx2_3: LTX-2.3's transformer
    and connectors (diffusers' scripts/convert_ltx2_to_diffusers.py, version 2.3): gated attention, cross-attention
    modulated by the prompt (cross_attn_mod, audio_cross_attn_mod), perturbed attention for STG, the prompt
    projected per modality by the connectors straight to the transformer's widths (no caption projection)."""
    from diffusers import AutoencoderKLLTX2Audio, LTX2VideoTransformer3DModel
    from diffusers.pipelines.ltx2 import LTX2TextConnectors
    from diffusers.pipelines.ltx2.vocoder import LTX2Vocoder

    text_encoder = gemma3(tok, hidden=32)  # LTX-2.0's connectors keep its width: 4 heads x 8
    width, layers = text_encoder.config.text_config.hidden_size, text_encoder.config.text_config.num_hidden_layers
    v23: dict[str, Any] = dict(gated_attn=True, cross_attn_mod=True, audio_gated_attn=True, audio_cross_attn_mod=True,
                               perturbed_attn=True, use_prompt_embeddings=False) if ltx2_3 else {}
    transformer = LTX2VideoTransformer3DModel(in_channels=channels, out_channels=channels, patch_size=1,
                                              patch_size_t=1, num_attention_heads=2, attention_head_dim=8,
                                              cross_attention_dim=16, audio_in_channels=4, audio_out_channels=4,
                                              audio_num_attention_heads=2, audio_attention_head_dim=4,
                                              audio_cross_attention_dim=8, num_layers=2,
                                              qk_norm="rms_norm_across_heads", caption_channels=width,
                                              rope_double_precision=False, rope_type="split", **v23)
    # LTX-2.3's connectors end at the transformer's widths, video 2 x 8 and audio 2 x 4 (4096 and 2048 there)
    heads = dict(video_connector_num_attention_heads=2, video_connector_attention_head_dim=8,
                 audio_connector_num_attention_heads=2, audio_connector_attention_head_dim=4, video_gated_attn=True,
                 audio_gated_attn=True, per_modality_projections=True, video_hidden_dim=16, audio_hidden_dim=8,
                 proj_bias=True) if ltx2_3 else dict(
        video_connector_num_attention_heads=4, video_connector_attention_head_dim=8,
        audio_connector_num_attention_heads=4, audio_connector_attention_head_dim=8)
    connectors = LTX2TextConnectors(caption_channels=width, text_proj_in_factor=layers + 1,
                                    video_connector_num_layers=1, video_connector_num_learnable_registers=None,
                                    audio_connector_num_layers=1, audio_connector_num_learnable_registers=None,
                                    connector_rope_base_seq_len=32, rope_theta=10000.0, rope_double_precision=False,
                                    causal_temporal_positioning=False, rope_type="split", **heads)
    audio_vae = AutoencoderKLLTX2Audio(base_channels=4, output_channels=2, ch_mult=(1,), num_res_blocks=1,
                                       attn_resolutions=None, in_channels=2, resolution=32, latent_channels=2,
                                       norm_type="pixel", causality_axis="height", dropout=0.0,
                                       mid_block_add_attention=False, sample_rate=16000, mel_hop_length=160,
                                       is_causal=True, mel_bins=8)
    vocoder = LTX2Vocoder(in_channels=2 * 8, hidden_channels=32, out_channels=2, upsample_kernel_sizes=[4, 4],
                          upsample_factors=[2, 2], resnet_kernel_sizes=[3], resnet_dilations=[[1, 3, 5]],
                          leaky_relu_negative_slope=0.1, output_sampling_rate=16000)
    return dict(text_encoder=text_encoder, tokenizer=tok, connectors=connectors, transformer=transformer,
                audio_vae=audio_vae, vocoder=vocoder)


def _ltx2_vae(ltx2_3: bool) -> Any:
    """LTX-2's (or LTX-2.3's) video VAE at 1/32 of its width, one layer a block: 128 channels; pixels patchified
    4x4, then four stages (spatial, temporal, spatio-temporal twice): 32x in space, 8x in time; a decoder that is
    not causal in time and takes no timestep. The layouts are diffusers' scripts/convert_ltx2_to_diffusers.py's:
    LTX-2.0 widths 256 to 2048 and three spatio-temporal upsamplers with residuals, LTX-2.3 widths 256 to 1024 and
    four upsamplers (spatio-temporal twice, temporal, spatial) without."""
    from diffusers import AutoencoderKLLTX2Video

    down = dict(latent_channels=128, down_block_types=("LTX2VideoDownBlock3D",) * 4, patch_size=4, patch_size_t=1,
                spatio_temporal_scaling=(True,) * 4,
                downsample_type=("spatial", "temporal", "spatiotemporal", "spatiotemporal"), timestep_conditioning=False,
                encoder_causal=True, decoder_causal=False, spatial_compression_ratio=32, temporal_compression_ratio=8)
    if ltx2_3:
        vae: Any = AutoencoderKLLTX2Video(block_out_channels=(8, 16, 32, 32), decoder_block_out_channels=(8, 16, 16, 32),
                                          layers_per_block=(1,) * 5, decoder_layers_per_block=(1,) * 5,
                                          decoder_spatio_temporal_scaling=(True,) * 4,
                                          decoder_inject_noise=(False,) * 5,
                                          upsample_type=("spatiotemporal", "spatiotemporal", "temporal", "spatial"),
                                          upsample_residual=(False,) * 4, upsample_factor=(2, 2, 1, 2),
                                          decoder_spatial_padding_mode="zeros", **down)
    else:
        vae = AutoencoderKLLTX2Video(block_out_channels=(8, 16, 32, 64), decoder_block_out_channels=(8, 16, 32),
                                     layers_per_block=(1,) * 5, decoder_layers_per_block=(1,) * 4,
                                     decoder_spatio_temporal_scaling=(True,) * 3, decoder_inject_noise=(False,) * 4,
                                     upsample_type=("spatiotemporal",) * 3, upsample_residual=(True,) * 3,
                                     upsample_factor=(2, 2, 2), **down)
    # Its statistics are buffers (per_channel_statistics in Lightricks' checkpoints), zeros and ones when built
    # from a config: give them a trained VAE's spread, so a preview that left them out would show
    vae.latents_mean.normal_(0.0, 0.5)
    vae.latents_std.uniform_(0.5, 2.0)
    return vae


def _ltx2(ltx2_3: bool) -> Any:
    from diffusers import FlowMatchEulerDiscreteScheduler, LTX2Pipeline

    from previewlab.preview.models.offline_tokenizers import gemma3_tokenizer

    vae = _ltx2_vae(ltx2_3)
    # flow matching with the shift following the token count (the pipeline hands the scheduler its mu), at
    # LTX-Video's settings; the pipeline deep-copies it for the audio latents
    scheduler = FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=1.0, use_dynamic_shifting=True,
                                                base_shift=0.95, max_shift=2.05, base_image_seq_len=1024,
                                                max_image_seq_len=4096, shift_terminal=0.1)
    return LTX2Pipeline(scheduler=scheduler, vae=vae, **ltx2_parts(128, gemma3_tokenizer(), ltx2_3))


def tiny_ltx2() -> Any:
    return _ltx2(ltx2_3=False)


def tiny_ltx2_3() -> Any:
    return _ltx2(ltx2_3=True)


# ----------------------------------------------------------------------------------------------- real size


def wan21_1_3b() -> Any:
    """Wan 2.1 T2V 1.3B (Wan-AI/Wan2.1-T2V-1.3B-Diffusers configs: transformer 30 layers, 12 heads of 128, FFN 8960,
    RMS qk-norm across heads, normed cross-attention; the Wan 2.1 VAE, AutoencoderKLWan's defaults; UniPC with
    flow shift 3) without UMT5-XXL: its 5.7 B parameters (23 GB in float32) would not fit 24 GiB of RAM beside
    the rest. In its place a UMT5 encoder of one layer of UMT5-XXL's shape (width 4096 = the transformer's
    text_dim, 64 heads of 64, gated-GELU FFN 10240) with a 1000-token vocabulary: the transformer sees text
    embeddings of the real width and length (512 tokens), the encoder costs 1/24 of the real one's layers."""
    from diffusers import AutoencoderKLWan, WanPipeline, WanTransformer3DModel

    from previewlab.preview.models.offline_tokenizers import t5_tokenizer

    transformer = WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=12, attention_head_dim=128,
                                        in_channels=16, out_channels=16, text_dim=4096, freq_dim=256, ffn_dim=8960,
                                        num_layers=30, cross_attn_norm=True, qk_norm="rms_norm_across_heads",
                                        eps=1e-6, rope_max_seq_len=1024)
    vae = AutoencoderKLWan(base_dim=96, z_dim=16, dim_mult=[1, 2, 4, 4], num_res_blocks=2,
                           temperal_downsample=[False, True, True], latents_mean=WAN21_MEAN, latents_std=WAN21_STD)
    text_encoder = _umt5(4096, layers=1, heads=64, d_kv=64, d_ff=10240)
    return WanPipeline(tokenizer=t5_tokenizer(), text_encoder=text_encoder, transformer=transformer, vae=vae,
                       scheduler=_wan_scheduler(3.0))

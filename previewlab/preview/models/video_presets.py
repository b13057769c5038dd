"""The video families' clip defaults (playback rate, clip length), and the synthetic presets of the six families
whose pipelines take a step callback (presets.TINY_VIDEO: Wan 2.1, Wan 2.2 5B, HunyuanVideo, CogVideoX, Mochi,
LTX-Video): the real diffusers 0.42.1 pipeline classes with random seeded weights and tokenizers built offline, on
the CPU. HunyuanVideo 1.5, LTX-2 and LTX-2.3 are new_video_presets.py's; the text encoders are text_encoders.py's.

The tiny presets keep each family's real VAE class at a small width, with its real latent channels and compression
(8x in space and 4x in time; Wan 2.2 16x / 4x, Mochi 8x / 6x, LTX-Video 32x / 8x) and its real latent statistics
(a scaling factor, or a per-channel mean and std), so a preview that leaves out an unscale shows. They run 2 steps
of a 64 px clip of a few frames in seconds on a CPU, for tests. Each family's TAE is previewlab's TAEHV in the
layout of madebyollin's published file (taehv_files.TAE_LAYOUTS, random weights); Mochi and LTX-Video have none.

`wan21_1_3b` is Wan 2.1 T2V 1.3B's transformer and VAE at their real size, for costs a CPU or GPU can measure.
"""
from __future__ import annotations

import inspect
from typing import Any

import torch

from previewlab.preview.models.families import Family
from previewlab.preview.models.offline_tokenizers import clip_tokenizer, llama_tokenizer, t5_tokenizer
from previewlab.preview.models.text_encoders import t5, umt5

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


def wan_scheduler(shift: float) -> Any:
    from diffusers import UniPCMultistepScheduler

    # Wan's own scheduler_config.json: UniPC on flow sigmas, shifted (Wan 2.1 1.3B: 3.0; Wan 2.2 TI2V 5B: 5.0).
    # On the CPU even inside parameter_counts' meta device: UniPC copies its sigmas to the CPU as it is built.
    with torch.device("cpu"):
        return UniPCMultistepScheduler(num_train_timesteps=1000, prediction_type="flow_prediction",
                                       use_flow_sigmas=True, flow_shift=shift, solver_order=2)


def ltx_scheduler() -> Any:
    """LTX-Video's scheduler_config.json, which the LTX-2 presets keep: flow matching, the shift following the
    token count (the pipeline hands the scheduler its mu), a terminal shift."""
    from diffusers import FlowMatchEulerDiscreteScheduler

    return FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=1.0, use_dynamic_shifting=True,
                                           base_shift=0.95, max_shift=2.05, base_image_seq_len=1024,
                                           max_image_seq_len=4096, shift_terminal=0.1)


# ----------------------------------------------------------------------------------------------- tiny presets


def tiny_wan21() -> Any:
    from diffusers import AutoencoderKLWan, WanPipeline, WanTransformer3DModel

    # Wan 2.1's VAE at 1/12 of its width: three spatial and two temporal downsamples (8x, 4x), its statistics
    vae = AutoencoderKLWan(base_dim=8, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
                           temperal_downsample=[False, True, True], latents_mean=WAN21_MEAN, latents_std=WAN21_STD)
    # patches 1 x 2 x 2; head width 12 = RoPE axes (time, height, width) 4 + 4 + 4; text_dim: UMT5's width
    transformer = WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=12,
                                        in_channels=16, out_channels=16, text_dim=32, freq_dim=256, ffn_dim=32,
                                        num_layers=2, cross_attn_norm=True, qk_norm="rms_norm_across_heads",
                                        rope_max_seq_len=32)
    return WanPipeline(tokenizer=t5_tokenizer(), text_encoder=umt5(32), transformer=transformer, vae=vae,
                       scheduler=wan_scheduler(3.0))


def tiny_wan22() -> Any:
    from diffusers import AutoencoderKLWan, WanPipeline, WanTransformer3DModel

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
    return WanPipeline(tokenizer=t5_tokenizer(), text_encoder=umt5(32), transformer=transformer, vae=vae,
                       scheduler=wan_scheduler(5.0), expand_timesteps=True)


def tiny_hunyuanvideo() -> Any:
    from diffusers import (AutoencoderKLHunyuanVideo, FlowMatchEulerDiscreteScheduler, HunyuanVideoPipeline,
                           HunyuanVideoTransformer3DModel)
    from transformers import CLIPTextConfig, CLIPTextModel, LlamaConfig, LlamaModel

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
    return CogVideoXPipeline(tokenizer=t5_tokenizer(), text_encoder=t5(32), vae=vae, transformer=transformer,
                             scheduler=scheduler)


def tiny_mochi() -> Any:
    from diffusers import AutoencoderKLMochi, FlowMatchEulerDiscreteScheduler, MochiPipeline, MochiTransformer3DModel

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
                         text_encoder=t5(32), tokenizer=t5_tokenizer(), transformer=transformer)


def tiny_ltxv() -> Any:
    from diffusers import AutoencoderKLLTXVideo, LTXPipeline, LTXVideoTransformer3DModel

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
    return LTXPipeline(scheduler=ltx_scheduler(), vae=vae, text_encoder=t5(32), tokenizer=t5_tokenizer(),
                       transformer=transformer)


# ----------------------------------------------------------------------------------------------- real size


def wan21_1_3b() -> Any:
    """Wan 2.1 T2V 1.3B (Wan-AI/Wan2.1-T2V-1.3B-Diffusers configs: transformer 30 layers, 12 heads of 128, FFN 8960,
    RMS qk-norm across heads, normed cross-attention; the Wan 2.1 VAE, AutoencoderKLWan's defaults; UniPC with
    flow shift 3) without UMT5-XXL: its 5.7 B parameters (23 GB in float32) would not fit 24 GiB of RAM beside
    the rest. In its place a UMT5 encoder of one layer of UMT5-XXL's shape (width 4096 = the transformer's
    text_dim, 64 heads of 64, gated-GELU FFN 10240) with a 1000-token vocabulary: the transformer sees text
    embeddings of the real width and length (512 tokens), the encoder costs 1/24 of the real one's layers."""
    from diffusers import AutoencoderKLWan, WanPipeline, WanTransformer3DModel

    transformer = WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=12, attention_head_dim=128,
                                        in_channels=16, out_channels=16, text_dim=4096, freq_dim=256, ffn_dim=8960,
                                        num_layers=30, cross_attn_norm=True, qk_norm="rms_norm_across_heads",
                                        eps=1e-6, rope_max_seq_len=1024)
    vae = AutoencoderKLWan(base_dim=96, z_dim=16, dim_mult=[1, 2, 4, 4], num_res_blocks=2,
                           temperal_downsample=[False, True, True], latents_mean=WAN21_MEAN, latents_std=WAN21_STD)
    text_encoder = umt5(4096, layers=1, heads=64, d_kv=64, d_ff=10240)
    return WanPipeline(tokenizer=t5_tokenizer(), text_encoder=text_encoder, transformer=transformer, vae=vae,
                       scheduler=wan_scheduler(3.0))

"""The synthetic presets of the newer video families, HunyuanVideo 1.5, LTX-2 and LTX-2.3: the real diffusers 0.42.1
pipeline classes with random seeded weights and tokenizers built offline, on the CPU, at their real latent channels
and compression (HunyuanVideo 1.5 16x / 4x, LTX-2 and LTX-2.3 32x / 8x) and statistics. HunyuanVideo15Pipeline has
no step callback (previewlab steps on its scheduler), through which the tests of presets.TINY_VIDEO drive every
pipeline, so these are tested in tests/test_new_video_presets.py. The older families' presets are video_presets.py's.
"""
from __future__ import annotations

from typing import Any

from previewlab.preview.models.text_encoders import byt5, gemma3, qwen25_vl_text
from previewlab.preview.models.video_presets import ltx_scheduler


# ----------------------------------------------------------------------------------------------- HunyuanVideo 1.5


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
    from diffusers import LTX2Pipeline

    from previewlab.preview.models.offline_tokenizers import gemma3_tokenizer

    vae = _ltx2_vae(ltx2_3)
    # LTX-Video's scheduler settings; the pipeline deep-copies it for the audio latents
    return LTX2Pipeline(scheduler=ltx_scheduler(), vae=vae, **ltx2_parts(128, gemma3_tokenizer(), ltx2_3))


def tiny_ltx2() -> Any:
    return _ltx2(ltx2_3=False)


def tiny_ltx2_3() -> Any:
    return _ltx2(ltx2_3=True)

"""Six pipelines built exactly as diffusers' own fast tests build them: the bodies of their test classes'
`get_dummy_components` and `get_dummy_inputs` (device "cpu"), copied from diffusers' tests for 0.42.1
(git mirror of huggingface/diffusers, 58eb52c; Apache License 2.0, Copyright The HuggingFace Team, Bria AI):

- bria_fibo: tests/pipelines/bria_fibo/test_pipeline_bria_fibo.py, BriaFiboPipelineFastTests (BriaFiboPipeline)
- bria_fibo_edit: tests/pipelines/bria_fibo_edit/test_pipeline_bria_fibo_edit.py, BriaFiboPipelineFastTests
  (BriaFiboEditPipeline)
- ltx_condition: tests/pipelines/ltx/test_ltx_condition.py, LTXConditionPipelineFastTests (use_conditions=False)
- allegro: tests/pipelines/allegro/test_allegro.py, AllegroPipelineFastTests (num_layers=1)
- anyflow_far: tests/pipelines/anyflow/test_anyflow_far.py, AnyFlowFARPipelineFastTests
- cascade_prior: tests/pipelines/stable_cascade/test_stable_cascade_prior.py, StableCascadePriorPipelineFastTests
  (its properties dummy_prior, dummy_text_encoder and dummy_tokenizer inlined)

One change, so that they build offline: where a test loads a tokenizer or a config from the hub
(hf-internal-testing/tiny-random-t5, tiny-random-clip), the offline stand-in that the survey serves for it is
used (previewlab.preview.models.offline_tokenizers' t5_tokenizer and clip_tokenizer; bench/survey/hub_encoders'
T5_TINY, tiny-random-t5's config). Token ids do not change what is measured here. Everything else, seeds
included, is the test's own.
"""
from __future__ import annotations

from typing import Any

import torch
from PIL import Image

from previewlab.bench.survey.hub_encoders import T5_TINY
from previewlab.preview.models.offline_tokenizers import clip_tokenizer, t5_tokenizer


def _generator(seed: int) -> torch.Generator:
    return torch.Generator(device="cpu").manual_seed(seed)


def _tiny_t5_config() -> Any:  # AutoConfig.from_pretrained("hf-internal-testing/tiny-random-t5"), offline
    from transformers import T5Config

    return T5Config(**T5_TINY)


def _bria_fibo_transformer() -> Any:
    from diffusers.models.transformers.transformer_bria_fibo import BriaFiboTransformer2DModel

    return BriaFiboTransformer2DModel(patch_size=1, in_channels=16, num_layers=1, num_single_layers=1,
                                      attention_head_dim=8, num_attention_heads=2, joint_attention_dim=64,
                                      text_encoder_dim=32, pooled_projection_dim=None, axes_dims_rope=[0, 4, 4])


def bria_fibo_components() -> dict[str, Any]:
    from diffusers import AutoencoderKLWan, FlowMatchEulerDiscreteScheduler
    from transformers.models.smollm3.modeling_smollm3 import SmolLM3Config, SmolLM3ForCausalLM

    torch.manual_seed(0)
    transformer = _bria_fibo_transformer()
    torch.manual_seed(0)
    vae = AutoencoderKLWan(base_dim=160, decoder_base_dim=256, num_res_blocks=2, out_channels=12, patch_size=2,
                           scale_factor_spatial=16, scale_factor_temporal=4,
                           temperal_downsample=[False, True, True], z_dim=16)
    scheduler = FlowMatchEulerDiscreteScheduler()
    torch.manual_seed(0)
    text_encoder = SmolLM3ForCausalLM(SmolLM3Config(hidden_size=32))
    tokenizer = t5_tokenizer()  # AutoTokenizer.from_pretrained("hf-internal-testing/tiny-random-t5")
    return {"scheduler": scheduler, "text_encoder": text_encoder, "tokenizer": tokenizer,
            "transformer": transformer, "vae": vae}


def bria_fibo_inputs(seed: int = 0) -> dict[str, Any]:
    return {"prompt": "{'text': 'A painting of a squirrel eating a burger'}", "negative_prompt": "bad, ugly",
            "generator": _generator(seed), "num_inference_steps": 2, "guidance_scale": 5.0, "height": 32,
            "width": 32, "output_type": "np"}


def bria_fibo_edit_components() -> dict[str, Any]:
    from diffusers import AutoencoderKLWan, FlowMatchEulerDiscreteScheduler
    from transformers.models.smollm3.modeling_smollm3 import SmolLM3Config, SmolLM3ForCausalLM

    torch.manual_seed(0)
    transformer = _bria_fibo_transformer()
    vae = AutoencoderKLWan(base_dim=80, decoder_base_dim=128, dim_mult=[1, 2, 4, 4], dropout=0.0, in_channels=12,
                           latents_mean=[0.0] * 16, latents_std=[1.0] * 16, is_residual=True, num_res_blocks=2,
                           out_channels=12, patch_size=2, scale_factor_spatial=16, scale_factor_temporal=4,
                           temperal_downsample=[False, True, True], z_dim=16)
    scheduler = FlowMatchEulerDiscreteScheduler()
    text_encoder = SmolLM3ForCausalLM(SmolLM3Config(hidden_size=32))
    tokenizer = t5_tokenizer()  # AutoTokenizer.from_pretrained("hf-internal-testing/tiny-random-t5")
    return {"scheduler": scheduler, "text_encoder": text_encoder, "tokenizer": tokenizer,
            "transformer": transformer, "vae": vae}


def bria_fibo_edit_inputs(seed: int = 0) -> dict[str, Any]:
    inputs = {"prompt": '{"text": "A painting of a squirrel eating a burger","edit_instruction": "A painting of a '
                        'squirrel eating a burger"}',
              "negative_prompt": "bad, ugly", "generator": _generator(seed), "num_inference_steps": 2,
              "guidance_scale": 5.0, "height": 192, "width": 336, "output_type": "np"}
    inputs["image"] = Image.new("RGB", (336, 192), (255, 255, 255))
    return inputs


def ltx_condition_components() -> dict[str, Any]:
    from diffusers import AutoencoderKLLTXVideo, FlowMatchEulerDiscreteScheduler, LTXVideoTransformer3DModel
    from transformers import T5EncoderModel

    torch.manual_seed(0)
    transformer = LTXVideoTransformer3DModel(in_channels=8, out_channels=8, patch_size=1, patch_size_t=1,
                                             num_attention_heads=4, attention_head_dim=8, cross_attention_dim=32,
                                             num_layers=1, caption_channels=32)
    torch.manual_seed(0)
    vae = AutoencoderKLLTXVideo(in_channels=3, out_channels=3, latent_channels=8, block_out_channels=(8, 8, 8, 8),
                                decoder_block_out_channels=(8, 8, 8, 8), layers_per_block=(1, 1, 1, 1, 1),
                                decoder_layers_per_block=(1, 1, 1, 1, 1),
                                spatio_temporal_scaling=(True, True, False, False),
                                decoder_spatio_temporal_scaling=(True, True, False, False),
                                decoder_inject_noise=(False, False, False, False, False),
                                upsample_residual=(False, False, False, False), upsample_factor=(1, 1, 1, 1),
                                timestep_conditioning=False, patch_size=1, patch_size_t=1, encoder_causal=True,
                                decoder_causal=False)
    vae.use_framewise_encoding = False
    vae.use_framewise_decoding = False
    torch.manual_seed(0)
    scheduler = FlowMatchEulerDiscreteScheduler()
    config = _tiny_t5_config()
    # `eval()` because a directly constructed model stays in training mode (the test's own comment)
    text_encoder = T5EncoderModel(config).eval()
    tokenizer = t5_tokenizer()  # AutoTokenizer.from_pretrained("hf-internal-testing/tiny-random-t5")
    return {"transformer": transformer, "vae": vae, "scheduler": scheduler, "text_encoder": text_encoder,
            "tokenizer": tokenizer}


def ltx_condition_inputs(seed: int = 0) -> dict[str, Any]:
    generator = _generator(seed)
    image = torch.randn((1, 3, 32, 32), generator=generator, device="cpu")
    return {"conditions": None, "image": image, "prompt": "dance monkey", "negative_prompt": "",
            "generator": generator, "num_inference_steps": 2, "guidance_scale": 3.0, "height": 32, "width": 32,
            "num_frames": 9, "max_sequence_length": 16, "output_type": "pt"}


def allegro_components(num_layers: int = 1) -> dict[str, Any]:
    from diffusers import AllegroTransformer3DModel, AutoencoderKLAllegro, DDIMScheduler
    from transformers import T5Config, T5EncoderModel

    torch.manual_seed(0)
    transformer = AllegroTransformer3DModel(num_attention_heads=2, attention_head_dim=12, in_channels=4,
                                            out_channels=4, num_layers=num_layers, cross_attention_dim=24,
                                            sample_width=8, sample_height=8, sample_frames=8, caption_channels=24)
    torch.manual_seed(0)
    vae = AutoencoderKLAllegro(in_channels=3, out_channels=3, down_block_types=("AllegroDownBlock3D",) * 4,
                               up_block_types=("AllegroUpBlock3D",) * 4, block_out_channels=(8, 8, 8, 8),
                               latent_channels=4, layers_per_block=1, norm_num_groups=2,
                               temporal_compression_ratio=4)
    # TODO(aryan): Only for now, since VAE decoding without tiling is not yet implemented here
    vae.enable_tiling()
    torch.manual_seed(0)
    scheduler = DDIMScheduler()
    text_encoder_config = T5Config(d_ff=37, d_kv=8, d_model=24, num_decoder_layers=2, num_heads=4, num_layers=2,
                                   relative_attention_num_buckets=8, vocab_size=1103)
    text_encoder = T5EncoderModel(text_encoder_config)
    tokenizer = t5_tokenizer()  # AutoTokenizer.from_pretrained("hf-internal-testing/tiny-random-t5")
    return {"transformer": transformer, "vae": vae, "scheduler": scheduler, "text_encoder": text_encoder,
            "tokenizer": tokenizer}


def allegro_inputs(seed: int = 0) -> dict[str, Any]:
    return {"prompt": "dance monkey", "negative_prompt": "", "generator": _generator(seed),
            "num_inference_steps": 2, "guidance_scale": 6.0, "height": 16, "width": 16, "num_frames": 8,
            "max_sequence_length": 16, "output_type": "pt"}


def anyflow_far_components() -> dict[str, Any]:
    from diffusers import AnyFlowFARTransformer3DModel, AutoencoderKLWan, FlowMapEulerDiscreteScheduler
    from transformers import T5EncoderModel

    torch.manual_seed(0)
    vae = AutoencoderKLWan(base_dim=3, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
                           temperal_downsample=[False, True, True])
    torch.manual_seed(0)
    scheduler = FlowMapEulerDiscreteScheduler(num_train_timesteps=1000, shift=5.0)
    config = _tiny_t5_config()
    text_encoder = T5EncoderModel(config)
    tokenizer = t5_tokenizer()  # AutoTokenizer.from_pretrained("hf-internal-testing/tiny-random-t5")
    torch.manual_seed(0)
    transformer = AnyFlowFARTransformer3DModel(patch_size=(1, 2, 2), compressed_patch_size=(1, 4, 4),
                                               full_chunk_limit=3, num_attention_heads=2, attention_head_dim=12,
                                               in_channels=16, out_channels=16, text_dim=32, freq_dim=256,
                                               ffn_dim=32, num_layers=2, cross_attn_norm=True, rope_max_seq_len=32,
                                               gate_value=0.25, deltatime_type="r", chunk_partition=(1, 1, 1))
    return {"transformer": transformer, "vae": vae, "scheduler": scheduler, "text_encoder": text_encoder,
            "tokenizer": tokenizer}


def anyflow_far_inputs(seed: int = 0) -> dict[str, Any]:
    # num_frames=9 -> 3 latent frames (VAE temporal stride 4); chunk_partition=(1, 1, 1) (the test's comment)
    return {"prompt": "dance monkey", "negative_prompt": "negative", "generator": _generator(seed),
            "num_inference_steps": 2, "guidance_scale": 6.0, "height": 16, "width": 16, "num_frames": 9,
            "max_sequence_length": 16, "output_type": "pt"}


def cascade_prior_components() -> dict[str, Any]:
    from diffusers import DDPMWuerstchenScheduler
    from diffusers.models import StableCascadeUNet
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection

    hidden = 32  # text_embedder_hidden_size
    torch.manual_seed(0)
    prior = StableCascadeUNet(conditioning_dim=128, block_out_channels=(128, 128), num_attention_heads=(2, 2),
                              down_num_layers_per_block=(1, 1), up_num_layers_per_block=(1, 1),
                              switch_level=(False,), clip_image_in_channels=768, clip_text_in_channels=hidden,
                              clip_text_pooled_in_channels=hidden, dropout=(0.1, 0.1)).eval()
    torch.manual_seed(0)
    config = CLIPTextConfig(bos_token_id=0, eos_token_id=2, hidden_size=hidden, projection_dim=hidden,
                            intermediate_size=37, layer_norm_eps=1e-05, num_attention_heads=4, num_hidden_layers=5,
                            pad_token_id=1, vocab_size=1000)
    text_encoder = CLIPTextModelWithProjection(config).eval()
    tokenizer = clip_tokenizer()  # CLIPTokenizer.from_pretrained("hf-internal-testing/tiny-random-clip")
    return {"prior": prior, "text_encoder": text_encoder, "tokenizer": tokenizer,
            "scheduler": DDPMWuerstchenScheduler(), "feature_extractor": None, "image_encoder": None}


def cascade_prior_inputs(seed: int = 0) -> dict[str, Any]:
    return {"prompt": "horse", "generator": _generator(seed), "guidance_scale": 4.0, "num_inference_steps": 2,
            "output_type": "np"}

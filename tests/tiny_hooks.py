"""Tiny versions of real diffusers pipeline classes that previewlab must hook without `callback_on_step_end`: classic
pipelines whose `__call__` has none (or, LTX-2, whose audio latents the callback does not hand over), and Modular
Diffusers pipelines, which have no callback at all. Same conventions as tests/tiny_pipes.py, whose helpers they reuse:
random seeded weights built from configs on the CPU, tokenizers built offline, `Tiny(name, pipe, kwargs, height,
width)` with the pipe in float32, eval(), progress bars off, and kwargs() fresh on each call (a generator seeded 0,
num_inference_steps=2). Pictures are noise; classes, latent layouts, schedulers and decode paths are the real ones.

    tiny = build("pndm_adapter")
    out = tiny.pipe(**tiny.kwargs())

Classic pipelines (output_type "np", except "pt" for ltx2_audio):
- pixart_sigma: PixArtSigmaPipeline, diffusers' test transformer (learned sigma), T5, tiny_pipes' SDXL VAE, DDIM.
- if: IFPipeline (DeepFloyd IF stage I), pixel space, no VAE: the UNet denoises the 32 px picture itself. DDPM with
  thresholding and learned variance, whose step takes `generator`: the pipeline passes it only if
  inspect.signature(scheduler.step) names it, so a step wrapper must keep the signature (functools.wraps).
- ltx2_audio: LTX2Pipeline (it has the callback, but its _callback_tensor_inputs are latents and prompt embeddings,
  not audio_latents): 5 frames at 32 px, packed video latents (B, T*h*w, C) and audio
  latents (B, frames, C) stepped by a deep copy of `scheduler` made inside __call__ (a closure stored on the
  instance would be copied along and step the original's state; bind with types.MethodType). Returns frames and
  audio (stereo, 16 kHz vocoder).
- hunyuan15: HunyuanVideo15Pipeline: Qwen2.5-VL text model + ByT5, CFG through a guider (6.0); a 4-channel VAE,
  4x in space, 2x in time: 9 frames at 32 px are 5 x 8 x 8 latents. Its text window is 1000 tokens (the slowest).
- pndm_adapter: StableDiffusionAdapterPipeline with a full T2IAdapter and SD1.5's PNDMScheduler (skip_prk_steps):
  num_inference_steps=2 gives scheduler.timesteps [501, 1, 1] (PLMS repeats a timestep to start its multistep
  history), so the loop runs 3 times: the UNet and scheduler.step are called 3 times, at t = 501, 1 and 1.
- stable_unclip: StableUnCLIPPipeline: the prior's DDPM scheduler (`prior_scheduler`) steps (1, 32) image embeddings
  twice (prior_num_inference_steps=2), then `scheduler` (DDIM, v-prediction) steps the latents twice;
  `image_noising_scheduler` only adds noise. The DDIM step takes eta and generator (the signature trap again).

Modular pipelines: called as `pipe(**kwargs)` where kwargs carry `output` (what to return) and the blocks' inputs:
prompt, negative_prompt, height, width, num_inference_steps, generator, output_type, plus num_frames (clips) and
frame_rate and max_sequence_length (LTX, Helios). A modular pipeline only warns about an input its blocks do not
have, and ignores it: kwargs() asserts every name is an input of pipe._blocks. Guidance scales are guider
components, not call kwargs.
- flux3_modular: Flux3ModularPipeline from Flux3AutoBlocks with `prompt_upsampler` popped before init_pipeline()
  (a Qwen3.5 model that rewrites the prompt; popping it encodes the prompt as given, as its docstring says), then
  update_components(text_encoder=Qwen3VLForConditionalGeneration (32 layers: the step stacks hidden states
  4, 8, ..., 32), tokenizer=a Qwen3VLProcessor, vae=AutoencoderKLFlux2, transformer=Flux3Transformer2DModel,
  scheduler=FlowMatchEulerDiscreteScheduler(shift=6.93)); init_pipeline() makes the guider (CFG 3.5) and the image
  processor. output="images". Latents at the step are tokens (B, h/16 * w/16, 128).
- wan22_modular: Wan22ModularPipeline() (its default blocks, Wan22Blocks; Wan22Blocks().init_pipeline() would make a
  plain WanModularPipeline, the "wan" mapping without a config), Wan 2.2 A14B style: `transformer` for t >=
  boundary_ratio x 1000 (0.875) and `transformer_2` below, each with its own guider (guider CFG 4, guider_2 CFG 3,
  made by the blocks); tiny_pipes' Wan 2.1 VAE, UMT5 and transformer plus a second transformer. UniPC with flow shift
  5 makes the 2 steps t = 999 (transformer) and 833 (transformer_2). output="videos", 5 frames at 32 px.
- helios_modular: HeliosModularPipeline() (HeliosAutoBlocks): the clip is made in chunks of 9 latent frames (33
  frames), each with its own 2-step schedule, so 66 frames are 2 chunks and scheduler.step runs 4 times; output
  has 65 frames. output="videos".
- ltx25_modular: LTX25ModularPipeline() (LTX25AutoBlocks): LTX-2's parts with a diffusion video decoder
  (LTX2VideoDiffusionDecoderModel) in place of the VAE; audio latents stepped by a deep copy of `scheduler`, as in
  LTX-2. output=["videos", "audio"] returns a dict. 9 frames at 96 px.
- krea2_modular, krea2_turbo_modular: Krea2ModularPipeline() and Krea2TurboModularPipeline() (their default blocks;
  the turbo has no guider and no negative prompt): a Qwen3VLModel of 36 layers (the text step stacks hidden states
  2, 5, ..., 35) for a transformer of 12 text layers, tiny_pipes' Qwen2 tokenizer (the chat prefix the step drops is
  its 34 tokens) and Qwen-Image VAE. output="images", 64 px. Latents at the step are packed 2x2 tokens (B, 16, 64);
  the blocks unpack them after the loop (krea2/decoders.py, a module-level _unpack_latents taking the patch size).
- ernie_image_modular: ErnieImageModularPipeline() (ErnieImageAutoBlocks; the prompt enhancer runs only with use_pe,
  and has no component here): a Mistral3Model text encoder, the offline Mistral tokenizer, FLUX.2's VAE. output=
  "images", 64 px. Latents at the step are patchified in place, (B, 128, h/16, w/16), not tokens.

Where the denoising loop is: the LoopSequentialPipelineBlocks whose sub_blocks run once per iteration lives in the
pipeline's own tree, pipe._blocks (`denoise_loops(pipe)` lists them). Conditional blocks hold one loop per
workflow and a call runs one; for these text-to-image/video calls the loop that runs is
    flux3_modular   pipe._blocks.sub_blocks['denoise'].sub_blocks['text2image'].sub_blocks['denoise']
    wan22_modular   pipe._blocks.sub_blocks['denoise'].sub_blocks['denoise']
    helios_modular  pipe._blocks.sub_blocks['denoise'].sub_blocks['text2video'].sub_blocks['chunk_denoise']
    ltx25_modular   pipe._blocks.sub_blocks['denoise'].sub_blocks['text2video'].sub_blocks['denoise']
    krea2_modular, krea2_turbo_modular, ernie_image_modular   pipe._blocks.sub_blocks['denoise'].sub_blocks['denoise']
(flux3 also has ['image_conditioned'], helios ['video2video'] and ['image2video'], ltx25 ['in_context'],
['condition'] and ['image2video'], which these calls do not run). A block put into that loop's sub_blocks runs once
per iteration of the next call and leaves the output bit-identical; put into pipe.blocks, a deep copy, it never
runs. Helios's loop is per chunk (2 runs for 4 steps): its steps loop inside one block,
...['chunk_denoise'].sub_blocks['denoise_inner'], so only a hook on scheduler.step (or the transformer) sees each
step. ModularPipeline.set_progress_bar_config reaches only top-level blocks, none of which is a loop here; the
builders set it on every loop.

Workarounds for diffusers 0.42.1 here: the modular Wan and Helios text encoder steps call ftfy.fix_text although
ftfy is not installed (NameError: name 'ftfy' is not defined); where it is missing their modules get a stand-in that
returns the text (what ftfy does with an ASCII prompt). Helios's inner loop opens a bare tqdm bar no config reaches:
its module gets a tqdm switched off. The LTX-2.5 diffusion decoder's neighbourhood attention is torch's
flex_attention, which traces itself with dynamo the first time it meets a shape in a process (about 2 s): the
builder decodes once at the call's latent shape, so ltx25_modular takes about 4 s to build the first time.

Skipped: none.

`python -m tests.tiny_hooks [NAME ...]` builds each, calls it twice (seconds of each call on one thread; the outputs
must be bit-identical), calls it again counting pipe's schedulers' step calls (timestep, shape of the sample
stepped), and for a modular pipeline once more with a spy block in every loop of its tree. Run on 2026-12-02:

    pixart_sigma: 0.02 s / 0.02 s, out [(1, 64, 64, 3)], identical True, counted identical True; step: scheduler x2
        t=[500.0, 0.0] sample [(1, 4, 8, 8)]
    if: 0.14 s / 0.13 s, out [(1, 32, 32, 3)], identical True, counted identical True; step: scheduler x2 t=[500.0,
        0.0] sample [(1, 3, 32, 32)]
    flux3_modular: 0.06 s / 0.06 s, out [(1, 64, 64, 3)], identical True, counted identical True; step: scheduler x2
        t=[1000.0, 873.9] sample [(1, 16, 128)]; loop runs
        {"pipe._blocks.sub_blocks['denoise'].sub_blocks['text2image'].sub_blocks['denoise']": 2}, spied identical
        True
    wan22_modular: 0.10 s / 0.09 s, out [(1, 5, 32, 32, 3)], identical True, counted identical True; step: scheduler
        x2 t=[999.0, 833.0] sample [(1, 16, 2, 4, 4)]; loop runs
        {"pipe._blocks.sub_blocks['denoise'].sub_blocks['denoise']": 2}, spied identical True
    ltx2_audio: 0.11 s / 0.11 s, out [(1, 5, 3, 32, 32), (1, 2, 68)], identical True, counted identical True; step:
        scheduler x2 t=[1000.0, 500.0] sample [(1, 768, 4)]; copy of scheduler x2 t=[1000.0, 500.0] sample [(1, 5,
        4)]
    hunyuan15: 0.40 s / 0.39 s, out [(1, 9, 32, 32, 3)], identical True, counted identical True; step: scheduler x2
        t=[1000.0, 875.0] sample [(1, 4, 5, 8, 8)]
    pndm_adapter: 0.06 s / 0.05 s, out [(1, 64, 64, 3)], identical True, counted identical True; step: scheduler x3
        t=[501.0, 1.0, 1.0] sample [(1, 4, 8, 8)]
    stable_unclip: 0.03 s / 0.03 s, out [(1, 64, 64, 3)], identical True, counted identical True; step:
        prior_scheduler x2 t=[500.0, 0.0] sample [(1, 32)]; scheduler x2 t=[501.0, 1.0] sample [(1, 4, 8, 8)]
    helios_modular: 0.20 s / 0.21 s, out [(1, 65, 32, 32, 3)], identical True, counted identical True; step:
        scheduler x4 t=[999.4, 613.2, 999.4, 613.2] sample [(1, 16, 9, 4, 4)]; loop runs
        {"pipe._blocks.sub_blocks['denoise'].sub_blocks['text2video'].sub_blocks['chunk_denoise']": 2}, spied
        identical True
    ltx25_modular: 0.18 s / 0.20 s, out [(1, 9, 3, 96, 96), (1, 2, 132)], identical True, counted identical True;
        step: scheduler x2 t=[1000.0, 500.0] sample [(1, 18, 8)]; copy of scheduler x2 t=[1000.0, 500.0] sample [(1,
        9, 4)]; loop runs {"pipe._blocks.sub_blocks['denoise'].sub_blocks['text2video'].sub_blocks['denoise']": 2},
        spied identical True
    krea2_modular: 0.08 s / 0.07 s, out [(1, 64, 64, 3)], identical True, counted identical True; step: scheduler x2
        t=[1000.0, 616.5] sample [(1, 16, 64)]; loop runs {"pipe._blocks.sub_blocks['denoise'].sub_blocks['denoise']":
        2}, spied identical True
    krea2_turbo_modular: 0.05 s / 0.05 s, out [(1, 64, 64, 3)], identical True, counted identical True; step:
        scheduler x2 t=[1000.0, 759.5] sample [(1, 16, 64)]; loop runs
        {"pipe._blocks.sub_blocks['denoise'].sub_blocks['denoise']": 2}, spied identical True
    ernie_image_modular: 0.02 s / 0.02 s, out [(1, 64, 64, 3)], identical True, counted identical True; step:
        scheduler x2 t=[1000.0, 500.0] sample [(1, 128, 4, 4)]; loop runs
        {"pipe._blocks.sub_blocks['denoise'].sub_blocks['denoise']": 2}, spied identical True (2026-12-05)
"""
from __future__ import annotations

import functools
import inspect
import time
import types
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from previewlab.preview.models.offline_tokenizers import (GEMMA3_SPECIALS, QWEN_CHAT, clip_tokenizer,
                                                          mistral_tokenizer, t5_tokenizer)
from previewlab.preview.models.new_video_presets import ltx2_parts
from previewlab.preview.models.text_encoders import byt5, gemma3 as _gemma3, qwen25_vl_text
from previewlab.bench.survey.outputs import arrays
from tests import tiny_pipes
from tests.tiny_pipes import Tiny, _call, _seeded, _t5, _tiny, qwen2_tokenizer


# ----------------------------------------------------------------------------------------------- text encoders


def gemma3_tokenizer() -> Any:
    """tiny_pipes' Gemma tokenizer (BOS first, Gemma's ids for <pad> <eos> <bos> <unk>) with Gemma 3's image
    tokens added, so that the text encoder's config can name them."""
    return tiny_pipes._wordpiece(GEMMA3_SPECIALS, [], pad="<pad>", unk="<unk>", bos="<bos>", eos="<eos>",
                                 add_bos=True)


def qwen3vl_processor(tok: Any) -> Any:
    """Qwen3VLProcessor with the PIL image processor and no video processor (it needs torchvision), and Qwen's
    chat template for text messages. Flux3's text encoder step uses its apply_chat_template and its tokenizer."""
    from transformers import Qwen2VLImageProcessorPil, Qwen3VLProcessor

    class ImageOnlyQwen3VLProcessor(Qwen3VLProcessor):
        @classmethod
        def get_attributes(cls) -> list[str]:
            return ["image_processor", "tokenizer"]

    processor = ImageOnlyQwen3VLProcessor(image_processor=Qwen2VLImageProcessorPil(patch_size=16), tokenizer=tok,
                                          chat_template=QWEN_CHAT)
    processor.video_processor = None
    return processor


def _qwen3_vl(tok: Any, hidden: int = 16, layers: int = 32, base: bool = False) -> Any:
    """Qwen3VLForConditionalGeneration, tiny (FLUX.3's text encoder class); base: its Qwen3VLModel, without the
    language-model head (Krea 2's text encoder class). Same config either way."""
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration, Qwen3VLModel

    ids = tok.convert_tokens_to_ids
    # head_dim 8: the interleaved multimodal RoPE sections (temporal, height, width) add up to head_dim / 2
    text = dict(vocab_size=len(tok), hidden_size=hidden, intermediate_size=32, num_hidden_layers=layers,
                num_attention_heads=2, num_key_value_heads=1, head_dim=8, max_position_embeddings=4096,
                rope_parameters={"rope_type": "default", "rope_theta": 5000000.0, "mrope_section": [2, 1, 1],
                                 "mrope_interleaved": True})
    vision = dict(depth=1, hidden_size=16, intermediate_size=16, num_heads=2, out_hidden_size=hidden, patch_size=16,
                  spatial_merge_size=2, temporal_patch_size=2, num_position_embeddings=16, deepstack_visual_indexes=[0])
    cfg = Qwen3VLConfig(text_config=text, vision_config=vision, image_token_id=ids("<|image_pad|>"),
                        video_token_id=ids("<|video_pad|>"), vision_start_token_id=ids("<|vision_start|>"),
                        vision_end_token_id=ids("<|vision_end|>"))
    return Qwen3VLModel(cfg) if base else Qwen3VLForConditionalGeneration(cfg)


def _mistral3_model(tok: Any, hidden: int = 16, layers: int = 2) -> Any:
    """Mistral3Model (a Mistral text model with a Pixtral vision tower, no language-model head), tiny: ERNIE-Image's
    text encoder class. Its step takes the second-to-last hidden state, unpadded, one prompt at a time."""
    from transformers import Mistral3Config, Mistral3Model, MistralConfig, PixtralVisionConfig

    text = MistralConfig(vocab_size=len(tok), hidden_size=hidden, intermediate_size=32, num_hidden_layers=layers,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=8, max_position_embeddings=512)
    vision = PixtralVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                                 image_size=32, patch_size=8)
    return Mistral3Model(Mistral3Config(text_config=text, vision_config=vision, image_token_index=10,
                                        spatial_merge_size=2))


# ----------------------------------------------------------------------------------------------- classic


def pixart_sigma() -> Tiny:
    from diffusers import DDIMScheduler, PixArtSigmaPipeline, PixArtTransformer2DModel

    # diffusers' test transformer (tests/pipelines/pixart_sigma): learned sigma (out_channels 2 x 4), AdaLN-single;
    # caption_channels: T5's width. tiny_pipes' SDXL VAE (PixArt-Sigma uses SDXL's; 4 stages: 64 px, 8 x 8 latents).
    # The test's scheduler, DDIM, whose step takes eta and a generator. Prompts padded to 32 tokens (300 by default).
    transformer = PixArtTransformer2DModel(sample_size=8, num_layers=2, patch_size=2, attention_head_dim=8,
                                           num_attention_heads=3, caption_channels=32, in_channels=4,
                                           cross_attention_dim=24, out_channels=8, attention_bias=True,
                                           activation_fn="gelu-approximate", num_embeds_ada_norm=1000,
                                           norm_type="ada_norm_single", norm_elementwise_affine=False, norm_eps=1e-6)
    pipe = PixArtSigmaPipeline(tokenizer=t5_tokenizer(), text_encoder=_t5(32), vae=tiny_pipes._sdxl_vae(),
                               transformer=transformer, scheduler=DDIMScheduler())
    return _tiny("pixart_sigma", pipe, 64, 4.5, negative_prompt="blurry", clean_caption=False,
                 use_resolution_binning=False, max_sequence_length=32)


def deepfloyd_if() -> Tiny:
    from diffusers import DDPMScheduler, IFPipeline, UNet2DConditionModel
    from diffusers.models.attention_processor import AttnAddedKVProcessor

    # diffusers' test UNet and scheduler (tests/pipelines/deepfloyd_if): pixel space (3 channels in, 6 out: the
    # noise and the learned variance range), T5's width as encoder_hid_dim; DDPM with thresholding, whose step takes
    # a generator (the pipeline passes it after reading the step's signature)
    unet: Any = UNet2DConditionModel(sample_size=32, layers_per_block=1, block_out_channels=(32, 64),
                                     down_block_types=("ResnetDownsampleBlock2D", "SimpleCrossAttnDownBlock2D"),
                                     mid_block_type="UNetMidBlock2DSimpleCrossAttn",
                                     up_block_types=("SimpleCrossAttnUpBlock2D", "ResnetUpsampleBlock2D"),
                                     in_channels=3, out_channels=6, cross_attention_dim=32, encoder_hid_dim=32,
                                     attention_head_dim=8, addition_embed_type="text", addition_embed_type_num_heads=2,
                                     cross_attention_norm="group_norm", resnet_time_scale_shift="scale_shift",
                                     act_fn="gelu")
    unet.set_attn_processor(AttnAddedKVProcessor())
    scheduler = DDPMScheduler(num_train_timesteps=1000, beta_schedule="squaredcos_cap_v2", beta_start=0.0001,
                              beta_end=0.02, thresholding=True, dynamic_thresholding_ratio=0.95, sample_max_value=1.0,
                              prediction_type="epsilon", variance_type="learned_range")
    pipe = IFPipeline(tokenizer=t5_tokenizer(), text_encoder=_t5(32), unet=unet, scheduler=scheduler,
                      safety_checker=None, feature_extractor=None, watermarker=None, requires_safety_checker=False)
    return _tiny("if", pipe, 32, 7.0, negative_prompt="blurry", clean_caption=False)


def _ltx2_parts(channels: int) -> dict[str, Any]:
    """LTX-2's text, audio and denoising parts (new_video_presets.ltx2_parts) with the Gemma 3 tokenizer above."""
    return ltx2_parts(channels, gemma3_tokenizer())


def ltx2_audio() -> Tiny:
    from diffusers import AutoencoderKLLTX2Video, FlowMatchEulerDiscreteScheduler, LTX2Pipeline

    # diffusers' test video VAE: 4 channels, one stage (2x in space and time); the pipeline deep-copies `scheduler`
    # into an audio scheduler for the audio latents. guidance_scale 3 (CFG) with the pipeline's own defaults for
    # STG (spatio-temporal guidance, on the transformer's last block here: 2 blocks, not 48) and modality guidance.
    vae: Any = AutoencoderKLLTX2Video(in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(8,),
                                      decoder_block_out_channels=(8,), layers_per_block=(1,),
                                      decoder_layers_per_block=(1, 1), spatio_temporal_scaling=(True,),
                                      decoder_spatio_temporal_scaling=(True,), decoder_inject_noise=(False, False),
                                      downsample_type=("spatial",), upsample_residual=(False,), upsample_factor=(1,),
                                      timestep_conditioning=False, patch_size=1, patch_size_t=1, encoder_causal=True,
                                      decoder_causal=False)
    vae.use_framewise_encoding = False
    vae.use_framewise_decoding = False
    pipe = LTX2Pipeline(scheduler=FlowMatchEulerDiscreteScheduler(), vae=vae, **_ltx2_parts(4))
    return _tiny("ltx2_audio", pipe, 32, 3.0, negative_prompt="blurry", num_frames=5, frame_rate=25.0,
                 max_sequence_length=16, spatio_temporal_guidance_blocks=[1], output_type="pt")


def hunyuan15() -> Tiny:
    from diffusers import (AutoencoderKLHunyuanVideo15, FlowMatchEulerDiscreteScheduler, HunyuanVideo15Pipeline,
                           HunyuanVideo15Transformer3DModel)
    from diffusers.guiders import ClassifierFreeGuidance
    from transformers import ByT5Tokenizer

    # diffusers' test components (tests/pipelines/hunyuan_video1_5): in_channels 9 = 4 latent + 4 image-condition
    # latents + 1 mask channel (zeros for text-to-video); a VAE of 4 channels, 4x in space and 2x in time (the real
    # one: 32 channels, 16x and 4x). The ByT5 encoder encodes quoted text only (none here: zeros).
    transformer = HunyuanVideo15Transformer3DModel(in_channels=9, out_channels=4, num_attention_heads=2,
                                                   attention_head_dim=8, num_layers=1, num_refiner_layers=1,
                                                   mlp_ratio=2.0, patch_size=1, patch_size_t=1, text_embed_dim=16,
                                                   text_embed_2_dim=32, image_embed_dim=12, rope_axes_dim=(2, 2, 4),
                                                   target_size=16, task_type="t2v")
    vae = AutoencoderKLHunyuanVideo15(in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(16, 16),
                                      layers_per_block=1, spatial_compression_ratio=4, temporal_compression_ratio=2,
                                      downsample_match_channel=False, upsample_match_channel=False)
    tok = qwen2_tokenizer()
    tok.chat_template = QWEN_CHAT  # the pipeline encodes [system, user] messages through it
    text_encoder = qwen25_vl_text(tok)
    pipe = HunyuanVideo15Pipeline(text_encoder=text_encoder, tokenizer=tok, transformer=transformer, vae=vae,
                                  scheduler=FlowMatchEulerDiscreteScheduler(shift=7.0), text_encoder_2=byt5(32),
                                  tokenizer_2=ByT5Tokenizer(), guider=ClassifierFreeGuidance(guidance_scale=6.0))
    return _tiny("hunyuan15", pipe, 32, None, negative_prompt="blurry", num_frames=9)


def pndm_adapter() -> Tiny:
    from diffusers import PNDMScheduler, StableDiffusionAdapterPipeline, T2IAdapter, UNet2DConditionModel

    # tiny_pipes' SD1.5 parts with SD1.5's own scheduler (PNDM, PLMS only) and a full T2I-Adapter whose two levels
    # match the UNet's two down blocks (32 and 64 channels) at 1/8 and 1/16 of the control image, as the UNet's are
    # of the picture. The UNet has SD1.5's block order, cross-attention first: the adapter's features are added
    # inside a cross-attention down block before it downsamples, after a plain one (tiny_pipes' UNet starts with
    # one) has downsampled, at half the adapter's size.
    parts = tiny_pipes._sd15_parts()
    parts["unet"] = UNet2DConditionModel(sample_size=8, in_channels=4, out_channels=4, layers_per_block=1,
                                         block_out_channels=(32, 64),
                                         down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                                         up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=32,
                                         attention_head_dim=(2, 4), norm_num_groups=8)
    parts["scheduler"] = PNDMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                                       num_train_timesteps=1000, skip_prk_steps=True, steps_offset=1,
                                       set_alpha_to_one=False)
    parts.pop("requires_safety_checker")
    adapter = T2IAdapter(in_channels=3, channels=[32, 64], num_res_blocks=1, downscale_factor=8,
                         adapter_type="full_adapter")
    pipe = StableDiffusionAdapterPipeline(adapter=adapter, requires_safety_checker=False, **parts)
    return _tiny("pndm_adapter", pipe, 64, 7.5, negative_prompt="blurry", image=lambda: tiny_pipes._image(64))


def stable_unclip() -> Tiny:
    from diffusers import (DDIMScheduler, DDPMScheduler, PriorTransformer, StableUnCLIPPipeline,
                           UNet2DConditionModel)
    from diffusers.pipelines.stable_diffusion.stable_unclip_image_normalizer import StableUnCLIPImageNormalizer

    # diffusers' test components (tests/pipelines/stable_unclip): a prior transformer turns the prompt's CLIP
    # embedding into an image embedding in prior_num_inference_steps steps of its own DDPM scheduler (it predicts the
    # sample); the image embedding, noised by image_noising_scheduler (add_noise, no step), conditions the UNet
    # (class_embed_type "projection": image embedding and noise level, 2 x 32), which steps its DDIM
    # (v-prediction) scheduler on SD's 4-channel latents; tiny_pipes' 4-stage SD VAE (64 px)
    prior_scheduler = DDPMScheduler(variance_type="fixed_small_log", prediction_type="sample", num_train_timesteps=1000,
                                    clip_sample=True, clip_sample_range=5.0, beta_schedule="squaredcos_cap_v2")
    unet = UNet2DConditionModel(sample_size=8, in_channels=4, out_channels=4,
                                down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                                up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), block_out_channels=(32, 64),
                                attention_head_dim=(2, 4), class_embed_type="projection",
                                projection_class_embeddings_input_dim=2 * 32, cross_attention_dim=32,
                                layers_per_block=1, upcast_attention=True, use_linear_projection=True,
                                norm_num_groups=8)
    scheduler = DDIMScheduler(beta_schedule="scaled_linear", beta_start=0.00085, beta_end=0.012,
                              prediction_type="v_prediction", set_alpha_to_one=False, steps_offset=1)
    pipe = StableUnCLIPPipeline(prior_tokenizer=clip_tokenizer(), prior_text_encoder=tiny_pipes._clip(32, True),
                                prior=PriorTransformer(num_attention_heads=2, attention_head_dim=12, embedding_dim=32,
                                                       num_layers=1),
                                prior_scheduler=prior_scheduler,
                                image_normalizer=StableUnCLIPImageNormalizer(embedding_dim=32),
                                image_noising_scheduler=DDPMScheduler(beta_schedule="squaredcos_cap_v2"),
                                tokenizer=clip_tokenizer(), text_encoder=tiny_pipes._clip(32), unet=unet,
                                scheduler=scheduler, vae=tiny_pipes._sd_vae())
    return _tiny("stable_unclip", pipe, 64, 7.5, negative_prompt="blurry", prior_num_inference_steps=2)


# ----------------------------------------------------------------------------------------------- modular


def _modular(name: str, pipe: Any, size: int, *, output: str | list[str], **extra: Any) -> Tiny:
    """A Tiny of a ModularPipeline: its kwargs are checked against the blocks' inputs (a modular pipeline only
    warns about an unknown one, and ignores it); progress bars are switched off in every loop, however deep
    (ModularPipeline.set_progress_bar_config reaches only the top level)."""
    for part in pipe.components.values():
        if isinstance(part, nn.Module):
            assert next(part.parameters()).dtype == torch.float32 and next(part.parameters()).device.type == "cpu"
            part.eval()
    for _, loop in _loops(pipe._blocks):
        loop.set_progress_bar_config(disable=True)
    kwargs = _call(size, None, **extra)

    def modular_kwargs() -> dict:
        kw = kwargs()
        unknown = set(kw) - {p.name for p in pipe._blocks.inputs}
        assert not unknown, f"{name}: not inputs of its blocks: {unknown}"
        return dict(kw, output=output)

    return Tiny(name=name, pipe=pipe, kwargs=modular_kwargs, height=size, width=size)


def _loops(blocks: Any, path: str = "pipe._blocks") -> list[tuple[str, Any]]:
    """Every LoopSequentialPipelineBlocks in a block tree, with its attribute path."""
    from diffusers.modular_pipelines import LoopSequentialPipelineBlocks

    found = [(path, blocks)] if isinstance(blocks, LoopSequentialPipelineBlocks) else []
    if not found:
        for key, sub in getattr(blocks, "sub_blocks", {}).items():
            found += _loops(sub, f"{path}.sub_blocks[{key!r}]")
    return found


def _ftfy_stand_in(encoders: types.ModuleType) -> None:
    """diffusers 0.42.1's modular Wan and Helios text encoder steps call ftfy.fix_text unconditionally (the classic
    WanPipeline first checks is_ftfy_available) and ftfy is not installed here: without it the step fails with
    "name 'ftfy' is not defined". Where ftfy is missing, give their module a stand-in that returns the text as it
    is, as ftfy does for an ASCII prompt."""
    if not hasattr(encoders, "ftfy"):
        setattr(encoders, "ftfy", types.SimpleNamespace(fix_text=lambda text: text))


def _quiet_helios() -> None:
    """Helios's inner step loop (HeliosChunkDenoiseInner) opens a plain tqdm bar, once per chunk, that no progress
    bar config reaches: give its module a tqdm that is switched off."""
    from diffusers.modular_pipelines.helios import denoise

    if not isinstance(denoise.tqdm, functools.partial):
        denoise.tqdm = functools.partial(denoise.tqdm, disable=True)


def _flux2_vae() -> Any:
    from diffusers import AutoencoderKLFlux2

    # FLUX.2's VAE (FLUX.3 uses it): 32 channels at 1/8, four stages; the transformer sees them patchified 2 x 2
    # (128 channels at 1/16), normalized by the VAE's batch-norm statistics, given values unlike a fresh
    # BatchNorm's 0 and 1 so that a preview which leaves them out shows
    vae: Any = AutoencoderKLFlux2(latent_channels=32, block_out_channels=(16,) * 4, layers_per_block=1,
                                  norm_num_groups=8, sample_size=64)
    vae.bn.running_mean.normal_(0.0, 0.5)
    vae.bn.running_var.uniform_(0.5, 2.0)
    return vae


def flux3_modular() -> Tiny:
    from diffusers import FlowMatchEulerDiscreteScheduler, Flux3Transformer2DModel
    from diffusers.modular_pipelines import Flux3AutoBlocks

    blocks: Any = Flux3AutoBlocks()
    blocks.sub_blocks.pop("prompt_upsampler")  # a Qwen3.5 model that rewrites the prompt; encode it as given
    pipe = blocks.init_pipeline()  # Flux3ModularPipeline; it makes the guider (CFG 3.5) and the image processor
    tok = qwen2_tokenizer()
    # 32 Qwen3-VL layers: the text encoder step stacks hidden states 4, 8, ..., 32, so joint_attention_dim is 8 x 16;
    # head width 16 = RoPE axes (t, h, w, l) 4 + 4 + 4 + 4
    transformer = Flux3Transformer2DModel(in_channels=128, cond_in_channels=128, num_layers=1, num_single_layers=1,
                                          attention_head_dim=16, num_attention_heads=2, joint_attention_dim=8 * 16,
                                          timestep_channels=32, mlp_ratio=2.0, axes_dims_rope=(4, 4, 4, 4))
    pipe.update_components(text_encoder=_qwen3_vl(tok), tokenizer=qwen3vl_processor(tok), vae=_flux2_vae(),
                           transformer=transformer, scheduler=FlowMatchEulerDiscreteScheduler(shift=6.93))
    return _modular("flux3_modular", pipe, 64, output="images", negative_prompt="blurry")


def wan22_modular() -> Tiny:
    from diffusers import UniPCMultistepScheduler, WanTransformer3DModel
    from diffusers.modular_pipelines import Wan22ModularPipeline

    # Wan 2.2 A14B: two transformers of one architecture, `transformer` for the high-noise steps (t >= boundary_ratio
    # x 1000) and `transformer_2` after, each with its own guider (CFG 4.0 and 3.0, made by the blocks); Wan 2.1's
    # VAE (16 channels, 8x in space, 4x in time). The components are tiny_pipes' Wan 2.1 ones plus a second
    # transformer. Wan22ModularPipeline() takes its default blocks, Wan22Blocks; note that
    # Wan22Blocks().init_pipeline() makes a plain WanModularPipeline (the "wan" mapping without a config).
    from diffusers.modular_pipelines.wan import encoders

    _ftfy_stand_in(encoders)
    parts = tiny_pipes.wan().pipe.components
    pipe: Any = Wan22ModularPipeline()
    transformer_2 = WanTransformer3DModel.from_config(parts["transformer"].config)
    # boundary 0.875 (T2V-A14B's) with flow shift 5 (I2V-A14B's and TI2V-5B's): the 2 steps are t = 999 on
    # `transformer` and t = 833 on `transformer_2`. T2V-A14B's own shift 12 gives 999 and 923, both on `transformer`.
    scheduler = UniPCMultistepScheduler(num_train_timesteps=1000, prediction_type="flow_prediction",
                                        use_flow_sigmas=True, flow_shift=5.0, solver_order=2)
    pipe.update_components(text_encoder=parts["text_encoder"], tokenizer=parts["tokenizer"], vae=parts["vae"],
                           transformer=parts["transformer"], transformer_2=transformer_2, scheduler=scheduler,
                           boundary_ratio=0.875)
    return _modular("wan22_modular", pipe, 32, output="videos", negative_prompt="blurry", num_frames=5)


def helios_modular() -> Tiny:
    from diffusers import HeliosScheduler, HeliosTransformer3DModel
    from diffusers.modular_pipelines import HeliosModularPipeline
    from diffusers.modular_pipelines.helios import encoders

    # Helios makes a clip in chunks of num_latent_frames_per_chunk latent frames (9: 33 frames), each denoised with
    # a history of earlier latent frames (history_sizes 16, 2, 1, compressed by the transformer's memory patches).
    # diffusers' test transformer (tests/pipelines/helios); Wan 2.1's VAE and UMT5 (tiny_pipes' Wan parts).
    _ftfy_stand_in(encoders)
    _quiet_helios()
    parts = tiny_pipes.wan().pipe.components
    transformer = HeliosTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=12,
                                           in_channels=16, out_channels=16, text_dim=32, freq_dim=256, ffn_dim=32,
                                           num_layers=2, cross_attn_norm=True, qk_norm="rms_norm_across_heads",
                                           rope_dim=(4, 4, 4), has_multi_term_memory_patch=True,
                                           guidance_cross_attn=True, zero_history_timestep=True,
                                           is_amplify_history=False)
    pipe: Any = HeliosModularPipeline()  # its default blocks, HeliosAutoBlocks; the guider is CFG 5.0
    pipe.update_components(text_encoder=parts["text_encoder"], tokenizer=parts["tokenizer"], vae=parts["vae"],
                           transformer=transformer,
                           scheduler=HeliosScheduler(stage_range=[0, 1], stages=1, use_dynamic_shifting=True))
    # 66 frames: two chunks of 33
    return _modular("helios_modular", pipe, 32, output="videos", negative_prompt="blurry", num_frames=66,
                    max_sequence_length=16)


def ltx25_modular() -> Tiny:
    from diffusers import FlowMatchEulerDiscreteScheduler, LTX2VideoDiffusionDecoderModel
    from diffusers.guiders import LTX2Guidance
    from diffusers.modular_pipelines import LTX25ModularPipeline

    # LTX-2.5 decodes video with a diffusion decoder instead of the VAE; with no `vae` the pipeline takes LTX-2's
    # compression, 32x in space and 8x in time, which this decoder has: diffusers' test decoder with pixel patches of
    # 8 instead of 2 and one spatial upsampling fewer (at patch 2 and 4 its unfused flex attention over the
    # full-size patches takes 1-2 s on the CPU). 96 px and 9 frames are 2 x 3 x 3 latent tokens of 128 channels (LTX-2.5's own, so its latents read as LTX-2.3's space):
    # the neighbourhood attention needs at least 3 latents a side (64 px fails). Its latent statistics are buffers,
    # given values other than 0 and 1. The guiders are the blocks' own (CFG 3, STG 1, modality 3, rescale 0.7 for
    # video; CFG 7 for audio) with STG on the transformer's last block (2 blocks here, not 48).
    decoder: Any = LTX2VideoDiffusionDecoderModel(out_channels=3, latent_channels=128, patch_size=8, decoder_head_dim=16,
                                                  decoder_stage_channels=(64, 32, 16, 16, 16),
                                                  decoder_stage_depths=(1, 1, 1, 1, 2),
                                                  decoder_stage_kernels=((3, 3, 3),) * 4,
                                                  decoder_upsample_strides=((1, 2, 2), (2, 1, 1), (2, 1, 1), (2, 2, 2)),
                                                  decoder_upsample_channel_reductions=(2, 2, 1, 1),
                                                  decoder_stage5_kernel=(3, 3, 3), decoder_t_emb_dim=32,
                                                  spatial_compression_ratio=32, temporal_compression_ratio=8)
    decoder.latents_mean.copy_(torch.linspace(-0.1, 0.1, 128))
    decoder.latents_std.copy_(torch.linspace(0.5, 1.5, 128))
    # its attention is torch's flex_attention, which without torch.compile traces itself with dynamo the first time
    # it meets a shape in a process (about 2 s here): decode once at the call's latent shape now, not in the call
    with torch.no_grad():
        decoder.decode(torch.zeros(1, 128, 2, 3, 3))
    pipe: Any = LTX25ModularPipeline()  # its default blocks, LTX25AutoBlocks
    guider = LTX2Guidance(guidance_scale=3.0, stg_scale=1.0, modality_scale=3.0, guidance_rescale=0.7,
                          spatio_temporal_guidance_blocks=[1])
    pipe.update_components(diffusion_decoder=decoder, scheduler=FlowMatchEulerDiscreteScheduler(), guider=guider,
                           **_ltx2_parts(128))
    return _modular("ltx25_modular", pipe, 96, output=["videos", "audio"], negative_prompt="blurry", num_frames=9,
                    frame_rate=25.0, max_sequence_length=16, output_type="pt")


def _krea2(name: str, turbo: bool) -> Tiny:
    from diffusers import FlowMatchEulerDiscreteScheduler, Krea2Transformer2DModel
    from diffusers.modular_pipelines import Krea2ModularPipeline, Krea2TurboModularPipeline

    # Krea 2's text step stacks the Qwen3-VL hidden states 2, 5, ..., 35 (KREA2_TEXT_ENCODER_SELECT_LAYERS, 12 of
    # them) per token: a Qwen3VLModel of 36 layers, 16 wide, and a transformer of num_text_layers 12 and
    # text_hidden_dim 16 (diffusers' classic test has 2 encoder layers, 3 text layers and its own layer selection,
    # which the modular step does not take). tiny_pipes' Qwen2 tokenizer makes the chat template's system prefix
    # 34 tokens (the step drops the first 34) and its assistant suffix 5. Otherwise the classic test's transformer,
    # with Qwen-Image's 16-channel VAE (tiny_pipes', 8x, the real statistics) packed 2x2: in_channels 64.
    # Krea2ModularPipeline's blocks make the guider (CFG 4.5, original formulation); the turbo has none.
    tok = qwen2_tokenizer()
    transformer = Krea2Transformer2DModel(in_channels=64, num_layers=2, attention_head_dim=8, num_attention_heads=4,
                                          num_key_value_heads=2, intermediate_size=32, timestep_embed_dim=8,
                                          text_hidden_dim=16, num_text_layers=12, text_num_attention_heads=2,
                                          text_num_key_value_heads=1, text_intermediate_size=16,
                                          num_layerwise_text_blocks=1, num_refiner_text_blocks=1,
                                          axes_dims_rope=(4, 2, 2), rope_theta=1000.0)
    scheduler = FlowMatchEulerDiscreteScheduler(use_dynamic_shifting=True, base_shift=0.5, max_shift=1.15,
                                                base_image_seq_len=256, max_image_seq_len=6400)
    pipe: Any = Krea2TurboModularPipeline() if turbo else Krea2ModularPipeline()  # their default blocks
    pipe.update_components(text_encoder=_qwen3_vl(tok, layers=36, base=True), tokenizer=tok, transformer=transformer,
                           vae=tiny_pipes._qwen_vae(), scheduler=scheduler)
    extra: dict[str, Any] = {} if turbo else {"negative_prompt": "blurry"}
    return _modular(name, pipe, 64, output="images", max_sequence_length=16, **extra)


def krea2_modular() -> Tiny:
    return _krea2("krea2_modular", turbo=False)


def krea2_turbo_modular() -> Tiny:
    return _krea2("krea2_turbo_modular", turbo=True)


def ernie_image_modular() -> Tiny:
    from diffusers import ErnieImageTransformer2DModel, FlowMatchEulerDiscreteScheduler
    from diffusers.modular_pipelines import ErnieImageModularPipeline

    # ERNIE-Image: FLUX.2's VAE (32 channels at 1/8, batch-norm statistics), whose latents the pipeline patchifies
    # 2x2 into channels (ErnieImagePachifier): the transformer steps (B, 128, h/16, w/16) latents, patch_size 1.
    # A Mistral3Model text encoder (16 wide: text_in_dim) with the offline Mistral tokenizer; head width 16 = RoPE
    # axes 8 + 4 + 4. The blocks make the guider (CFG 4.0), the pachifier and the image processor; the prompt
    # enhancer (pe, a Ministral 3 causal LM) runs only when use_pe is given, and is left out.
    tok = mistral_tokenizer()
    transformer = ErnieImageTransformer2DModel(hidden_size=32, num_attention_heads=2, num_layers=1,
                                               ffn_hidden_size=32, in_channels=128, out_channels=128, patch_size=1,
                                               text_in_dim=16, rope_theta=256, rope_axes_dim=(8, 4, 4))
    pipe: Any = ErnieImageModularPipeline()  # its default blocks, ErnieImageAutoBlocks
    pipe.update_components(text_encoder=_mistral3_model(tok), tokenizer=tok, transformer=transformer,
                           vae=_flux2_vae(), scheduler=FlowMatchEulerDiscreteScheduler())
    return _modular("ernie_image_modular", pipe, 64, output="images", negative_prompt="blurry")


# ----------------------------------------------------------------------------------------------- registry

BUILDERS: dict[str, Callable[[], Tiny]] = {name: _seeded(builder) for name, builder in (
    ("pixart_sigma", pixart_sigma), ("if", deepfloyd_if), ("flux3_modular", flux3_modular),
    ("wan22_modular", wan22_modular), ("ltx2_audio", ltx2_audio), ("hunyuan15", hunyuan15),
    ("pndm_adapter", pndm_adapter), ("stable_unclip", stable_unclip), ("helios_modular", helios_modular),
    ("ltx25_modular", ltx25_modular), ("krea2_modular", krea2_modular),
    ("krea2_turbo_modular", krea2_turbo_modular), ("ernie_image_modular", ernie_image_modular),
)}
NAMES: list[str] = list(BUILDERS)


def build(name: str) -> Tiny:
    if name not in BUILDERS:
        raise KeyError(f"unknown tiny pipeline {name!r}; known are {', '.join(BUILDERS)}")
    return BUILDERS[name]()


def denoise_loops(pipe: Any) -> list[tuple[str, Any]]:
    """A modular pipeline's LoopSequentialPipelineBlocks, in its own block tree (pipe.blocks is a deep copy: a block
    put there changes nothing), with their attribute paths from the pipeline; conditional blocks hold one per
    workflow, of which a call runs one."""
    return _loops(getattr(pipe, "_blocks", None))


# ----------------------------------------------------------------------------------------------- self-check

Step = tuple[str, float, tuple[int, ...]]  # scheduler, timestep, shape of the sample it steps




def _same(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return len(a) == len(b) > 0 and all(x.shape == y.shape and np.array_equal(x, y) for x, y in zip(a, b))


def _count_steps(scheduler: Any, name: str, calls: list[Step]) -> None:
    """Record every scheduler.step call. Bound to the instance with types.MethodType, so that a deep copy (LTX-2's
    audio scheduler) is bound to the copy, and wrapped with functools.wraps of the class's step, so that its
    signature, which pipelines read to decide on passing eta and generator, stays the same."""
    step = type(scheduler).step

    @functools.wraps(step)
    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        sample = kwargs["sample"] if "sample" in kwargs else args[2]
        timestep = kwargs["timestep"] if "timestep" in kwargs else args[1]
        calls.append((name if self is scheduler else f"copy of {name}", float(timestep), tuple(sample.shape)))
        return step(self, *args, **kwargs)

    before = inspect.signature(scheduler.step)
    scheduler.step = types.MethodType(counted, scheduler)
    assert inspect.signature(scheduler.step) == before


def _schedulers(pipe: Any) -> dict[str, Any]:
    from diffusers import SchedulerMixin

    return {k: v for k, v in pipe.components.items() if isinstance(v, SchedulerMixin)}


def _spy(path: str, seen: list[str]) -> Any:
    """A block that records each run of the loop it is put in."""
    from diffusers.modular_pipelines import ModularPipelineBlocks

    class Spy(ModularPipelineBlocks):
        @property
        def description(self) -> str:
            return "records each iteration of its loop"

        def __call__(self, components: Any, block_state: Any, **loop_kwargs: Any) -> tuple[Any, Any]:
            seen.append(path)
            return components, block_state

    return Spy()


def _run(tiny: Tiny) -> tuple[float, list[np.ndarray]]:
    start = time.perf_counter()
    out = arrays(tiny.pipe(**tiny.kwargs()))
    return time.perf_counter() - start, out


def _counted(tiny: Tiny) -> tuple[list[Step], list[np.ndarray]]:
    calls: list[Step] = []
    schedulers = _schedulers(tiny.pipe)
    for key, scheduler in schedulers.items():
        _count_steps(scheduler, key, calls)
    try:
        return calls, _run(tiny)[1]
    finally:
        for scheduler in schedulers.values():
            vars(scheduler).pop("step", None)


def _spied(tiny: Tiny) -> tuple[list[str], list[np.ndarray]]:
    """Runs with a spy block appended to every loop of the pipeline's block tree: which loops ran, how often."""
    seen: list[str] = []
    loops = denoise_loops(tiny.pipe)
    for path, loop in loops:
        loop.sub_blocks["spy"] = _spy(path, seen)
    try:
        return seen, _run(tiny)[1]
    finally:
        for _, loop in loops:
            del loop.sub_blocks["spy"]


def check(name: str) -> str:
    """Builds one, calls it twice (bit-identical?), then once counting scheduler.step calls and, for a modular
    pipeline, once with a spy block in every denoising loop; both must leave the output as it was."""
    tiny = build(name)
    (first, out), (second, again) = _run(tiny), _run(tiny)
    calls, counted = _counted(tiny)
    steps: dict[str, list[tuple[float, tuple[int, ...]]]] = {}
    for who, t, shape in calls:
        steps.setdefault(who, []).append((round(t, 1), shape))
    line = (f"{name}: {first:.2f} s / {second:.2f} s, out {[a.shape for a in out]}, identical {_same(out, again)}"
            f", counted identical {_same(out, counted)}; step: "
            + "; ".join(f"{who} x{len(v)} t={[t for t, _ in v]} sample {sorted({s for _, s in v})}"
                        for who, v in steps.items()))
    if denoise_loops(tiny.pipe):
        seen, spied = _spied(tiny)
        runs = {path: seen.count(path) for path in dict.fromkeys(seen)}
        line += f"; loop runs {runs}, spied identical {_same(out, spied)}"
    return line


if __name__ == "__main__":
    import sys
    import warnings

    from diffusers.utils import logging as diffusers_logging

    diffusers_logging.set_verbosity_error()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    for name in sys.argv[1:] or NAMES:
        print(check(name), flush=True)

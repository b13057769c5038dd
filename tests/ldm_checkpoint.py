"""Write an SD 1.x diffusers pipeline as one checkpoint in the original (CompVis/LDM) key layout, the layout of
the .safetensors files that A1111 and ComfyUI users keep. Only for tests of single-file loading: diffusers
converts this layout back on load, so a round trip checks the shipped configs against real key names.

The layout, for SD 1.x (two resnets per down level, three per up level, four levels):
  UNet  model.diffusion_model.: input_blocks.N.{0 resnet, 1 attention}, middle_block.{0,1,2}, output_blocks.N.*;
        resnets name their parts in_layers/out_layers/emb_layers/skip_connection.
  VAE   first_stage_model.: encoder.down.L.block.J, decoder.up.L.block.J (up levels counted from the bottom),
        mid.block_1/attn_1/block_2; attention weights are 1x1 convolutions named q, k, v, proj_out.
  text  cond_stage_model.transformer.text_model. + the transformers CLIPTextModel keys.
"""
from __future__ import annotations

import re
from typing import Any, Callable

import torch

RESNET = {"norm1": "in_layers.0", "conv1": "in_layers.2", "norm2": "out_layers.0", "conv2": "out_layers.3",
          "time_emb_proj": "emb_layers.1", "conv_shortcut": "skip_connection"}
UNET_FIXED = {"time_embedding.linear_1": "time_embed.0", "time_embedding.linear_2": "time_embed.2",
              "conv_in": "input_blocks.0.0", "conv_norm_out": "out.0", "conv_out": "out.2"}


def _resnet(rest: str) -> str:
    part, _, param = rest.partition(".")
    return f"{RESNET[part]}.{param}"


Rule = tuple[str, Callable[[re.Match[str]], str]]
UNET_RULES: list[Rule] = [
    (r"down_blocks\.(\d)\.resnets\.(\d)\.(.+)",
     lambda m: f"input_blocks.{3 * int(m[1]) + int(m[2]) + 1}.0.{_resnet(m[3])}"),
    (r"down_blocks\.(\d)\.attentions\.(\d)\.(.+)", lambda m: f"input_blocks.{3 * int(m[1]) + int(m[2]) + 1}.1.{m[3]}"),
    (r"down_blocks\.(\d)\.downsamplers\.0\.conv\.(.+)", lambda m: f"input_blocks.{3 * int(m[1]) + 3}.0.op.{m[2]}"),
    (r"up_blocks\.(\d)\.resnets\.(\d)\.(.+)", lambda m: f"output_blocks.{3 * int(m[1]) + int(m[2])}.0.{_resnet(m[3])}"),
    (r"up_blocks\.(\d)\.attentions\.(\d)\.(.+)", lambda m: f"output_blocks.{3 * int(m[1]) + int(m[2])}.1.{m[3]}"),
    (r"up_blocks\.(\d)\.upsamplers\.0\.(.+)",
     lambda m: f"output_blocks.{3 * int(m[1]) + 2}.{1 if m[1] == '0' else 2}.{m[2]}"),
    (r"mid_block\.resnets\.(\d)\.(.+)", lambda m: f"middle_block.{2 * int(m[1])}.{_resnet(m[2])}"),
    (r"mid_block\.attentions\.0\.(.+)", lambda m: f"middle_block.1.{m[1]}"),
]
ATTN = {"group_norm": "norm", "to_q": "q", "to_k": "k", "to_v": "v", "to_out.0": "proj_out"}
VAE_RULES: list[Rule] = [
    (r"encoder\.down_blocks\.(\d)\.resnets\.(\d)\.(.+)", lambda m: f"encoder.down.{m[1]}.block.{m[2]}.{m[3]}"),
    (r"encoder\.down_blocks\.(\d)\.downsamplers\.0\.(.+)", lambda m: f"encoder.down.{m[1]}.downsample.{m[2]}"),
    (r"decoder\.up_blocks\.(\d)\.resnets\.(\d)\.(.+)", lambda m: f"decoder.up.{3 - int(m[1])}.block.{m[2]}.{m[3]}"),
    (r"decoder\.up_blocks\.(\d)\.upsamplers\.0\.(.+)", lambda m: f"decoder.up.{3 - int(m[1])}.upsample.{m[2]}"),
    (r"(encoder|decoder)\.mid_block\.resnets\.(\d)\.(.+)", lambda m: f"{m[1]}.mid.block_{int(m[2]) + 1}.{m[3]}"),
    (r"(encoder|decoder)\.mid_block\.attentions\.0\.(group_norm|to_q|to_k|to_v|to_out\.0)\.(.+)",
     lambda m: f"{m[1]}.mid.attn_1.{ATTN[m[2]]}.{m[3]}"),
    (r"(encoder|decoder)\.conv_norm_out\.(.+)", lambda m: f"{m[1]}.norm_out.{m[2]}"),
]


def _rename(key: str, rules: list[Rule]) -> str:
    for pattern, to in rules:
        m = re.fullmatch(pattern, key)
        if m:
            return to(m)
    return key


def unet_key(key: str) -> str:
    head, _, param = key.rpartition(".")
    if head in UNET_FIXED:
        return f"{UNET_FIXED[head]}.{param}"
    return _rename(key, UNET_RULES)


def vae_key(key: str) -> str:
    return _rename(key, VAE_RULES).replace("conv_shortcut", "nin_shortcut")


def ldm_state_dict(pipe: Any, dtype: torch.dtype = torch.float16) -> dict[str, torch.Tensor]:
    """The pipeline's UNet, VAE and text encoder under their original checkpoint keys."""
    out: dict[str, torch.Tensor] = {}
    for k, v in pipe.unet.state_dict().items():
        out["model.diffusion_model." + unet_key(k)] = v
    for k, v in pipe.vae.state_dict().items():
        new = vae_key(k)
        if ".mid.attn_1." in new and new.endswith(".weight") and v.ndim == 2:
            v = v[:, :, None, None]  # linear in diffusers, 1x1 convolution in the original
        out["first_stage_model." + new] = v
    for k, v in pipe.text_encoder.state_dict().items():
        if not k.endswith("position_ids"):  # transformers 5 leaves out the text_model. that checkpoints keep
            out["cond_stage_model.transformer." + (k if k.startswith("text_model.") else "text_model." + k)] = v
    return {k: v.detach().to(dtype).contiguous() for k, v in out.items()}

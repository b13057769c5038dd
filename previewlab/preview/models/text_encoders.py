"""The synthetic presets' text encoders: each family's real transformers class (T5, UMT5, Qwen2.5-VL's text model,
ByT5, Gemma 3), tiny, with random weights, built from a config on the CPU; nothing is downloaded. The tokenizers
they take are offline_tokenizers.py's.
"""
from __future__ import annotations

from typing import Any


def t5(d_model: int) -> Any:
    """A T5 encoder of two layers: the class of SD3's third text encoder, FLUX.1's second, CogVideoX's, Mochi's
    and LTX-Video's."""
    from transformers import T5Config, T5EncoderModel

    return T5EncoderModel(T5Config(vocab_size=1000, d_model=d_model, d_kv=8, d_ff=37, num_layers=2, num_heads=4,
                                   relative_attention_num_buckets=8, pad_token_id=0, eos_token_id=1))


def umt5(d_model: int, layers: int = 2, heads: int = 4, d_kv: int = 8, d_ff: int = 37, vocab: int = 1000) -> Any:
    """Wan's text encoder class: UMT5 (a relative attention bias in every layer), gated GELU as UMT5-XXL."""
    from transformers import UMT5Config, UMT5EncoderModel

    return UMT5EncoderModel(UMT5Config(vocab_size=vocab, d_model=d_model, d_kv=d_kv, d_ff=d_ff, num_layers=layers,
                                       num_heads=heads, relative_attention_num_buckets=32,
                                       feed_forward_proj="gated-gelu", pad_token_id=0, eos_token_id=1))


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

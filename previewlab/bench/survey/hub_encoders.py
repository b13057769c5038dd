"""Offline stand-ins for the configs and text encoders the tests load from the hub, by repository: the same
architecture built from a config with random weights, keeping the widths the tests' other components are sized for
(tiny-random-t5: d_model 32; the Llama: 16; ...), and numbering its tokens as the stand-in tokenizer does."""
from __future__ import annotations

from typing import Any

from previewlab.bench.survey.hub_tokenizers import qwen_tokenizer
from previewlab.bench.survey.offline import load_helpers

T5_TINY: dict[str, Any] = dict(vocab_size=1103, d_model=32, d_kv=8, d_ff=37, num_layers=5, num_decoder_layers=5,
                               num_heads=4, relative_attention_num_buckets=8, dropout_rate=0.1, eos_token_id=1,
                               pad_token_id=0, decoder_start_token_id=0, feed_forward_proj="relu",
                               layer_norm_epsilon=1e-6)


def config_for(repo: str) -> Any:
    """The config that stands in for `repo`'s; None where there is none."""
    import transformers as tf

    key = repo.lower()
    if key.endswith("/tiny-random-t5") or key.endswith("/tiny-random-t5model"):
        return tf.T5Config(**T5_TINY)
    if key.endswith("/tiny-random-umt5"):
        return tf.UMT5Config(**T5_TINY)
    if key.endswith("/tiny-random-bertmodel"):
        return tf.BertConfig(vocab_size=1124, hidden_size=32, num_hidden_layers=5, num_attention_heads=4,
                             intermediate_size=37, max_position_embeddings=512, type_vocab_size=16)
    if key.endswith("/tiny-random-llamaforcausallm"):
        return tf.LlamaConfig(vocab_size=32000, hidden_size=16, intermediate_size=64, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=2048,
                              bos_token_id=1, eos_token_id=2, pad_token_id=0)
    if key.endswith("/tiny-random-chatglm3-6b"):  # Kolors' UNet: cross-attention 8 and 8 pooled of its 56
        from diffusers.pipelines.kolors.text_encoder import ChatGLMConfig

        return ChatGLMConfig(num_layers=2, padded_vocab_size=128, hidden_size=8, ffn_hidden_size=16, kv_channels=4,
                             num_attention_heads=2, seq_length=256, multi_query_attention=True,
                             multi_query_group_num=1, original_rope=True)
    if key.endswith("/tiny-random-siglipvisionmodel"):
        return tf.SiglipVisionConfig(hidden_size=32, intermediate_size=37, num_hidden_layers=5, num_attention_heads=4,
                                     image_size=30, patch_size=2)
    return None


def _qwen2_vl(hidden: int = 16) -> Any:
    """A Qwen2-VL text encoder for the stand-in tokenizer's ids: text width `hidden` (EasyAnimate's text_embed_dim
    16), two layers, a one-block vision tower."""
    import transformers as tf

    tok = qwen_tokenizer()
    ids = tok.convert_tokens_to_ids
    text = dict(vocab_size=len(tok), hidden_size=hidden, intermediate_size=16, num_hidden_layers=2,
                num_attention_heads=2, num_key_value_heads=2,
                rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [1, 1, 2]})
    vision = dict(depth=1, embed_dim=16, hidden_size=hidden, num_heads=2)
    return tf.Qwen2VLForConditionalGeneration(tf.Qwen2VLConfig(
        text_config=text, vision_config=vision, image_token_id=ids("<|image_pad|>"),
        video_token_id=ids("<|video_pad|>"), vision_start_token_id=ids("<|vision_start|>"),
        vision_end_token_id=ids("<|vision_end|>")))


def model_of_class(cls: Any, repo: str, kwargs: dict[str, Any]) -> Any:
    """The stand-in for `cls.from_pretrained(repo, **kwargs)` of a model class, in eval(); None where there is none."""
    from transformers.models.auto.auto_factory import _BaseAutoModelClass

    config = config_for(repo)
    if config is None and "qwen3vl" in repo.lower():
        _, tiny_hooks = load_helpers()
        made = tiny_hooks._qwen3_vl(qwen_tokenizer(), hidden=16, layers=2)
    elif config is None and "qwen2vl" in repo.lower() and cls.__name__.startswith("Qwen2VL"):
        made = _qwen2_vl()
    elif config is None and "tiny-gemma3" in repo.lower():
        _, tiny_hooks = load_helpers()  # 32 wide, as tiny_hooks' LTX-2 (the tests read its widths)
        made = tiny_hooks._gemma3(tiny_hooks.gemma3_tokenizer(), hidden=32)
    elif config is None:
        return None
    elif "chatglm" in repo.lower():  # its default skips initialising the weights: from_pretrained fills them
        made = cls(config, empty_init=False)
    else:
        made = cls.from_config(config) if issubclass(cls, _BaseAutoModelClass) else cls(config)
    dtype = kwargs.get("torch_dtype") or kwargs.get("dtype")
    return (made.to(dtype) if dtype is not None else made).eval()

"""Tokenizers built offline for the synthetic presets (no hub): CLIP, T5, and Mistral-, Llama-, Qwen- and
Gemma-style ones. Token ids do not change compute: the pipelines pad every prompt to a fixed length."""
from __future__ import annotations

import string
from typing import Any

CHARS = list(string.ascii_lowercase + string.digits)


def clip_tokenizer() -> Any:
    """A CLIP tokenizer built offline, for every synthetic preset. Token ids do not change compute: prompts are
    padded to model_max_length=77, which must be set, or the pipelines pad to 1e30 and fail."""
    from transformers import CLIPTokenizer

    tokens = ["<|startoftext|>", "<|endoftext|>", "!"] + CHARS + [c + "</w>" for c in CHARS]
    return CLIPTokenizer(vocab={t: i for i, t in enumerate(tokens)}, merges=[], unk_token="<|endoftext|>",
                         bos_token="<|startoftext|>", eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                         model_max_length=77)


def t5_tokenizer() -> Any:
    """A T5 tokenizer (a Unigram model, transformers 5 builds it with the tokenizers library); ids 0-2 are
    <pad>, </s>, <unk> as in T5's own vocabulary. Token ids do not change compute: sequences are padded."""
    from transformers import T5Tokenizer  # transformers 5: T5TokenizerFast is this class, tokenizers-backed

    vocab = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("\u2581", -2.0)]
    vocab += [(c, -3.0) for c in CHARS] + [("\u2581" + c, -2.5) for c in CHARS]
    return T5Tokenizer(vocab=vocab, extra_ids=0, model_max_length=512)


# Flux2Pipeline calls tokenizer.apply_chat_template on [system, user] messages whose content is a list of
# {"type": "text", "text": ...} parts (pipeline_flux2.format_input); a Mistral-style template renders them.
CHAT_TEMPLATE = ("{{ bos_token }}{% for m in messages %}{% set c = m['content'] %}{% if c is not string %}"
                 "{% set c = c | map(attribute='text') | join(' ') %}{% endif %}{% if m['role'] == 'system' %}"
                 "[SYSTEM_PROMPT]{{ c }}[/SYSTEM_PROMPT]{% elif m['role'] == 'user' %}[INST]{{ c }}[/INST]"
                 "{% else %}{{ c }}{{ eos_token }}{% endif %}{% endfor %}")


def mistral_tokenizer() -> Any:
    """A character-level WordLevel tokenizer (tokenizers library) with Mistral's special tokens and a chat
    template, standing in for FLUX.2's PixtralProcessor: the pipeline uses only apply_chat_template."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<s>", "</s>", "<unk>", "[INST]", "[/INST]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]"]
    tok = Tokenizer(models.WordLevel(vocab={t: i for i, t in enumerate(specials + CHARS)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace(),
                                                 pre_tokenizers.Split(pattern="", behavior="isolated")])
    tok.add_special_tokens(specials)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   pad_token="<pad>", chat_template=CHAT_TEMPLATE, model_max_length=512)


def llama_tokenizer() -> Any:
    """A character-level WordLevel tokenizer with Llama 3's special tokens, standing in for HunyuanVideo's
    LlamaTokenizerFast: the pipeline pads and truncates to a fixed length, so ids do not change compute."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
                "<unk>"]
    tok = Tokenizer(models.WordLevel(vocab={t: i for i, t in enumerate(specials + CHARS)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace(),
                                                 pre_tokenizers.Split(pattern="", behavior="isolated")])
    tok.add_special_tokens(specials)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>",
                                   unk_token="<unk>", pad_token="<|end_of_text|>", model_max_length=512)


def _chars(specials: list[str], *, pad: str, unk: str, eos: str, bos: str | None = None,
           chat_template: str | None = None) -> Any:
    """A character-level WordLevel tokenizer (tokenizers library) whose first ids are `specials`, in order, each
    kept whole wherever it occurs; a `bos` is put before every sequence."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(specials + CHARS)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=unk))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace(),
                                                 pre_tokenizers.Split(pattern="", behavior="isolated")])
    tok.add_special_tokens(specials)
    if bos is not None:
        tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
                                                           special_tokens=[(bos, vocab[bos])])
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=pad, unk_token=unk, eos_token=eos, bos_token=bos,
                                   chat_template=chat_template, model_max_length=4096)


# Qwen's ChatML: HunyuanVideo 1.5 encodes [system, user] messages through it (apply_chat_template)
QWEN_CHAT = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
             "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                 "<|image_pad|>", "<|video_pad|>", "<unk>"]
# Gemma's ids for <pad> <eos> <bos> <unk>, then Gemma 3's image tokens, which its text encoder's config names
GEMMA3_SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_image>", "<end_of_image>", "<image_soft_token>"]


def qwen_tokenizer() -> Any:
    """Qwen2's special tokens, <|endoftext|> as padding, no BOS, and ChatML: standing in for HunyuanVideo 1.5's
    Qwen2Tokenizer, of which the pipeline uses apply_chat_template, padded to 1000 + 108 tokens."""
    return _chars(QWEN_SPECIALS, pad="<|endoftext|>", unk="<unk>", eos="<|im_end|>", chat_template=QWEN_CHAT)


def gemma3_tokenizer() -> Any:
    """Gemma 3's special tokens at Gemma's ids and a BOS before every sequence, standing in for LTX-2's
    GemmaTokenizerFast; the pipeline pads every prompt (on the left) to max_sequence_length."""
    return _chars(GEMMA3_SPECIALS, pad="<pad>", unk="<unk>", eos="<eos>", bos="<bos>")

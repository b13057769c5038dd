"""Offline stand-ins for the tokenizers and processors the tests load from the hub, by repository: previewlab's
offline tokenizers and the repository's (tests/tiny_pipes.py, tests/tiny_hooks.py), with the specials, padding and
decoding the pipelines rely on."""
from __future__ import annotations

from typing import Any

from previewlab.bench.survey.offline import load_helpers


def _decoding(tok: Any) -> Any:
    """A WordPiece decoder for tiny_pipes' tokenizers (they have none: decode() would keep the "##" of every
    piece); pipelines that truncate a prompt cut the text by the length of the decoded tail (Kandinsky 5)."""
    from tokenizers import decoders

    tok.backend_tokenizer.decoder = decoders.WordPiece(prefix="##")
    return tok


def qwen_tokenizer() -> Any:
    """tiny_pipes' Qwen2 tokenizer (its specials, its whole words for QwenImage's template), but a word it does
    not know is one <unk>, not its letters, so that a text is about as many tokens as with Qwen's BPE: pipelines
    that drop a template's first N tokens (Kandinsky 5: 128, 54) or cut a prompt to fit keep what they mean to.
    With tiny_hooks' Qwen chat template (Qwen-VL, Qwen3 and Cosmos pipelines encode chat messages through it)."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tiny_pipes, tiny_hooks = load_helpers()
    vocab: dict[str, int] = {}
    for t in tiny_pipes.QWEN_SPECIALS + ["\n"] + tiny_pipes.PUNCT + tiny_pipes.CHARS + tiny_pipes.QWEN_WORDS:
        vocab.setdefault(t, len(vocab))
    words = Tokenizer(models.WordPiece(vocab=vocab, unk_token="<unk>", max_input_chars_per_word=100))
    words.normalizer = normalizers.Lowercase()
    words.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"[^\S\n]+"), behavior="removed"),
        pre_tokenizers.Split(Regex(r"\n"), behavior="isolated"),
        pre_tokenizers.Punctuation(behavior="isolated")])
    words.add_special_tokens(tiny_pipes.QWEN_SPECIALS)
    words.add_tokens(["'s", "),"])
    words.decoder = decoders.WordPiece(prefix="##")
    return PreTrainedTokenizerFast(tokenizer_object=words, pad_token="<|endoftext|>", unk_token="<unk>",
                                   eos_token="<|im_end|>", model_max_length=4096, chat_template=tiny_hooks.QWEN_CHAT)


def _chatglm_tokenizer() -> Any:
    """ChatGLM's tokenizer (Kolors) needs sentencepiece: a word-piece one that pads on the left and returns
    position_ids, as ChatGLMTokenizer does (0 on the padding, then 0, 1, ...)."""
    import torch
    from transformers import PreTrainedTokenizerFast

    tiny_pipes, _ = load_helpers()
    base = tiny_pipes._wordpiece(["<pad>", "<unk>", "[gMASK]", "sop", "</s>"], [], pad="<pad>", unk="<unk>",
                                 eos="</s>", padding_side="left")

    class GLMStandIn(PreTrainedTokenizerFast):
        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            out = super().__call__(*args, **kwargs)
            mask = out.get("attention_mask")
            if isinstance(mask, torch.Tensor):
                out["position_ids"] = (mask.cumsum(-1) - 1).clamp(min=0)
            return out

    return _decoding(GLMStandIn(tokenizer_object=base.backend_tokenizer, pad_token="<pad>", unk_token="<unk>",
                                eos_token="</s>", padding_side="left", model_max_length=4096))


def tokenizer_for(repo: str) -> Any:
    from previewlab.preview.models.offline_tokenizers import clip_tokenizer, t5_tokenizer

    tiny_pipes, tiny_hooks = load_helpers()
    key = repo.lower()
    if "tiny-random-clip" in key:
        return clip_tokenizer()
    if key.endswith(("/tiny-random-t5", "/tiny-random-t5model", "/tiny-random-umt5")):
        return t5_tokenizer()
    if "qwen" in key or "cosmos3" in key:
        return qwen_tokenizer()
    if "chatglm" in key:
        return _chatglm_tokenizer()
    if "glm-4" in key:
        return _decoding(tiny_pipes._wordpiece(["<pad>", "<unk>", "[gMASK]", "<sop>", "<|endoftext|>"], [],
                                               pad="<pad>", unk="<unk>", bos="[gMASK]", eos="<|endoftext|>",
                                               add_bos=True))
    if "gemma3" in key:
        return _decoding(tiny_hooks.gemma3_tokenizer())
    if "gemma" in key:
        return _decoding(tiny_pipes.gemma_tokenizer())
    pieces = tiny_pipes._wordpiece
    if "llama" in key or "hunyaunvideo" in key or "hunyuanvideo" in key:
        return _decoding(pieces(["<unk>", "<s>", "</s>", "<pad>"], [], pad="<pad>", unk="<unk>", bos="<s>",
                                eos="</s>", add_bos=True))
    if "bert" in key:
        return _decoding(pieces(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], [], pad="[PAD]", unk="[UNK]",
                                bos="[CLS]", eos="[SEP]", add_bos=True))
    if "roberta" in key or "mclip" in key:
        return _decoding(pieces(["<s>", "<pad>", "</s>", "<unk>"], [], pad="<pad>", unk="<unk>", bos="<s>",
                                eos="</s>", add_bos=True))
    return None


def processor_for(cls: Any, repo: str, kwargs: dict[str, Any]) -> Any:
    import transformers as tf

    tiny_pipes, tiny_hooks = load_helpers()
    key, name = repo.lower(), getattr(cls, "__name__", "")
    if "qwen3vl" in key or name.startswith("Qwen3VL"):
        return tiny_hooks.qwen3vl_processor(qwen_tokenizer())
    if "qwen2vl" in key:
        return tiny_pipes.qwen2vl_processor(qwen_tokenizer())
    if "mistral" in key:  # FLUX.2's PixtralProcessor: the pipeline uses only its apply_chat_template
        from previewlab.preview.models.offline_tokenizers import mistral_tokenizer

        return mistral_tokenizer()
    if "siglip" in key:
        return tf.SiglipImageProcessorPil(**{k: v for k, v in kwargs.items() if k == "size"})
    if "dpt" in key:  # the tiny DPT's own input size (the test's DPTConfig: image_size 32)
        return tf.DPTImageProcessor(size={"height": 32, "width": 32})
    if "clap" in key:
        return tf.ClapFeatureExtractor()
    return None


def tokenizer_of_class(cls: Any, repo: str, kwargs: dict[str, Any]) -> Any:
    """The stand-in for `cls.from_pretrained(repo, **kwargs)` of a tokenizer class; None where there is none."""
    if any(w in repo.lower() for w in ("qwen3vl", "qwen2vl")) and "Processor" in cls.__name__:
        return processor_for(cls, repo, kwargs)
    tok = tokenizer_for(repo)
    if tok is not None and "model_max_length" in kwargs:
        tok.model_max_length = kwargs["model_max_length"]
    if tok is not None and "Roberta" in cls.__name__ and not isinstance(tok, cls):
        # AudioLDM 2 picks what to encode by isinstance(tokenizer, RobertaTokenizer, ...): the class asked for,
        # around the stand-in's tokenizer
        tok = cls(tokenizer_object=tok.backend_tokenizer, bos_token=tok.bos_token, eos_token=tok.eos_token,
                  unk_token=tok.unk_token, pad_token=tok.pad_token, model_max_length=tok.model_max_length)
    return tok

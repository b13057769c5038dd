"""Survey (issue 32): on diffusers' own tiny test components, which pipelines `watch()` previews, bit-identically.

    mkdir -p /tmp/difftests && git -C DIFFUSERS_GIT archive HEAD tests | tar -x -C /tmp/difftests
    nice .venv/bin/python -m previewlab.bench.pipeline_survey --tests /tmp/difftests/tests \
        --out docs/results/pipeline-survey-2026-12-02.txt [--json FILE] [--only NAME] [--again]

Cases. Every class under tests/pipelines/ with `pipeline_class`, `get_dummy_components` and `get_dummy_inputs`
(own or inherited, found by reading the files, not importing them) is a classic case; its kind is "callback" or
"no callback": whether the pipeline class's `__call__` takes `callback_on_step_end`. Every Modular Diffusers
pipeline class of the installed diffusers is a modular case, once per tester config of tests/modular_pipelines/
that names it (its inputs), built from the dummy components of the matching classic test (MODULAR_PARTS:
diffusers' modular tests load theirs from the hub) or from a recipe of tests/tiny_hooks.py; a modular class with
neither is "not built".

Each case runs in a process of its own (one thread; nice the command) with a time limit for its build and another
for its calls: build (modules in eval(), as loaded models are), call plainly twice (identical, else
"nondeterministic"), then for each decoder of none, latent2rgb and vae: `watch(pipe, decoder=..., mode="sync",
size=(h, w), source="auto")`, the call (with `callback_on_step_end=w` where `w.source` is "callback"), `w.rows`,
`w.record`, `w.remove()`; and one plain call after the last watch. The global random state is seeded the same
before every call. A pass: every watched output and the last plain one equal to the first plain call's, bit for
bit, every array; one row per step (steps counted on the pipeline's own progress bar, independently of the
watch); a preview at every step with latent2rgb and vae; no event that says "failed"; a record. Results: pass,
refused: (watch() raised), failed: (the watched call raised, or a check above, or the calls' time limit),
nondeterministic:, not built: (the test file does not import or skips itself, a hub load has no offline stand-in
here, the plain call raises or takes longer than the limit).

Hub loads inside the tests' components are served offline (_install_stand_ins; the results file lists those a run
used): tokenizers by previewlab's and the repository's offline ones (tests/tiny_pipes.py, tests/tiny_hooks.py), the
few text encoders the tests load with weights by the same architecture built from a config with random weights,
keeping the widths the tests' other components are sized for (tiny-random-t5: d_model 32; the Llama: 16; ...).
Anything else from the hub raises NoStandIn: the case is "not built", naming the repository.
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

DECODERS = ("none", "latent2rgb", "vae")
KINDS = ("callback", "no callback", "modular")
MARK = "@@survey@@ "  # the worker's result line on stdout


# ----------------------------------------------------------------------------------------------- cases


@dataclass(frozen=True)
class Case:
    """One survey case. classic: `test` is a tests/pipelines file and `cls` its test class. modular: `pipeline` is the
    Modular pipeline class, `test`/`cls` its tester config (inputs; "" for none), `parts` where its components come
    from: "FILE::Class" of a classic test, "recipe:NAME" (tiny_hooks), or "" (none known)."""
    kind: str        # classic | modular (the result's kind, callback or not, is read at run time)
    test: str        # path relative to the tests folder, e.g. pipelines/pixart_sigma/test_pixart.py
    cls: str
    pipeline: str    # the pipeline class's name as the test names it
    parts: str = ""

    @property
    def name(self) -> str:
        return f"{self.pipeline} [{self.cls}]" if self.kind == "modular" and self.cls else \
            self.pipeline if self.kind == "modular" else f"{self.cls} ({self.pipeline})"


@dataclass
class _ClassInfo:
    module: str
    name: str
    bases: list[str]
    attrs: dict[str, str]  # class-level assignments: name -> source of the value
    methods: dict[str, int]  # name -> its required positional parameters, self left out


def _module_of(tests: Path, path: Path) -> str:
    rel = path.relative_to(tests.parent).with_suffix("")
    return ".".join(rel.parts)


def _read_classes(tests: Path, path: Path) -> tuple[list[_ClassInfo], dict[str, str]]:
    """The classes of one test file and its `from X import Name` imports (Name -> absolute module)."""
    tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    module = _module_of(tests, path)
    imports: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            base = module.split(".")[: len(module.split(".")) - node.level] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                imports[alias.asname or alias.name] = target
    classes = []
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        attrs: dict[str, str] = {}
        methods: dict[str, int] = {}
        for item in node.body:
            if isinstance(item, ast.Assign):
                for t in item.targets:
                    if isinstance(t, ast.Name):
                        attrs[t.id] = ast.unparse(item.value)
            elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) and item.value is not None:
                attrs[item.target.id] = ast.unparse(item.value)
            elif isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = item.args
                methods[item.name] = max(0, len(a.posonlyargs) + len(a.args) - len(a.defaults) - 1)
        classes.append(_ClassInfo(module, node.name, [ast.unparse(b) for b in node.bases], attrs, methods))
    return classes, imports


class _Index:
    """Every class of the test files, with its bases resolved across files (by the files' own imports)."""

    def __init__(self, tests: Path, files: Iterable[Path]) -> None:
        self.classes: dict[tuple[str, str], _ClassInfo] = {}
        self.imports: dict[str, dict[str, str]] = {}
        self.files: dict[str, Path] = {}
        for path in files:
            try:
                found, imports = _read_classes(tests, path)
            except SyntaxError:
                continue
            module = _module_of(tests, path)
            self.imports[module], self.files[module] = imports, path
            for c in found:
                self.classes[(module, c.name)] = c

    def chain(self, c: _ClassInfo) -> Iterator[_ClassInfo]:
        """c, then its bases that are classes of the indexed files, depth first (the MRO, near enough)."""
        seen: set[tuple[str, str]] = set()
        todo = [c]
        while todo:
            k = todo.pop(0)
            if (k.module, k.name) in seen:
                continue
            seen.add((k.module, k.name))
            yield k
            for b in k.bases:
                name = b.split(".")[-1]
                where = k.module if (k.module, name) in self.classes else self.imports.get(k.module, {}).get(name)
                if where is not None and (where, name) in self.classes:
                    todo.append(self.classes[(where, name)])

    def attr(self, c: _ClassInfo, name: str) -> str | None:
        return next((k.attrs[name] for k in self.chain(c) if name in k.attrs), None)

    def has(self, c: _ClassInfo, method: str) -> bool:
        return any(method in k.methods for k in self.chain(c))

    def required(self, c: _ClassInfo, method: str) -> int:
        """The required parameters of the method as c resolves it (0 where it has none)."""
        return next((k.methods[method] for k in self.chain(c) if method in k.methods), 0)


def classic_cases(tests: Path) -> list[Case]:
    """Classes of tests/pipelines/**/test_*.py with a pipeline_class and the dummy component and input makers."""
    files = sorted((tests / "pipelines").rglob("test_*.py"))
    index = _Index(tests, files)
    cases = []
    for (module, name), c in index.classes.items():
        pipeline = index.attr(c, "pipeline_class")
        if not pipeline or pipeline == "None" or name.startswith("_"):
            continue
        if not (index.has(c, "get_dummy_components") and index.has(c, "get_dummy_inputs")):
            continue
        if not ({"get_dummy_components", "get_dummy_inputs"} & set(c.methods) or "pipeline_class" in c.attrs):
            continue  # all three inherited: the same case as the class it inherits them from (Test*Memory, ...)
        if index.required(c, "get_dummy_components") > 0:
            continue  # a base whose subclasses say which parts (AdapterTests: adapter_type)
        rel = index.files[module].relative_to(tests).as_posix()
        cases.append(Case("classic", rel, name, pipeline.split(".")[-1]))
    return sorted(cases, key=lambda k: (k.test, k.cls))


def modular_configs(tests: Path) -> list[Case]:
    """Tester configs of tests/modular_pipelines: a pipeline_class, a pipeline_blocks_class and get_dummy_inputs."""
    folder = tests / "modular_pipelines"
    files = sorted(folder.rglob("test_*.py")) if folder.is_dir() else []
    index = _Index(tests, files)
    out = []
    for (module, name), c in index.classes.items():
        if not name.endswith("TesterConfig"):
            continue
        pipeline, blocks = index.attr(c, "pipeline_class"), index.attr(c, "pipeline_blocks_class")
        # a base config whose subclasses keep its pipeline class only gathers what they share (LTX-2's workflows)
        shared = any(k is not c and k.name.endswith("TesterConfig") and "pipeline_class" not in k.attrs
                     and c in list(index.chain(k))[1:] for k in index.classes.values())
        if pipeline and blocks and index.has(c, "get_dummy_inputs") and not shared:
            rel = index.files[module].relative_to(tests).as_posix()
            out.append(Case("modular", rel, name, pipeline.split(".")[-1]))
    return sorted(out, key=lambda k: (k.test, k.cls))


# Modular pipelines: where their tiny components come from (diffusers' modular tests load theirs from the hub).
# "FILE::Class": the dummy components of that classic test (FILE under the tests folder); "recipe:NAME": a
# builder of tests/tiny_hooks.py. The inputs are the pipeline's tester config's (tests/modular_pipelines) with
# the classic test's height, width, frames and text length, else the classic test's inputs that are inputs of
# the blocks; a recipe brings its own. Second field: the output to ask for where no tester config names it.
MODULAR_PARTS: dict[str, tuple[str, str]] = {
    "FluxModularPipeline": ("pipelines/flux/test_pipeline_flux.py::FluxPipelineTesterConfig", "images"),
    "FluxKontextModularPipeline": ("pipelines/flux/test_pipeline_flux_kontext.py::FluxKontextPipelineFastTests",
                                   "images"),
    "Flux2ModularPipeline": ("pipelines/flux2/test_pipeline_flux2.py::Flux2PipelineTesterConfig", "images"),
    "Flux2KleinModularPipeline": ("pipelines/flux2/test_pipeline_flux2_klein.py::Flux2KleinPipelineTesterConfig",
                                  "images"),
    "Flux2KleinBaseModularPipeline": (
        "pipelines/flux2/test_pipeline_flux2_klein.py::Flux2KleinPipelineTesterConfig", "images"),
    "Flux3ModularPipeline": ("recipe:flux3_modular", "images"),
    "Flux3DistilledModularPipeline": ("recipe:flux3_distilled", "images"),
    "HeliosModularPipeline": ("pipelines/helios/test_helios.py::HeliosPipelineFastTests", "videos"),
    "HeliosPyramidModularPipeline": ("pipelines/helios/test_helios.py::HeliosPipelineFastTests", "videos"),
    "HeliosPyramidDistilledModularPipeline": ("pipelines/helios/test_helios.py::HeliosPipelineFastTests", "videos"),
    "HunyuanVideo15ModularPipeline": (
        "pipelines/hunyuan_video1_5/test_hunyuan_1_5.py::HunyuanVideo15PipelineFastTests", "videos"),
    "Krea2ModularPipeline": ("pipelines/krea2/test_krea2.py::Krea2PipelineFastTests", "images"),
    "Krea2TurboModularPipeline": ("pipelines/krea2/test_krea2.py::Krea2PipelineFastTests", "images"),
    "LTXModularPipeline": ("pipelines/ltx/test_ltx.py::LTXPipelineFastTests", "videos"),
    "LTX2ModularPipeline": ("pipelines/ltx2/test_ltx2.py::LTX2PipelineFastTests", "videos"),
    "LTX25ModularPipeline": ("recipe:ltx25_modular", "videos"),
    "QwenImageModularPipeline": ("pipelines/qwenimage/test_qwenimage.py::QwenImagePipelineTesterConfig", "images"),
    "QwenImageEditModularPipeline": (
        "pipelines/qwenimage/test_qwenimage_edit.py::QwenImageEditPipelineTesterConfig", "images"),
    "QwenImageEditPlusModularPipeline": (
        "pipelines/qwenimage/test_qwenimage_edit_plus.py::QwenImageEditPlusPipelineTesterConfig", "images"),
    "StableDiffusion3ModularPipeline": (
        "pipelines/stable_diffusion_3/test_pipeline_stable_diffusion_3.py::StableDiffusion3PipelineFastTests", "images"),
    "StableDiffusionXLModularPipeline": (
        "pipelines/stable_diffusion_xl/test_stable_diffusion_xl.py::StableDiffusionXLPipelineFastTests", "images"),
    "WanModularPipeline": ("pipelines/wan/test_wan.py::WanPipelineTesterConfig", "videos"),
    "Wan22ModularPipeline": ("pipelines/wan/test_wan_22.py::Wan22PipelineTesterConfig", "videos"),
    "WanImage2VideoModularPipeline": (
        "pipelines/wan/test_wan_image_to_video.py::WanImageToVideoPipelineTesterConfig", "videos"),
    "Wan22Image2VideoModularPipeline": (
        "pipelines/wan/test_wan_22_image_to_video.py::Wan22ImageToVideoPipelineTesterConfig", "videos"),
    "Wan22VaceModularPipeline": ("pipelines/wan/test_wan_vace.py::WanVACEPipelineTesterConfig", "videos"),
    "ZImageModularPipeline": ("pipelines/z_image/test_z_image.py::ZImagePipelineFastTests", "images"),
    "Cosmos3OmniModularPipeline": ("pipelines/cosmos/test_cosmos3.py::Cosmos3OmniPipelineFastTests", "videos"),
    "Cosmos3DistilledModularPipeline": ("pipelines/cosmos/test_cosmos3.py::Cosmos3OmniPipelineFastTests", "videos"),
}


# why a Modular pipeline cannot run on its classic test's parts, where the error alone does not say
MODULAR_HINTS: dict[str, str] = {
    name: "its text step stacks the real encoder's layers 2, 5, ..., 35 (KREA2_TEXT_ENCODER_SELECT_LAYERS) for a "
          "transformer of 12 text layers; the classic test's encoder has 2 layers and its transformer takes 3"
    for name in ("Krea2ModularPipeline", "Krea2TurboModularPipeline")
} | {
    name: "a pyramid pipeline steps a scheduler of one stage per pyramid level (the checkpoint's; the distilled one "
          "a HeliosDMDScheduler); the classic test's HeliosScheduler has one stage"
    for name in ("HeliosPyramidModularPipeline", "HeliosPyramidDistilledModularPipeline")
}

# a Modular pipeline no tester config names, and the config whose inputs it takes (its own blocks stay)
MODULAR_INPUTS: dict[str, str] = {
    "HeliosPyramidDistilledModularPipeline":
        "modular_pipelines/helios/test_modular_pipeline_helios.py::HeliosPyramidModularPipelineTesterConfig",
}


def modular_pipelines() -> list[str]:
    """The Modular pipeline classes of the installed diffusers (their names end in ModularPipeline)."""
    import diffusers.modular_pipelines as mp

    return sorted(n for n in dir(mp) if n.endswith("ModularPipeline") and n != "ModularPipeline")


def modular_cases(tests: Path, names: Sequence[str]) -> list[Case]:
    """One case per tester config naming a Modular pipeline class, and one for each class no config names."""
    configs = modular_configs(tests)
    out = []
    for name in names:
        parts = MODULAR_PARTS.get(name, ("", ""))[0]
        # a recipe brings its own inputs: one case, whatever configs name the class
        mine = [] if parts.startswith("recipe:") else [c for c in configs if c.pipeline == name]
        if not mine and name in MODULAR_INPUTS:
            test, cls = MODULAR_INPUTS[name].split("::")
            mine = [Case("modular", test, cls, name, parts)]
        out += [Case("modular", c.test, c.cls, name, parts) for c in mine] or [Case("modular", "", "", name, parts)]
    return out


# ----------------------------------------------------------------------------------------------- results


@dataclass
class Result:
    """One case's outcome. kind: callback | no callback | modular; result: pass, or "<category>: <first line>" with
    category one of refused, failed, nondeterministic, not built."""
    kind: str
    name: str
    test: str
    result: str
    seconds: float
    source: str = ""                                       # the step source watch() picked (auto)
    steps: int | None = None                               # the plain call's steps, by its progress bar
    decoders: dict[str, str] = field(default_factory=dict)  # decoder -> pass or what went wrong
    notes: list[str] = field(default_factory=list)

    @property
    def category(self) -> str:
        return self.result.split(":", 1)[0]

    @property
    def built(self) -> bool:
        return self.category != "not built"


def first_line(e: BaseException | str, limit: int = 240) -> str:
    """The first non-empty line of a message; an exception's prefixed with its type."""
    text = e if isinstance(e, str) else str(e)
    line = next((s.strip() for s in text.splitlines() if s.strip()), "")
    if not isinstance(e, str):
        line = f"{type(e).__name__}: {line}" if line else type(e).__name__
    return line if len(line) <= limit else line[: limit - 3] + "..."


# ----------------------------------------------------------------------------------------------- the worker:
# everything below runs in the case's own process


class NoStandIn(RuntimeError):
    """A hub load inside the test's components that has no offline stand-in here: the case is not built."""


STOOD_IN: list[str] = []  # what this worker stood in for (hub loads served offline, ...), in order: notes


class OverTime(BaseException):
    """The case's time limit (signal.alarm). A BaseException, so that no `except Exception` inside a pipeline or
    a preview swallows it."""


_phase = "start"


def _alarm(signum: int, frame: Any) -> None:
    raise OverTime(_phase)


def _repo() -> Path:
    import previewlab

    return Path(previewlab.__file__).resolve().parent.parent


def _load_helpers() -> tuple[Any, Any]:
    """The repository's tests/tiny_pipes.py and tests/tiny_hooks.py, loaded by path as tests.tiny_pipes and
    tests.tiny_hooks under diffusers' own `tests` package (the worker imports diffusers' tests as `tests`:
    two of their files import themselves absolutely), so that tiny_hooks' `from tests import tiny_pipes` finds it."""
    import importlib.util

    import tests as package

    loaded = []
    for name in ("tiny_pipes", "tiny_hooks"):
        full = f"tests.{name}"
        if full not in sys.modules:
            path = _repo() / "tests" / f"{name}.py"
            if not path.is_file():
                raise NoStandIn(f"the repository's tests/{name}.py is not here (offline tokenizers and recipes)")
            spec = importlib.util.spec_from_file_location(full, path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[full] = module
            setattr(package, name, module)
            spec.loader.exec_module(module)
        loaded.append(sys.modules[full])
    return loaded[0], loaded[1]


# what the tests load from the hub, by repository: a config of the same architecture with the widths the tests'
# other components are sized for (random weights), and the offline tokenizer that stands in for its own
T5_TINY: dict[str, Any] = dict(vocab_size=1103, d_model=32, d_kv=8, d_ff=37, num_layers=5, num_decoder_layers=5, num_heads=4,
               relative_attention_num_buckets=8, dropout_rate=0.1, eos_token_id=1, pad_token_id=0,
               decoder_start_token_id=0, feed_forward_proj="relu", layer_norm_epsilon=1e-6)


def _config_for(repo: str) -> Any:
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


def _decoding(tok: Any) -> Any:
    """A WordPiece decoder for tiny_pipes' tokenizers (they have none: decode() would keep the "##" of every
    piece); pipelines that truncate a prompt cut the text by the length of the decoded tail (Kandinsky 5)."""
    from tokenizers import decoders

    tok.backend_tokenizer.decoder = decoders.WordPiece(prefix="##")
    return tok


def _qwen_tokenizer() -> Any:
    """tiny_pipes' Qwen2 tokenizer (its specials, its whole words for QwenImage's template), but a word it does
    not know is one <unk>, not its letters, so that a text is about as many tokens as with Qwen's BPE: pipelines
    that drop a template's first N tokens (Kandinsky 5: 128, 54) or cut a prompt to fit keep what they mean to.
    With tiny_hooks' Qwen chat template (Qwen-VL, Qwen3 and Cosmos pipelines encode chat messages through it)."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tiny_pipes, tiny_hooks = _load_helpers()
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


def _qwen2_vl(hidden: int = 16) -> Any:
    """A Qwen2-VL text encoder for the stand-in tokenizer's ids: text width `hidden` (EasyAnimate's text_embed_dim
    16), two layers, a one-block vision tower."""
    import transformers as tf

    tok = _qwen_tokenizer()
    ids = tok.convert_tokens_to_ids
    text = dict(vocab_size=len(tok), hidden_size=hidden, intermediate_size=16, num_hidden_layers=2,
                num_attention_heads=2, num_key_value_heads=2,
                rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [1, 1, 2]})
    vision = dict(depth=1, embed_dim=16, hidden_size=hidden, num_heads=2)
    return tf.Qwen2VLForConditionalGeneration(tf.Qwen2VLConfig(
        text_config=text, vision_config=vision, image_token_id=ids("<|image_pad|>"),
        video_token_id=ids("<|video_pad|>"), vision_start_token_id=ids("<|vision_start|>"),
        vision_end_token_id=ids("<|vision_end|>")))


def _chatglm_tokenizer() -> Any:
    """ChatGLM's tokenizer (Kolors) needs sentencepiece: a word-piece one that pads on the left and returns
    position_ids, as ChatGLMTokenizer does (0 on the padding, then 0, 1, ...)."""
    import torch
    from transformers import PreTrainedTokenizerFast

    tiny_pipes, _ = _load_helpers()
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


def _tokenizer_for(repo: str) -> Any:
    from previewlab.preview.models.offline_tokenizers import clip_tokenizer, t5_tokenizer

    tiny_pipes, tiny_hooks = _load_helpers()
    key = repo.lower()
    if "tiny-random-clip" in key:
        return clip_tokenizer()
    if key.endswith(("/tiny-random-t5", "/tiny-random-t5model", "/tiny-random-umt5")):
        return t5_tokenizer()
    if "qwen" in key or "cosmos3" in key:
        return _qwen_tokenizer()
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


def _processor_for(cls: Any, repo: str, kwargs: dict[str, Any]) -> Any:
    import transformers as tf

    tiny_pipes, tiny_hooks = _load_helpers()
    key, name = repo.lower(), getattr(cls, "__name__", "")
    if "qwen3vl" in key or name.startswith("Qwen3VL"):
        return tiny_hooks.qwen3vl_processor(_qwen_tokenizer())
    if "qwen2vl" in key:
        return tiny_pipes.qwen2vl_processor(_qwen_tokenizer())
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


def _install_stand_ins() -> None:
    """Serve the tests' hub loads offline (see the module's docstring). A local folder still loads as it would;
    anything else without a stand-in raises NoStandIn."""
    import transformers as tf
    from transformers.models.auto.auto_factory import _BaseAutoModelClass
    import diffusers

    def local(repo: Any) -> bool:
        return not isinstance(repo, str) or os.path.isdir(repo)

    def refuse(what: Any, repo: str) -> NoStandIn:
        return NoStandIn(f"{getattr(what, '__name__', what)}.from_pretrained({repo!r}) loads from the hub; no "
                         "offline stand-in here")

    def patch(owner: Any, make: Any) -> None:
        original = owner.__dict__["from_pretrained"].__func__

        def from_pretrained(cls: Any, repo: Any = None, *args: Any, **kwargs: Any) -> Any:
            if local(repo):
                return original(cls, repo, *args, **kwargs)
            made = make(cls, repo, kwargs)
            if made is None:
                raise refuse(cls, repo)
            STOOD_IN.append(f"served offline: {cls.__name__}.from_pretrained({repo!r})")
            return made
        owner.from_pretrained = classmethod(from_pretrained)

    def tokenizer(cls: Any, repo: str, kwargs: dict[str, Any]) -> Any:
        if any(w in repo.lower() for w in ("qwen3vl", "qwen2vl")) and "Processor" in cls.__name__:
            return _processor_for(cls, repo, kwargs)
        tok = _tokenizer_for(repo)
        if tok is not None and "model_max_length" in kwargs:
            tok.model_max_length = kwargs["model_max_length"]
        if tok is not None and "Roberta" in cls.__name__ and not isinstance(tok, cls):
            # AudioLDM 2 picks what to encode by isinstance(tokenizer, RobertaTokenizer, ...): the class asked for,
            # around the stand-in's tokenizer
            tok = cls(tokenizer_object=tok.backend_tokenizer, bos_token=tok.bos_token, eos_token=tok.eos_token,
                      unk_token=tok.unk_token, pad_token=tok.pad_token, model_max_length=tok.model_max_length)
        return tok

    def model(cls: Any, repo: str, kwargs: dict[str, Any]) -> Any:
        config = _config_for(repo)
        if config is None and "qwen3vl" in repo.lower():
            _, tiny_hooks = _load_helpers()
            made = tiny_hooks._qwen3_vl(_qwen_tokenizer(), hidden=16, layers=2)
        elif config is None and "qwen2vl" in repo.lower() and cls.__name__.startswith("Qwen2VL"):
            made = _qwen2_vl()
        elif config is None and "tiny-gemma3" in repo.lower():
            _, tiny_hooks = _load_helpers()  # 32 wide, as tiny_hooks' LTX-2 (the tests read its widths)
            made = tiny_hooks._gemma3(tiny_hooks.gemma3_tokenizer(), hidden=32)
        elif config is None:
            return None
        elif "chatglm" in repo.lower():  # its default skips initialising the weights: from_pretrained fills them
            made = cls(config, empty_init=False)
        else:
            made = cls.from_config(config) if issubclass(cls, _BaseAutoModelClass) else cls(config)
        dtype = kwargs.get("torch_dtype") or kwargs.get("dtype")
        return (made.to(dtype) if dtype is not None else made).eval()

    def config(cls: Any, repo: str, kwargs: dict[str, Any]) -> Any:
        return _config_for(repo)

    def nothing(cls: Any, repo: str, kwargs: dict[str, Any]) -> Any:
        return None

    patch(tf.PreTrainedTokenizerBase, tokenizer)
    patch(tf.AutoTokenizer, tokenizer)
    patch(tf.ProcessorMixin, lambda c, r, k: _processor_for(c, r, k))
    patch(tf.AutoProcessor, lambda c, r, k: _processor_for(c, r, k))
    patch(tf.ImageProcessingMixin, lambda c, r, k: _processor_for(c, r, k))
    patch(tf.FeatureExtractionMixin, lambda c, r, k: _processor_for(c, r, k))
    patch(tf.AutoImageProcessor, lambda c, r, k: _processor_for(c, r, k))
    patch(tf.PreTrainedModel, model)
    patch(_BaseAutoModelClass, model)
    patch(tf.PretrainedConfig, config)
    patch(tf.AutoConfig, config)
    patch(diffusers.ModelMixin, nothing)
    patch(diffusers.DiffusionPipeline, nothing)


def _stub_test_only_modules() -> None:
    """diffusers' tests import `parameterized` and `requests_mock` (not installed here) for tests this survey does
    not run: stand-ins that import."""
    import importlib.util
    import types

    if importlib.util.find_spec("requests_mock") is None:
        sys.modules["requests_mock"] = types.ModuleType("requests_mock")
    if importlib.util.find_spec("parameterized") is not None:
        return

    class parameterized:  # noqa: N801
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

        def __call__(self, f: Any) -> Any:
            return f

        @staticmethod
        def expand(*args: Any, **kwargs: Any) -> Any:
            return lambda f: f

    module = types.ModuleType("parameterized")
    module.parameterized = parameterized  # type: ignore[attr-defined]
    module.param = lambda *a, **k: (a, k)  # type: ignore[attr-defined]
    sys.modules["parameterized"] = module


SKIP_FRAMES = ("tqdm", "/torch/", "contextlib")  # frames between a bar and the code that opened it


class _Bars:
    """diffusers' progress bars, counted: each bar's ticks (update() calls, or items iterated) and where it was
    opened (the first frame outside tqdm and the progress_bar helpers). Every bar is switched off."""
    opened: list[Any] = []
    cls: Any = None

    @classmethod
    def make(cls) -> Any:
        if cls.cls is None:
            from tqdm.auto import tqdm

            class CountedBar(tqdm):  # type: ignore[misc, valid-type]
                def __init__(self, *args: Any, **kwargs: Any) -> None:
                    kwargs["disable"] = True
                    super().__init__(*args, **kwargs)
                    self.ticks = 0
                    f: Any = sys._getframe(1)
                    while f is not None and (f.f_code.co_name in ("__init__", "progress_bar")
                                             or any(w in f.f_code.co_filename for w in SKIP_FRAMES)):
                        f = f.f_back
                    self.site = f"{f.f_code.co_filename}:{f.f_lineno}" if f is not None else "?"
                    _Bars.opened.append(self)

                def update(self, n: float | None = 1) -> Any:
                    self.ticks += 1 if n is None else int(n)
                    return super().update(n)

                def __iter__(self) -> Any:
                    for item in super().__iter__():
                        self.ticks += 1
                        yield item

            cls.cls = CountedBar
        return cls.cls

    @classmethod
    def steps(cls) -> int | None:
        """The steps of the call since the last clear: the ticks of the last bar opened that ticked, summed with
        those opened just before it at the same place (a clip made in chunks opens one bar per chunk). A prior's
        bar, opened elsewhere before, is not counted. None: no bar ticked."""
        ticked = [b for b in cls.opened if b.ticks]
        if not ticked:
            return None
        site, total = ticked[-1].site, 0
        for bar in reversed(ticked):
            if bar.site != site:
                break
            total += bar.ticks
        return int(total)


def _patch_loaded_modules() -> None:
    """In every loaded diffusers module: a counted, switched-off bar for tqdm, and a stand-in for ftfy where the
    module uses ftfy but it is not installed (diffusers 0.42.1's Wan and Helios text steps call ftfy.fix_text
    unconditionally; the stand-in returns the text, as ftfy does for an ASCII prompt)."""
    import inspect
    import types

    import tqdm as tqdm_package
    from tqdm.auto import tqdm as auto_tqdm

    bar = _Bars.make()
    plain = {tqdm_package.tqdm, auto_tqdm}
    for name, module in list(sys.modules.items()):
        if not name.startswith("diffusers.") or module is None:
            continue
        if getattr(module, "tqdm", None) in plain:
            setattr(module, "tqdm", bar)
        if not hasattr(module, "ftfy"):
            try:
                source = inspect.getsource(module)
            except (OSError, TypeError):
                continue
            if "ftfy.fix_text" in source:
                setattr(module, "ftfy", types.SimpleNamespace(fix_text=lambda text: text))


OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "TRANSFORMERS_VERBOSITY": "error", "DIFFUSERS_VERBOSITY": "error", "OMP_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONWARNINGS": "ignore"}


def _prepare(tests: Path) -> None:
    """The worker's process: offline, one thread, quiet; diffusers' tests importable as `tests`. The environment
    (OFFLINE) is set before huggingface_hub is imported: it reads HF_HUB_OFFLINE once, at import."""
    import signal
    import warnings

    os.environ.update(OFFLINE)
    warnings.filterwarnings("ignore")
    sys.path.insert(0, str(tests.parent))
    for cached in [m for m in sys.modules if m == "tests" or m.startswith("tests.")]:
        del sys.modules[cached]  # a `tests` package imported from elsewhere
    import torch

    torch.set_num_threads(1)
    from diffusers.utils import logging as dlog
    from transformers.utils import logging as tlog

    dlog.set_verbosity_error()
    tlog.set_verbosity_error()
    _stub_test_only_modules()
    _install_stand_ins()
    signal.signal(signal.SIGALRM, _alarm)


def _seed() -> None:
    """The same global random state before every call: only the call's own generator and this make its noise."""
    import random

    import numpy as np
    import torch

    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)


def arrays(out: Any) -> list[Any]:
    """Every tensor or array in a call's result (an output dataclass, a tuple, a dict, a list of pictures)."""
    import numpy as np
    import torch

    if isinstance(out, torch.Tensor):
        return [out.detach().cpu().float().numpy() if out.dtype == torch.bfloat16 else out.detach().cpu().numpy()]
    if isinstance(out, np.ndarray):
        return [out]
    if hasattr(out, "getpixel"):  # a PIL image
        return [np.asarray(out)]
    if isinstance(out, dict) or hasattr(out, "to_tuple"):
        out = list(out.values())
    if isinstance(out, (list, tuple)):
        return [a for item in out for a in arrays(item)]
    return []


def _differs(a: list[Any], b: list[Any]) -> str:
    """"" when a and b are the same arrays bit for bit (NaN equal to NaN), else how they differ."""
    import numpy as np

    if len(a) != len(b):
        return f"{len(b)} arrays, not {len(a)}"
    for i, (x, y) in enumerate(zip(a, b)):
        if x.shape != y.shape or x.dtype != y.dtype:
            return f"array {i}: {y.dtype}{list(y.shape)}, not {x.dtype}{list(x.shape)}"
        nan = x.dtype.kind in "fc"
        if not np.array_equal(x, y, equal_nan=nan):
            gap = np.nanmax(np.abs(x.astype(np.float64) - y.astype(np.float64))) if x.dtype.kind in "fciub" else "?"
            return f"array {i} {list(x.shape)}: max difference {gap}"
    return ""


@dataclass
class _Built:
    pipe: Any
    inputs: Any            # () -> the call's kwargs, fresh
    call: Any              # (pipe, kwargs) -> output
    size: tuple[int, int] | None
    kind: str
    teardown: Any = None
    # other inputs to try, in order, where the plain call with `inputs` raises: (what they are, () -> kwargs)
    fallback: list[tuple[str, Any]] = field(default_factory=list)


def _size_of(kw: dict[str, Any]) -> tuple[int, int] | None:
    h, w = kw.get("height"), kw.get("width")
    return (int(h), int(w)) if isinstance(h, int) and isinstance(w, int) else None


def _test_instance(tests: Path, ref: str) -> Any:
    """An instance of test class FILE::Class, set up (unittest's setUp patches some pipelines' helpers)."""
    import importlib
    import unittest

    rel, cls_name = ref.split("::")
    module = importlib.import_module(_module_of(tests, tests / rel))
    cls = getattr(module, cls_name)
    inst = cls() if not issubclass(cls, unittest.TestCase) else cls("run")
    if hasattr(inst, "setUp"):
        inst.setUp()
    return inst


def _dummy_inputs(inst: Any, maker: str = "get_dummy_inputs") -> dict[str, Any]:
    import inspect

    fn = getattr(inst, maker)
    params = inspect.signature(fn).parameters
    return fn("cpu") if "device" in params else fn()


VISION_TOKENS = {"image_token_id": "<|image_pad|>", "video_token_id": "<|video_pad|>",
                 "vision_start_token_id": "<|vision_start|>", "vision_end_token_id": "<|vision_end|>"}


def _align_vision_ids(parts: dict[str, Any]) -> None:
    """The tests size Qwen-VL text encoders with Qwen's own token ids (<|image_pad|> 151655, ...), which the hub's
    tokenizer has; the offline stand-in numbers its tokens from 0: the encoder's config is told the stand-in's ids
    (what matters is that tokenizer and encoder agree)."""
    tok = getattr(parts.get("processor"), "tokenizer", None) or parts.get("tokenizer")
    tok = getattr(tok, "tokenizer", tok)  # a processor passed as the tokenizer (Kandinsky 5)
    if tok is None or not hasattr(tok, "convert_tokens_to_ids"):
        return
    for part in parts.values():
        config = getattr(part, "config", None)
        if config is None or not hasattr(config, "image_token_id"):
            continue
        for key, token in VISION_TOKENS.items():
            ids = tok.convert_tokens_to_ids(token)
            if hasattr(config, key) and isinstance(ids, int) and ids != tok.unk_token_id:
                setattr(config, key, ids)


def _eval(parts: dict[str, Any]) -> None:
    """Modules made from configs are in training mode, as no user's loaded model is: dropout would draw noise."""
    from torch import nn

    for part in parts.values():
        if isinstance(part, nn.Module):
            part.eval()


def _kind_of(pipeline_cls: Any) -> str:
    import inspect

    if any(c.__name__ == "ModularPipeline" for c in getattr(pipeline_cls, "__mro__", ())):
        return "modular"
    call = getattr(pipeline_cls, "__call__", None)
    params = inspect.signature(call).parameters if call is not None else {}
    return "callback" if "callback_on_step_end" in params else "no callback"


def _build_classic(tests: Path, case: Case) -> _Built:
    global _phase
    _phase = "import"
    inst = _test_instance(tests, f"{case.test}::{case.cls}")
    kind = _kind_of(inst.pipeline_class)
    _phase = "build"
    parts = inst.get_dummy_components()
    _align_vision_ids(parts)
    pipe = inst.pipeline_class(**parts)
    pipe.to("cpu")
    _eval(dict(pipe.components))
    if hasattr(pipe, "set_progress_bar_config"):
        pipe.set_progress_bar_config(disable=True)

    def inputs() -> dict[str, Any]:
        if hasattr(inst, "get_dummy_inversion_inputs"):  # LEdits++ edits the image its invert() inverted last
            inversion = _dummy_inputs(inst, "get_dummy_inversion_inputs")
            if isinstance(inversion.get("image"), list):
                inversion["image"] = inversion["image"][0]  # one image, as the tests' warm-up test inverts
            pipe.invert(**inversion)
        return _dummy_inputs(inst)

    return _Built(pipe, inputs, lambda p, kw: p(**kw), _size_of(_dummy_inputs(inst)), kind,
                  getattr(inst, "tearDown", None))


def _flux3_distilled(tiny_hooks: Any) -> Any:
    """Flux3DistilledModularPipeline on tiny_hooks' FLUX.3 parts (its guider stays the blocks' own), with the
    transformer made again as a flow-map one (flow_map=True: it also embeds the timestep each step jumps to),
    which the step-distilled pipeline calls with target_timestep."""
    import torch
    from diffusers import Flux3Transformer2DModel
    from diffusers.modular_pipelines import Flux3DistilledAutoBlocks, Flux3DistilledModularPipeline

    flux3 = tiny_hooks.build("flux3_modular")
    torch.manual_seed(0)
    flow_map = Flux3Transformer2DModel.from_config(flux3.pipe.transformer.config, flow_map=True).eval()
    blocks: Any = Flux3DistilledAutoBlocks()
    blocks.sub_blocks.pop("prompt_upsampler", None)  # a Qwen3.5 model that rewrites the prompt, as in flux3_modular
    pipe: Any = Flux3DistilledModularPipeline(blocks=blocks)
    pipe.update_components(transformer=flow_map, **{k: v for k, v in flux3.pipe.components.items()
                                                    if k in ("text_encoder", "tokenizer", "vae", "scheduler")})
    names = {p.name for p in pipe._blocks.inputs}
    return pipe, lambda: {k: v for k, v in flux3.kwargs().items() if k in names or k == "output"}, flux3.height


# what an error says when a library the pipeline needs is not installed here
MISSING = {"name 'transforms' is not defined": "torchvision is not installed",
           "name 'OmniGenMultiModalProcessor' is not defined": "torchvision is not installed"}

SHARED_INPUTS = ("height", "width", "num_frames", "max_sequence_length")  # what the classic parts are sized for


def _build_modular(tests: Path, case: Case) -> _Built:
    global _phase
    import diffusers.modular_pipelines as mp

    _phase = "build"
    pipe_cls = getattr(mp, case.pipeline)
    if not case.parts:
        raise NoStandIn("no tiny components: diffusers' tests have no classic test for it and its modular test "
                        "loads them from the hub")
    if case.parts.startswith("recipe:"):
        _, tiny_hooks = _load_helpers()
        name = case.parts.split(":", 1)[1]
        if name == "flux3_distilled":
            made, kwargs, side = _flux3_distilled(tiny_hooks)
        else:
            tiny = tiny_hooks.build(name)
            made, kwargs, side = tiny.pipe, tiny.kwargs, tiny.height
        return _Built(made, kwargs, lambda p, kw: p(**kw), _size_of(kwargs()) or (side, side), "modular")
    _phase = "import"
    config = _test_instance(tests, f"{case.test}::{case.cls}") if case.cls else None
    classic = _test_instance(tests, case.parts)
    _phase = "build"
    same_class = getattr(getattr(config, "pipeline_class", None), "__name__", "") == case.pipeline
    blocks_cls = getattr(config, "pipeline_blocks_class", None) if same_class else None
    pipe: Any = pipe_cls(blocks=blocks_cls()) if blocks_cls is not None else pipe_cls()
    parts = classic.get_dummy_components()
    _align_vision_ids(parts)
    if "transformer_2" in pipe._component_specs and parts.get("transformer_2") is None and "transformer" in parts:
        # a Wan 2.2 two-expert pipeline on a one-transformer test (VACE): a second expert of the same config, as
        # tiny_hooks' wan22_modular makes one (the low-noise steps run it)
        import torch

        torch.manual_seed(1)
        parts["transformer_2"] = type(parts["transformer"]).from_config(parts["transformer"].config).eval()
        STOOD_IN.append("stand-in: transformer_2, a second transformer of the test's transformer config")
    # its models, tokenizers and schedulers, and config values; the guiders stay the blocks' own (a classic test's
    # guider is set for its own checks: HunyuanVideo 1.5's CFG 1.0 leaves the modular text step without negatives)
    specs = pipe._component_specs
    known = {k for k, spec in specs.items() if spec.default_creation_method == "from_pretrained"}
    pipe.update_components(**{k: v for k, v in parts.items()
                              if v is not None and (k in known or k in pipe._config_specs)})
    # the modular pipeline makes its image and video processors from fixed configs (the real model's VAE); the
    # classic pipeline on the same parts makes them for this VAE (diffusers' modular tests patch them likewise)
    try:
        same = classic.pipeline_class(**parts)
    except Exception:
        same = None
    processors = {k: getattr(same, k) for k in pipe._component_specs
                  if k.endswith("_processor") and getattr(same, k, None) is not None}
    pipe.update_components(**processors)
    _eval(pipe.components)
    output = getattr(config, "output_name", None) or MODULAR_PARTS[case.pipeline][1]
    names = {p.name for p in pipe._blocks.inputs}

    def classic_inputs() -> dict[str, Any]:
        return {k: v for k, v in _dummy_inputs(classic).items() if k in names}

    def sized_inputs() -> dict[str, Any]:
        kw, theirs = _dummy_inputs(config), _dummy_inputs(classic)
        kw.update({k: theirs[k] for k in SHARED_INPUTS if k in theirs and k in names})
        return kw

    call = lambda p, kw: p(**kw, output=output)  # noqa: E731
    if config is None:
        return _Built(pipe, classic_inputs, call, _size_of(classic_inputs()), "modular")
    # the tester config's inputs, sized for the hub's parts; where they do not fit these, the classic test's sizes
    mine = lambda: _dummy_inputs(config)  # noqa: E731
    return _Built(pipe, mine, call, _size_of(mine()), "modular",
                  fallback=[("the tester config's inputs at the classic test's sizes", sized_inputs)])


def _watched(built: _Built, decoder: str, ref: list[Any], steps: int | None) -> tuple[str, str]:
    """One watched call: (pass or what went wrong, the source watch() picked)."""
    from previewlab import watch

    kw = built.inputs()  # before the watch: LEdits++'s inversion belongs to no watched call
    try:
        w = watch(built.pipe, decoder=decoder, mode="sync", size=built.size, source="auto")
    except Exception as e:  # a refusal is an exception at watch()
        return "refused: " + first_line(e), ""
    source = w.source
    try:
        if source == "callback":
            kw.update(callback_on_step_end=w, callback_on_step_end_tensor_inputs=w.tensor_inputs)
        _seed()
        _Bars.opened.clear()
        try:
            out = arrays(built.call(built.pipe, kw))
        except Exception as e:
            return "failed: the watched call raised " + first_line(e), source
        rows, record = list(w.rows), w.record
    except Exception as e:
        return "failed: reading the watch raised " + first_line(e), source
    finally:
        try:
            w.remove()
        except Exception as e:
            return "failed: remove() raised " + first_line(e), source
    problems = []
    failed = [r for r in rows if "failed" in (r.event or "").lower()]
    if failed:
        problems.append(f"step {failed[0].step}: {failed[0].event}")
    gap = _differs(ref, out)
    if gap:
        problems.append(f"output differs from the plain call ({gap})")
    if steps is not None and len(rows) != steps:
        problems.append(f"{len(rows)} rows for {steps} steps")
    if len({r.step for r in rows}) != len(rows):
        problems.append(f"steps repeated in the rows: {[r.step for r in rows]}")
    if decoder != "none" and any(not r.preview for r in rows):
        problems.append(f"no preview at steps {[r.step for r in rows if not r.preview]}")
    if record is None:
        problems.append("no record")
    return ("failed: " + "; ".join(problems) if problems else "pass"), source


def _verdict(outcomes: dict[str, str]) -> str:
    """The case's result from its decoders' outcomes: pass, or the first one that did not pass, naming the decoders
    it holds for unless it holds for all."""
    bad = [(d, r) for d, r in outcomes.items() if r != "pass"]
    if not bad:
        return "pass"
    first = bad[0][1]
    same = [d for d, r in bad if r == first]
    if len(same) == len(outcomes):
        return first
    category, message = first.split(": ", 1)
    return f"{category}: [{', '.join(same)}] {message}"


def worker(tests: Path, case: Case, timeout_s: int) -> Result:
    """Build and survey one case in this process (see the module's docstring)."""
    import signal

    global _phase
    start = time.perf_counter()
    _prepare(tests)
    res = Result(kind=_installed_kind(case), name=case.name, test=case.test or case.parts, result="", seconds=0.0)
    try:
        signal.alarm(timeout_s)
        built = _build_modular(tests, case) if case.kind == "modular" else _build_classic(tests, case)
        signal.alarm(0)
        res.kind = built.kind
        _patch_loaded_modules()
        signal.alarm(timeout_s)
        _phase = "plain call"
        kw = built.inputs()
        _seed()
        _Bars.opened.clear()
        try:
            ref = arrays(built.call(built.pipe, kw))
        except Exception as e:
            if not built.fallback:
                raise
            what, built.inputs = built.fallback.pop(0)
            built.size = _size_of(built.inputs())
            res.notes.append(f"inputs: {what} (with its own: {first_line(e)})")
            kw = built.inputs()
            _seed()
            _Bars.opened.clear()
            ref = arrays(built.call(built.pipe, kw))
        res.steps = _Bars.steps()
        if not ref:
            res.result = "not built: the call returns no array to compare"
            return res
        kw = built.inputs()
        _seed()
        gap = _differs(ref, arrays(built.call(built.pipe, kw)))
        if gap:
            res.result = f"nondeterministic: two plain calls differ ({gap})"
            return res
        sources = []
        for decoder in DECODERS:
            _phase = f"the watched call with {decoder}"
            res.decoders[decoder], source = _watched(built, decoder, ref, res.steps)
            sources.append(source)
        res.source = "/".join(sorted({s for s in sources if s})) or "-"
        res.result = _verdict(res.decoders)
        _phase = "the plain call after remove()"
        kw = built.inputs()
        _seed()
        gap = _differs(ref, arrays(built.call(built.pipe, kw)))
        if gap and res.result == "pass":
            res.result = f"failed: a plain call after remove() differs from the first ({gap})"
        if res.steps is None:
            res.notes.append("no progress bar ticked: rows not counted against steps")
        signal.alarm(0)
        if built.teardown is not None:
            try:
                built.teardown()
            except Exception:
                pass
    except OverTime as e:
        phase = str(e)
        res.result = (f"not built: {phase} took over {timeout_s} s" if phase in ("import", "build", "plain call")
                      else f"failed: over the time limit ({timeout_s} s) in {phase}")
    except NoStandIn as e:
        res.result = "not built: " + first_line(str(e))
    except BaseException as e:  # pytest's skip at import (Skipped) is a BaseException
        if type(e).__name__ in ("Skipped", "SkipTest"):
            res.result = "not built: the test file skips itself: " + first_line(str(e))
            return res
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        what = {"import": "the test file does not import here", "build": "building raised",
                "plain call": "the plain call raised"}.get(_phase, f"{_phase} raised")
        what += next((f" ({why})" for clue, why in MISSING.items() if clue in str(e)), "")
        if case.pipeline in MODULAR_HINTS:
            what += f" ({MODULAR_HINTS[case.pipeline]})"
        res.result = f"{'not built' if _phase in ('import', 'build', 'plain call', 'start') else 'failed'}: " \
                     f"{what}: {first_line(e)}"
    finally:
        signal.alarm(0)
        res.seconds = round(time.perf_counter() - start, 1)
        res.notes += list(dict.fromkeys(STOOD_IN))
    return res


def _installed_kind(case: Case) -> str:
    """The kind from the installed diffusers, before anything is built (a test file that does not import still
    has one); "unknown" for a pipeline class the installed diffusers does not have."""
    if case.kind == "modular":
        return "modular"
    try:
        import diffusers

        cls = getattr(diffusers, case.pipeline, None)
    except Exception:
        cls = None
    return _kind_of(cls) if cls is not None else "unknown"


# ----------------------------------------------------------------------------------------------- the driver


def run_case(tests: Path, case: Case, timeout_s: int) -> Result:
    """The case in a process of its own: one thread; killed if it outlives its two time limits (build, calls)
    and an allowance for its imports."""
    env = dict(os.environ, **OFFLINE)
    cmd = [sys.executable, "-m", "previewlab.bench.pipeline_survey", "--tests", str(tests), "--timeout",
           str(timeout_s), "--worker", json.dumps(asdict(case))]
    start = time.perf_counter()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=2 * timeout_s + 120, env=env,
                              cwd=str(_repo()))
        stdout, stderr, rc = done.stdout, done.stderr, done.returncode
    except subprocess.TimeoutExpired as e:
        stdout = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        stderr, rc = "", None
    for line in reversed(stdout.splitlines()):
        if line.startswith(MARK):
            return Result(**json.loads(line[len(MARK):]))
    seconds = round(time.perf_counter() - start, 1)
    kind = "modular" if case.kind == "modular" else "unknown"
    why = (f"killed after {seconds:.0f} s" if rc is None else
           f"the worker exited with {rc}: {first_line(stderr.strip().splitlines()[-1] if stderr.strip() else '')}")
    return Result(kind=kind, name=case.name, test=case.test or case.parts, result=f"failed: {why}", seconds=seconds)


def _pct(n: int, d: int) -> str:
    return f"{100.0 * n / d:.0f} %" if d else "-"


def summary(results: Sequence[Result]) -> list[str]:
    """The table: per kind, cases, built, passed (of those built), and the other outcomes."""
    kinds = list(KINDS) + sorted({r.kind for r in results} - set(KINDS))
    head = f"{'kind':<12} {'cases':>5} {'built':>5} {'passed':>6} {'of built':>8} {'refused':>7} {'failed':>6} " \
           f"{'nondet.':>7} {'not built':>9}"
    lines = [head, "-" * len(head)]
    for kind in kinds + ["all"]:
        mine = [r for r in results if kind == "all" or r.kind == kind]
        if not mine:
            continue
        built = [r for r in mine if r.built]
        count = {c: sum(r.category == c for r in mine) for c in ("pass", "refused", "failed", "nondeterministic")}
        lines.append(f"{kind:<12} {len(mine):>5} {len(built):>5} {count['pass']:>6} "
                     f"{_pct(count['pass'], len(built)):>8} {count['refused']:>7} {count['failed']:>6} "
                     f"{count['nondeterministic']:>7} {len(mine) - len(built):>9}")
    return lines


def report(results: Sequence[Result], header: Sequence[str]) -> str:
    width = max([len(r.name) for r in results] + [10])
    order = {k: i for i, k in enumerate(KINDS)}
    ranked = sorted(results, key=lambda r: (order.get(r.kind, 9), r.name))
    lines = list(header) + ["", "## Summary", ""] + summary(results)
    lines += ["", "## Not passed, by outcome (first line)", ""]
    for category in ("refused", "failed", "nondeterministic", "not built"):
        mine = [r for r in ranked if r.category == category]
        if mine:
            lines.append(f"{category} ({len(mine)}):")
            lines += [f"  {r.kind:<11} {r.name}: {r.result.split(': ', 1)[1] if ': ' in r.result else r.result}"
                      for r in mine]
            lines.append("")
    served: dict[str, int] = {}
    for r in results:
        for note in r.notes:
            served[note] = served.get(note, 0) + 1
    if served:
        lines += ["## Notes (cases)", ""] + [f"  {n} ({k})" for n, k in sorted(served.items())] + [""]
    lines += ["## Every case: kind | class (pipeline) | result | seconds | source | steps", ""]
    for r in ranked:
        extra = f" | {r.source or '-'} | {r.steps if r.steps is not None else '-'}"
        lines.append(f"{r.kind:<11} | {r.name:<{width}} | {r.result} | {r.seconds:.1f}{extra}")
    return "\n".join(lines) + "\n"


def _git(folder: Path) -> str:
    """The checkout's commit, and the files it has changed, or why there is none."""
    try:
        sha = subprocess.run(["git", "-C", str(folder), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(folder), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.split("\n")
    except (OSError, subprocess.CalledProcessError):
        return "not a git checkout"
    changed = [line[3:] for line in dirty if line.strip()]
    return f"git {sha}" + (f", changed: {', '.join(changed)}" if changed else ", clean")


def _header(tests: Path, argv: Sequence[str], notes: Sequence[str]) -> list[str]:
    import platform

    import diffusers
    import torch
    import transformers

    return [f"# previewlab pipeline survey (issue 32), {time.strftime('%Y-%m-%d %H:%M')}",
            f"# command: python -m previewlab.bench.pipeline_survey {shlex.join(argv)}",
            f"# previewlab: {_repo()} ({_git(_repo())})",
            f"# tests: {tests}"] + [f"# {n}" for n in notes] + [
            f"# diffusers {diffusers.__version__}, transformers {transformers.__version__}, torch {torch.__version__},"
            f" python {platform.python_version()}, one thread per case",
            "# pass: watch() with none, latent2rgb and vae (source auto) leaves the output bit-identical to a plain "
            "call,",
            "# one row per step (the pipeline's own progress bar), a preview at every step (latent2rgb, vae), no "
            "failed event,",
            "# and a plain call after remove() is still identical."]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--tests", required=True, type=Path, help="diffusers' tests folder (with pipelines/ in it)")
    p.add_argument("--out", type=Path, help="the results file (rewritten after every case)")
    p.add_argument("--json", type=Path, help="also keep the results as JSON lines here; with --only or --again, "
                   "the cases not rerun are kept from it")
    p.add_argument("--again", action="store_true", help="with --json: run only the cases it holds no pass for")
    p.add_argument("--resume", action="store_true", help="with --json: run only the cases it holds no result for")
    p.add_argument("--timeout", type=int, default=120, help="seconds for a case's build, and again for its calls")
    p.add_argument("--only", action="append", default=[], help="cases whose name or file contains this (repeatable)")
    p.add_argument("--list", action="store_true", help="list the cases and stop")
    p.add_argument("--report", action="store_true", help="rewrite --out from --json and stop (the header kept)")
    p.add_argument("--note", action="append", default=[], help="a line for the results file's header (repeatable)")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    tests = args.tests.resolve()
    if (tests / "tests" / "pipelines").is_dir():
        tests = tests / "tests"
    if args.worker:
        res = worker(tests, Case(**json.loads(args.worker)), args.timeout)
        print(MARK + json.dumps(asdict(res)), flush=True)
        return 0
    if not (tests / "pipelines").is_dir():
        p.error(f"{tests} has no pipelines/ folder: pass diffusers' tests folder")
    cases = classic_cases(tests) + modular_cases(tests, modular_pipelines())
    if args.only:
        cases = [c for c in cases if any(o in c.name or o in c.test or o in c.parts for o in args.only)]
    if args.list:
        for c in cases:
            print(f"{c.kind:<8} {c.name}  {c.test or c.parts}")
        return 0
    keys = {c.name + (c.test or c.parts) for c in cases}
    kept: dict[str, Result] = {}
    if args.json is not None and args.json.is_file() and (args.only or args.again or args.resume):
        for line in args.json.read_text().splitlines():
            r = Result(**json.loads(line))
            if r.name + r.test in keys or args.only:
                kept[r.name + r.test] = r
    if args.again or args.resume:
        cases = [c for c in cases if kept.get(c.name + (c.test or c.parts), None) is None
                 or (args.again and kept[c.name + (c.test or c.parts)].result != "pass")]
    header = _header(tests, list(argv if argv is not None else sys.argv[1:]), args.note)
    if args.report:
        if args.json is None or args.out is None:
            p.error("--report needs --json and --out")
        if args.out.is_file():
            header = [line for line in args.out.read_text().splitlines() if line.startswith("#")] or header
        stored = [Result(**json.loads(line)) for line in args.json.read_text().splitlines()]
        args.out.write_text(report(stored, header))
        print("\n".join(summary(stored)))
        return 0
    results: dict[str, Result] = dict(kept)
    for i, case in enumerate(cases, 1):
        res = run_case(tests, case, args.timeout)
        results[res.name + res.test] = res
        print(f"[{i}/{len(cases)}] {res.kind:<11} {res.name}: {res.result} ({res.seconds:.1f} s)", flush=True)
        if args.out is not None:
            args.out.write_text(report(list(results.values()), header))
        if args.json is not None:
            args.json.write_text("".join(json.dumps(asdict(r)) + "\n" for r in results.values()))
    print("\n".join(summary(list(results.values()))))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A case built: a classic test's pipeline on its dummy components, or a Modular pipeline on a classic test's
components (modular_parts.py) or a tests/tiny_hooks.py recipe, with the inputs to call it with (modules in eval(),
as loaded models are)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from previewlab.bench.survey import process
from previewlab.bench.survey.cases import Case, module_of
from previewlab.bench.survey.modular_parts import MODULAR_PARTS
from previewlab.bench.survey.offline import STOOD_IN, NoStandIn, load_helpers


@dataclass
class Built:
    """A built case: its pipeline, how to make its inputs and call it, its kind."""
    pipe: Any
    inputs: Any            # () -> the call's kwargs, fresh
    call: Any              # (pipe, kwargs) -> output
    kind: str
    teardown: Any = None
    # other inputs to try, in order, where the plain call with `inputs` raises: (what they are, () -> kwargs)
    fallback: list[tuple[str, Any]] = field(default_factory=list)


DEPRECATED = "Deprecated Pipeline: "  # the skip diffusers' PipelineTesterMixin.setUp gives a deprecated pipeline


def _test_instance(tests: Path, ref: str) -> Any:
    """An instance of test class FILE::Class, set up (unittest's setUp patches some pipelines' helpers). A
    deprecated pipeline (Stable Cascade's three) is built all the same: its test skips itself in setUp, after
    the mixin's own set-up, but 0.42.1 still ships it and users still run it (noted in STOOD_IN)."""
    import importlib
    import unittest

    rel, cls_name = ref.split("::")
    module = importlib.import_module(module_of(tests, tests / rel))
    cls = getattr(module, cls_name)
    inst = cls() if not issubclass(cls, unittest.TestCase) else cls("run")
    if hasattr(inst, "setUp"):
        try:
            inst.setUp()
        except BaseException as e:  # pytest's skip (Skipped) is a BaseException
            if type(e).__name__ not in ("Skipped", "SkipTest") or not str(e).startswith(DEPRECATED):
                raise
            STOOD_IN.append(f"built though its test skips it ({str(e)}): 0.42.1 still ships it")
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


def kind_of(pipeline_cls: Any) -> str:
    """callback, no callback (whether `__call__` takes callback_on_step_end) or modular."""
    import inspect

    if any(c.__name__ == "ModularPipeline" for c in getattr(pipeline_cls, "__mro__", ())):
        return "modular"
    call = getattr(pipeline_cls, "__call__", None)
    params = inspect.signature(call).parameters if call is not None else {}
    return "callback" if "callback_on_step_end" in params else "no callback"


def build_classic(tests: Path, case: Case) -> Built:
    """The test class's pipeline on its dummy components, called with its dummy inputs."""
    process.enter("import")
    inst = _test_instance(tests, f"{case.test}::{case.cls}")
    kind = kind_of(inst.pipeline_class)
    process.enter("build")
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

    return Built(pipe, inputs, lambda p, kw: p(**kw), kind,
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
    return pipe, lambda: {k: v for k, v in flux3.kwargs().items() if k in names or k == "output"}


def _from_recipe(name: str) -> Built:
    """A Modular pipeline tests/tiny_hooks.py builds itself (case.parts "recipe:NAME")."""
    _, tiny_hooks = load_helpers()
    if name == "flux3_distilled":
        made, kwargs = _flux3_distilled(tiny_hooks)
    else:
        tiny = tiny_hooks.build(name)
        made, kwargs = tiny.pipe, tiny.kwargs
    return Built(made, kwargs, lambda p, kw: p(**kw), "modular")


def _stand_in_parts(pipe: Any, classic: Any) -> None:
    """The classic test's tiny components into the Modular pipeline, with the processors the classic pipeline
    makes for them; all in eval mode."""
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


SHARED_INPUTS = ("height", "width", "num_frames", "max_sequence_length")  # what the classic parts are sized for


def build_modular(tests: Path, case: Case) -> Built:
    """The Modular pipeline on the parts MODULAR_PARTS names, called with its tester config's inputs (else the
    classic test's); NoStandIn where no parts are known."""
    import diffusers.modular_pipelines as mp

    process.enter("build")
    pipe_cls = getattr(mp, case.pipeline)
    if not case.parts:
        raise NoStandIn("no tiny components: diffusers' tests have no classic test for it and its modular test "
                        "loads them from the hub")
    if case.parts.startswith("recipe:"):
        return _from_recipe(case.parts.split(":", 1)[1])
    process.enter("import")
    config = _test_instance(tests, f"{case.test}::{case.cls}") if case.cls else None
    classic = _test_instance(tests, case.parts)
    process.enter("build")
    same_class = getattr(getattr(config, "pipeline_class", None), "__name__", "") == case.pipeline
    blocks_cls = getattr(config, "pipeline_blocks_class", None) if same_class else None
    pipe: Any = pipe_cls(blocks=blocks_cls()) if blocks_cls is not None else pipe_cls()
    _stand_in_parts(pipe, classic)
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
        return Built(pipe, classic_inputs, call, "modular")
    # the tester config's inputs, sized for the hub's parts; where they do not fit these, the classic test's sizes
    mine = lambda: _dummy_inputs(config)  # noqa: E731
    return Built(pipe, mine, call, "modular",
                  fallback=[("the tester config's inputs at the classic test's sizes", sized_inputs)])

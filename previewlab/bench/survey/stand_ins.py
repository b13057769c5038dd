"""Serve the tests' hub loads offline: every `from_pretrained` of transformers' and diffusers' base classes is
patched to load a local folder as it would, to make a stand-in for a hub repository (hub_tokenizers.py,
hub_encoders.py; noted in STOOD_IN), or to raise NoStandIn."""
from __future__ import annotations

import os
from typing import Any, Callable

from previewlab.bench.survey.hub_encoders import config_for, model_of_class
from previewlab.bench.survey.hub_tokenizers import processor_for, tokenizer_of_class
from previewlab.bench.survey.offline import STOOD_IN, NoStandIn

Make = Callable[[Any, str, dict[str, Any]], Any]  # (class, repository, from_pretrained's kwargs) -> stand-in or None


def _local(repo: Any) -> bool:
    return not isinstance(repo, str) or os.path.isdir(repo)


def _refuse(what: Any, repo: str) -> NoStandIn:
    return NoStandIn(f"{getattr(what, '__name__', what)}.from_pretrained({repo!r}) loads from the hub; no "
                     "offline stand-in here")


def _patch(owner: Any, make: Make) -> None:
    original = owner.__dict__["from_pretrained"].__func__

    def from_pretrained(cls: Any, repo: Any = None, *args: Any, **kwargs: Any) -> Any:
        if _local(repo):
            return original(cls, repo, *args, **kwargs)
        made = make(cls, repo, kwargs)
        if made is None:
            raise _refuse(cls, repo)
        STOOD_IN.append(f"served offline: {cls.__name__}.from_pretrained({repo!r})")
        return made
    owner.from_pretrained = classmethod(from_pretrained)


def install() -> None:
    """Serve the tests' hub loads offline (see the package's docstring). A local folder still loads as it would;
    anything else without a stand-in raises NoStandIn."""
    import transformers as tf
    from transformers.models.auto.auto_factory import _BaseAutoModelClass
    import diffusers

    def config(cls: Any, repo: str, kwargs: dict[str, Any]) -> Any:
        return config_for(repo)

    def nothing(cls: Any, repo: str, kwargs: dict[str, Any]) -> Any:
        return None

    _patch(tf.PreTrainedTokenizerBase, tokenizer_of_class)
    _patch(tf.AutoTokenizer, tokenizer_of_class)
    _patch(tf.ProcessorMixin, processor_for)
    _patch(tf.AutoProcessor, processor_for)
    _patch(tf.ImageProcessingMixin, processor_for)
    _patch(tf.FeatureExtractionMixin, processor_for)
    _patch(tf.AutoImageProcessor, processor_for)
    _patch(tf.PreTrainedModel, model_of_class)
    _patch(_BaseAutoModelClass, model_of_class)
    _patch(tf.PretrainedConfig, config)
    _patch(tf.AutoConfig, config)
    _patch(diffusers.ModelMixin, nothing)
    _patch(diffusers.DiffusionPipeline, nothing)

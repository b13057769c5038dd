"""The settings a final PNG carries, as the PNG-info readers of other tools read them.

  parameters  AUTOMATIC1111's text chunk (its "PNG Info" tab, and the readers that follow it: Forge, SD.Next,
              civitai): the prompt, then "Steps: 20, Sampler: ..., CFG scale: 7.5, Seed: 4, Size: 64x64, Model: ..."
  prompt      ComfyUI's: the run as an API-format graph (checkpoint, two text encodes, an empty latent, a
              sampler), which its "Load" reads back as a workflow's inputs

Each is a few hundred bytes of text, made once after the run's final decode: no work in the denoising loop.
"""
from __future__ import annotations

import json

from previewlab.preview.record.run import RunMeta


def parameters(meta: RunMeta, sampler: str) -> str:
    """A1111's `parameters`: the prompt line, then the settings line (a negative prompt line between them only
    where one was given: previewlab takes none). A guidance a script's call did not show is left out."""
    settings = [f"Steps: {meta.steps}", f"Sampler: {sampler}"]
    if meta.guidance is not None:
        settings.append(f"CFG scale: {meta.guidance:g}")
    if meta.seed >= 0:
        settings.append(f"Seed: {meta.seed}")
    settings += [f"Size: {meta.width}x{meta.height}", f"Model: {meta.model}"]
    if meta.batch > 1:
        settings.append(f"Batch size: {meta.batch}")
    if meta.init is not None and meta.strength is not None:
        settings.append(f"Denoising strength: {meta.strength:g}")
    return f"{meta.prompt}\n" + ", ".join(settings)


def comfy_prompt(meta: RunMeta, sampler: str) -> str:
    """ComfyUI's `prompt`: the API-format graph of a plain text-to-image run with these settings."""
    graph = {
        "4": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": meta.model}},
        "5": {"class_type": "EmptyLatentImage",
              "inputs": {"width": meta.width, "height": meta.height, "batch_size": meta.batch}},
        "6": {"class_type": "CLIPTextEncode", "inputs": {"text": meta.prompt, "clip": ["4", 1]}},
        "7": {"class_type": "CLIPTextEncode", "inputs": {"text": "", "clip": ["4", 1]}},
        "3": {"class_type": "KSampler",
              "inputs": {"seed": max(meta.seed, 0), "steps": meta.steps,
                         "cfg": meta.guidance if meta.guidance is not None else 1.0, "sampler_name": sampler,
                         "scheduler": "normal", "denoise": meta.strength if meta.init is not None and
                         meta.strength is not None else 1.0,
                         "model": ["4", 0], "positive": ["6", 0], "negative": ["7", 0], "latent_image": ["5", 0]}},
    }
    return json.dumps(graph, ensure_ascii=False)


def png_text(meta: RunMeta, sampler: str) -> dict[str, str]:
    """The text chunks of a run's final PNG: A1111's parameters and ComfyUI's prompt."""
    return {"parameters": parameters(meta, sampler), "prompt": comfy_prompt(meta, sampler)}

"""What kind of pipeline a watch is handed, read once as the watch is made and never touching its modules: its
Model (script_pipe.model_of), where its steps come from (sources.source_of), how its loop numbers them, the
pipelines it runs inside its own call, a clip's rate, and whether the decoder asked can preview it."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from previewlab.preview.call.script_pipe import model_of
from previewlab.preview.call.watch_settings import WatchSettings
from previewlab.preview.decoding.contract import DecoderError
from previewlab.preview.decoding.rgb_decoder import has_factors
from previewlab.preview.decoding.tae_decoder import taesd_refusal
from previewlab.preview.models import Model
from previewlab.preview.models.reading import inner_pipelines
from previewlab.preview.models.video_presets import clip_defaults
from previewlab.preview.settings import default_mode
from previewlab.preview.source.sources import chunked, source_of
from previewlab.preview.source.steps import Source, per_chunk


@dataclass(frozen=True)
class WatchedPipe:
    """A user's pipeline as its watch reads it."""
    model: Model
    settings: WatchSettings  # as asked; where no mode was asked, the one the model's device takes
    source: Source           # where the steps come from
    fps: float               # a clip's rate: the one given, else its family's (what diffusers' own examples export
                             # at); 0: an image
    per_chunk: bool          # its loop calls the step callback per chunk, numbering each chunk's steps from 0
    chunked: bool            # a Modular pipeline whose denoising loops run per chunk (steps numbered across them)
    inner: tuple[Any, ...]   # the pipelines of its own it hands its step callback to (Stable Cascade's combined
                             # pipeline: decoder_pipe)

    @classmethod
    def read(cls, pipe: Any, settings: WatchSettings, mode_asked: bool) -> WatchedPipe:
        """Raises SourceError, DecoderError or FamilyError for a pipeline that cannot be previewed as asked,
        ModelError for a TAE that does not fit it."""
        model = model_of(pipe, settings.taesd)
        if not mode_asked:  # overlap where a side stream exists, sync on a CPU
            settings = replace(settings, preview=replace(settings.preview, mode=default_mode(model.device.type)))
        fps = settings.fps or (clip_defaults(pipe, model.family)[1] if model.space.video else 0.0)
        _check_decoder(pipe, model, settings.preview.decoder)
        return cls(model, settings, source_of(pipe, settings.source), fps, per_chunk=per_chunk(pipe),
                   chunked=chunked(pipe), inner=tuple(inner for _, inner in inner_pipelines(pipe)))


def _check_decoder(pipe: Any, model: Model, decoder: str) -> None:
    """Raises DecoderError for a decoder that cannot preview this pipeline, saying which one can."""
    if decoder == "taesd" and model.taesd is None and not model.space.pixel:
        raise DecoderError(taesd_refusal(model).replace("--taesd PATH", "taesd=PATH"))
    if decoder == "latent2rgb" and model.space.stage and not has_factors(model):
        raise DecoderError(f"decoder latent2rgb: {type(pipe).__name__}'s latents ({model.space.describe()}) "
                           "have no known factors and no VAE to fit them against; use taesd")
    if decoder == "vae" and model.space.stage:
        raise DecoderError(f"decoder vae: {type(pipe).__name__} has no VAE ({model.space.stage}); use "
                           "latent2rgb or taesd")

"""What a model previews with: a TAE decoder that takes its latent space's channels, and latent2rgb factors
of its own where its folder ships them (loading.shipped)."""
from __future__ import annotations

from typing import Any, Literal

from torch import nn

from previewlab.preview.models import loading
from previewlab.preview.models.families import Family
from previewlab.preview.models.latent_spaces import LatentSpace
from previewlab.preview.models.latent_formats import Factors
from previewlab.preview.models.model import ModelError
from previewlab.preview.models.reading import latent_space


def tae_channels(tae: Any) -> int | None:
    """The latent channels a TAE decoder takes: madebyollin's (its first conv after the clamp) or a diffusers
    AutoencoderTiny's config."""
    cfg = getattr(tae, "config", None)
    if cfg is not None and getattr(cfg, "latent_channels", None) is not None:
        return int(cfg.latent_channels)
    first = next((m for m in tae.modules() if isinstance(m, nn.Conv2d)), None)
    return int(first.in_channels) if first is not None else None


def check_tae(tae: Any, space: LatentSpace, path: str) -> None:
    """A TAE that does not take this latent space's channels is refused before any run, in one line."""
    got = tae_channels(tae)
    if got is not None and got != space.channels:
        raise ModelError(f"--taesd {path}: a TAE for {got} latent channels, but the model's latent space is "
                         f"{space.describe()}; a TAE must take {space.channels} channels")


def load_taesd(path: str, family: Family | None = None, space: LatentSpace | None = None
               ) -> tuple[nn.Module, Literal["diffusers", "madebyollin"]]:
    """A TAE decoder for `family` (see loading.load_taesd), refused when it does not take `space`'s channels.
    Raises ModelError."""
    try:
        module, kind = loading.load_taesd(path, family)
    except loading.LoadError as e:
        raise ModelError(str(e)) from None
    if space is not None:
        check_tae(module, space, path)
    return module, "diffusers" if kind == "diffusers" else "madebyollin"


def previews_of(pipe: Any, family: Family | None, taesd: str | None
                ) -> tuple[nn.Module | None, Literal["diffusers", "madebyollin", "none"], Factors | None]:
    """What a real pipeline previews with: the TAE `taesd` names, else the one its folder ships (loading.shipped),
    on the CPU; and the folder's own latent2rgb factors, else None (its family's). The server's load() and
    watch() both ask here. Raises ModelError."""
    space = latent_space(pipe)
    try:
        found = loading.shipped(pipe, family, space.channels)
    except loading.LoadError as e:
        raise ModelError(str(e)) from None
    own_rgb = found.latent_rgb if found else None
    path = taesd if taesd is not None else str(found.taesd) if found and found.taesd else None
    if path is None:
        return None, "none", own_rgb
    tiny, kind = load_taesd(path, family, space)
    return tiny, kind, own_rgb

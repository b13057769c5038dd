"""The run's final image: the pipeline's own final decode, then the PNG users keep, written whole or not at all."""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Callable, Mapping

import numpy as np
import torch

from previewlab.preview.decoding import clips, decoders

from previewlab.preview.decoding.vae_decoder import vae_decoder
from previewlab.preview.frames import grid, tile, to_uint8_hwc
from previewlab.preview.models import Model


FinalDecode = Callable[[torch.Tensor, int, int], torch.Tensor]  # final latents -> uint8 (H, W, 3) on the device


def final_decoder(model: Model) -> FinalDecode:
    """The final decode, built before the run (its constants then): the pipeline's VAE fed as its own final
    decode feeds it, a batch as one grid image. A clip decodes whole, as the pipeline decodes it (that cost
    is the run's), and its first frame is the run's image."""
    if model.space.video:
        space, clip = model.space, decoders.build_clip("vae", model)
        assert clip is not None
        causal = decoders.causal("vae", model)

        def decode_clip(latents: torch.Tensor, height: int, width: int) -> torch.Tensor:
            whole = clips.pick("all", space.latent_frames(latents, height, width), space.temporal, 0.0,
                               causal=causal)
            return to_uint8_hwc(tile(clip(latents, height, width, whole)[:, :1])[0])  # the first frame's grid

        return decode_clip
    if model.space.pixel:  # the latents are the image in [-1, 1]
        return lambda latents, height, width: to_uint8_hwc(((grid(latents).float() + 1) / 2).clamp(0, 1))
    vae = vae_decoder(model)
    return lambda latents, height, width: to_uint8_hwc(((grid(vae(latents, height, width)).float() + 1) / 2)
                                                       .clamp(0, 1))


def final_u8(model: Model, latents: torch.Tensor, height: int, width: int,
             decode: FinalDecode | None = None) -> torch.Tensor:
    """Latents -> uint8 (H, W, 3) on the device (final_decoder; decode: one built before the run)."""
    return (decode or final_decoder(model))(latents, height, width)


def final_image(model: Model, latents: torch.Tensor, height: int, width: int) -> np.ndarray:
    """Latents -> uint8 (H, W, 3) on the host: final_u8, then the copy (which waits for the device)."""
    return final_u8(model, latents, height, width).cpu().numpy()


def write_whole(path: Path, data: bytes) -> None:
    """Write a file whole or not at all: a disk that fills mid-write leaves no empty or torn file behind. The
    OSError raised names the file."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        e.filename = str(path)  # the file the caller asked for, not its temporary name
        raise


def save_image(image: np.ndarray, text: Mapping[str, str] | None = None) -> bytes:
    """The final image as PNG, the way users keep it; text: its text chunks (png_text.py: the run's settings as
    A1111's and ComfyUI's PNG-info readers read them). Pillow writes a chunk tEXt, or iTXt where its text is not
    Latin-1 (a prompt in another script)."""
    import io

    from PIL import Image, PngImagePlugin

    info = PngImagePlugin.PngInfo()
    for key, value in (text or {}).items():
        info.add_text(key, value)
    buf = io.BytesIO()
    Image.fromarray(image, "RGB").save(buf, "PNG", pnginfo=info)
    return buf.getvalue()

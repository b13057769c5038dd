"""Image encoders: uint8 RGB (H, W, 3) -> bytes. A registry; `turbojpeg` falls back to Pillow when the
system libturbojpeg is missing, with one warning, and reports the encoder that really ran."""
from __future__ import annotations

import io
import logging
from dataclasses import dataclass
from collections.abc import Mapping
from typing import Any, Callable

import numpy as np
import torch

from previewlab.preview.names import ENCODER_NAMES, EncoderName, check

log = logging.getLogger("previewlab")
FORMATS: Mapping[str, str] = {"turbojpeg": "jpeg", "pillow": "jpeg", "webp": "webp", "png": "png", "nvjpeg": "jpeg"}


class EncoderError(ValueError):
    pass


@dataclass(frozen=True)
class Encoder:
    """encode(image, quality): a host uint8 (H, W, 3) array -> bytes; with on_device, a contiguous uint8
    (3, H, W) tensor on the device (frames.to_uint8_chw) -> a uint8 tensor of the encoded bytes, still on the
    device. The caller runs every on-device encode and the copy of its bytes under the one stream
    streams.jpeg_stream gives (nvJPEG orders its work on the stream it was built under, and on no other)."""
    name: str      # the encoder that really runs (turbojpeg may have become pillow)
    format: str    # jpeg | webp | png, what the bytes are
    encode: Callable[[Any, int], Any]
    on_device: bool = False  # only the compressed bytes cross to the host


def _pillow(fmt: str) -> Callable[[np.ndarray, int], bytes]:
    from PIL import Image

    def encode(rgb: np.ndarray, quality: int) -> bytes:
        buf = io.BytesIO()
        img = Image.fromarray(rgb, "RGB")
        if fmt == "PNG":
            img.save(buf, fmt, compress_level=1)  # previews favour speed over size
        else:
            img.save(buf, fmt, quality=quality)
        return buf.getvalue()

    return encode


class TurboJpeg:
    """The turbojpeg encoder's factory: loads libturbojpeg once, and when it cannot, falls back to Pillow with
    one warning per factory. lib_path: where libturbojpeg is (None: the system's); tests give a missing file."""

    def __init__(self, lib_path: str | None = None) -> None:
        self.lib_path = lib_path
        self._lib: Any = None
        self.warned = False

    def __call__(self) -> Encoder:
        try:
            if self._lib is None:
                from turbojpeg import TurboJPEG

                self._lib = TurboJPEG(self.lib_path)
        except (ImportError, OSError, RuntimeError) as e:
            if not self.warned:
                log.warning("turbojpeg unavailable (%s); falling back to Pillow JPEG (apt install libturbojpeg0)",
                            str(e).splitlines()[0][:120])
                self.warned = True
            return Encoder("pillow", "jpeg", _pillow("JPEG"))
        from turbojpeg import TJPF_RGB, TJSAMP_420

        tj = self._lib

        def encode(rgb: np.ndarray, quality: int) -> bytes:
            return tj.encode(np.ascontiguousarray(rgb), quality=quality, pixel_format=TJPF_RGB,
                             jpeg_subsample=TJSAMP_420)

        return Encoder("turbojpeg", "jpeg", encode)


def _nvjpeg(device: torch.device | None = None) -> Encoder:
    """JPEG on the GPU (torchvision.io.encode_jpeg on a CUDA tensor runs nvJPEG): about 50 KB cross to the
    host instead of 786 KB of pixels for a 512x512 preview. torchvision is imported only here: it is not a
    dependency, and a CPU machine never needs it."""
    if device is None or device.type != "cuda":
        raise EncoderError(f"encoder nvjpeg runs on a CUDA device and this model is on "
                           f"{'no device' if device is None else device.type}; use turbojpeg (or pillow, webp, png)")
    try:
        from torchvision.io import encode_jpeg
    except (ImportError, RuntimeError) as e:
        raise EncoderError(f"encoder nvjpeg needs torchvision built for torch {torch.__version__} "
                           f"({str(e).splitlines()[0][:100]}); use turbojpeg, or pip install torchvision") from None

    def encode(chw: Any, quality: int) -> Any:
        return encode_jpeg(chw, quality=quality)  # no copy here: it would run unordered with nvJPEG's stream

    return Encoder("nvjpeg", "jpeg", encode, on_device=True)


ENCODERS: dict[EncoderName, Callable[..., Encoder]] = {
    "turbojpeg": TurboJpeg(),
    "pillow": lambda: Encoder("pillow", "jpeg", _pillow("JPEG")),
    "webp": lambda: Encoder("webp", "webp", _pillow("WEBP")),
    "png": lambda: Encoder("png", "png", _pillow("PNG")),
    "nvjpeg": _nvjpeg,
}


def get(name: str, device: torch.device | None = None) -> Encoder:
    """The encoder for a name; `device` is where the previews are (nvjpeg needs CUDA). Raises EncoderError."""
    name = check("encoder", name, ENCODER_NAMES, EncoderError)
    return _nvjpeg(device) if name == "nvjpeg" else ENCODERS[name]()

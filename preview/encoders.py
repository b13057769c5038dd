"""Image encoders: uint8 RGB (H, W, 3) -> bytes. A registry; `turbojpeg` falls back to Pillow when the
system libturbojpeg is missing, with one warning, and reports the encoder that really ran."""
from __future__ import annotations

import io
import logging
from dataclasses import dataclass
from typing import Any, Callable, Literal

import numpy as np

log = logging.getLogger("previewlab")
EncoderName = Literal["turbojpeg", "pillow", "webp", "png"]
FORMATS: dict[str, str] = {"turbojpeg": "jpeg", "pillow": "jpeg", "webp": "webp", "png": "png"}


class EncoderError(ValueError):
    pass


@dataclass(frozen=True)
class Encoder:
    name: str      # the encoder that really runs (turbojpeg may have become pillow)
    format: str    # jpeg | webp | png, what the bytes are
    encode: Callable[[np.ndarray, int], bytes]


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


_turbo: object | None = None
_warned = False


def _turbojpeg(lib_path: str | None = None) -> Encoder:
    """lib_path: where libturbojpeg is (None: the system's); tests point it at a missing file."""
    global _turbo, _warned
    try:
        if _turbo is None or lib_path is not None:
            from turbojpeg import TurboJPEG

            _turbo = TurboJPEG(lib_path)
    except (ImportError, OSError, RuntimeError) as e:
        if not _warned:
            log.warning("turbojpeg unavailable (%s); falling back to Pillow JPEG (apt install libturbojpeg0)",
                        str(e).splitlines()[0][:120])
            _warned = True
        return Encoder("pillow", "jpeg", _pillow("JPEG"))
    from turbojpeg import TJPF_RGB, TJSAMP_420

    tj: Any = _turbo

    def encode(rgb: np.ndarray, quality: int) -> bytes:
        return tj.encode(np.ascontiguousarray(rgb), quality=quality, pixel_format=TJPF_RGB,
                         jpeg_subsample=TJSAMP_420)

    return Encoder("turbojpeg", "jpeg", encode)


ENCODERS: dict[str, Callable[[], Encoder]] = {
    "turbojpeg": _turbojpeg,
    "pillow": lambda: Encoder("pillow", "jpeg", _pillow("JPEG")),
    "webp": lambda: Encoder("webp", "webp", _pillow("WEBP")),
    "png": lambda: Encoder("png", "png", _pillow("PNG")),
}


def check_name(name: str) -> EncoderName:
    if name not in ENCODERS:
        raise EncoderError(f"unknown encoder {name!r}; allowed are {', '.join(ENCODERS)}")
    return name  # type: ignore[return-value]


def get(name: str) -> Encoder:
    return ENCODERS[check_name(name)]()

"""The binary messages: a preview as one WebSocket message, packed here and read back (server/ws/adapt.py
re-encodes one for a slow link; the tests read them).

A message is a 4-byte big-endian header length N, N bytes of UTF-8 JSON header, then the image bytes: one image,
or a clip's frames one after another (the header's `sizes` gives each frame's bytes, `frames` their count and
`fps` the rate that plays them over the clip; one ack answers the whole message).
"""
from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from previewlab.preview.frames import Frame


def frame(f: Frame, seq: int, sent_at_ms: float) -> bytes:
    """A preview as one binary message; sent_at_ms: the server's wall clock, for the page's latency."""
    header = dict(run_id=f.run_id, step=f.step, seq=seq, decoder=f.decoder, format=f.format, width=f.width,
                  height=f.height, sent_at_ms=sent_at_ms, frames=f.frames, sizes=list(f.sizes or (len(f.data),)),
                  fps=round(f.fps, 3))
    return pack_frame(header, f.data)


def pack_frame(header: Mapping[str, object], data: bytes) -> bytes:
    """4-byte big-endian header length, the UTF-8 JSON header, the image bytes."""
    h = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack(">I", len(h)) + h + data


def unpack_frame(blob: bytes) -> tuple[dict[str, Any], bytes]:
    """A packed message's header, as its JSON reads back, and its image bytes."""
    (n,) = struct.unpack(">I", blob[:4])
    return json.loads(blob[4:4 + n]), blob[4 + n:]

"""One watcher's link, as its acks measure it, and the frames it is sent over it (issue 47).

A link that cannot carry the previews as fast as they are made shows in one way: the client's one-frame slot is
replaced before its sender could take it (a drop), because the socket write that went before it still waits for
the link. Then that client, and only that client, is sent the newest preview re-encoded cheaper: a lower JPEG
quality, then a smaller side (libjpeg decodes at 1/2, 1/4 or 1/8 of the side for a fraction of the work), down the
LEVELS until one fits. The level is chosen from two measurements: the rate the link delivered (bytes over the time
from each send to its ack) and each level's own bytes per frame (measured on the
frames re-encoded so far; a level not yet seen is guessed from the frame as made), against the time between
frames made. Fewer frames are the slot's work: the newest wins. After a run of frames with no drop the link is
probed one level richer, and a drop sends it back. Nothing here touches the denoising or another client's frames:
the re-encode runs on the sender's own thread pool, once per frame the client is actually sent.

Only JPEG previews are re-encoded (the default encoders'); WebP and PNG previews go as they are made.
"""
from __future__ import annotations

import collections
import io
from dataclasses import dataclass, field
from typing import Any

from previewlab.server.ws.protocol import pack_frame, unpack_frame

HEADROOM = 0.8          # a level fits when its frame crosses the link in this share of the time between frames
PROBE_AFTER = 8         # frames acked with no drop at a level before the next richer one is tried
DROPS_TO_STEP = 2       # drops at a level before a poorer one is chosen
TRIPS = 8               # the acks the rate is measured over


@dataclass(frozen=True)
class Level:
    """How a client's previews are re-encoded: the side divided by `shrink` (1, 2, 4 or 8), at `quality`
    (0: the frame as it was made)."""
    shrink: int
    quality: int

    def words(self, width: int, height: int) -> str:
        """What the page says of it: "320 px, q60" (the long side)."""
        return "" if self.quality == 0 else f"{max(width, height) // self.shrink} px, q{self.quality}"


LEVELS: tuple[Level, ...] = (Level(1, 0), Level(1, 60), Level(2, 60), Level(2, 40), Level(4, 40), Level(8, 40))
# bytes per frame of a level against the frame as made, before any is measured: JPEG's size goes about with the
# pixels (1 / shrink^2) and falls with the quality (q60 about 0.6 of q85, q40 about 0.45)
_QUALITY_SHARE = {0: 1.0, 60: 0.6, 40: 0.45}


class Reencoder:
    """JPEG -> JPEG at a level: libturbojpeg's scaled decode and encode where it loads, else Pillow's draft mode."""

    def __init__(self) -> None:
        self._tj: Any = None
        try:
            from turbojpeg import TurboJPEG

            self._tj = TurboJPEG()
        except (ImportError, OSError, RuntimeError):
            self._tj = None

    def image(self, jpeg: bytes, level: Level) -> tuple[bytes, int, int]:
        """One JPEG at `level`: (its bytes, width, height)."""
        if self._tj is not None:
            from turbojpeg import TJSAMP_420

            rgb = self._tj.decode(jpeg, scaling_factor=(1, level.shrink))
            out = self._tj.encode(rgb, quality=level.quality, jpeg_subsample=TJSAMP_420)
            return out, int(rgb.shape[1]), int(rgb.shape[0])
        from PIL import Image

        src = Image.open(io.BytesIO(jpeg))
        side = (max(1, src.width // level.shrink), max(1, src.height // level.shrink))
        src.draft("RGB", side)  # libjpeg's scaled decode: a side at least the one asked
        img = src.convert("RGB")
        if img.size != side:
            img = img.resize(side)
        buf = io.BytesIO()
        img.save(buf, "JPEG", quality=level.quality)
        return buf.getvalue(), img.width, img.height

    def frame(self, blob: bytes, level: Level) -> bytes:
        """A packed preview (protocol.frame) at `level`: each of its JPEGs re-encoded, its header's size and
        `adapted` saying so. A non-JPEG preview, or the level that keeps frames as made, is returned as it is."""
        header, data = unpack_frame(blob)
        if level.quality == 0 or header.get("format") != "jpeg":
            return blob
        at = level
        parts, start, width, height = [], 0, header["width"], header["height"]
        for n in header["sizes"]:
            out, width, height = self.image(data[start:start + n], at)
            parts.append(out)
            start += n
        words = at.words(int(header["width"]), int(header["height"]))
        header.update(width=width, height=height, sizes=[len(p) for p in parts], adapted=words)
        return pack_frame(header, b"".join(parts))


@dataclass
class Link:
    """One client's link and its level. Fed by the hub (frames made, sent, dropped) and the acks; every figure
    here is the server's own clock, seconds, and bytes as sent."""
    level: int = 0
    trips: collections.deque[tuple[float, float, int]] = field(
        default_factory=lambda: collections.deque(maxlen=TRIPS))  # (sent at, acked at, bytes)
    sizes: dict[int, float] = field(default_factory=dict)  # level -> bytes per frame (moving average)
    made_at: float | None = None
    interval_s: float | None = None  # time between frames made (moving average)
    drops_here: int = 0              # drops since the level last changed
    clean_here: int = 0              # frames acked since the level last changed or the last drop, whichever later
    in_flight: tuple[float, int] | None = None  # the preview sent and not yet acked: (sent at, bytes)

    def made(self, t: float) -> None:
        if self.made_at is not None:
            gap = t - self.made_at
            self.interval_s = gap if self.interval_s is None else 0.7 * self.interval_s + 0.3 * gap
        self.made_at = t

    def sent(self, t: float, nbytes: int) -> None:
        self.in_flight = (t, nbytes)

    def rate_bps(self) -> float | None:
        """Bits per second the link delivered previews at: their bytes over the time each took from its send to
        its ack (the idle time between previews left out); None before two acks. A preview's trip includes a
        round trip, the page's paint and the text sent with it (step rows, deliveries: about 1 KB a step, not
        counted in the bytes), so it reads low: a small preview on a fast link, and any preview on a link of a
        few hundred kbit/s (about half the rate at 96 kbit/s). The rate only chooses a level once the link drops
        previews, and a low reading errs towards a cheaper one."""
        if len(self.trips) < 2:
            return None
        busy = sum(acked - sent for sent, acked, _ in self.trips)
        return sum(t[2] for t in self.trips) * 8 / busy if busy > 0 else None

    def acked(self, sent_at: float, acked_at: float, nbytes: int, level: int) -> bool:
        """A frame of `level` was painted; True when the level changed (a probe one richer)."""
        self.trips.append((sent_at, acked_at, nbytes))
        self.in_flight = None
        old = self.sizes.get(level)
        self.sizes[level] = float(nbytes) if old is None else 0.7 * old + 0.3 * nbytes
        self.clean_here += 1
        if self.level > 0 and self.clean_here >= PROBE_AFTER:
            return self._to(self.level - 1)
        return False

    def dropped(self, t: float) -> bool:
        """At time t a newer frame replaced one this client was not yet sent; True when the level changed."""
        self.drops_here += 1
        self.clean_here = 0
        if self.drops_here < DROPS_TO_STEP:
            return False
        return self._to(max(self.level + 1, self.fitting(t)))

    def fitting(self, t: float) -> int:
        """The richest level whose frame crosses the link within HEADROOM of the time between frames made; the
        current level while either is unmeasured. Before two acks, the preview in flight bounds the rate: the link
        is no faster than its bytes over the time since its send."""
        rate, gap = self.rate_bps(), self.interval_s
        if rate is None and self.in_flight is not None and t > self.in_flight[0]:
            rate = self.in_flight[1] * 8 / (t - self.in_flight[0])
            self.sizes.setdefault(self.level, float(self.in_flight[1]))
        if rate is None or gap is None or not self.sizes:
            return self.level
        seen, nbytes = next(iter(sorted(self.sizes.items())))
        made = nbytes / self._share(seen)  # the frame as made, from the least re-encoded level measured
        for i in range(len(LEVELS)):
            guess = self.sizes.get(i, made * self._share(i))
            if guess * 8 / rate <= HEADROOM * gap:
                return i
        return len(LEVELS) - 1

    @staticmethod
    def _share(i: int) -> float:
        level = LEVELS[i]
        return _QUALITY_SHARE.get(level.quality, 1.0) / level.shrink ** 2

    def _to(self, level: int) -> bool:
        level = min(max(level, 0), len(LEVELS) - 1)
        changed, self.level = level != self.level, level
        self.drops_here = self.clean_here = 0
        return changed

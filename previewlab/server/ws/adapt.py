"""One watcher's link, as its acks measure it, and the frames it is sent over it (issues 47, 56).

A link that cannot carry the previews as fast as they are made shows first as drops: the client's one-frame slot
is replaced before its sender could take it, because the preview before it is not acked yet. A slow page shows the
same way, so a drop is read against the acks: each carries the page's own decode and paint time, and where that is
at least PAGE_SHARE of the previews' trips the page, not the link, holds them back; they keep their level and the
page is told so (slow_page). Otherwise that client, and only that client, is sent the newest preview re-encoded
cheaper: a lower JPEG quality, then a smaller side (libjpeg decodes at 1/2, 1/4 or 1/8 of the side for a fraction
of the work), down the LEVELS until one fits. The level is chosen from two measurements: the rate the link
delivered (bytes over each preview's time from its send to its ack, less the page's own time) and each level's
bytes against the frame as made (measured on the frames re-encoded so far; a level not yet seen is guessed from
the frame as made), against the time between frames made. Two limits hold whatever the link:
- a preview is never made smaller than MIN_SIDE px on its long side, or than it was made where it is smaller:
  under 64 px a picture's composition is gone (issue 56: at 8 px the page's blue square vanished), and its bytes
  are nearly all the JPEG's fixed headers (FIXED_BYTES), so a smaller side saves next to nothing on any link
  (turbojpeg at q40, a 512 px picture resized down: 866 B at 64 px, 714 at 32, 640 at 2);
- a poorer level is taken only where its bytes are at least SAVING below the level's now, guessed or measured;
  one measured short of that on the frame it was tried on is left at once, and that frame is sent as before.
Fewer frames are the slot's work: the newest wins. After a run of frames with no drop the link is probed one level
richer, and a drop sends it back; a new run starts from the preview as made (new_run). Nothing here touches the
denoising or another client's frames: the re-encode runs on the sender's own thread pool, once per frame the
client is actually sent.

Only JPEG previews are re-encoded (the default encoders'); WebP and PNG previews go as they are made.
"""
from __future__ import annotations

import collections
import io
from dataclasses import dataclass, field
from typing import Any

from previewlab.server.ws.binary import pack_frame, unpack_frame

HEADROOM = 0.8          # a level fits when its frame crosses the link in this share of the time between frames
PROBE_AFTER = 8         # frames acked with no drop at a level before the next richer one is tried
DROPS_TO_STEP = 2       # drops at a level before a poorer one is chosen
TRIPS = 8               # the acks the rate is measured over
MIN_SIDE = 64           # px: no level makes a preview's long side smaller than this (or than the preview as made)
SAVING = 0.2            # a poorer level must cut the bytes by this share at least
PAGE_SHARE = 0.5        # the page's own decode and paint, as a share of the trips, from which it is the slow part
FIXED_BYTES = 850       # bytes a smaller side never saves: a JPEG's headers (640 B) and the frame's (about 200)


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
        """A packed preview (binary.frame) at `level`: each of its JPEGs re-encoded, its header's size and
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
    trips: collections.deque[tuple[float, float, int, float]] = field(
        default_factory=lambda: collections.deque(maxlen=TRIPS))  # (sent at, acked at, bytes, the page's own s)
    ratios: dict[int, float] = field(default_factory=dict)  # level -> its bytes over the frame's as made (average)
    made_bytes: float | None = None  # bytes of a frame as made (moving average)
    side: int = 0                    # the long side of the newest frame as made, px (0: not known: never shrunk)
    made_at: float | None = None
    interval_s: float | None = None  # time between frames made (moving average)
    drops_here: int = 0              # drops since the level last changed
    clean_here: int = 0              # frames acked since the level last changed or the last drop, whichever later
    in_flight: tuple[float, int] | None = None  # the preview sent and not yet acked: (sent at, bytes)
    came_from: int = 0               # the level the last poorer step left: a level that saves no bytes goes back
    page_slow: bool = False          # the last drops were the page's: its level was kept

    def new_run(self) -> None:
        """A run starts: from the preview as made, its frames' sizes and pace unknown (the link's trips stay)."""
        self.level = self.came_from = self.drops_here = self.clean_here = self.side = 0
        self.ratios.clear()
        self.made_bytes = self.made_at = self.interval_s = None
        self.page_slow = False

    def made(self, t: float, nbytes: int = 0, side: int = 0) -> None:
        """A frame of `nbytes` as made, its long side `side` px, was made at t."""
        if self.made_at is not None:
            gap = t - self.made_at
            self.interval_s = gap if self.interval_s is None else 0.7 * self.interval_s + 0.3 * gap
        self.made_at = t
        if nbytes > 0:
            self.made_bytes = nbytes if self.made_bytes is None else 0.7 * self.made_bytes + 0.3 * nbytes
        self.side = side

    def sent(self, t: float, nbytes: int) -> None:
        self.in_flight = (t, nbytes)

    def seen(self, level: int, nbytes: int, made_nbytes: int) -> int:
        """A frame of `made_nbytes` as made re-encoded at `level` took `nbytes`: the level to send it at. A poorer
        level that saves less than SAVING against the one it left is left at once (the caller sends that one)."""
        ratio = nbytes / max(made_nbytes, 1)
        old = self.ratios.get(level)
        self.ratios[level] = ratio if old is None else 0.7 * old + 0.3 * ratio
        if level == self.level > 0 and not self.saves(level, self.came_from):
            self._to(self.came_from)
            return self.level
        return level

    def trip(self, sent_at: float, acked_at: float, nbytes: int, page_s: float = 0.0) -> None:
        """A preview's trip, from its send to its ack; page_s: the page's own decode and paint of it."""
        self.trips.append((sent_at, acked_at, nbytes, max(0.0, page_s)))
        self.in_flight = None

    def rate_bps(self) -> float | None:
        """Bits per second the link delivered previews at: their bytes over the time each took from its send to
        its ack less the page's own decode and paint (the idle time between previews left out); None before two
        acks. A trip still includes a round trip, a busy page's wait before it reads the preview and the text sent
        with the preview (step rows, deliveries: about 1 KB a step, not counted in the bytes), so it reads low: a
        small preview on a fast link, and any preview on a link of a few hundred kbit/s (about half the rate at
        96 kbit/s). The rate only chooses a level once the link drops previews, and a low reading errs towards a
        cheaper one."""
        if len(self.trips) < 2:
            return None
        wire = sum(max(acked - sent - page, 0.0) for sent, acked, _, page in self.trips)
        return sum(t[2] for t in self.trips) * 8 / wire if wire > 0 else None

    def page_is_slow(self) -> bool:
        """The page's own decode and paint are at least PAGE_SHARE of its previews' trips."""
        trip = sum(acked - sent for sent, acked, _, _ in self.trips)
        return trip > 0 and sum(t[3] for t in self.trips) >= PAGE_SHARE * trip

    def acked(self, sent_at: float, acked_at: float, nbytes: int, level: int, page_s: float = 0.0) -> bool:
        """A frame of `level` was painted, the page's own decode and paint taking page_s; True when the level
        changed (a probe one richer)."""
        self.trip(sent_at, acked_at, nbytes, page_s)
        self.clean_here += 1
        if self.clean_here >= PROBE_AFTER:
            self.page_slow = False
            if self.level > 0:
                return self._to(self.level - 1)
        return False

    def dropped(self, t: float) -> bool:
        """At time t a newer frame replaced one this client was not yet sent; True when the level changed. The
        page's drops keep the level; the link's step it down where a poorer level saves bytes and keeps the side
        at MIN_SIDE or more."""
        self.drops_here += 1
        self.clean_here = 0
        if self.drops_here < DROPS_TO_STEP:
            return False
        self.page_slow = self.page_is_slow()
        poorer = self.level if self.page_slow else self.poorer(t)
        self.drops_here = 0
        return self._to(poorer)

    def poorer(self, t: float) -> int:
        """The level the link's drops step to: of the poorer levels that keep MIN_SIDE and save bytes, the first
        that fits (fitting), else the poorest; the level now where none does."""
        steps = [i for i in range(self.level + 1, len(LEVELS)) if self.shows(i) and self.saves(i, self.level)]
        if not steps:
            return self.level
        fit = self.fitting(t)
        return next((i for i in steps if i >= fit), steps[-1])

    def fitting(self, t: float) -> int:
        """The richest level whose frame crosses the link within HEADROOM of the time between frames made, of the
        levels that keep MIN_SIDE; the current level while either is unmeasured. Before two acks, the preview in
        flight bounds the rate: the link is no faster than its bytes over the time since its send."""
        rate, gap, made = self.rate_bps(), self.interval_s, self.made_bytes
        if rate is None and self.in_flight is not None and t > self.in_flight[0]:
            rate = self.in_flight[1] * 8 / (t - self.in_flight[0])
        if rate is None or gap is None or made is None:
            return self.level
        shown = [i for i in range(len(LEVELS)) if self.shows(i)]
        return next((i for i in shown if made * self.ratio(i) * 8 / rate <= HEADROOM * gap), shown[-1])

    def shows(self, i: int) -> bool:
        """Level i keeps the preview's long side at MIN_SIDE or more (or as made, where it was made smaller)."""
        shrink = LEVELS[i].shrink
        return shrink == 1 or (self.side > 0 and self.side // shrink >= min(self.side, MIN_SIDE))

    def saves(self, i: int, than: int) -> bool:
        """Level i's bytes are at least SAVING below level `than`'s."""
        return self.ratio(i) <= (1 - SAVING) * self.ratio(than)

    def ratio(self, i: int) -> float:
        """Level i's bytes over the frame's as made: measured, or guessed: FIXED_BYTES stay, the rest goes with
        the pixels and the quality (_share)."""
        if i == 0:
            return 1.0
        if i in self.ratios:
            return self.ratios[i]
        made = self.made_bytes
        if made is None or made <= FIXED_BYTES:
            return 1.0
        return (FIXED_BYTES + (made - FIXED_BYTES) * self._share(i)) / made

    def slow_page(self, words: str) -> str:
        """What the page is told while its own drops keep its level ("" while they do not): its time against the
        link's, a preview; words: its level's ("128 px, q60"; "" as made)."""
        if not self.page_slow or not self.trips:
            return ""
        page = sum(t[3] for t in self.trips) / len(self.trips)
        wire = sum(max(acked - sent - p, 0.0) for sent, acked, _, p in self.trips) / len(self.trips)
        kept = f"at {words}" if words else "as made"
        return (f"this page is slow, not the link: {page * 1e3:.0f} ms to decode and paint a preview, "
                f"{wire * 1e3:.0f} ms on the link; previews kept {kept}")

    @staticmethod
    def _share(i: int) -> float:
        level = LEVELS[i]
        return _QUALITY_SHARE.get(level.quality, 1.0) / level.shrink ** 2

    def _to(self, level: int) -> bool:
        level = min(max(level, 0), len(LEVELS) - 1)
        changed = level != self.level
        if changed:  # a step back (a probe, or a level that saved no bytes) is checked against the frame as made
            self.came_from, self.level = (self.level if level > self.level else 0), level
        self.drops_here = self.clean_here = 0
        return changed

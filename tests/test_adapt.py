"""Issues 47 and 56: a watcher's link, measured from its acks, and the previews re-encoded for it
(server/ws/adapt.py): never below the side that still shows the picture, never for no bytes saved, never for a
page that is slow itself, and from the preview as made at each run."""
from __future__ import annotations

import asyncio
import io
from typing import Any, cast

import numpy as np
import pytest
from PIL import Image

from previewlab.server.ws.adapt import DROPS_TO_STEP, LEVELS, MIN_SIDE, PROBE_AFTER, Level, Link, Reencoder
from previewlab.server.ws.binary import pack_frame, unpack_frame
from previewlab.server.ws.sender import Client, Hub, Packed


def jpeg(side: int, seed: int = 0) -> bytes:
    """A photo-like JPEG: smooth gradients and some noise, as a preview is."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:side, 0:side] / side
    rgb = np.stack([x, y, (x + y) / 2], -1) * 200 + rng.normal(0, 12, (side, side, 3))
    buf = io.BytesIO()
    Image.fromarray(rgb.clip(0, 255).astype(np.uint8)).save(buf, "JPEG", quality=90)
    return buf.getvalue()


def packed(*images: bytes, side: int = 256) -> bytes:
    return pack_frame(dict(run_id="r", step=1, seq=1, decoder="vae", format="jpeg", width=side, height=side,
                           sent_at_ms=0.0, frames=len(images), sizes=[len(i) for i in images], fps=0.0),
                      b"".join(images))


@pytest.mark.parametrize("level", LEVELS[1:])
def test_every_level_makes_a_smaller_whole_jpeg_of_its_side(level):
    blob = packed(jpeg(256), jpeg(256, 1), side=256)  # a clip of two frames
    header, data = unpack_frame(Reencoder().frame(blob, level))
    assert header["width"] == header["height"] == 256 // level.shrink
    assert header["adapted"] == f"{256 // level.shrink} px, q{level.quality}"
    assert len(header["sizes"]) == 2 and sum(header["sizes"]) == len(data) < len(unpack_frame(blob)[1])
    first = Image.open(io.BytesIO(data[:header["sizes"][0]]))
    first.load()  # a whole picture
    assert first.size == (256 // level.shrink,) * 2


def test_a_frame_as_made_or_not_jpeg_goes_as_it_is():
    r = Reencoder()
    blob = packed(jpeg(64))
    assert r.frame(blob, LEVELS[0]) is blob
    png = pack_frame(dict(format="png", width=8, height=8, sizes=[3]), b"png")
    assert r.frame(png, LEVELS[2]) is png


def feed(link: Link, *, nbytes: int, rate_bps: float, gap_s: float, frames: int, t: float = 0.0, side: int = 256,
         page_s: float = 0.0) -> float:
    """Frames of `nbytes` as made, `side` px, made every gap_s, each sent as the last one's ack came, crossing at
    rate_bps, the page taking page_s more to decode and paint each; the frames the link cannot carry in time are
    dropped, as the hub drops them, and each re-encode's bytes are seen as the hub sees them. Returns the clock."""
    busy_until = t
    for _ in range(frames):
        link.made(t, nbytes, side)
        if busy_until > t:
            link.dropped(t)
        else:
            level = link.level
            size = int(nbytes * link.ratio(level))
            if level > 0:
                level = link.seen(level, size, nbytes)
                size = int(nbytes * link.ratio(level))
            busy_until = t + size * 8 / rate_bps + page_s
            link.sent(t, size)
            link.acked(t, busy_until, size, level, page_s)
        t += gap_s
    return t


def test_a_link_that_drops_frames_steps_down_to_the_level_that_fits():
    """40 KB frames every 0.1 s over 1 Mbit/s: each takes 0.32 s, so most drop; the link settles where a frame
    crosses within the time between frames."""
    link = Link()
    feed(link, nbytes=40_000, rate_bps=1e6, gap_s=0.1, frames=60)
    fits = [i for i in range(len(LEVELS)) if 40_000 * link.ratio(i) * 8 / 1e6 <= 0.1]
    assert link.level >= 1 and link.level <= fits[0] + 1
    rate = link.rate_bps()
    assert rate is not None and 0.2e6 < rate <= 1e6 * (1 + 1e-9)  # what the acks say the link carried


def test_a_fast_link_is_never_adapted_and_a_recovered_one_is_probed_back_up():
    link = Link()
    feed(link, nbytes=40_000, rate_bps=100e6, gap_s=0.1, frames=40)
    assert link.level == 0 and link.drops_here == 0
    slow = Link()
    t = feed(slow, nbytes=40_000, rate_bps=1e6, gap_s=0.1, frames=40)
    low = slow.level
    assert low > 0
    feed(slow, nbytes=40_000, rate_bps=100e6, gap_s=0.1, frames=PROBE_AFTER * (low + 1), t=t + 1)
    assert slow.level < low  # probed richer once the drops stopped


def test_one_drop_does_not_step():
    link = Link()
    for i in range(DROPS_TO_STEP - 1):
        assert not link.dropped(float(i))
    assert link.level == 0


def test_before_two_acks_the_preview_in_flight_bounds_the_rate():
    """A 24 KB preview still unacked 1.5 s after its send: the link carries at most 128 kbit/s, so frames made
    every 0.25 s step straight down to a level whose guessed size fits, not one level at a time."""
    link = Link()
    for i in range(6):
        link.made(i * 0.25, 24_000, 256)
    link.sent(0.0, 24_000)
    link.dropped(1.25)
    assert link.dropped(1.5) and link.level >= 3


def test_level_words():
    assert Level(2, 60).words(640, 480) == "320 px, q60" and Level(1, 0).words(640, 480) == ""


def test_a_preview_is_never_shrunk_below_the_side_that_shows_the_picture():
    """A link far too slow for any level: a 512 px preview stops at 64 px (1/8), a 128 px one at 64 (1/2), and
    one made at 48 px keeps its side (only its quality is lowered)."""
    for side, smallest in ((512, MIN_SIDE), (128, MIN_SIDE), (48, 48)):
        link = Link()
        feed(link, nbytes=40_000, rate_bps=20e3, gap_s=0.1, frames=80, side=side)
        assert link.level > 0 and side // LEVELS[link.level].shrink == smallest, (side, LEVELS[link.level])


def test_a_level_that_saves_no_bytes_is_never_taken():
    """A 16 px preview of 800 bytes is nearly all JPEG headers: q60 or q40 would save a few bytes, a smaller side
    none; however slow the link, it goes as made. A level tried and measured short of the saving goes back."""
    tiny = Link()
    feed(tiny, nbytes=800, rate_bps=2e3, gap_s=0.1, frames=60, side=16)
    assert tiny.level == 0 and tiny.drops_here < DROPS_TO_STEP
    link = Link()
    link.made(0.0, 40_000, 256)
    link._to(3)
    assert link.seen(3, 36_000, 40_000) == 0 and link.level == 0  # 10 % saved: sent as made
    assert link.seen(0, 40_000, 40_000) == 0


def test_a_slow_page_keeps_its_level_and_is_named_where_a_slow_link_steps():
    """The same trips, 0.5 s a preview every 0.1 s: 0.45 s of them the page's own decode and paint, or none."""
    page = Link()
    feed(page, nbytes=40_000, rate_bps=6.4e6, gap_s=0.1, frames=40, page_s=0.45)
    assert page.level == 0 and page.page_slow
    line = page.slow_page("")
    assert line.startswith("this page is slow, not the link: 450 ms to decode and paint a preview, 50 ms on the link;")
    assert line.endswith("previews kept as made") and "at 128 px, q60" in page.slow_page("128 px, q60")
    rate = page.rate_bps()
    assert rate is not None and rate > 6e6  # the link's own rate: the page's time left out
    link = Link()
    feed(link, nbytes=40_000, rate_bps=0.64e6, gap_s=0.1, frames=40)
    assert link.level > 0 and not link.page_slow and link.slow_page("") == ""


def test_a_new_run_starts_from_the_preview_as_made():
    """A client adapted to a slow link in one run gets the next run's first preview as made (issue 56: the 2 px
    of a busy page's run stayed on the next)."""
    hub = Hub(adapt=True)
    c = Client(cast(Any, None), 1, run="a")  # Hub.frame only fills its slot; nothing is sent here
    hub.clients[c.cid] = c
    c.link._to(4)
    hub.frame(Packed("a", 5, 1, packed(jpeg(64)), 1.0, 256, 256))
    assert c.link.level == 4
    hub.frame(Packed("b", 1, 2, packed(jpeg(64)), 2.0, 256, 256))
    assert c.link.level == 0 and c.slot is not None and c.slot.run_id == "b"


def test_a_reencode_that_saves_no_bytes_is_sent_as_made():
    """The hub re-encodes a 16 px preview at q60 once (a link at that level), finds it saves under 20 % and sends
    the frame as made, its link back at the frame as made."""
    hub = Hub(adapt=True)
    c = Client(cast(Any, None), 1)
    c.link.made(0.0, 800, 16)
    c.link._to(1)
    f = Packed("r", 1, 1, packed(jpeg(16), side=16), 0.0, 16, 16)
    blob, level = asyncio.run(hub._blob(c, f))
    assert blob is f.blob and level == 0 and c.link.level == 0

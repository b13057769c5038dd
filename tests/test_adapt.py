"""Issue 47: a watcher's link, measured from its acks, and the previews re-encoded for it (server/ws/adapt.py)."""
from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from previewlab.server.ws.adapt import DROPS_TO_STEP, LEVELS, PROBE_AFTER, Level, Link, Reencoder
from previewlab.server.ws.protocol import pack_frame, unpack_frame


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


def feed(link: Link, *, nbytes: int, rate_bps: float, gap_s: float, frames: int, t: float = 0.0) -> float:
    """Frames made every gap_s, each sent as the last one's ack came, crossing at rate_bps; the frames the link
    cannot carry in time are dropped, as the hub drops them. Returns the clock."""
    busy_until = t
    for _ in range(frames):
        link.made(t)
        if busy_until > t:
            link.dropped(t)
        else:
            size = link.sizes.get(link.level, nbytes * Link._share(link.level))
            busy_until = t + size * 8 / rate_bps
            link.sent(t, int(size))
            link.acked(t, busy_until, int(size), link.level)
        t += gap_s
    return t


def test_a_link_that_drops_frames_steps_down_to_the_level_that_fits():
    """40 KB frames every 0.1 s over 1 Mbit/s: each takes 0.32 s, so most drop; the link settles where a frame
    crosses within the time between frames."""
    link = Link()
    feed(link, nbytes=40_000, rate_bps=1e6, gap_s=0.1, frames=60)
    fits = [i for i in range(len(LEVELS)) if 40_000 * Link._share(i) * 8 / 1e6 <= 0.1]
    assert link.level >= 1 and link.level <= fits[0] + 1
    rate = link.rate_bps()
    assert rate is not None and 0.2e6 < rate <= 1e6  # what the acks say the link carried


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
        link.made(i * 0.25)
    link.sent(0.0, 24_000)
    link.dropped(1.25)
    assert link.dropped(1.5) and link.level >= 3


def test_level_words():
    assert Level(2, 60).words(640, 480) == "320 px, q60" and Level(1, 0).words(640, 480) == ""

"""What one client or one request may cost the server: token buckets, the work limit of a run, and what each
watcher's socket is held to (SessionLimits).

Every limit here is a number a person can read in the README's "Who may drive it" section; the ones with a
flag name it in their error, so whoever hits one knows what to change.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

# steps x width x height: 64 steps at 1024x1024, 256 at 512x512 or 1000 at 256x256. A CPU does about
# 0.25 s per 256x256 step of synthetic:small, so the limit keeps a run on it to a few minutes; one
# SDXL-sized run of 50 steps (52 M) fits. 0 turns the limit off.
DEFAULT_MAX_PIXEL_STEPS = 64 * 1024 * 1024
DEFAULT_KEEP_RUNS = 500          # run folders kept in the data folder, quick ones removed first (retention.py); 0 all
BAD_BURST, BAD_PER_S = 20, 2.0   # bad messages one client may send at once, then per second, before 1008
SET_BURST, SET_PER_S = 20, 10.0  # `set` messages: a person changes a control a few times a second at most
WS_BURST, WS_PER_S = 64, 20.0    # WebSocket handshakes one address may open at once, then per second
FRAME_BURST, FRAME_PER_S = 1000, 500.0  # WebSocket frames of every kind (pings, pongs, fragments) one
                                        # connection may send at once, then per second, before 1008; the page
                                        # sends a few messages and an ack per painted frame (60/s at 60 Hz)
MAX_FRAGMENTS = 64               # frames one WebSocket message may come in (browsers send one), then 1008
MAX_REQUESTS_PER_CONNECTION = 100  # HTTP requests one connection is answered (the page makes a handful), then closed
# HTTP connections one address may hold open at once (a WebSocket leaves the count once upgraded): idle sockets
# from one address filled uvicorn's limit_concurrency and every request, the token holder's included, got 503
MAX_CONNECTIONS_PER_ADDRESS = 32
MAX_ERROR_CHARS = 300            # an `error` message never echoes more than this
MAX_EVENT_CHARS = 1000           # a step's `event` cell: far under the csv module's 128 KiB field limit


class RateLimit:
    """A token bucket: `burst` at once, refilled at `per_s` a second; the clock is injected for tests."""

    def __init__(self, burst: int, per_s: float, clock: Any = time.monotonic) -> None:
        self.burst, self.per_s, self.clock = burst, per_s, clock
        self.tokens, self.t = float(burst), clock()

    def allow(self) -> bool:
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.t) * self.per_s)
        self.t = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False

    def full(self) -> bool:
        """Refilled to its burst by now: a bucket that may be forgotten and made afresh."""
        return self.tokens + (self.clock() - self.t) * self.per_s >= self.burst


def work_error(steps: int, width: int, height: int, max_pixel_steps: int, batch: int = 1,
               frames: int = 1) -> str | None:
    """None when the run fits the limit, else the one line a person needs to make it fit. A batch of images
    costs its size times one image's work, and a clip its frames times one frame's."""
    work = steps * width * height * batch * frames
    if max_pixel_steps <= 0 or work <= max_pixel_steps:
        return None
    fit = max_pixel_steps // (width * height * batch * frames)
    at = (f"{width}x{height}" + (f" x {frames} frames" if frames > 1 else "")
          + (f" x {batch} images" if batch > 1 else ""))
    hint = f"at {at} at most {fit} steps fit" if fit else f"no step at {at} fits"
    what = "steps x width x height" + (" x frames" if frames > 1 else "") + (" x batch" if batch > 1 else "")
    shown = (f"{steps} x {width} x {height}" + (f" x {frames}" if frames > 1 else "")
             + (f" x {batch}" if batch > 1 else ""))
    return (f"{what} = {shown} = {work:,} pixel-steps, over this server's limit of {max_pixel_steps:,} "
            f"(--max-pixel-steps); {hint}")


def clip(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """An error as the client sees it: one line, at most `limit` characters."""
    text = text.replace("\n", " ")
    return text if len(text) <= limit else text[:limit - 3] + "..."


def short(v: Any, limit: int = 40) -> str:
    """A bad value as logs and errors quote it: at most `limit` characters of its repr."""
    text = repr(v)
    return text if len(text) <= limit else text[:limit] + "..."
MAX_MESSAGE_BYTES = 64 * 1024


@dataclass(frozen=True)
class SessionLimits:
    """What each watcher's socket is held to: how many may watch at once, how long one send may take before
    the watcher is dropped, how long a run's end waits for a watcher's ack of its last preview, and its two
    buckets (burst, then a rate per second): bad messages, and `set`s."""
    max_clients: int = 32
    send_timeout_s: float = 10.0
    ack_wait_s: float = 1.0  # a page acks a preview in milliseconds; a tab that never does delays `done` this long
    bad_burst: int = BAD_BURST
    bad_per_s: float = BAD_PER_S
    set_burst: int = SET_BURST
    set_per_s: float = SET_PER_S

"""A shaped link for the load bench (previewlab load --link RATE[:DELAY]): the server and its watchers in a private
network namespace, each watcher behind a relay of its own whose traffic towards the watcher crosses a link of RATE
(traffic control's htb: one class per relay port), with DELAY added to each round
trip by the relay (this kernel has tbf and htb but no netem; FACTS.md). Each watcher has its own link, as remote
tabs do; what a watcher sends back (its acks) is not shaped, as a home link's upstream carries them unqueued.

The namespace (unshare -n) needs root, `unshare`, `ip` and `tc`; where one is missing, `previewlab load --link`
says so in one line and runs nothing. Inside it, loopback's MTU is set to 1500 so the classes meter packets of an
Ethernet's size (loopback's own 65536 would pass a whole preview as one burst).
"""
from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from typing import Sequence

NETNS_ENV = "PREVIEWLAB_LOAD_NETNS"  # set in the re-executed bench: it runs in its own namespace
_UNITS = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}
MIN_BPS, MAX_BPS = 64e3, 10e9
MAX_DELAY_MS = 2000


class LinkError(ValueError):
    """A link that cannot be shaped here, or a spec that names none; one line."""


@dataclass(frozen=True)
class Link:
    """RATE bits per second, DELAY ms added to each round trip (half each way)."""
    bps: float
    delay_ms: float = 0.0

    @property
    def name(self) -> str:
        rate = next(f"{self.bps / f:g}{u}" for u, f in sorted(_UNITS.items(), key=lambda x: -x[1]) if self.bps >= f)
        return rate + (f":{self.delay_ms:g}ms" if self.delay_ms else "")

    @property
    def burst_bytes(self) -> int:
        """The bucket's depth: a 200th of a second of the rate, at least one packet (a deeper bucket passes a small
        preview whole at loopback's speed, and its acks then read the link faster than it is)."""
        return max(1600, int(self.bps / 8 / 200))


def parse(spec: str) -> Link:
    """"10mbit" or "10mbit:40ms" (kbit, mbit, gbit; ms or s) -> Link. Raises LinkError naming what is allowed."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(kbit|mbit|gbit)\s*(?::\s*(\d+(?:\.\d+)?)\s*(ms|s))?\s*", spec.lower())
    if not m:
        raise LinkError(f"--link {spec!r}: expected RATE[:DELAY], a rate in kbit, mbit or gbit and a round-trip "
                        "delay in ms or s, for example 1mbit, 10mbit:40ms")
    bps = float(m.group(1)) * _UNITS[m.group(2)]
    delay = float(m.group(3) or 0) * (1000 if m.group(4) == "s" else 1)
    if not MIN_BPS <= bps <= MAX_BPS:
        raise LinkError(f"--link {spec!r}: a rate from 64kbit to 10gbit")
    if delay > MAX_DELAY_MS:
        raise LinkError(f"--link {spec!r}: a delay of at most {MAX_DELAY_MS} ms")
    return Link(bps, delay)


def in_namespace() -> bool:
    return os.environ.get(NETNS_ENV) == "1"


def why_not() -> str | None:
    """Why a link cannot be shaped on this machine, in one line; None when it can."""
    if os.geteuid() != 0:
        return "--link needs root: a private network namespace (unshare -n) and traffic control (tc) on its loopback"
    for tool in ("unshare", "tc", "ip"):
        if shutil.which(tool) is None:
            return f"--link needs `{tool}` (util-linux, iproute2), which this machine lacks"
    return None


def reexec(argv: Sequence[str]) -> int:
    """The bench again, in a private network namespace of its own; its exit status."""
    env = dict(os.environ, **{NETNS_ENV: "1"})
    return subprocess.call(["unshare", "-n", sys.executable, "-m", "previewlab", "load", *argv], env=env)


def shape(link: Link, ports: Sequence[int]) -> None:
    """Inside the namespace: loopback up at an Ethernet's MTU; what leaves each of `ports` (a watcher's relay)
    crosses a link of its own at link's rate, everything else is not shaped. Raises LinkError with tc's own line
    when the kernel refuses it."""
    rate = f"{int(link.bps)}bit"
    # room for a preview and the text around it (the hub keeps one preview in flight per watcher, so a longer
    # queue never fills with stale ones), or half a second of a fast link
    queue = max(96 * 1024, int(link.bps / 8 / 2))
    steps = [["ip", "link", "set", "lo", "up"], ["ip", "link", "set", "lo", "mtu", "1500"],
             # no segmentation offload: TCP would hand the qdisc 64 KB super-packets once its window has grown,
             # and htb lets one through whole on credit (measured: a 12 KB preview in 0 ms after the first)
             ["ip", "link", "set", "lo", "gso_max_size", "1500", "gso_max_segs", "1"],
             ["tc", "qdisc", "replace", "dev", "lo", "root", "handle", "1:", "htb", "default", "1"],
             ["tc", "class", "add", "dev", "lo", "parent", "1:", "classid", "1:1", "htb", "rate", "100gbit"]]
    for i, port in enumerate(ports, 10):
        steps += [["tc", "class", "add", "dev", "lo", "parent", "1:", "classid", f"1:{i}", "htb", "rate", rate,
                   "ceil", rate, "burst", str(link.burst_bytes), "cburst", str(link.burst_bytes)],
                  ["tc", "qdisc", "add", "dev", "lo", "parent", f"1:{i}", "bfifo", "limit", str(queue)],
                  ["tc", "filter", "add", "dev", "lo", "parent", "1:", "protocol", "ip", "prio", "1", "u32", "match",
                   "ip", "sport", str(port), "0xffff", "flowid", f"1:{i}"]]
    for cmd in steps:
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise LinkError(f"--link: `{' '.join(cmd)}` failed: {(done.stderr or done.stdout).strip()[:160]}")


def up() -> None:
    """Inside the namespace: loopback up, before anything listens on it."""
    done = subprocess.run(["ip", "link", "set", "lo", "up"], capture_output=True, text=True)
    if done.returncode != 0:
        raise LinkError(f"--link: `ip link set lo up` failed: {(done.stderr or done.stdout).strip()[:160]}")


class Relay:
    """TCP from `port` to the server at `target`: one watcher's end of the link (shape() meters what leaves
    `port`), each chunk held delay_ms / 2 each way before it goes on, in order (the link's latency, which htb
    does not add)."""

    def __init__(self, target: int, delay_ms: float) -> None:
        self.target, self.half_s = target, delay_ms / 2000
        self.server: asyncio.base_events.Server | None = None
        self.port = 0

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self.port

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.open_connection("127.0.0.1", self.target)
        except OSError:
            writer.close()
            return
        await asyncio.gather(self._pipe(reader, up_w), self._pipe(up_r, writer), return_exceptions=True)

    async def _pipe(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def later() -> None:
            while True:
                due, chunk = await queue.get()
                if not chunk:
                    break
                await asyncio.sleep(max(0.0, due - loop.time()))
                dst.write(chunk)
                await dst.drain()
            dst.close()

        out = asyncio.create_task(later())
        try:
            while chunk := await src.read(65536):
                queue.put_nowait((loop.time() + self.half_s, chunk))
        finally:
            queue.put_nowait((loop.time() + self.half_s, b""))
            await out

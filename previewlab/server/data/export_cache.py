"""A finished run's export rows, kept compressed between exports: its files never change, so exporting it again
costs a stat per file and an inflate, never a parse.

The kept texts were bounded at 16 M characters and the least recently exported went first, so an export of
every run (150 runs of 1000 steps: about 40 M characters) evicted each run just before it was asked for again
and parsed every row every time. Compressed, a run of 1000 steps is under 100 KB (its context repeats on every
row), and zlib lets the interpreter go while it inflates, so a kept run streams at little cost to a running
model.
"""
from __future__ import annotations

import codecs
import threading
import zlib
from collections import OrderedDict
from typing import Any, Iterator

EXPORT_CACHE_BYTES = 64 << 20  # compressed: 700 runs of 1000 steps (93 KB each), past --keep-runs' 500
LEVEL = 1                      # zlib's fastest: CSV of numbers shrinks 3-10x already


class ExportCache:
    """Run id -> (its files' stamps, its rows as compressed CSV). Used from the disk thread; retention forgets
    runs from another, hence the lock."""

    def __init__(self, budget_bytes: int = EXPORT_CACHE_BYTES) -> None:
        self.budget_bytes = budget_bytes
        self.hits = 0
        self._kept: OrderedDict[str, tuple[Any, bytes]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, rid: str, stamps: Any) -> bytes | None:
        """The run's kept rows when its files are as they were (stamps); None otherwise."""
        with self._lock:
            kept = self._kept.get(rid)
            if kept is None or kept[0] != stamps:
                return None
            self._kept.move_to_end(rid)
            self.hits += 1
            return kept[1]

    def put(self, rid: str, stamps: Any, blob: bytes) -> None:
        with self._lock:
            self._drop(rid)
            if len(blob) > self.budget_bytes:
                return
            self._kept[rid] = (stamps, blob)
            self._bytes += len(blob)
            while self._bytes > self.budget_bytes:
                self._drop(next(iter(self._kept)))

    def forget(self, rid: str) -> None:
        with self._lock:
            self._drop(rid)

    def _drop(self, rid: str) -> None:
        kept = self._kept.pop(rid, None)
        self._bytes -= len(kept[1]) if kept else 0

    @property
    def bytes(self) -> int:
        return self._bytes


class Packer:
    """CSV text in, compressed bytes out, a piece at a time: a run's export is never whole as text."""

    def __init__(self) -> None:
        self._z = zlib.compressobj(LEVEL)
        self._out: list[bytes] = []

    def add(self, text: str) -> None:
        self._out.append(self._z.compress(text.encode("utf-8")))

    def done(self) -> bytes:
        self._out.append(self._z.flush())
        return b"".join(self._out)


def unpack(blob: bytes, chars: int) -> Iterator[str]:
    """The text back in pieces of at most `chars` characters (a character split across pieces' bytes waits
    for the next piece)."""
    z, text = zlib.decompressobj(), codecs.getincrementaldecoder("utf-8")()
    data = blob
    while not z.eof:
        out = z.decompress(data, chars)
        data = z.unconsumed_tail
        if not out and not data:
            break  # a stream cut short: never made here, but never a loop either
        piece = text.decode(out)
        if piece:
            yield piece
    rest = text.decode(z.flush(), final=True)
    if rest:
        yield rest

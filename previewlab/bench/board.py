"""A cluster sweep's progress: its units queued, and running, done or failed on each node, as one line.

The driver (bench/cluster.py) tells the board what happens; the board only counts and draws.
"""
from __future__ import annotations

from dataclasses import dataclass, field

BAR_WIDTH = 20  # characters of the bar


@dataclass
class Board:
    """Counts per node, in the order nodes were named. queued: units no node has taken yet."""
    total: int
    queued: int
    running: dict[str, int] = field(default_factory=dict)
    done: dict[str, int] = field(default_factory=dict)
    failed: dict[str, int] = field(default_factory=dict)
    lost: set[str] = field(default_factory=set)
    dropped: int = 0  # units given up after their tries

    def node(self, name: str) -> None:
        """A node the sweep may use, shown from the start."""
        for d in (self.running, self.done, self.failed):
            d.setdefault(name, 0)

    def start(self, name: str) -> None:
        self.node(name)
        self.queued -= 1
        self.running[name] += 1

    def finish(self, name: str, ok: bool = True) -> None:
        self.running[name] -= 1
        (self.done if ok else self.failed)[name] += 1

    def again(self, name: str) -> None:
        """A unit that did not finish on `name` (the node was lost, its worker died) is queued again."""
        self.running[name] -= 1
        self.queued += 1

    def drop(self) -> None:
        """A unit queued again is given up (bench/cluster.py's TRIES)."""
        self.queued -= 1
        self.dropped += 1

    def lose(self, name: str) -> None:
        self.lost.add(name)

    def line(self) -> str:
        """'[########------------] 4/10 units | host/1a2b3c4d: 2 done, 1 running | ... | 4 queued'."""
        done = sum(self.done.values()) + sum(self.failed.values()) + self.dropped
        filled = BAR_WIDTH * done // max(1, self.total)
        parts = [f"[{'#' * filled}{'-' * (BAR_WIDTH - filled)}] {done}/{self.total} units"]
        for name in self.running:
            said = [f"{self.done[name]} done", f"{self.running[name]} running"] + \
                   ([f"{self.failed[name]} failed"] if self.failed[name] else [])
            parts.append(f"{name}{' (lost)' if name in self.lost else ''}: {', '.join(said)}")
        parts.append(f"{self.queued} queued" + (f", {self.dropped} given up" if self.dropped else ""))
        return " | ".join(parts)

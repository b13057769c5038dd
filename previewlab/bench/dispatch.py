"""A cluster sweep's units on their nodes (bench/cluster.py's driver hands them over): queued for the cluster,
each started on a node with a free slot, written as it finishes, run again where its worker or node died (up to
TRIES), cancelled on Ctrl-C.
"""
from __future__ import annotations

import collections
import sys
from typing import Callable

import ray
from ray.exceptions import NodeDiedError, RayError, RayTaskError

from previewlab.bench.board import Board
from previewlab.bench.nodes import Node, first_line, on
from previewlab.bench.unit import UnitJob, UnitResult, run_unit

TRIES = 3          # a unit whose worker or node dies is run again, up to this many tries in all
POLL_S = 1.0       # how often the driver wakes while units run (Ctrl-C is heard between waits)


def say(line: str) -> None:
    """One line of the driver's, on stderr at once."""
    print(line, file=sys.stderr, flush=True)


class Dispatch:
    """The units' life on the cluster: queued (for the cluster, not a node: whichever frees a slot first takes
    the next), running on a node, then done, failed, or queued again where their worker or node died. The nodes
    still usable, each with its free slots."""

    def __init__(self, jobs: list[UnitJob], places: list[tuple[Node, int]], asks: dict[str, float],
                 write: Callable[[UnitResult], None], board: Board) -> None:
        self.jobs, self.asks, self.write, self.board = jobs, asks, write, board
        self.queue = collections.deque(jobs)
        self.free = {n.id: slots for n, slots in places}
        self.nodes = {n.id: n for n, _ in places}
        self.running: dict[ray.ObjectRef, tuple[UnitJob, Node]] = {}
        self.tries: collections.Counter[int] = collections.Counter()
        self.failed = 0
        self.remote = ray.remote(run_unit)

    def run(self) -> int:
        """Runs every unit, at most a node's slots at once, writing each as it finishes; how many failed. On
        KeyboardInterrupt, cancels what runs and re-raises."""
        try:
            while self.queue or self.running:
                self._fill()
                if not self.running:  # what finished is kept and summarized
                    self._stop("every node that could run a unit was lost")
                    break
                try:
                    done, _ = ray.wait(list(self.running), num_returns=1, timeout=POLL_S)
                except RayError as e:  # the head itself is gone
                    self._stop(f"the cluster stopped answering ({first_line(e)})")
                    break
                for ref in done:
                    self._settle(ref)
                    say("  " + self.board.line())
        except KeyboardInterrupt:
            for ref in self.running:
                ray.cancel(ref, force=True)
            raise
        return self.failed

    def _say(self, job: UnitJob, what: str) -> None:
        say(f"  unit {job.index + 1}/{len(self.jobs)} {job.name}: {what}")

    def _fill(self) -> None:
        for node in list(self.nodes.values()):
            while self.queue and self.free[node.id] > 0:
                job = self.queue.popleft()
                ref = self.remote.options(max_retries=0, scheduling_strategy=on(node.id), **self.asks) \
                    .remote(job, node.name)
                self.running[ref] = (job, node)
                self.free[node.id] -= 1
                self.tries[job.index] += 1
                self.board.start(node.name)
                self._say(job, f"starts on {node.name}")

    def _settle(self, ref: ray.ObjectRef) -> None:
        job, node = self.running.pop(ref)
        self.free[node.id] += 1
        try:
            result: UnitResult = ray.get(ref)
        except RayTaskError as e:  # the unit itself raised: another try would raise again
            self.failed += 1
            self.board.finish(node.name, ok=False)
            self._say(job, f"failed on {node.name}: {first_line(e)}")
        except RayError as e:  # its worker or its node died
            self._again(job, node, e)
        else:
            self.write(result)
            self.board.finish(node.name)
            self._say(job, f"done on {node.name} ({result.device}, its model loaded in {result.load_s:.1f} s)")

    def _again(self, job: UnitJob, node: Node, e: RayError) -> None:
        """A unit whose worker or node died: queued again (first in line), or given up after TRIES."""
        self.board.again(node.name)
        # a node Ray says died, or that the cluster no longer lists alive, takes no more units
        if node.id in self.nodes and (isinstance(e, NodeDiedError) or not _alive(node.id)):
            del self.nodes[node.id]
            self.board.lose(node.name)
            say(f"  node {node.name} lost")
        if self.tries[job.index] >= TRIES:
            self.failed += 1
            self.board.drop()
            self._say(job, f"gave up after {TRIES} tries ({first_line(e)})")
        else:
            self.queue.appendleft(job)
            self._say(job, f"did not finish on {node.name} ({first_line(e)}); runs again")

    def _stop(self, why: str) -> None:
        say(f"  {why}; {len(self.queue)} units not run")
        self.failed += len(self.queue)
        for _ in self.queue:
            self.board.drop()
        self.queue.clear()


def _alive(node: str) -> bool:
    return any(n["NodeID"] == node and n.get("Alive") for n in ray.nodes())

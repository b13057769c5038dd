"""Profiler ranges named previewlab.<stage>, so a torch.profiler trace shows each stage by name."""
from __future__ import annotations

from typing import Any

import torch


class Ranges:
    """torch.profiler ranges named previewlab.<stage>; does nothing unless a trace was asked for."""

    def __init__(self, on: bool) -> None:
        self.on = on
        self._open: dict[str, Any] = {}

    def begin(self, name: str) -> None:
        if self.on:
            rf = torch.profiler.record_function(f"previewlab.{name}")
            rf.__enter__()
            self._open[name] = rf

    def end(self, name: str) -> None:
        rf = self._open.pop(name, None)
        if rf is not None:
            rf.__exit__(None, None, None)

    def end_all(self) -> None:
        """Close the ranges left open (a run that stopped or failed mid-step)."""
        for name in list(self._open):
            self.end(name)

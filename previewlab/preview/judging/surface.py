"""How a surface words the advice: what differs between the surfaces that render it (the bench's summary and
report, compare, the server's page, a watch's summary), and the words for an overhead they all share. No torch
here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from previewlab.preview.judging.estimates import Estimate, verdict


def bench_more(n: int) -> str:
    """How the bench gets n more pairs."""
    return f"--repeats {n} more for the 95 % level"


_FLAGS = {"decoder": "--decoders", "every": "--every", "decode_at": "--decode-at", "preview_max": "--preview-max"}


def bench_how(setting: str, value: object) -> str:
    """How the bench measures a setting."""
    return f"measure it: previewlab bench {_FLAGS.get(setting, '--' + setting)} {value}"


@dataclass(frozen=True)
class Surface:
    """What differs between the surfaces that render the advice: how each gets n more pairs (more), what its
    NOISY line offers (remedies: None, the bench's), and how its user measures a setting (how)."""
    more: Callable[[int], str] = bench_more
    remedies: str | None = None
    how: Callable[[str, object], str] = bench_how


BENCH = Surface()


def said(e: Estimate | None, more: Callable[[int], str] = bench_more) -> str:
    """An overhead and its verdict in the words every surface uses."""
    if e is None:
        return "no baseline beside it"
    tail = f"; {more(e.more_for_level)}" if e.more_for_level else ""
    return f"{e.signed()}: {verdict(e)}{tail}"

"""A meta.json's numbers, read only where they fit what previewlab writes.

JSON allows any number: a 400-digit integer, or 1e999, which Python reads as infinity. No run of previewlab
writes either, and each, hand-placed in one meta.json, made every listing that showed the run answer 500 (a float
of the integer: OverflowError; infinity: no valid JSON answer). So a meta.json is read here, its numbers checked
as they are parsed: an integer within a signed 64 bits (a seed's range, the widest previewlab writes), a float
finite (NaN and Infinity are not JSON at all). A number past them is OutOfRange, naming its key, and the reader
(run_files.read_meta) calls the run damaged: one place, so nothing that reads a meta.json converts or sums such a
number.
"""
from __future__ import annotations

import json
import math
from typing import Any, Iterator

INT_MIN, INT_MAX = -(2**63), 2**63 - 1
SHOWN = 24  # characters of a number's text the reason quotes


class OutOfRange(ValueError):
    """A number no meta.json of previewlab's holds; str(): `key=number: why`, one line."""


def loads(text: str) -> Any:
    """text as JSON, as json.loads reads it. Raises OutOfRange (a number past INT_MIN..INT_MAX, or a float that
    is not finite) or ValueError (not JSON: NaN and Infinity among it)."""
    odd: list[str] = []

    def as_int(s: str) -> int:
        v = int(s)  # past 4300 digits Python refuses (ValueError): not JSON, as before
        if len(s) > 18 and not INT_MIN <= v <= INT_MAX:
            odd.append(s)
        return v

    def as_float(s: str) -> float:
        v = float(s)
        if not math.isfinite(v):
            odd.append(s)
        return v

    value = json.loads(text, parse_int=as_int, parse_float=as_float, parse_constant=_no_constant)
    if odd:
        raise OutOfRange(_reason(value, odd[0]))
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # NaN in a listing would make the whole /runs answer invalid


def _reason(value: Any, text: str) -> str:
    """The first number past the range, as `key=number: why`."""
    where = next((k for k, v in _numbers(value, "") if _odd(v)), "?")
    if not where.isprintable() or len(where) > 80:
        where = ascii(where[:80])
    shown = text if len(text) <= SHOWN else f"{text[:SHOWN - 4]}... ({len(text.lstrip('-'))} digits)"
    why = ("past what a float holds (read as infinity)" if any(c in text for c in ".eE")
           else "past a signed 64-bit integer")
    return f"{where}={shown}: {why}, not a number previewlab writes"


def _odd(v: Any) -> bool:
    if isinstance(v, float):
        return not math.isfinite(v)
    return isinstance(v, int) and not isinstance(v, bool) and not INT_MIN <= v <= INT_MAX


def _numbers(value: Any, where: str) -> Iterator[tuple[str, Any]]:
    """Every leaf of value with its key path (totals.bytes, a list's [i]), in the file's order; no recursion (a
    deeply nested file that json read must not overflow the stack here)."""
    stack: list[tuple[str, Any]] = [(where, value)]
    while stack:
        path, v = stack.pop()
        if isinstance(v, dict):
            stack.extend(reversed([(f"{path}.{k}" if path else str(k), x) for k, x in v.items()]))
        elif isinstance(v, list):
            stack.extend(reversed([(f"{path}[{i}]", x) for i, x in enumerate(v)]))
        else:
            yield path, v

"""A record's cells: the one parser of a CSV line into a record (from_cells), each cell read as its field's type
says, and a JSON object's values made into such cells (json_cells), so a record read from JSON is parsed and checked
as its CSV line is. The records themselves are records.py's (StepRow, Totals) and run.py's."""
from __future__ import annotations

import functools
import types
from collections.abc import Mapping
from dataclasses import MISSING, fields
from typing import Any, Callable, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

R = TypeVar("R")


def json_cells(d: Mapping[str, Any]) -> dict[str, str]:
    """A JSON object's values as the cells from_cells reads, so a record read from JSON is parsed and checked as
    its CSV line is: None is "", a bool 0 or 1, a number as Python writes it (which parses back to the same
    number). Objects and lists are left out: a nested record is read by its own from_json."""
    return {k: "" if v is None else str(int(v)) if isinstance(v, bool) else v if isinstance(v, str) else str(v)
            for k, v in d.items() if not isinstance(v, (dict, list))}


def _bool(cell: str) -> bool:
    if cell not in ("0", "1", "False", "True"):
        raise ValueError(cell)
    return cell in ("1", "True")


def _one_of(allowed: tuple[Any, ...]) -> Callable[[str], str]:
    """A Literal field's parse: the cell when it is one of the names allowed."""
    if not all(isinstance(a, str) for a in allowed):
        raise TypeError(f"Literal{list(allowed)}: a record read from cells holds names (text) only")
    known = frozenset(allowed)

    def parse(cell: str) -> str:
        if cell not in known:
            raise ValueError(cell)
        return cell
    return parse


_NUMBERS: dict[Any, tuple[Callable[[str], Any], Any, str]] = {  # kind -> parse, its zero, what a bad cell is not
    int: (int, 0, "not int"), float: (float, 0.0, "not float"), bool: (_bool, False, "not bool")}


@functools.cache
def _plan(cls: type) -> tuple[tuple[str, Callable[[str], Any], bool, bool, Any, str], ...]:
    """A record's fields as from_cells reads them, from their resolved annotations: name, parse, text ("" is a
    value: str, any other kind but a number, a bool or a Literal, and a Literal that names ""), may be None,
    value when missing, what a cell that does not parse is (the error's words)."""
    hints = get_type_hints(cls)
    out = []
    for f in fields(cls):
        kind = hints[f.name]
        args = get_args(kind)
        optional = get_origin(kind) in (Union, types.UnionType) and type(None) in args
        core = [a for a in args if a is not type(None)] if optional else [kind]
        kind = core[0] if len(core) == 1 else object  # a union of several kinds is text
        if kind in _NUMBERS:
            (parse, zero, expect), text = _NUMBERS[kind], False
        elif get_origin(kind) is Literal:
            names = get_args(kind)
            parse, zero, expect, text = _one_of(names), "", f"allowed are {', '.join(names)}", "" in names
        else:
            parse, zero, expect, text = str, "", "not text", True
        missing = f.default if f.default is not MISSING else None if optional else zero
        out.append((f.name, parse, text, optional, missing, expect))
    return tuple(out)


def from_cells(cls: type[R], row: Mapping[str, str], **given: Any) -> R:
    """The one place a CSV line becomes a record: each field's cell parsed to the field's type (a Literal's cell
    must be one of its names; any other kind but a number or a bool is text); a column an older file lacks, or
    an empty cell where "" is no value (a number's, a Literal's that has no "" among its names), takes the
    field's default, or None where the field may be None, or its type's zero; columns the record does not have
    are ignored; given: fields made by the caller (a nested record). Raises ValueError naming a cell that does
    not parse, and for a Literal's the names allowed."""
    out: dict[str, Any] = dict(given)
    for name, parse, text, optional, missing, expect in _plan(cls):  # type: ignore[arg-type]  # a class is hashable
        if name in given:
            continue
        cell = row.get(name)
        if cell is None or (cell == "" and (optional or not text)):
            out[name] = missing
            continue
        try:
            out[name] = parse(cell)
        except ValueError:
            raise ValueError(f"{name}={cell[:40]!r}: {expect}") from None
    return cls(**out)

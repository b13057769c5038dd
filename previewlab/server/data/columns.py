"""The data folder's CSVs, column by column: deliveries.csv's row (DeliveryRow), the exports' columns (a run's step
rows with its context, RUN_CONTEXT; the list's row a run, LIST_COLUMNS) and their cells, made from a meta.json as
it was written (run_context, list_row) and made inert for a spreadsheet (inert). The store writes them and its
reader (store_reader.py) reads them back.
"""
from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

from previewlab.preview.record.cells import from_cells
from previewlab.preview.record.records import STEP_COLUMNS, TOTALS_COLUMNS
from previewlab.preview.record.run import RunMeta
from previewlab.preview.settings import PreviewSettings


@dataclass(frozen=True)
class DeliveryRow:
    """A deliveries.csv line: one frame's trip to one client, acked (its timings, ms) or dropped (none)."""
    run_id: str
    step: int
    seq: int
    client: str
    kind: Literal["ack", "drop"]
    send_ms: float | None = None
    ack_rtt_ms: float | None = None
    client_decode_ms: float | None = None
    client_paint_ms: float | None = None
    nbytes: int | None = None        # as sent over its link (server/ws/adapt.py re-encodes for a slow one)
    age_ms: float | None = None      # made to painted (the ack), ms
    link_mbps: float | None = None   # the rate its link delivered over the last acks
    adapted: str = ""                # its re-encode ("320 px, q60"), "" as made

    def to_row(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_row(cls, row: Mapping[str, str]) -> DeliveryRow:
        return from_cells(cls, row)


DELIVERY_COLUMNS = tuple(f.name for f in fields(DeliveryRow))
# a run's context, repeated on each step row of the server's CSVs (device_name comes from the run's totals)
RUN_CONTEXT = ("model", "model_note", "device", "device_name", "dtype", "prompt", "seed", "guidance", "steps",
               "purpose")  # purpose: a measure series' baseline or measured run, "" a user's
EXPORT_COLUMNS = STEP_COLUMNS + RUN_CONTEXT
# the list's CSV, a row per run: what it was asked (meta.json's fields), how it ended, then its totals' own fields
LIST_COLUMNS = tuple(dict.fromkeys(
    [f.name for f in fields(RunMeta) if f.name != "preview"] + [f.name for f in fields(PreviewSettings)]
    + ["status", "error", "damaged", "changes"] + list(TOTALS_COLUMNS)))
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")  # what makes a spreadsheet read a cell as a formula


def inert(v: object) -> object:
    """A text cell a spreadsheet would evaluate (=, +, -, @, a tab or a CR first: "=HYPERLINK(...)" in a prompt)
    gets a leading apostrophe, so it shows as the text it is (OWASP's advice on CSV injection). Numbers pass."""
    return "'" + v if isinstance(v, str) and v.startswith(FORMULA_START) else v


def _cell(v: object) -> object:
    """A meta.json value as one cell: a list of texts (a run's changes) joined with arrows, any other list or
    object as compact JSON, text made inert."""
    if isinstance(v, list) and all(isinstance(x, str) for x in v):
        v = " \u2192 ".join(v)
    elif isinstance(v, (list, dict)):
        v = json.dumps(v, ensure_ascii=False, separators=(",", ":"))
    return inert(v)


def run_context(meta: Mapping[str, object]) -> dict[str, object]:
    """The run's context for each of its step rows (RUN_CONTEXT): meta.json's, and device_name from its totals
    (a run that ended without totals, failed or interrupted, has none)."""
    totals = meta.get("totals")
    found = {**(totals if isinstance(totals, dict) else {}), **meta}
    return {k: _cell(found.get(k, "")) for k in RUN_CONTEXT}


def list_row(meta: Mapping[str, object]) -> dict[str, object]:
    """A run's row in the list's CSV: its meta.json's fields, then its totals' (the meta's win where both have
    one: its status says `interrupted`, its totals only how the steps ended)."""
    totals = meta.get("totals")
    found = {**(totals if isinstance(totals, dict) else {}), **meta}
    return {k: _cell(found.get(k)) for k in LIST_COLUMNS}


def export_header() -> str:
    """The exports' header line (EXPORT_COLUMNS), as csv writes it."""
    buf = io.StringIO()
    csv.writer(buf).writerow(EXPORT_COLUMNS)
    return buf.getvalue()

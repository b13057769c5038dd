"""The server's text messages to the browser, each built by the function of its name below, JSON-ready for the
hub to serialise (server/ws/sender.py); what the browser sends is protocol.py's, the binary previews binary.py's.

  hello     the model, the run defaults and limits (max_prompt: characters), the choices this server offers, the
            run going on (or null), whether a start is taken (starts: false when a script's watch owns the runs),
            why the default decoder is the one it is (decoder_note, "" when that needs no word), the words
            the model knows (vocabulary: the demo model's, else null) and the cores the process may use (cores:
            what a CPU's busy share is of)
  run       a run's meta (preview/record/run.py's RunMeta): it started
  step      one step's row (preview/record/records.py's StepRow), once it is on disk
  delivery  one preview's trip to this client: send time, ack round trip, the browser's decode and paint (ms);
            its link's figures (bytes, age when painted, the rate delivered, this run's previews painted of those
            made, its re-encode) and the page's two lines on them (link_line, adapted_line)
  done      a run's end (preview/record/run.py's RunEnd): its meta, status, live changes, totals or error; its
            figures and its settings' analysis (server/core/run_figures.py's RunFigures: the page computes none)
  measure   a measure series' progress: its state (running, done, stopped, failed), its configuration, the
            pairs it has and needs, the pairs it adds (said at its start), the pairs it starts at most, and its
            line in words
  fidelity  the fidelity pass's progress: its state (running, done, failed) and its line
  error     one line: a message refused (to its sender), or a run's preview failure (run_id: to everyone)
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, TypedDict

from previewlab.preview.names import (BATCH_PREVIEWS, DECODE_ATS, DECODER_NAMES, FRAMES_NAMES, MAX_PREVIEW_FRAMES, MODES,
                                     TARGETS)
from previewlab.preview.record.records import StepRow
from previewlab.preview.record.run import RunEnd, RunMeta, dtype_name
from previewlab.preview.settings import MAX_BATCH, MAX_PROMPT, RUN_FIELDS, RunSettings

from previewlab.server.core.limits import clip
from previewlab.server.core.run_figures import RunFigures
from previewlab.server.data.columns import DeliveryRow

if TYPE_CHECKING:
    from previewlab.preview.models import Model

Outbound = dict[str, object]  # a text message to the browser, JSON-ready, for the hub to serialise


def hello(model: Model, defaults: RunSettings, *, max_pixel_steps: int, encoders: tuple[str, ...],
          running: RunMeta | None, starts: bool = True, decoder_note: str = "",
          vocabulary: dict[str, list[str]] | None = None, cores: int = 0) -> Outbound:
    """encoders: the ones this server can run (the registry's, less nvjpeg without CUDA); starts: False when a
    script owns the runs (serve(watch)): the page offers no start and no run settings, only the live ones.
    decoder_note: why the default decoder is the one it is, when that needs saying ("" otherwise); vocabulary:
    the words the model knows (the demo model's: bench/demo/scenes.vocabulary), None for every other model;
    cores: the cores the process may use (timing/busy.usable_cores; 0: not said), what a CPU's busy share is of."""
    return {"type": "hello", "model": model.name, "synthetic": model.synthetic, "note": model.note, "starts": starts,
            "max_prompt": MAX_PROMPT, "decoder_note": decoder_note, "vocabulary": vocabulary,
            "family": model.space.name, "space": model.space.describe(), "device": model.device.type,
            "dtype": dtype_name(model.dtype), "max_batch": MAX_BATCH, "video": model.space.video,
            "cores": cores,  # a CPU's busy share (the process's CPU time) is of these, not of one core
            "max_frames": defaults.max_frames,
            "defaults": {**{k: getattr(defaults, k) for k in RUN_FIELDS}, **asdict(defaults.preview)},
            "max_side": defaults.max_side, "max_pixel_steps": max_pixel_steps, "taesd": model.taesd is not None,
            "running": running.to_json() if running else None,
            # the page's choices come from the registries, so a new decoder or encoder needs no page edit
            "choices": {"decoder": list(DECODER_NAMES), "encoder": list(encoders), "mode": list(MODES),
                        "target": list(TARGETS), "batch_preview": list(BATCH_PREVIEWS),
                        "frames": list(FRAMES_NAMES), "decode_at": list(DECODE_ATS)},
            "max_preview_frames": MAX_PREVIEW_FRAMES}  # frames also takes a number N from 2 to this


def run(meta: RunMeta) -> Outbound:
    return {"type": "run", **meta.to_json()}


def step(row: StepRow) -> Outbound:
    return {"type": "step", **asdict(row)}


@dataclass(frozen=True)
class Delivery:
    """One preview's trip to one client, from the browser's ack, ms; its deliveries.csv row and its message."""
    run_id: str
    step: int
    seq: int
    send_ms: float           # the socket write, on the server
    ack_rtt_ms: float        # from the send's start to the ack
    client_decode_ms: float  # the browser's, as it reports them
    client_paint_ms: float
    # its link (server/ws/adapt.py): the bytes it was sent as; its age when painted (made to ack, ms); the rate the
    # link delivered over the last acks (Mbit/s, None before two); this run's previews offered to the client and
    # painted by it so far; what its re-encode was ("320 px, q60"; "" as made)
    nbytes: int = 0
    age_ms: float | None = None
    link_mbps: float | None = None
    made: int | None = None
    delivered: int | None = None
    adapted: str = ""

    def row(self, client: str) -> DeliveryRow:
        """Its deliveries.csv row, an ack by `client`."""
        return DeliveryRow(self.run_id, self.step, self.seq, client, "ack", send_ms=self.send_ms,
                           ack_rtt_ms=self.ack_rtt_ms, client_decode_ms=self.client_decode_ms,
                           client_paint_ms=self.client_paint_ms, nbytes=self.nbytes, age_ms=self.age_ms,
                           link_mbps=self.link_mbps, adapted=self.adapted)

    def line(self) -> str:
        """What the page says of this tab's link: "this tab: 1.9 Mbit/s, 38 of 60 previews, newest 180 ms old"."""
        rate = "rate not measured yet" if self.link_mbps is None else f"{self.link_mbps:.3g} Mbit/s"
        count = "" if self.made is None else f", {self.delivered} of {self.made} previews"
        age = "" if self.age_ms is None else f", newest {self.age_ms:.0f} ms old"
        return f"this tab: {rate}{count}{age}"


def delivery(d: Delivery, slow_page: str = "") -> Outbound:
    """slow_page: the server's line on a page that holds its own previews back (adapt.Link.slow_page), said in the
    place of the adapted line."""
    adapted = slow_page or (f"adapted to this link: {d.adapted}" if d.adapted else "")
    return {"type": "delivery", **asdict(d), "link_line": d.line(), "adapted_line": adapted}


def done(end: RunEnd, judged: RunFigures | None = None) -> Outbound:
    """judged: the run's figures and its settings' analysis (server/figures.Figures.of_run), where it has them."""
    return {"type": "done", **end.to_json(), **(judged.to_json() if judged is not None else {})}


class MeasureMessage(TypedDict):
    type: str  # "measure"
    state: str  # running, done, stopped or failed
    config: str
    pairs: int
    needs: int
    adds: int
    most: int
    line: str


def measure(state: str, config: str, pairs: int, needs: int, line: str, *, adds: int, most: int) -> MeasureMessage:
    """A series' progress: its configuration's pairs, the pairs it aims at (needs), adds and starts at most."""
    return {"type": "measure", "state": state, "config": config, "pairs": pairs, "needs": needs, "adds": adds,
            "most": most, "line": line}


def fidelity(state: str, line: str) -> Outbound:
    """The fidelity pass's progress: running, done or failed, and its line."""
    return {"type": "fidelity", "state": state, "line": line}


def error(message: str, run_id: str | None = None) -> Outbound:
    """One line. A run's error names its run; a refused message's goes to its sender alone and names none."""
    named = {} if run_id is None else {"run_id": run_id}
    return {"type": "error", **named, "message": clip(message)}

"""The WebSocket protocol: one validator turns a text frame into a typed message or a ProtocolError.

Browser -> server (text, JSON objects with a "type"):
  start  {prompt, steps, width, height, seed, guidance, batch, init, strength, num_frames, fps, decoder, every,
          preview_max, encoder, quality, mode, budget, target, batch_preview, frames, decode_at}
         (all optional; every may be "auto": the autopilot picks the interval to fit budget, in percent;
          init: a past run's id, whose final image is the input of an img2img run at strength;
          num_frames and fps: a video model's clip; frames: which of its frames a preview shows;
          decode_at: where the preview decoder stops, preview | full | half_latents)
  set    {decoder, every, preview_max, encoder, quality, mode, budget, target, batch_preview, frames, decode_at}
         (at least one)
  stop   {}   (also ends a measure series)
  ack    {seq, client_decode_ms, client_paint_ms}
  link   {adapt}  this client's previews re-encoded cheaper while its link drops them (true, the default) or as made
  measure  the fields of start: pairs of a no-preview baseline of those settings and a run with those preview
         settings, their order alternating (server/measure.py), until that configuration's overhead has the pairs
         the series set out to add (those for the 95 % level, counted from the pairs it has); every "auto" is
         refused (its runs change as they go, so none pairs)
Server -> browser (text, each built by the function of its name below):
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
  done      a run's end (preview/record/run.py's RunEnd): its meta, status, live changes, totals or error; its figures and
            its settings' analysis (server/figures.py: the page computes none)
  measure   a measure series' progress: its state (running, done, stopped, failed), its configuration, the
            pairs it has and needs, the pairs it adds (said at its start), the pairs it starts at most, and its
            line in words
  error     one line: a message refused (to its sender), or a run's preview failure (run_id: to everyone)
Binary previews: 4-byte big-endian header length N, N bytes of UTF-8 JSON header, then the image bytes: one
  image, or a clip's frames one after another (the header's `sizes` gives each frame's bytes, `frames` their
  count and `fps` the rate that plays them over the clip; one ack answers the whole message).
"""
from __future__ import annotations

import json
import math
import struct
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Union

from previewlab.preview.names import (BATCH_PREVIEWS, DECODE_ATS, DECODER_NAMES, FRAMES_NAMES, MAX_PREVIEW_FRAMES, MODES,
                                     TARGETS)
from previewlab.preview.record.records import StepRow
from previewlab.preview.record.run import RunEnd, RunMeta, dtype_name
from previewlab.preview.settings import (MAX_BATCH, MAX_EVERY, MAX_PROMPT, PREVIEW_FIELDS, RUN_FIELDS, PreviewSettings,
                                        RunSettings, SettingsError)

from previewlab.server.core.limits import MAX_MESSAGE_BYTES, clip, short, work_error

if TYPE_CHECKING:
    from previewlab.preview.frames import Frame
    from previewlab.preview.models import Model

Outbound = dict[str, Any]  # a text message to the browser, for the hub to serialise


class ProtocolError(ValueError):
    """A message that was not accepted; str() is the one line sent back as an `error`."""


@dataclass(frozen=True)
class Start:
    settings: RunSettings


@dataclass(frozen=True)
class Set:
    """Validated once, here: the named fields, and the preview settings they make on top of the defaults."""
    fields: tuple[str, ...]
    settings: PreviewSettings

    @property
    def changes(self) -> dict[str, Any]:
        """The named fields' values, typed and checked (taken from the validated settings, not the raw JSON)."""
        return {f: getattr(self.settings, f) for f in self.fields}


@dataclass(frozen=True)
class Stop:
    pass


@dataclass(frozen=True)
class Measure:
    """Measure `settings`' overhead: baselines of its run settings, each followed by a run of its preview
    settings (server/measure.py)."""
    settings: RunSettings


@dataclass(frozen=True)
class MeasureFidelity:
    """Measure what each decoder's preview shows of `settings`' runs against the full VAE's, over `seeds` seeds:
    the fidelity pass (preview/call/fidelity_pass.py), untimed, between runs."""
    settings: RunSettings
    seeds: int = 3


FIDELITY_SEEDS = (1, 12)  # seeds a page's pass may ask: 6 reach the 95 % level; past 12 it holds the model long


@dataclass(frozen=True)
class Ack:
    seq: int
    client_decode_ms: float
    client_paint_ms: float


@dataclass(frozen=True)
class LinkChoice:
    """This client's previews over its link: re-encoded cheaper while the link drops them (adapt, the default),
    or always as made."""
    adapt: bool


Message = Union[Start, Set, Stop, Ack, Measure, MeasureFidelity, LinkChoice]
TYPES = ("start", "set", "stop", "ack", "measure", "fidelity", "link")


def _reject_constant(name: str) -> Any:
    raise ProtocolError(f"{name} is not allowed: numbers must be finite")


def _number(field: str, v: Any, lo: float, hi: float) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not lo <= v <= hi:
        raise ProtocolError(f"{field}: must be a number from {lo:g} to {hi:g}, got {short(v)}")
    return float(v)



def parse(text: str, *, defaults: RunSettings, max_pixel_steps: int = 0,
          encoders: tuple[str, ...] | None = None) -> Message:
    """Parse one text frame. `defaults` carries the server's run defaults and its size cap (max_side);
    a start over `max_pixel_steps` (steps x width x height, 0: no limit) is refused, and so is an encoder
    outside `encoders`, the ones this server can run (what `hello` offers; None: every registered one)."""
    if len(text.encode("utf-8", "replace")) > MAX_MESSAGE_BYTES:
        raise ProtocolError(f"message over {MAX_MESSAGE_BYTES} bytes")
    try:
        msg = json.loads(text, parse_constant=_reject_constant)
    except ProtocolError:
        raise
    except RecursionError:  # [[[[... within 64 KiB: the C parser gives up past the interpreter's depth
        raise ProtocolError(NESTED) from None
    except ValueError:
        raise ProtocolError(f"not JSON: {short(text)}") from None
    if "\\ud" in text.lower() and _lone_surrogate(msg):  # only an escape makes one: JSON text itself cannot
        raise ProtocolError("text must be valid Unicode: a lone surrogate escape (\\ud800 to \\udfff without its "
                            "pair) is not a character")
    try:
        return _message(msg, defaults, max_pixel_steps, encoders)
    except RecursionError:  # a nested value under the parser's depth can still be too deep to quote (repr)
        raise ProtocolError(NESTED) from None


def _lone_surrogate(msg: Any) -> bool:
    try:
        json.dumps(msg, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


NESTED = "JSON nested too deeply: messages are flat objects"
MAX_SEQ = 2**53  # the largest integer a browser's JSON keeps exactly


def _message(msg: Any, defaults: RunSettings, max_pixel_steps: int, encoders: tuple[str, ...] | None) -> Message:
    if not isinstance(msg, dict):
        raise ProtocolError(f"expected a JSON object with a \"type\", got {type(msg).__name__}")
    kind = msg.pop("type", None)
    if kind not in TYPES:
        raise ProtocolError(f"type: unknown {short(kind)}; allowed are {', '.join(TYPES)}")
    if kind == "stop":
        _no_extra(kind, msg, ())
        return Stop()
    if kind == "ack":
        _no_extra(kind, msg, ("seq", "client_decode_ms", "client_paint_ms"))
        seq = msg.get("seq")
        if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq <= MAX_SEQ:
            raise ProtocolError(f"seq: must be an integer from 0 to 2**53, got {short(seq)}")
        return Ack(seq, _number("client_decode_ms", msg.get("client_decode_ms", 0), 0, 3.6e6),
                   _number("client_paint_ms", msg.get("client_paint_ms", 0), 0, 3.6e6))
    if kind == "link":
        _no_extra(kind, msg, ("adapt",))
        if not isinstance(msg.get("adapt"), bool):
            raise ProtocolError(f"link: adapt must be true (previews re-encoded for a slow link) or false (as made), "
                                f"got {short(msg.get('adapt'))}")
        return LinkChoice(msg["adapt"])
    if kind == "set":
        _no_extra(kind, msg, PREVIEW_FIELDS)
        if not msg:
            raise ProtocolError(f"set: name at least one of {', '.join(PREVIEW_FIELDS)}")
        msg = _auto(msg, defaults.preview.budget)
        _runnable(msg, encoders)
        try:
            checked = PreviewSettings(**{**defaults.preview.__dict__, **msg})  # validates every named field
        except SettingsError as e:
            raise ProtocolError(clip(str(e))) from None
        return Set(tuple(msg), checked)
    seeds = 3
    if kind == "fidelity":
        _no_extra(kind, msg, RUN_FIELDS + PREVIEW_FIELDS + ("seeds",))
        lo, hi = FIDELITY_SEEDS
        seeds = msg.pop("seeds", 3)
        if isinstance(seeds, bool) or not isinstance(seeds, int) or not lo <= seeds <= hi:
            raise ProtocolError(f"seeds: must be an integer from {lo} to {hi}, got {short(seeds)}")
    else:
        _no_extra(kind, msg, RUN_FIELDS + PREVIEW_FIELDS)
    msg = _auto(msg, defaults.preview.budget)
    _runnable(msg, encoders)
    run = {k: v for k, v in msg.items() if k in RUN_FIELDS}
    prev = {k: v for k, v in msg.items() if k in PREVIEW_FIELDS}
    try:
        preview = PreviewSettings(**{**defaults.preview.__dict__, **prev})
        settings = RunSettings(**{**{k: getattr(defaults, k) for k in RUN_FIELDS}, **run}, preview=preview,
                               max_side=defaults.max_side, max_frames=defaults.max_frames,
                               frame_step=defaults.frame_step)
    except SettingsError as e:
        raise ProtocolError(clip(str(e))) from None
    too_much = work_error(settings.steps, settings.width, settings.height, max_pixel_steps, settings.batch,
                          settings.num_frames)
    if too_much:
        raise ProtocolError(too_much)
    if kind == "fidelity":
        return MeasureFidelity(settings, seeds)
    return Start(settings) if kind == "start" else Measure(settings)


AUTO_BUDGET = 10.0  # percent, when every is "auto" and no budget is named


def _auto(msg: dict[str, Any], default_budget: float) -> dict[str, Any]:
    """every: "auto" means the autopilot with the named budget; a number turns it off. Anything else is refused
    here, naming what was sent and both choices (the settings' own error knows no "auto")."""
    msg = dict(msg)
    every = msg.get("every")
    if every == "auto":
        msg["every"] = 1
        if "budget" not in msg:
            msg["budget"] = default_budget or AUTO_BUDGET
        elif msg["budget"] == 0:
            raise ProtocolError("budget: every=\"auto\" needs a budget above 0 percent")
    elif "every" in msg:
        if isinstance(every, bool) or not isinstance(every, int) or not 1 <= every <= MAX_EVERY:
            raise ProtocolError(f"every={short(every)}: must be an integer from 1 to {MAX_EVERY}, or auto")
        if "budget" not in msg:
            msg["budget"] = 0.0
    return msg


def _runnable(msg: dict[str, Any], encoders: tuple[str, ...] | None) -> None:
    """An encoder is checked against what this server can run (nvjpeg needs CUDA), not only the registry."""
    name = msg.get("encoder")
    if encoders is not None and isinstance(name, str) and name not in encoders:
        raise ProtocolError(f"encoder: {short(name)} cannot run on this server; allowed are {', '.join(encoders)}")


def _no_extra(kind: str, msg: dict[str, Any], allowed: tuple[str, ...]) -> None:
    extra = [k for k in msg if k not in allowed]
    if extra:
        names = ", ".join(allowed) if allowed else "no fields"
        raise ProtocolError(f"{kind}: unknown field {short(extra[0])}; allowed are {names}")


# -- server -> browser ---------------------------------------------------------------------------------------
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

    def timings(self) -> dict[str, Any]:
        """Its deliveries.csv cells besides the run, step, seq, client and kind."""
        return {"send_ms": self.send_ms, "ack_rtt_ms": self.ack_rtt_ms, "client_decode_ms": self.client_decode_ms,
                "client_paint_ms": self.client_paint_ms, "nbytes": self.nbytes, "age_ms": self.age_ms,
                "link_mbps": self.link_mbps, "adapted": self.adapted}

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


def done(end: RunEnd, judged: dict[str, Any] | None = None) -> Outbound:
    """judged: the run's figures and its settings' analysis (server/figures.Figures.of_run), where it has them."""
    return {"type": "done", **end.to_json(), **(judged or {})}


def measure(state: str, config: str, pairs: int, needs: int, line: str, *, adds: int, most: int) -> Outbound:
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


def frame(f: Frame, seq: int, sent_at_ms: float) -> bytes:
    """A preview as one binary message; sent_at_ms: the server's wall clock, for the page's latency."""
    header = dict(run_id=f.run_id, step=f.step, seq=seq, decoder=f.decoder, format=f.format, width=f.width,
                  height=f.height, sent_at_ms=sent_at_ms, frames=f.frames, sizes=list(f.sizes or (len(f.data),)),
                  fps=round(f.fps, 3))
    return pack_frame(header, f.data)


def pack_frame(header: dict[str, Any], data: bytes) -> bytes:
    """4-byte big-endian header length, the UTF-8 JSON header, the image bytes."""
    h = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack(">I", len(h)) + h + data


def unpack_frame(blob: bytes) -> tuple[dict[str, Any], bytes]:
    (n,) = struct.unpack(">I", blob[:4])
    return json.loads(blob[4:4 + n]), blob[4 + n:]

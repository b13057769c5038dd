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
  fidelity the fields of start and seeds (1 to 12): what each decoder's preview shows of those settings'
         runs against the full VAE's (preview/call/fidelity_pass.py), untimed, between runs
What the server sends: its text messages are outbound.py's, its binary previews binary.py's.
"""
from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Union

from previewlab.preview.settings import (MAX_EVERY, PREVIEW_FIELDS, RUN_FIELDS, PreviewSettings, RunSettings,
                                        SettingsError)

from previewlab.server.core.limits import MAX_MESSAGE_BYTES, clip, short, work_error


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


def _number(field: str, v: object, lo: float, hi: float) -> float:
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


def _lone_surrogate(msg: object) -> bool:
    try:
        json.dumps(msg, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


NESTED = "JSON nested too deeply: messages are flat objects"
MAX_SEQ = 2**53  # the largest integer a browser's JSON keeps exactly


Fields = dict[str, object]  # a message's fields as sent: JSON values, each checked here or by the settings


def _message(msg: object, defaults: RunSettings, max_pixel_steps: int, encoders: tuple[str, ...] | None) -> Message:
    if not isinstance(msg, dict):
        raise ProtocolError(f"expected a JSON object with a \"type\", got {type(msg).__name__}")
    fields: Fields = dict(msg)
    kind = fields.pop("type", None)
    if not isinstance(kind, str) or kind not in TYPES:
        raise ProtocolError(f"type: unknown {short(kind)}; allowed are {', '.join(TYPES)}")
    if kind == "stop":
        _no_extra(kind, fields, ())
        return Stop()
    if kind == "ack":
        _no_extra(kind, fields, ("seq", "client_decode_ms", "client_paint_ms"))
        seq = fields.get("seq")
        if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq <= MAX_SEQ:
            raise ProtocolError(f"seq: must be an integer from 0 to 2**53, got {short(seq)}")
        return Ack(seq, _number("client_decode_ms", fields.get("client_decode_ms", 0), 0, 3.6e6),
                   _number("client_paint_ms", fields.get("client_paint_ms", 0), 0, 3.6e6))
    if kind == "link":
        _no_extra(kind, fields, ("adapt",))
        adapt = fields.get("adapt")
        if not isinstance(adapt, bool):
            raise ProtocolError(f"link: adapt must be true (previews re-encoded for a slow link) or false (as made), "
                                f"got {short(adapt)}")
        return LinkChoice(adapt)
    if kind == "set":
        _no_extra(kind, fields, PREVIEW_FIELDS)
        if not fields:
            raise ProtocolError(f"set: name at least one of {', '.join(PREVIEW_FIELDS)}")
        fields = _auto(fields, defaults.preview.budget)
        _runnable(fields, encoders)
        try:
            checked = PreviewSettings(**{**defaults.preview.__dict__, **_as_sent(fields)})  # checks every field
        except SettingsError as e:
            raise ProtocolError(clip(str(e))) from None
        return Set(tuple(fields), checked)
    seeds = 3
    if kind == "fidelity":
        _no_extra(kind, fields, RUN_FIELDS + PREVIEW_FIELDS + ("seeds",))
        seeds = _seeds(fields.pop("seeds", 3))
    else:
        _no_extra(kind, fields, RUN_FIELDS + PREVIEW_FIELDS)
    settings = _run_settings(_auto(fields, defaults.preview.budget), defaults, max_pixel_steps, encoders)
    if kind == "fidelity":
        return MeasureFidelity(settings, seeds)
    return Start(settings) if kind == "start" else Measure(settings)


def _seeds(seeds: object) -> int:
    lo, hi = FIDELITY_SEEDS
    if isinstance(seeds, bool) or not isinstance(seeds, int) or not lo <= seeds <= hi:
        raise ProtocolError(f"seeds: must be an integer from {lo} to {hi}, got {short(seeds)}")
    return seeds


def _run_settings(fields: Fields, defaults: RunSettings, max_pixel_steps: int,
                  encoders: tuple[str, ...] | None) -> RunSettings:
    """A start's (or a series' or a pass's) settings: its fields over the defaults, checked, within the work
    limit (max_pixel_steps)."""
    _runnable(fields, encoders)
    sent = _as_sent(fields)
    run = {k: v for k, v in sent.items() if k in RUN_FIELDS}
    prev = {k: v for k, v in sent.items() if k in PREVIEW_FIELDS}
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
    return settings


def _as_sent(fields: Mapping[str, object]) -> dict[str, Any]:
    """The fields as the browser sent them, for the settings' constructors, which check each value whatever its
    type (SettingsError): the one place a message's JSON meets the typed settings."""
    return dict(fields)


AUTO_BUDGET = 10.0  # percent, when every is "auto" and no budget is named


def _auto(msg: Fields, default_budget: float) -> Fields:
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


def _runnable(msg: Mapping[str, object], encoders: tuple[str, ...] | None) -> None:
    """An encoder is checked against what this server can run (nvjpeg needs CUDA), not only the registry."""
    name = msg.get("encoder")
    if encoders is not None and isinstance(name, str) and name not in encoders:
        raise ProtocolError(f"encoder: {short(name)} cannot run on this server; allowed are {', '.join(encoders)}")


def _no_extra(kind: str, msg: Mapping[str, object], allowed: tuple[str, ...]) -> None:
    extra = [k for k in msg if k not in allowed]
    if extra:
        names = ", ".join(allowed) if allowed else "no fields"
        raise ProtocolError(f"{kind}: unknown field {short(extra[0])}; allowed are {names}")

"""One step's preview: decode, resize, copy, encode and hand the frame on, in the step callback (sync) or on the
encode thread (overlap). A failure on the way becomes the row's event and a cheaper decoder, never the run's end.
"""
from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from previewlab.preview.budget.planner import also as _also
from previewlab.preview.pipeline.meter_parts import MeterParts
from previewlab.preview.pipeline.row_ledger import Marks
from previewlab.preview.decoding import clips, decoders, encoders
from previewlab.preview.decoding.stops import WHOLE, Cut
from previewlab.preview.frames import Frame, grid, tile, to_uint8_chw, to_uint8_hwc
from previewlab.preview.pipeline.overlap import Overlap
from previewlab.preview.pipeline.streams import jpeg_stream
from previewlab.preview.pipeline.sync import Sync
from previewlab.preview.record.records import StepCells
from previewlab.preview.settings import PreviewSettings
from previewlab.preview.source.targets import choose

log = logging.getLogger("previewlab")


@dataclass(frozen=True)
class _Render:
    """One preview's pixels: latents -> frames (F, 3, H, W) in [0, 1] (an image is one frame, a batch one grid
    per frame), the latent frames it reads, and the rate that plays its frames (0: one frame)."""
    fn: Callable[[torch.Tensor], torch.Tensor]
    latent_frames: int
    fps: float


class PreviewMaker:
    """The previews of one metered call. Its overlap path (the side stream and the encode thread) is made on
    first use: sync-only runs never start its thread."""

    def __init__(self, parts: MeterParts) -> None:
        self.p = parts
        self.sync: Sync | None = None        # the two strategies over a preview's stages (sync.py, overlap.py)
        self.overlap: Overlap | None = None
        self._x0_told = False

    @property
    def in_flight(self) -> bool:
        """A preview is still being made beside the denoising (overlap)."""
        return self.overlap is not None and self.overlap.flight.count > 0

    def make(self, marks: Marks, s: PreviewSettings, latents: torch.Tensor) -> None:
        """Make this step's preview with its row's decoder: in the callback (sync) or handed to the encode thread
        (overlap), filling the step's cells. Any failure on the way becomes the row's event and a cheaper
        decoder, never the run's end."""
        p, c = self.p, marks.cells
        decoder, s = marks.row.decoder, p.plan.sized(s)
        ps = s if decoder == s.decoder else s.changed(decoder=decoder)
        memory = p.readings.memory
        level = memory.before()  # what the step holds: the preview's memory is its peak over this
        try:
            prev = p.previewer
            enc = prev.encoder(s.encoder)
            shown, c.target = choose(s.target, p.tap, latents)
            if s.target == "x0" and c.target != "x0" and not self._x0_told and p.tap is not None:
                self._x0_told = True
                c.event = _also(c.event, _no_x0(p.tap.sched))
            if s.batch_preview == "first":  # a grid decodes the whole batch: the cost of showing it all
                shown = shown[:1]
            # where the decoder stops: the preview's size, for the grid of the images shown (no device read)
            cut = prev.cut(decoder, s, p.width, p.height, int(shown.shape[0]))
            if prev.compile and not prev.compiled(decoder, cut):  # a live switch: compile now, say so
                ms = prev.warm(decoder, p.height, p.width, cut)
                c.event = _also(c.event, _compiled(decoder, ms, cut))
            render = self._render(decoder, s, shown, cut, c)
            try:
                if s.mode == "sync":
                    self._sync(marks, shown, ps, render, enc)
                else:
                    self._overlap(marks, shown, ps, render, enc)
            finally:
                for note in prev.take_notes():  # a fit of latent2rgb factors, made inside this decode
                    c.event = _also(c.event, note)
        except Exception as e:
            self._failed(marks, ps, e)
            marks.dec0 = None
        c.mem_mb = memory.after(level)  # allocations count when queued: known now, no device wait
        if not c.skipped:  # preview work ran (made, or failed on the way)
            marks.touched = True
            p.plan.started()

    def _render(self, decoder: str, s: PreviewSettings, latents: torch.Tensor, cut: Cut,
                cells: StepCells) -> _Render:
        """How this preview's pixels are made: an image's decode, or the frames of a clip that s.frames picks
        (clips.pick), decoding only the latent frames they need; the decoder stopped where `cut` says, and the
        size it made goes on the row. Shapes only, no device read."""
        p = self.p
        h, w, prev, space = p.height, p.width, p.previewer, p.model.space

        def made(x: torch.Tensor) -> torch.Tensor:
            cells.decode_height, cells.decode_width = int(x.shape[-2]), int(x.shape[-1])
            return x

        if not space.video:
            decode = prev.decoder(decoder, cut)
            assert decode is not None
            return _Render(lambda z: grid(made(decode(z, h, w)))[None], 1, 0.0)
        clip = prev.clip(decoder, cut)
        assert clip is not None
        pick = clips.pick(s.frames, space.latent_frames(latents, h, w), space.temporal, p.fps,
                          causal=decoders.causal(decoder, p.model), odd=space.family == "cogvideox",
                          tile=space.tile_t if decoder == "vae" else 1)
        return _Render(lambda z: tile(made(clip(z, h, w, pick))), len(pick.reads), pick.fps)

    def _sync(self, marks: Marks, latents: torch.Tensor, s: PreviewSettings, render: _Render,
              enc: encoders.Encoder) -> None:
        if self.sync is None:
            self.sync = Sync(self.p.sw, self.p.ranges)
        to_u8 = to_uint8_chw if enc.on_device else to_uint8_hwc
        self.sync.submit(latents, render.fn, lambda img: to_u8(img, s.preview_max),
                         lambda arr, sync_ms: self._finish(marks, s, enc, arr, sync_ms, render), marks,
                         on_device=enc.on_device)

    def _overlap(self, marks: Marks, latents: torch.Tensor, s: PreviewSettings, render: _Render,
                 enc: encoders.Encoder) -> None:
        if self.overlap is None:
            self.overlap = Overlap(self.p.sw, self.p.inflight, self.p.ranges)
        if self.overlap.flight.full():
            marks.cells.skipped = 1  # the pipeline is full: skip this preview, never queue it
            return

        def done(arr: np.ndarray, sync_ms: float) -> None:
            try:
                self._finish(marks, s, enc, arr, sync_ms, render)
            except Exception as e:
                self._failed(marks, s, e)

        marks.cells.preview = 1  # made, or being made; a failure on the encode thread resets it, so set it first
        to_u8 = to_uint8_chw if enc.on_device else to_uint8_hwc
        marks.future = self.overlap.submit(latents, render.fn, lambda img: to_u8(img, s.preview_max), done, marks,
                                           on_device=enc.on_device)

    def _finish(self, marks: Marks, s: PreviewSettings, enc: encoders.Encoder, arr: Any, sync_ms: float,
                render: _Render) -> None:
        """Encode and hand off: in the callback (sync) or on the encode thread (overlap). arr holds the frames:
        a host uint8 (F, h, w, 3) array, or for an on-device encoder the uint8 (F, 3, h, w) tensor still on the
        device (only the bytes cross): each frame is encoded and its bytes copied under the device's one JPEG
        stream. The frames go out as one Frame, in order."""
        p, row, c = self.p, marks.row, marks.cells
        dev, clock = p.sw.dev, p.sw.clock
        on_stream = dev.use(jpeg_stream(dev)) if enc.on_device and dev is not None else contextlib.nullcontext()
        with on_stream:
            t0 = clock()
            outs = [enc.encode(frame, s.quality) for frame in arr]
            t1 = clock()
            if enc.on_device:  # the frames' bytes joined on the device: one copy, whatever their count
                sizes = [int(out.numel()) for out in outs]
                data = (torch.cat(outs) if len(outs) > 1 else outs[0]).cpu().numpy().tobytes()
                c.transfer_ms = (clock() - t1) * 1e3
            else:
                sizes, data = [len(out) for out in outs], b"".join(outs)
        c.encode_ms, c.sync_ms = (t1 - t0) * 1e3, sync_ms
        c.preview, c.bytes, c.encoder = 1, len(data), enc.name
        c.frames, c.latent_frames = len(sizes), render.latent_frames
        h_axis = 2 if enc.on_device else 1
        c.preview_height, c.preview_width = int(arr.shape[h_axis]), int(arr.shape[h_axis + 1])
        frame = Frame(p.run_id, row.step, row.decoder, enc.format, width=c.preview_width, height=c.preview_height,
                      data=data, sizes=tuple(sizes), fps=render.fps)
        p.kept.keep(frame)  # a reference: its progress is read after the run ends, never here
        if p.events is not None:
            p.events.frame(frame)

    def _failed(self, marks: Marks, s: PreviewSettings, e: BaseException) -> None:
        """A preview must never end the run: report, fall back to a cheaper decoder, record it on the row."""
        p, row = self.p, marks.row
        fallback = decoders.DECODERS[decoders.check_name(s.decoder)].fallback
        detail = str(e).splitlines()[0][:160] if str(e) else ""
        msg = f"preview with decoder {s.decoder} failed at step {row.step} ({type(e).__name__}: {detail}); " \
              f"continuing with {fallback}"
        log.warning("%s: %s", p.run_id, msg)  # one line in the user's terminal; the traceback at debug level
        log.debug("preview failure at step %d", row.step, exc_info=e)
        p.controls.set(decoder=fallback, note=False)
        p.plan.fell_back(fallback)
        marks.cells.event = _also(marks.cells.event, msg)
        marks.cells.preview = 0
        if p.events is not None:
            p.events.error(p.run_id, msg)

    def finish(self) -> int:
        """Wait for the previews in flight (overlap); returns the most that were in flight at once."""
        if self.overlap is None:
            return 0
        self.overlap.drain()
        peak, self.overlap = self.overlap.flight.peak, None
        return peak


# ---- event texts: what a row's event column says, every note of its step joined by "; " --------------------------

def _compiled(decoder: str, ms: float, cut: Cut = WHOLE) -> str:
    at = "" if cut == WHOLE else f" at {cut.label}"
    return f"compiled {decoder}{at} in {ms:.0f} ms"


def _no_x0(scheduler: Any) -> str:
    return f"x0 is not available with {type(scheduler).__name__}: previews show the latents"

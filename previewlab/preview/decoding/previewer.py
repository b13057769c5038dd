"""The decoders and encoders of a run (or a sweep, or a server's life), built on first use and kept."""
from __future__ import annotations

import time

import torch

from previewlab.preview.decoding import contract, decoders, encoders
from previewlab.preview.decoding.rgb_decoder import has_factors
from previewlab.preview.decoding.stops import WHOLE, Cut, cut_for, upsample_factors
from previewlab.preview.frames import grid_size
from previewlab.preview.models import Model
from previewlab.preview.settings import PreviewSettings

SMALLEST_SIDE = 128  # px: the autopilot decodes no preview smaller on its long side (too little to judge a picture)


class Previewer:
    """Builds decoders and encoders on demand and keeps them for the run (a switch back costs nothing). A decoder
    is kept per cut (where it stops short of the image's size): a cut shares its decoder's weights."""

    def __init__(self, model: Model, compile: bool = False) -> None:
        self.model, self.compile = model, compile
        self._dec: dict[tuple[str, Cut], contract.Decode | None] = {}
        self._clip: dict[tuple[str, Cut], contract.ClipDecode | None] = {}
        self._enc: dict[str, encoders.Encoder] = {}
        self._factors: dict[str, tuple[int, ...]] = {}
        self.compile_ms: dict[tuple[str, Cut], float] = {}
        self.cost_ms: dict[str, float] = {}  # the autopilot's latest cost per preview, by decoder
        self._notes: list[str] = []  # what decoders said while making a preview (a fit), for its row's event

    def cut(self, name: str, s: PreviewSettings, width: int, height: int, batch: int = 1) -> Cut:
        """Where decoder `name` stops for a preview with settings s (decode_at, preview_max) of `batch` images of
        width x height px: the preview shows their grid, so the grid's long side decides. The decoder's stages
        are read once; then this is a few integer operations per preview."""
        if name not in self._factors:
            self._factors[name] = upsample_factors(name, self.model)
        return cut_for(s.decode_at, self._factors[name], max(grid_size(batch, width, height)), s.preview_max)

    def sides(self, name: str, s: PreviewSettings, width: int, height: int, batch: int = 1,
              smallest: int | None = None) -> tuple[int, ...]:
        """The long sides, px, that decoder `name` can make a preview at for the autopilot to trade: the preview's
        at settings s, then each half the one before while that leaves one more of its stages out (so it decodes
        fewer pixels, not only sends them), down to `smallest` (None: SMALLEST_SIDE). One side: nothing smaller
        to trade (no stages, decode_at full or half_latents, or a preview small already)."""
        smallest = SMALLEST_SIDE if smallest is None else smallest
        long = max(grid_size(batch, width, height))
        side = min(long, s.preview_max) if s.preview_max else long
        out, cut = [side], self.cut(name, s, width, height, batch)
        while side // 2 >= smallest:
            smaller = self.cut(name, s.changed(preview_max=side // 2), width, height, batch)
            if smaller.stages <= cut.stages:
                break
            side, cut = side // 2, smaller
            out.append(side)
        return tuple(out)

    def decoder(self, name: str, cut: Cut = WHOLE) -> contract.Decode | None:
        key = (name, cut)
        if key not in self._dec:
            fn = decoders.build(name, self.model, self._notes.append, cut)
            if fn is not None and self.compile:
                fn = torch.compile(fn, dynamic=False)
            self._dec[key] = fn
        return self._dec[key]

    def clip(self, name: str, cut: Cut = WHOLE) -> contract.ClipDecode | None:
        """A video pipeline's clip decode for a decoder name (never compiled: its shapes follow the frames
        setting, which changes live)."""
        key = (name, cut)
        if key not in self._clip:
            self._clip[key] = decoders.build_clip(name, self.model, self._notes.append, cut)
        return self._clip[key]

    def compiled(self, name: str, cut: Cut = WHOLE) -> bool:
        """This decoder and cut were compiled (or need no compiling) before."""
        return (name, cut) in self.compile_ms

    def take_notes(self) -> list[str]:
        """The decoders' notes since the last call (on the thread that ran the decode)."""
        notes, self._notes[:] = list(self._notes), []
        return notes

    def warm(self, name: str, height: int, width: int, cut: Cut = WHOLE) -> float:
        """Compile a decoder (at a cut) ahead of the run (torch.compile compiles on first call); returns the
        compile ms, which is reported apart from the steady state."""
        fn = self.decoder(name, cut)
        key = (name, cut)
        if fn is None or not self.compile or key in self.compile_ms:
            return 0.0
        if self.model.space.video:  # a clip's previews go through clip(), which is not compiled
            self.compile_ms[key] = 0.0
            return 0.0
        if name == "latent2rgb" and not has_factors(self.model):
            # its first call fits factors to the latents it is given: never to these zeros. It compiles at its
            # first preview instead, in that row's time
            self.compile_ms[key] = 0.0
            return 0.0
        t0 = time.perf_counter()
        with torch.inference_mode():  # as the run calls it: another grad mode would compile again
            shape = self.model.space.callback_shape(height, width)
            out = fn(torch.zeros(shape, device=self.model.device, dtype=self.model.dtype), height, width)
            out.cpu()  # outside the measured run: the compile is not done until its first result is
        self.compile_ms[key] = (time.perf_counter() - t0) * 1e3
        return self.compile_ms[key]

    def encoder(self, name: str) -> encoders.Encoder:
        if name not in self._enc:
            self._enc[name] = encoders.get(name, self.model.device)
        return self._enc[name]

"""The decoders and encoders of a run (or a sweep, or a server's life), built on first use and kept."""
from __future__ import annotations

import time

import torch

from . import decoders, encoders
from .models import Model


class Previewer:
    """Builds decoders and encoders on demand and keeps them for the run (a switch back costs nothing)."""

    def __init__(self, model: Model, compile: bool = False) -> None:
        self.model, self.compile = model, compile
        self._dec: dict[str, decoders.Decode | None] = {}
        self._clip: dict[str, decoders.ClipDecode | None] = {}
        self._enc: dict[str, encoders.Encoder] = {}
        self.compile_ms: dict[str, float] = {}
        self.cost_ms: dict[str, float] = {}  # the autopilot's latest cost per preview, by decoder
        self._notes: list[str] = []  # what decoders said while making a preview (a fit), for its row's event

    def decoder(self, name: str) -> decoders.Decode | None:
        if name not in self._dec:
            fn = decoders.build(name, self.model, self._notes.append)
            if fn is not None and self.compile:
                fn = torch.compile(fn, dynamic=False)
            self._dec[name] = fn
        return self._dec[name]

    def clip(self, name: str) -> decoders.ClipDecode | None:
        """A video pipeline's clip decode for a decoder name (never compiled: its shapes follow the frames
        setting, which changes live)."""
        if name not in self._clip:
            self._clip[name] = decoders.build_clip(name, self.model, self._notes.append)
        return self._clip[name]

    def take_notes(self) -> list[str]:
        """The decoders' notes since the last call (on the thread that ran the decode)."""
        notes, self._notes[:] = list(self._notes), []
        return notes

    def warm(self, name: str, height: int, width: int) -> float:
        """Compile a decoder ahead of the run (torch.compile compiles on first call); returns the compile ms,
        which is reported apart from the steady state."""
        fn = self.decoder(name)
        if fn is None or not self.compile or name in self.compile_ms:
            return 0.0
        if self.model.space.video:  # a clip's previews go through clip(), which is not compiled
            self.compile_ms[name] = 0.0
            return 0.0
        if name == "latent2rgb" and not decoders.has_factors(self.model):
            # its first call fits factors to the latents it is given: never to these zeros. It compiles at its
            # first preview instead, in that row's time
            self.compile_ms[name] = 0.0
            return 0.0
        t0 = time.perf_counter()
        with torch.inference_mode():  # as the run calls it: another grad mode would compile again
            shape = self.model.space.callback_shape(height, width)
            out = fn(torch.zeros(shape, device=self.model.device, dtype=self.model.dtype), height, width)
            out.cpu()  # outside the measured run: the compile is not done until its first result is
        self.compile_ms[name] = (time.perf_counter() - t0) * 1e3
        return self.compile_ms[name]

    def encoder(self, name: str) -> encoders.Encoder:
        if name not in self._enc:
            self._enc[name] = encoders.get(name, self.model.device)
        return self._enc[name]

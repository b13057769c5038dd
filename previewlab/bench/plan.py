"""A sweep's plan: which runs it makes and in what order. Every configuration (the product of the decoder,
interval, mode, target, frames and decode_at axes, or the GPU check's named arms) beside its own no-preview
baselines for each run setup (scheduler, steps, VAE mode), warm-ups first, pairs counterbalanced; and the plan cut
into units, each run on one machine (bench/unit.py). Pure: nothing here runs a model.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Iterator

from previewlab.bench.axes import Setup
from previewlab.bench.rows import Role
from previewlab.preview.judging.analysis import config_name
from previewlab.preview.names import DecodeAt, DecoderName, FrameChoice, Mode, Target
from previewlab.preview.settings import PreviewSettings, RunSettings

Slot = tuple[Role, int, PreviewSettings | None, Setup]  # role, repeat, preview settings (None: a direct call), run setup


@dataclass(frozen=True)
class Narrow:
    """A plan narrowed to one unit: one run setup and one configuration (None: the bare diffusers call where the
    plan has --direct, else the setup's baselines alone), with its own interleaved baselines and warm-up."""
    setup: Setup
    config: PreviewSettings | None


@dataclass(frozen=True)
class Plan:
    settings: RunSettings          # the base run; its preview settings carry encoder, quality, preview_max
    decoders: tuple[DecoderName, ...]
    every: tuple[int | str, ...]   # intervals, or "auto" for the budget autopilot
    repeats: int = 3
    warmup: int = 1
    direct: bool = False           # also time the bare diffusers call, paired with decoder none
    modes: tuple[Mode, ...] = ("overlap",)
    budget: float = 10.0           # percent, for every=auto
    inflight: int = 2
    compile: bool = False
    targets: tuple[Target, ...] = ()  # an axis of what previews show; () keeps the base settings' target
    frames: tuple[FrameChoice, ...] = ()  # a clip's preview frames, an axis; () keeps the base settings' frames
    decode_ats: tuple[DecodeAt, ...] = ()  # where decoders stop (preview, full, half_latents), an axis; () keeps the base's
    # the run axes, each an axis (named in the configurations) from two values on
    schedulers: tuple[str, ...] = ()  # axes.SCHEDULERS names; () keeps the model's own scheduler
    steps: tuple[int, ...] = ()       # denoising steps; () keeps the base settings' steps
    vaes: tuple[str, ...] = ()        # the VAE's memory mode (none, tiling, ...); () leaves the VAE as it is
    # named configurations in place of the axes' product (the GPU check's rows: an encoder, a budget, a decode_at
    # each); () takes the product of decoders, every, modes, targets, frames and decode_ats
    arms: tuple[tuple[str, PreviewSettings], ...] = ()
    alternate: bool = False    # even repeats run their pairs in reverse order: drift over a repeat cancels between them
    runs_s: float = math.inf   # no repeat starts that would likely end past this many seconds of measured runs
    narrow: Narrow | None = None  # a unit of the plan (units()); its names stay the whole plan's

    def setups(self) -> list[Setup]:
        """Every combination of the run axes; each has its own no-preview baselines."""
        if self.narrow is not None:
            return [self.narrow.setup]
        return [Setup(s, n, v) for s in self.schedulers or ("",) for n in self.steps or (0,) for v in self.vaes or ("",)]

    def units(self) -> list[Plan]:
        """The plan cut into units, each a plan of one run setup and one configuration (or the direct call, or
        a setup's baselines alone where the sweep has no configuration), to run on one machine with its own
        interleaved baselines and warm-up: overheads are never taken across units. In the order the whole plan
        runs them; each runs the same pairs it would run in the whole plan."""
        configs: list[PreviewSettings | None] = list(self.configs())
        extra: list[PreviewSettings | None] = [None] if self.direct or not configs else []
        return [replace(self, narrow=Narrow(u, c)) for u in self.setups() for c in configs + extra]

    def configs(self) -> list[PreviewSettings]:
        if self.narrow is not None:
            return [] if self.narrow.config is None else [self.narrow.config]
        if self.arms:
            return [p for _, p in self.arms]
        base, out = self.settings.preview, []
        for d in self.decoders:
            if d == "none":
                continue
            for e in self.every:
                for m in self.modes:
                    for t in self.targets or (base.target,):
                        for f in self.frames or (base.frames,):
                            for a in self.decode_ats or (base.decode_at,):
                                auto = e == "auto"
                                out.append(replace(base, decoder=d, every=1 if auto else int(e),
                                                   budget=self.budget if auto else 0.0, mode=m, target=t, frames=f,
                                                   decode_at=a))
        return out

    def name(self, p: PreviewSettings | None, clip: bool = False, setup: Setup = Setup()) -> str:
        """A configuration's name, its decode_at named when the sweep has that axis, then its setup's swept axes
        ('none/dpmpp_2m/8steps'), so each setup's baseline and configurations are grouped apart."""
        axes = (setup.scheduler if len(self.schedulers) > 1 else "", f"{setup.steps}steps" if len(self.steps) > 1 else "",
                f"vae-{setup.vae}" if len(self.vaes) > 1 else "")
        own = {q: n for n, q in self.arms}.get(p) if p is not None else None
        return (own or config_name(p, clip, at=bool(self.decode_ats))) + "".join(f"/{x}" for x in axes if x)

    def schedule(self) -> Iterator[Slot]:
        """(role, repeat, preview settings or None for a direct call, run setup), in the order they run: each
        setup's configurations beside its own baselines, every setup in every repeat."""
        for group in self.groups():
            yield from group

    def groups(self) -> Iterator[tuple[Slot, ...]]:
        """The schedule in the pieces that run together: each warm-up run alone, then each pair of each repeat (a
        configuration or the direct call, with its baseline), or a lone baseline where a setup has neither."""
        none = replace(self.settings.preview, decoder="none", every=1, budget=0.0, mode=self.modes[0])
        # a clip's decoders warm up on the most frames the sweep asks, so no measured run pays first allocations
        most = ("all" if "all" in self.frames else self.frames[-1]) if self.frames else none.frames
        # each place a decoder stops is its own graph: warm each, so no measured run pays its first allocations;
        # each named arm is its own code to warm, with its own encoder, budget or decode_at
        warm = list(dict.fromkeys([none] + self.configs())) if self.arms else \
            [none] + [replace(none, decoder=d, mode=m, frames=most, decode_at=a)
                      for d in dict.fromkeys(self.decoders) if d != "none" for m in self.modes
                      for a in self.decode_ats or (none.decode_at,)]
        if self.narrow is not None:  # a unit warms its own configuration's code, and the baselines'
            c = self.narrow.config
            warm = [w for w in warm if w == none or (c is not None and (w.decoder, w.mode, w.decode_at) ==
                                                     (c.decoder, c.mode, c.decode_at) and (not self.arms or w == c))]
        # a scheduler or a VAE mode is other code to warm; a step count is not
        warmed = list({(u.scheduler, u.vae): u for u in self.setups()}.values())
        for _ in range(self.warmup):
            for u in warmed:
                for p in warm:
                    yield (("warmup", 0, p, u),)
        for r in range(1, self.repeats + 1):
            for u in self.setups():
                # A B A B: drift on a noisy machine cancels; counterbalanced, as a benchmarker orders pairs: odd
                # repeats run the baseline first, even ones the configuration first, so the order's own effect
                # (a warm cache, a cooling core) cancels over the pairs (the analysis pairs either order). The
                # direct call comes right before the baseline it is paired with, last in each repeat.
                pairs: list[tuple[tuple[Role, PreviewSettings | None], ...]] = [
                    (("baseline", none), ("config", c)) for c in self.configs()]
                if self.alternate and r % 2 == 0:
                    pairs.reverse()
                if r % 2 == 0:
                    pairs = [pair[::-1] for pair in pairs]
                if self.direct and (self.narrow is None or self.narrow.config is None):
                    pairs.append((("direct", None), ("baseline", none)))
                for pair in pairs or [(("baseline", none),)]:
                    yield tuple((role, r, q, u) for role, q in pair)

"""Fidelity: how close a decoder's preview is to what the full VAE would show of the same latents, and how alike the
final images of two step counts are. The fidelity pass (preview/call/fidelity_pass.py) measures the samples off the
measured path; this module turns them into the figures every surface renders. No torch here.

A sample is one seed's one step: decoder D's preview of that step's latents (or x0, per the target), against the
full VAE's decode of the same tensor at the image's size, both brought to the preview's size (the size the page
shows it at: the image's, or --preview-max's; likeness.fitted), as SSIM and PSNR dB (likeness.ssim,
likeness.psnr_db). A figure is per decoder and decode_at:
each seed's median over its steps, then estimates.estimate across the seeds. The steps of one seed are one
trajectory, so they are not independent samples: an interval over them all would claim a level it lacks; the
seeds are. Six seeds reach the 95 % level; fewer give the seeds' whole range and say its level.
"""
from __future__ import annotations

import csv
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from previewlab.preview.judging.estimates import Estimate, estimate

if TYPE_CHECKING:
    from previewlab.preview.settings import PreviewSettings

# SSIM against the VAE's preview at or above which a preview is useful. Why 0.5: it lies between a preview that
# shows the picture's shapes where they will be and one that shows colour fields or nothing. Measured
# (docs/figures.md#fidelity, each seen at the preview's size): a synthetic model's noise pictures score 0.01 to 0.07;
# on the demo model, over a run's steps, its TAESD 0.54 [0.54, 0.56] (the shapes, their edges soft) and latent2rgb
# 0.39 [0.38, 0.40] (16 px of colour, enlarged). A user who judges colour alone lowers it; one who needs the final
# picture's detail raises it (--min-fidelity 0.9 leaves only the VAE on the demo model).
DEFAULT_MIN_SSIM = 0.5

FIDELITY_CSV = "fidelity.csv"
FINALS_CSV = "finals.csv"
FIDELITY_COLUMNS = ("seed", "steps", "step", "decoder", "decode_at", "target", "width", "height", "ssim", "psnr_db")
FINALS_COLUMNS = ("seed", "steps", "against_steps", "ssim", "psnr_db")


def _num(x: Any) -> float | None:
    return None if x in (None, "") else float(x)


@dataclass(frozen=True)
class Sample:
    """One line of fidelity.csv: one seed's run of `steps` steps, at `step`, decoder at decode_at, showing target
    (x0 or latents), its preview width x height px; ssim in [-1, 1] (None: a preview under 3 px a side), psnr_db
    (inf: the same pixels)."""
    seed: int
    steps: int
    step: int
    decoder: str
    decode_at: str
    target: str
    width: int
    height: int
    ssim: float | None
    psnr_db: float

    def to_row(self) -> dict[str, Any]:
        return {"seed": self.seed, "steps": self.steps, "step": self.step, "decoder": self.decoder,
                "decode_at": self.decode_at, "target": self.target, "width": self.width, "height": self.height,
                "ssim": self.ssim, "psnr_db": self.psnr_db}

    @classmethod
    def from_row(cls, row: Mapping[str, str]) -> Sample:
        """Raises ValueError (a cell that is no number), KeyError (a column missing)."""
        return cls(seed=int(row["seed"]), steps=int(row["steps"]), step=int(row["step"]), decoder=row["decoder"],
                   decode_at=row["decode_at"], target=row["target"], width=int(row["width"]),
                   height=int(row["height"]), ssim=_num(row["ssim"]), psnr_db=float(row["psnr_db"]))


@dataclass(frozen=True)
class Final:
    """One line of finals.csv: one seed's final image of `steps` steps against its final image of against_steps
    (the most the pass ran), at the image's size brought to likeness.SIDE."""
    seed: int
    steps: int
    against_steps: int
    ssim: float | None
    psnr_db: float

    def to_row(self) -> dict[str, Any]:
        return {"seed": self.seed, "steps": self.steps, "against_steps": self.against_steps, "ssim": self.ssim,
                "psnr_db": self.psnr_db}

    @classmethod
    def from_row(cls, row: Mapping[str, str]) -> Final:
        return cls(int(row["seed"]), int(row["steps"]), int(row["against_steps"]), _num(row["ssim"]),
                   float(row["psnr_db"]))


def at_name(decoder: str, decode_at: str) -> str:
    """The name a decoder's fidelity goes by, as costs.costed names its cost: 'taesd', 'vae at half_latents'."""
    return decoder if decode_at == "preview" else f"{decoder} at {decode_at}"


@dataclass(frozen=True)
class Fidelity:
    """One decoder at one decode_at: SSIM and PSNR dB against the VAE's preview (each seed's median over its steps,
    then across seeds), the seeds, and whether the model is synthetic (noise pictures: never advised on)."""
    decoder: str
    decode_at: str
    ssim: Estimate
    psnr_db: Estimate
    seeds: int
    synthetic: bool = False

    @property
    def name(self) -> str:
        return at_name(self.decoder, self.decode_at)

    def said(self) -> str:
        """'SSIM 0.66 [0.63, 0.70] (3 seeds, 75 %), 21.3 dB of the VAE's preview'."""
        e = self.ssim
        band = "" if e.lo is None or e.hi is None else f" [{e.lo:.2f}, {e.hi:.2f}]"
        level = "" if e.sure or e.lo is None else f", {e.level_pct:.0f} %"
        synth = "; SYNTHETIC model: noise pictures, not judged" if self.synthetic else ""
        return (f"SSIM {e.value:.2f}{band} ({self.seeds} seed{'s' * (self.seeds != 1)}{level}), "
                f"{_db(self.psnr_db.value)} of the VAE's preview{synth}")

    def reaches(self, min_ssim: float) -> bool | None:
        """True: its interval lies at or above min_ssim; False: wholly below it; None: it holds min_ssim (within
        noise of the threshold), its interval is short of the 95 % level (under 6 seeds: advice never builds on
        such a figure), or it is a synthetic model's."""
        e = self.ssim
        if self.synthetic or not e.sure or e.lo is None or e.hi is None:
            return None
        return True if e.lo >= min_ssim else False if e.hi < min_ssim else None

    def to_json(self) -> dict[str, Any]:
        return {"decoder": self.decoder, "decode_at": self.decode_at, "name": self.name,
                "ssim": self.ssim.to_json(), "psnr_db": _finite(self.psnr_db.value), "seeds": self.seeds,
                "synthetic": self.synthetic, "said": self.said()}


def apart(a: Fidelity, b: Fidelity) -> bool:
    """a's SSIM interval lies wholly above b's, both at the 95 % level: a difference beyond noise (overlapping
    intervals, or intervals short of the level, are not)."""
    return a.ssim.sure and b.ssim.sure and a.ssim.lo is not None and b.ssim.hi is not None and a.ssim.lo > b.ssim.hi


def _db(x: float) -> str:
    return "identical pixels (PSNR inf)" if math.isinf(x) else f"{x:.1f} dB"


def _finite(x: float) -> float | None:
    return None if math.isinf(x) or math.isnan(x) else x


@dataclass(frozen=True)
class StepsAlike:
    """Final images of `steps` steps against those of `against` steps (the same seeds): SSIM across seeds."""
    steps: int
    against: int
    ssim: Estimate

    def said(self) -> str:
        e = self.ssim
        band = "" if e.lo is None or e.hi is None else f" [{e.lo:.2f}, {e.hi:.2f}]"
        return f"{self.steps} steps' final image against {self.against} steps': SSIM {e.value:.2f}{band} ({e.n} seeds)"

    def to_json(self) -> dict[str, Any]:
        return {"steps": self.steps, "against": self.against, "ssim": self.ssim.to_json(), "said": self.said()}


@dataclass(frozen=True)
class Fidelities:
    """Everything the fidelity pass found: each decoder's figure, the threshold it is judged at, whether the model
    is synthetic, and the step counts' final images against each other. Empty: no pass ran."""
    figures: tuple[Fidelity, ...] = ()
    min_ssim: float = DEFAULT_MIN_SSIM
    synthetic: bool = False
    steps_alike: tuple[StepsAlike, ...] = ()
    shown: tuple[str, int] | None = None  # the target and preview_max the pass judged (None: those of every
    # configuration judged, as in a bench sweep; the page's pass judges its own, and another's are not measured)

    def of(self, decoder: str, decode_at: str) -> Fidelity | None:
        return next((f for f in self.figures if (f.decoder, f.decode_at) == (decoder, decode_at)), None)

    def judging(self, p: PreviewSettings) -> Fidelity | None:
        """The figure of a configuration's preview settings: its decoder at its decode_at, where the pass judged
        what it shows (its target) at its size (preview_max); None: not measured."""
        if self.shown is not None and (p.target, p.preview_max) != self.shown:
            return None
        return self.of(p.decoder, p.decode_at)

    def to_json(self) -> dict[str, Any]:
        return {"min_ssim": self.min_ssim, "synthetic": self.synthetic,
                "figures": [f.to_json() for f in self.figures], "steps_alike": [s.to_json() for s in self.steps_alike]}


NONE = Fidelities()


def _per_seed(xs: Iterable[tuple[int, float]]) -> list[float]:
    """Each seed's median of its values, in seed order."""
    by: dict[int, list[float]] = {}
    for seed, x in xs:
        by.setdefault(seed, []).append(x)
    return [statistics.median(v) for _, v in sorted(by.items())]


def figures(samples: Sequence[Sample], finals: Sequence[Final] = (), synthetic: bool = False,
            min_ssim: float = DEFAULT_MIN_SSIM) -> Fidelities:
    """The figures of a pass's samples: per decoder and decode_at, over the runs of the most steps the pass ran
    (a shorter schedule's previews are another trajectory); finals per step count against the most."""
    if not samples:
        return Fidelities((), min_ssim, synthetic, _alike(finals))
    most = max(s.steps for s in samples)
    keys = list(dict.fromkeys((s.decoder, s.decode_at) for s in samples))
    out = []
    for d, at in keys:
        mine = [s for s in samples if (s.decoder, s.decode_at) == (d, at) and s.steps == most]
        ssims = _per_seed((s.seed, s.ssim) for s in mine if s.ssim is not None)
        dbs = _per_seed((s.seed, s.psnr_db) for s in mine)
        if ssims and dbs:
            out.append(Fidelity(d, at, estimate(ssims), estimate(dbs), len(ssims), synthetic))
    return Fidelities(tuple(out), min_ssim, synthetic, _alike(finals))


def _alike(finals: Sequence[Final]) -> tuple[StepsAlike, ...]:
    by: dict[tuple[int, int], list[float]] = {}
    for f in finals:
        if f.ssim is not None:
            by.setdefault((f.steps, f.against_steps), []).append(f.ssim)
    return tuple(StepsAlike(s, a, estimate(v)) for (s, a), v in sorted(by.items()))


def write(folder: Path, samples: Sequence[Sample], finals: Sequence[Final]) -> None:
    """fidelity.csv and finals.csv, whole."""
    for name, cols, rows in ((FIDELITY_CSV, FIDELITY_COLUMNS, samples), (FINALS_CSV, FINALS_COLUMNS, finals)):
        with open(folder / name, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(cols))
            w.writeheader()
            w.writerows(r.to_row() for r in rows)


def read(folder: Path, synthetic: bool = False, min_ssim: float = DEFAULT_MIN_SSIM) -> Fidelities:
    """A folder's fidelity.csv and finals.csv as figures; NONE-like (no figures) where the pass did not run.
    Raises ValueError naming the file whose line is no sample."""
    def lines(name: str) -> list[dict[str, str]]:
        p = folder / name
        if not p.is_file():
            return []
        with open(p, newline="") as f:
            return [r for r in csv.DictReader(f) if None not in r.values()]
    try:
        samples = [Sample.from_row(r) for r in lines(FIDELITY_CSV)]
        finals = [Final.from_row(r) for r in lines(FINALS_CSV)]
    except (ValueError, KeyError) as e:
        raise ValueError(f"{folder}: fidelity.csv or finals.csv: not the fidelity pass's lines ({e})") from None
    return figures(samples, finals, synthetic, min_ssim)


"""A case's outcome (Result, kept as a JSON line by asdict and read back by Result(**...)) and its verdict."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Result:
    """One case's outcome. kind: callback | no callback | modular; result: pass, or "<category>: <first line>" with
    category one of refused, failed, nondeterministic, not built."""
    kind: str
    name: str
    test: str
    result: str
    seconds: float
    source: str = ""                                       # the step source watch() picked (auto)
    steps: int | None = None                               # the plain call's steps, by its progress bar
    decoders: dict[str, str] = field(default_factory=dict)  # decoder -> pass or what went wrong
    notes: list[str] = field(default_factory=list)

    @property
    def category(self) -> str:
        return self.result.split(":", 1)[0]

    @property
    def built(self) -> bool:
        return self.category != "not built"


def first_line(e: BaseException | str, limit: int = 240) -> str:
    """The first non-empty line of a message; an exception's prefixed with its type."""
    text = e if isinstance(e, str) else str(e)
    line = next((s.strip() for s in text.splitlines() if s.strip()), "")
    if not isinstance(e, str):
        line = f"{type(e).__name__}: {line}" if line else type(e).__name__
    return line if len(line) <= limit else line[: limit - 3] + "..."


# a decoder the pipeline cannot have, said so in one line (decoder vae where a diffusion model, not a VAE, makes the
# image): not a miss of previewlab's, so it does not fail the case; the report keeps the line
NOT_APPLICABLE = "not applicable: "


def verdict(outcomes: dict[str, str]) -> str:
    """The case's result from its decoders' outcomes: pass, or the first one that did not pass, naming the decoders
    it holds for unless it holds for all. A decoder the pipeline cannot have (NOT_APPLICABLE) is not a miss."""
    bad = [(d, r) for d, r in outcomes.items() if r != "pass" and not r.startswith(NOT_APPLICABLE)]
    if not bad:
        return "pass"
    first = bad[0][1]
    same = [d for d, r in bad if r == first]
    if len(same) == len(outcomes):
        return first
    category, message = first.split(": ", 1)
    return f"{category}: [{', '.join(same)}] {message}"

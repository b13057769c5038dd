"""The advice's record: Advice, what the figures support, as every surface renders it (with its JSON), and Asked,
what one call of advice.advise was asked, the part every Advice it makes repeats. No torch here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from previewlab.preview.judging.analysis import Finding


@dataclass(frozen=True)
class Advice:
    """What the figures support: keep the configuration in use (keep), set another (pick, and the settings it
    changes), the configurations that fit the budget (fit), the one surely cheapest of those measured (cheapest)
    or those that cannot be told apart (apart), the configurations whose overhead is wholly below 0 (drifted);
    its lines, as every surface prints them."""
    budget: float
    current: str | None
    keep: bool = False
    pick: str | None = None
    change: str = ""
    cheapest: str | None = None
    drifted: tuple[str, ...] = ()
    lines: tuple[str, ...] = ()
    fit: tuple[str, ...] = ()
    apart: tuple[str, ...] = ()
    headline: str = ""  # the one line a glance reads (the rule's pick and why); "" where the rule picked none

    def to_json(self) -> dict[str, Any]:
        return {"budget": self.budget, "current": self.current, "keep": self.keep, "pick": self.pick,
                "change": self.change, "cheapest": self.cheapest, "drifted": list(self.drifted),
                "fit": list(self.fit), "apart": list(self.apart), "lines": list(self.lines),
                "headline": self.headline}


@dataclass(frozen=True)
class Asked:
    """What one advice is asked: the budget in percent, the configuration in use (current: its name, None in a
    sweep; cur: its finding, None where it was not measured), and the configurations whose overhead is wholly
    below 0 (drifted), which every Advice of it names."""
    budget: float
    current: str | None
    cur: Finding | None
    drifted: tuple[str, ...]

    def advice(self, lines: Sequence[str], fit: tuple[str, ...] = (), *, keep: bool = False, pick: str | None = None,
               change: str = "", cheapest: str | None = None, apart: tuple[str, ...] = (),
               headline: str = "") -> Advice:
        """An Advice of these figures, with its lines and the configurations that fit (fit)."""
        return Advice(self.budget, self.current, keep=keep, pick=pick, change=change, cheapest=cheapest,
                      drifted=self.drifted, lines=tuple(lines), fit=fit, apart=apart, headline=headline)

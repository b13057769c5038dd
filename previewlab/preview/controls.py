"""Live preview controls: what a user changes while a run goes on, picked up once per step as a typed Change."""
from __future__ import annotations

import threading
from dataclasses import dataclass, fields
from typing import Any

from previewlab.preview.settings import PreviewSettings


@dataclass(frozen=True)
class Change:
    """The live changes one step picked up: which fields, and the event text that says so."""
    fields: frozenset[str]
    text: str


NO_CHANGE = Change(frozenset(), "")


class Controls:
    """Live preview settings: set from any thread, read once per step by the denoising thread.

    Replacing one reference is atomic in CPython, so the reader never sees half a change. Changes made within
    one step are merged: the last value of each field wins, and the step's event names each changed field
    once, so a flood of `set` messages costs one short event, never a growing one.
    """

    def __init__(self, preview: PreviewSettings) -> None:
        self._s = preview
        self._noted = preview  # the settings as the last event described them
        self._dirty = False    # a user change since the last event
        self._lock = threading.Lock()

    def get(self) -> PreviewSettings:
        return self._s

    def set(self, note: bool = True, **changes: Any) -> PreviewSettings:
        """Change settings from any thread; note=False for the engine's own changes, which say why elsewhere."""
        with self._lock:
            new = self._s.changed(**changes)  # validates; raises SettingsError and changes nothing
            self._s = new
            if note:
                self._dirty = True
            else:
                self._noted = self._noted.changed(**changes)
        return new

    def take(self) -> Change:
        """What the user changed since the last call, merged; called once per step."""
        if not self._dirty:  # the common case takes no lock
            return NO_CHANGE
        with self._lock:
            old, new, self._noted, self._dirty = self._noted, self._s, self._s, False
        names = tuple(f.name for f in fields(new) if getattr(old, f.name) != getattr(new, f.name))
        return Change(frozenset(names), "set " + " ".join(f"{k}={getattr(new, k)}" for k in names) if names else "")

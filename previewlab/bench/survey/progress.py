"""Steps counted on a pipeline's own progress bars, independently of the watch: the loaded diffusers modules' tqdm
becomes a counted, switched-off bar (and ftfy gets a stand-in where a module calls it but it is not installed)."""
from __future__ import annotations

import sys
from typing import Any

SKIP_FRAMES = ("tqdm", "/torch/", "contextlib")  # frames between a bar and the code that opened it


class Bars:
    """diffusers' progress bars, counted: each bar's ticks (update() calls, or items iterated) and where it was
    opened (the first frame outside tqdm and the progress_bar helpers). Every bar is switched off."""
    opened: list[Any] = []
    cls: Any = None

    @classmethod
    def make(cls) -> Any:
        if cls.cls is None:
            from tqdm.auto import tqdm

            class CountedBar(tqdm):  # type: ignore[misc, valid-type]
                def __init__(self, *args: Any, **kwargs: Any) -> None:
                    kwargs["disable"] = True
                    super().__init__(*args, **kwargs)
                    self.ticks = 0
                    f: Any = sys._getframe(1)
                    while f is not None and (f.f_code.co_name in ("__init__", "progress_bar")
                                             or any(w in f.f_code.co_filename for w in SKIP_FRAMES)):
                        f = f.f_back
                    self.site = f"{f.f_code.co_filename}:{f.f_lineno}" if f is not None else "?"
                    Bars.opened.append(self)

                def update(self, n: float | None = 1) -> Any:
                    self.ticks += 1 if n is None else int(n)
                    return super().update(n)

                def __iter__(self) -> Any:
                    for item in super().__iter__():
                        self.ticks += 1
                        yield item

            cls.cls = CountedBar
        return cls.cls

    @classmethod
    def steps(cls) -> int | None:
        """The steps of the call since the last clear: the ticks of the last bar opened that ticked, summed with
        those opened just before it at the same place (a clip made in chunks opens one bar per chunk). A prior's
        bar, opened elsewhere before, is not counted. None: no bar ticked."""
        ticked = [b for b in cls.opened if b.ticks]
        if not ticked:
            return None
        site, total = ticked[-1].site, 0
        for bar in reversed(ticked):
            if bar.site != site:
                break
            total += bar.ticks
        return int(total)


def patch_loaded_modules() -> None:
    """In every loaded diffusers module: a counted, switched-off bar for tqdm, and a stand-in for ftfy where the
    module uses ftfy but it is not installed (diffusers 0.42.1's Wan and Helios text steps call ftfy.fix_text
    unconditionally; the stand-in returns the text, as ftfy does for an ASCII prompt)."""
    import inspect
    import types

    import tqdm as tqdm_package
    from tqdm.auto import tqdm as auto_tqdm

    bar = Bars.make()
    plain = {tqdm_package.tqdm, auto_tqdm}
    for name, module in list(sys.modules.items()):
        if not name.startswith("diffusers.") or module is None:
            continue
        if getattr(module, "tqdm", None) in plain:
            setattr(module, "tqdm", bar)
        if not hasattr(module, "ftfy"):
            try:
                source = inspect.getsource(module)
            except (OSError, TypeError):
                continue
            if "ftfy.fix_text" in source:
                setattr(module, "ftfy", types.SimpleNamespace(fix_text=lambda text: text))

"""A call's output as arrays, and whether two outputs are the same bit for bit."""
from __future__ import annotations

from typing import Any


def arrays(out: Any) -> list[Any]:
    """Every tensor or array in a call's result (an output dataclass, a tuple, a dict, a list of pictures)."""
    import numpy as np
    import torch

    if isinstance(out, torch.Tensor):
        return [out.detach().cpu().float().numpy() if out.dtype == torch.bfloat16 else out.detach().cpu().numpy()]
    if isinstance(out, np.ndarray):
        return [out]
    if hasattr(out, "getpixel"):  # a PIL image
        return [np.asarray(out)]
    if isinstance(out, dict) or hasattr(out, "to_tuple"):
        out = list(out.values())
    if isinstance(out, (list, tuple)):
        return [a for item in out for a in arrays(item)]
    return []


def differs(a: list[Any], b: list[Any]) -> str:
    """"" when a and b are the same arrays bit for bit (NaN equal to NaN), else how they differ."""
    import numpy as np

    if len(a) != len(b):
        return f"{len(b)} arrays, not {len(a)}"
    for i, (x, y) in enumerate(zip(a, b)):
        if x.shape != y.shape or x.dtype != y.dtype:
            return f"array {i}: {y.dtype}{list(y.shape)}, not {x.dtype}{list(x.shape)}"
        nan = x.dtype.kind in "fc"
        if not np.array_equal(x, y, equal_nan=nan):
            gap = np.nanmax(np.abs(x.astype(np.float64) - y.astype(np.float64))) if x.dtype.kind in "fciub" else "?"
            return f"array {i} {list(x.shape)}: max difference {gap}"
    return ""

"""A pipeline's own unpacking of its packed latents, found by its signature, never by the pipeline's class: the
static _unpack_latents signatures previewlab can call (UNPACKS), a packed one that also takes the patch size the
pipeline keeps, a Modular pipeline's (a component's unpack_latents or its package's _unpack_latents), and LTX's
transformer patch sizes.
"""
from __future__ import annotations

import inspect
import sys
from typing import Any, Callable

import torch

from previewlab.preview.models.latent_spaces import Packing


# The static _unpack_latents signatures previewlab can call, and the packing each means: FLUX.1's 2x2 patches
# (the image size says everything), LTX-Video's tokens (the frame count follows from the sequence and the size)
UNPACKS: dict[tuple[str, ...], Packing] = {
    ("latents", "height", "width", "vae_scale_factor"): "packed",
    ("latents", "num_frames", "height", "width", "patch_size", "patch_size_t"): "ltx",
}


# what else a packed (FLUX.1-like) _unpack_latents may ask for beyond the latents, the image size and the scale
# factor, and where the pipeline keeps it: its patch size, on itself (Krea 2) or its transformer's config
# (NucleusMoE), which its final decode passes
def _patch_size(pipe: Any) -> Any:
    own = getattr(pipe, "patch_size", None)
    return own if isinstance(own, int) else getattr(getattr(getattr(pipe, "transformer", None), "config", None),
                                                    "patch_size", None)


def unpack_of(pipe: Any) -> tuple[Callable[..., torch.Tensor] | None, Packing | None, str | None]:
    """The pipeline's own _unpack_latents and its packing when previewlab can call it: one of UNPACKS' static
    signatures, or a packed one (a method too) that also takes the patch size the pipeline keeps; (None, None,
    its signature) when it cannot; (None, None, None) when it has none."""
    cls = type(pipe)
    own = inspect.getattr_static(cls, "_unpack_latents", None)
    if own is None:
        return None, None, None
    fn = own.__func__ if isinstance(own, staticmethod) else own if inspect.isfunction(own) else None
    params = tuple(inspect.signature(fn).parameters) if fn is not None else ()
    if isinstance(own, staticmethod) and params in UNPACKS:
        return fn, UNPACKS[params], None
    bound = getattr(pipe, "_unpack_latents", None)
    args = params[1:] if not isinstance(own, staticmethod) else params
    patch = _patch_size(pipe)
    packed = {"latents", "height", "width"} <= set(args) <= {"latents", "height", "width", "vae_scale_factor",
                                                             "patch_size"}
    if bound is not None and args and args[0] == "latents" and packed and (patch is not None or "patch_size" not in args):
        call = bound

        def unpack(z: torch.Tensor, height: int, width: int, vae_scale_factor: int) -> torch.Tensor:
            known = {"height": height, "width": width, "vae_scale_factor": vae_scale_factor, "patch_size": patch}
            return call(z, *(known[a] for a in args[1:]))
        return unpack, "packed", None
    return None, None, f"_unpack_latents({', '.join(params) if fn is not None else 'self, ...'})"


def modular_unpack(pipe: Any) -> tuple[Callable[..., torch.Tensor] | None, Packing | None]:
    """A Modular pipeline's own unpacking of packed latents: a component's `unpack_latents` (Qwen-Image's and
    LTX-Video's pachifier), else a module-level `_unpack_latents` of its package (FLUX's, LTX-2's), when it takes
    one of UNPACKS' signatures, or LTX's without the patch sizes (a pachifier knows its own). (None, None) for a
    pipeline whose latents are not packed."""
    found: list[Callable[..., torch.Tensor]] = []
    for name in getattr(pipe, "components", {}) or {}:
        part = getattr(pipe, name, None)
        method = getattr(part, "unpack_latents", None)
        if callable(method) and not isinstance(part, torch.nn.Module):
            found.append(method)
    package = type(pipe).__module__.rsplit(".", 1)[0]
    for module_name, module in sorted(sys.modules.items()):
        if module is not None and module_name.startswith(package + "."):
            fn = vars(module).get("_unpack_latents")
            if callable(fn):
                found.append(fn)
    patch = _patch_size(pipe)
    for fn in found:
        params = tuple(p for p in inspect.signature(fn).parameters if p != "self")
        if params in UNPACKS:
            return fn, UNPACKS[params]
        if patch is not None and set(params) == {"latents", "height", "width", "vae_scale_factor", "patch_size"}:
            # a packed unpack that also takes the patch size the pipeline keeps (Krea 2's decoders._unpack_latents:
            # (B, h/p * w/p, C * p * p) -> (B, C, 1, h, w)), its arguments by name
            own_packed = fn

            def unpack(z: torch.Tensor, height: int, width: int, vae_scale_factor: int) -> torch.Tensor:
                return own_packed(z, height=height, width=width, patch_size=patch,
                                  vae_scale_factor=vae_scale_factor)
            return unpack, "packed"
        if params == ("latents", "num_frames", "height", "width"):
            own = fn
            return (lambda z, f, h, w, p=1, pt=1: own(z, f, h, w)), "ltx"
    return None, None


def patches(pipe: Any) -> tuple[int, int]:
    """LTX: (spatial, temporal) patch sizes of its transformer, by the names the pipeline passes its own
    _unpack_latents (1, 1 for LTX-Video 0.9)."""
    def size(name: str) -> int:
        value = getattr(pipe, name, 1)
        return value if isinstance(value, int) and value > 0 else 1

    return size("transformer_spatial_patch_size"), size("transformer_temporal_patch_size")

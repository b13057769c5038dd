"""madebyollin's TAEHV files (github.com/madebyollin/taehv, MIT): the file each video family has, and what a file
decodes (latent channels, the pixel-shuffle patch, the temporal stride of each decoder stage, the variant), read
from its keys' shapes or, for the synthetic presets' random decoders, written out per family. The network that
decodes them is taehv.py's.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import torch

from previewlab.preview.models.families import Family
from previewlab.preview.models.taesd import TaeError

WIDTHS = (256, 128, 64, 64)  # decoder features per stage, then the last conv's input
SUPER_WIDTHS = (512, 256, 128, 64)
# madebyollin's published file per family (its name also carries the CogVideoX trim rule and H3's chunks); Mochi
# has none. HunyuanVideo 1.5 and Wan 2.2 also have a Super decoder (taehv1_5_super, taew2_2_super), the same
# family's latents.
FAMILY_FILES: dict[Family, str] = {
    "wan21": "taew2_1", "wan22": "taew2_2", "hunyuanvideo": "taehv", "cogvideox": "taecvx",
    "hunyuanvideo15": "taehv1_5", "ltx2": "taeltx_2", "ltx2_3": "taeltx2_3", "minimaxh3": "taeh3"}
# families with no TAE previewlab can load, and why, for decoder taesd's refusal (Mochi's says only its channels)
NO_TAE: dict[Family, str] = {
    "ltxv": "no published TAE fits LTX-Video 0.9's latents (madebyollin's taeltx_2 is for LTX-2's VAE, another "
            "latent space of the same 128 channels)",
    "qwenimage21": "madebyollin's taeqi2_1 (Qwen-Image 2.1: 64 channels, 16x, RGBA) came after the taesd code "
                   "previewlab follows (5cccb12), so previewlab has no decoder for it",
    "cascade_c": "no TAE is published for Stable Cascade's stage C latents",
    "cascade_b": "no TAE is published for Stable Cascade's stage B latents"}


@dataclass(frozen=True)
class Layout:
    """What a weight file decodes: latent channels, the pixel-shuffle patch, the temporal stride each stage's
    grow was trained with, whether it keeps the warm-up frames of an even-length input (CogVideoX), decodes in
    H3's chunks (MiniMax H3), and is the larger Super decoder."""
    channels: int
    patch: int
    strides: tuple[int, int, int]
    cogvideox: bool = False
    h3: bool = False
    super_: bool = False

    @property
    def widths(self) -> tuple[int, ...]:
        return SUPER_WIDTHS if self.super_ else WIDTHS

    @property
    def grows(self) -> tuple[int, int, int]:
        """The decoder indices of its three TGrow layers."""
        return (7, 14, 21) if self.super_ else (7, 13, 19)


# madebyollin's published TAE per family (tests/test_taehv.py holds the same layouts): latent channels, the
# pixel-shuffle patch, the temporal stride of each decoder stage, CogVideoX's trim rule. Mochi has none.
TAE_LAYOUTS: dict[Family, Layout] = {
    "wan21": Layout(16, 1, (1, 2, 2)),               # taew2_1
    "wan22": Layout(48, 2, (1, 2, 2)),               # taew2_2: 16x in space, 2 of it the patch
    "hunyuanvideo": Layout(16, 1, (1, 2, 2)),        # taehv
    "cogvideox": Layout(16, 1, (1, 2, 2), cogvideox=True),  # taecvx
    "hunyuanvideo15": Layout(32, 2, (1, 2, 2)),      # taehv1_5
    "ltx2": Layout(128, 4, (2, 2, 2)),               # taeltx_2: every stage grows in time, 8x
    "ltx2_3": Layout(128, 4, (2, 2, 2)),             # taeltx2_3
    "minimaxh3": Layout(24, 2, (1, 2, 2), h3=True),  # taeh3: decoded in chunks of five latent frames
}
EXPECTED = ("expected taehv, taew2_1, taew2_2, taecvx, taehv1_5, taeltx_2, taeltx2_3, taeh3, taehv1_5_super or "
            "taew2_2_super .pth / .safetensors from github.com/madebyollin/taehv")


def layout_of(state: Mapping[str, torch.Tensor], name: str = "") -> Layout:
    """The layout from a decoder state dict's keys and shapes (keys `decoder.N.*` or `N.*`); the file's name
    adds what the keys cannot say (taecvx's trim, taeh3's chunks), as the reference reads it. Raises TaeError."""
    def weight(i: int, rest: str) -> torch.Tensor | None:
        return state.get(f"decoder.{i}.{rest}", state.get(f"{i}.{rest}"))

    super_ = weight(1, "conv.0.weight") is not None  # a SuperMemBlock's depthwise conv right after the 1x1 in
    first = weight(0 if super_ else 1, "weight")
    widths = SUPER_WIDTHS if super_ else WIDTHS
    grows = [weight(i, "conv.weight") for i in ((7, 14, 21) if super_ else (7, 13, 19))]
    last = weight(22, "weight")
    if first is None or last is None or any(g is None for g in grows) or int(first.shape[0]) != widths[0]:
        raise TaeError("not a madebyollin TAEHV decoder (no first / decoder.22 convs or TGrow layers of its "
                       f"widths); {EXPECTED}")
    patch = int(round((int(last.shape[0]) / 3) ** 0.5))
    grown = widths[1:4] if super_ else widths[:3]  # a Super grow follows its stage's pixel shuffle
    strides = tuple(int(g.shape[0]) // n for g, n in zip(grows, grown))  # type: ignore[union-attr]
    base = Path(name).name.lower()
    return Layout(int(first.shape[1]), patch, strides, cogvideox="taecvx" in base,  # type: ignore[arg-type]
                  h3="taeh3" in base, super_=super_)


def is_taehv(state: Mapping[str, torch.Tensor]) -> bool:
    """A state dict in TAEHV's layout (its decoder's TGrow layers), not TAESD's."""
    return any(k in state for k in ("decoder.7.conv.weight", "7.conv.weight"))

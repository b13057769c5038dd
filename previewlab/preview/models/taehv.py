"""TAEHV: madebyollin's tiny video autoencoder (github.com/madebyollin/taehv, MIT), its decoder written here.

Latents NTCHW (frames before channels; the diffusion model's own latents, as a pipeline's step callback hands
them, with no scale or shift to undo) -> frames NTCHW in [0, 1]. The decoder is three stages of memory blocks, each seeing the current
frame and the previous one at its own depth (zeros before the first), then a spatial upsample and a temporal
grow, which turns each frame into `stride` frames by a 1x1 convolution. The first t_upscale - 1 output frames are
the causal warm-up and are trimmed, so T latent frames give T * t_upscale - (t_upscale - 1) frames: Wan's and
HunyuanVideo's 4x temporal compression of a 4k + 1 clip. CogVideoX's files (taecvx) keep every frame of an
even-length input, as the reference does. MiniMax H3's (taeh3) decode in chunks of five latent frames, each
chunk's warm-up trimmed, and drop the last three latent frames' frames (H3's own VAE does so).

Two decoders: the base one (a soft clamp, MemBlocks, nn.Upsample) and the larger "Super" one (taehv1_5_super,
taew2_2_super: no clamp, a 1x1 conv in, ConvNeXt-style SuperMemBlocks, pixel shuffles that upsample). The file's
keys say which; a Super decoder upsamples inside its convs, so it has no stage a preview can leave out.

Cheaper previews: `time_upscale` and `space_upscale` switch the growing and the upsampling off per stage; a
switched-off grow keeps the last of its `stride` outputs (the weights' last-timestep rows), as the reference
patches them. smaller(k) leaves out the last k upsamples of a loaded decoder, sharing its weights: a preview at
the preview's size, switched per preview. The weights are madebyollin's files unchanged (`.pth` or `.safetensors`), whose keys are
`decoder.N.*`; the variant (latent channels, patch size, which stages grow in time) is read from the keys' shapes
(taehv_files.py, with the file each family has).
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from previewlab.preview.models.taehv_files import Layout, layout_of
from previewlab.preview.models.taesd import Clamp, TaeError, conv, cut, read_state


class MemBlock(nn.Module):
    """A residual block that also sees the previous frame at this depth: (x, past) -> features."""

    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__()
        self.conv = nn.Sequential(conv(n_in * 2, n_out), nn.ReLU(inplace=True), conv(n_out, n_out),
                                  nn.ReLU(inplace=True), conv(n_out, n_out))
        self.skip = nn.Conv2d(n_in, n_out, 1, bias=False) if n_in != n_out else nn.Identity()
        self.act = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor, past: torch.Tensor) -> torch.Tensor:
        return self.act(self.conv(torch.cat([x, past], 1)) + self.skip(x))


class SuperMemBlock(nn.Module):
    """The Super decoder's block: a 7x7 depthwise conv over (x, past), an inverted bottleneck, a residual."""

    def __init__(self, n_f: int) -> None:
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(n_f * 2, n_f * 2, 7, padding=3, groups=n_f * 2, bias=False),
                                  nn.Conv2d(n_f * 2, n_f * 4, 1), nn.ReLU(inplace=True),
                                  nn.Conv2d(n_f * 4, n_f, 1, bias=False))

    def forward(self, x: torch.Tensor, past: torch.Tensor) -> torch.Tensor:
        return self.conv(torch.cat([x, past], 1)) + x


MEMORY = (MemBlock, SuperMemBlock)  # the blocks that see the previous frame


class TGrow(nn.Module):
    """Each frame's features -> `stride` frames' (N*T, C, H, W) -> (N*T*stride, C, H, W), by a 1x1 conv."""

    def __init__(self, n_f: int, stride: int) -> None:
        super().__init__()
        self.stride = stride
        self.conv = nn.Conv2d(n_f, n_f * stride, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, c, h, w = x.shape
        return self.conv(x).reshape(-1, c, h, w)


class TAEHV(nn.Module):
    """The TAEHV decoder: latents (N, T, C, h, w) -> frames (N, T', 3, H, W) in [0, 1].

    time_upscale / space_upscale: per stage, grow in time / upsample 2x in space (False: a cheaper preview with
    fewer frames / pixels; the frame count then follows the stages left on)."""

    def __init__(self, layout: Layout, time_upscale: tuple[bool, bool, bool] = (True, True, True),
                 space_upscale: tuple[bool, bool, bool] = (True, True, True)) -> None:
        super().__init__()
        self.layout = layout
        strides = [s if on else 1 for s, on in zip(layout.strides, time_upscale)]
        n = layout.widths
        layers: list[nn.Module]
        if layout.super_:  # the reference's arch_variant "super"
            layers = [nn.Conv2d(layout.channels, n[0], 1, bias=False)]
            for stage in range(3):
                up = 2 if space_upscale[stage] else 1
                layers += [SuperMemBlock(n[stage]) for _ in range(3)]
                layers += [conv(n[stage], n[stage + 1] * up ** 2), nn.ReLU(inplace=True), nn.PixelShuffle(up),
                           TGrow(n[stage + 1], strides[stage])]
            layers += [conv(n[3], 3 * layout.patch ** 2)]
        else:
            layers = [Clamp(), conv(layout.channels, n[0]), nn.ReLU(inplace=True)]
            for stage in range(3):
                layers += [MemBlock(n[stage], n[stage]) for _ in range(3)]
                layers += [nn.Upsample(scale_factor=2 if space_upscale[stage] else 1),
                           TGrow(n[stage], strides[stage]), conv(n[stage], n[stage + 1], bias=False)]
            layers += [nn.ReLU(inplace=True), conv(n[3], 3 * layout.patch ** 2)]
        self.decoder = nn.Sequential(*layers)
        self.t_upscale = 1
        for s in strides:
            self.t_upscale *= s
        self.frames_to_trim = self.t_upscale - 1

    def smaller(self, stages: int) -> TAEHV:
        """This decoder with its last `stages` spatial upsamples left out (taesd.cut): frames 2^stages times
        smaller per side, the same frame count, from the same modules (shared, not copied). Raises ValueError
        past the upsamples it has."""
        if stages == 0:
            return self
        if self.layout.super_:
            raise ValueError(f"stages={stages}: a Super decoder upsamples inside its convs (pixel shuffles), so no "
                             "stage can be left out")
        out = TAEHV.__new__(TAEHV)
        nn.Module.__init__(out)  # an empty module: the layers below are this one's, not new random ones
        out.layout, out.t_upscale, out.frames_to_trim = self.layout, self.t_upscale, self.frames_to_trim
        out.decoder = cut(self.decoder, stages)
        return out.train(self.training)

    def load(self, state: Mapping[str, torch.Tensor]) -> TAEHV:
        """Load madebyollin's weights as published (the encoder's keys, if any, are left out). A grow that is
        switched off keeps its last-timestep rows. Raises TaeError."""
        own = self.state_dict()
        picked = {}
        for key, value in state.items():
            local = key.removeprefix("decoder.") if key.startswith("decoder.") else key
            if key.startswith("encoder.") or f"decoder.{local}" not in own:
                continue
            want = own[f"decoder.{local}"]
            if value.shape != want.shape and local.endswith("conv.weight") and value.shape[0] > want.shape[0]:
                value = value[-want.shape[0]:]  # TGrow with its stride switched off: the last timestep
            picked[f"decoder.{local}"] = value
        try:
            self.load_state_dict(picked)
        except RuntimeError as e:
            lines = [line.strip() for line in str(e).splitlines() if line.strip()]
            raise TaeError(f"not a madebyollin TAEHV decoder state dict ({(lines[1] if len(lines) > 1 else lines[0])[:200]})") from None
        return self

    def forward(self, x: torch.Tensor, keep: Sequence[int] | None = None) -> torch.Tensor:
        """latents (N, T, C, h, w) -> frames (N, T', 3, H, W) in [0, 1], all frames at once; with `keep`, only
        those of the T' frames (indices past the last are the last), in that order.

        keep is exact and cheaper: the layers after the last memory block work on each frame alone, so only the
        frames a kept one grows from go through the last upsample and temporal grow, and only the kept frames
        through the convs after it (the time upscale switched off where its frames are not shown: a one-frame
        preview of Wan's first latent frame runs one frame, not four, through the largest convs)."""
        if keep is not None and not keep:
            raise ValueError("keep: name at least one frame, or None for all of them")
        if self.layout.h3:  # chunks trimmed one by one: every frame decoded, then the kept ones taken
            y = self._h3(x)
            return y if keep is None else take(y, [min(k, int(y.shape[1]) - 1) for k in keep])
        n, t, c, h, w = x.shape
        body, tail, grow_at, stride = self._parts()
        y = x.reshape(n * t, c, h, w)
        for block in body:
            if isinstance(block, MEMORY):
                frames = y.reshape(n, -1, *y.shape[1:])
                past = F.pad(frames, (0, 0, 0, 0, 0, 0, 1, 0))[:, :frames.shape[1]]  # the previous frame; zeros first
                y = block(y, past.reshape(y.shape))
            else:
                y = block(y)
        before = int(y.shape[0]) // n  # frames before the last grow
        trim = 0 if self.layout.cogvideox and t % 2 == 0 else self.frames_to_trim
        want = None if keep is None else [min(k, before * stride - trim - 1) + trim for k in keep]
        if want is not None and want == list(range(before * stride)):
            want = None  # every frame the grows make (no warm-up to trim), in order: the whole decode
        if want is None:
            for block in tail:
                y = block(y)
        else:
            grown = sorted({u // stride for u in want})
            y = take(y.reshape(n, before, *y.shape[1:]), grown)
            y = y.reshape(-1, *y.shape[2:])
            for block in tail[:grow_at + 1]:
                y = block(y)
            at = {g: i for i, g in enumerate(grown)}  # after the grow, frame u is at at[u // stride] x stride + ...
            y = take(y.reshape(n, -1, *y.shape[1:]), [at[u // stride] * stride + u % stride for u in want])
            y = y.reshape(-1, *y.shape[2:])
            for block in tail[grow_at + 1:]:
                y = block(y)
        if self.layout.patch > 1:
            y = F.pixel_shuffle(y, self.layout.patch)
        y = y.clamp(0, 1).reshape(n, -1, *y.shape[1:])
        return y if want is not None else y[:, trim:]

    def _h3(self, x: torch.Tensor) -> torch.Tensor:
        """MiniMax H3's decode, as the reference's _decode_h3_video: every frame the decoder grows, in chunks of
        five latent frames' worth, each chunk's first t_upscale - 1 (warm-up) frames dropped, then the frames of
        the last three latent frames dropped (the clip's padding in H3's own VAE)."""
        n, t, c, h, w = x.shape
        y = x.reshape(n * t, c, h, w)
        for block in self.decoder:
            if isinstance(block, MEMORY):
                frames = y.reshape(n, -1, *y.shape[1:])
                past = F.pad(frames, (0, 0, 0, 0, 0, 0, 1, 0))[:, :frames.shape[1]]
                y = block(y, past.reshape(y.shape))
            else:
                y = block(y)
        y = y.reshape(n, -1, *y.shape[1:])
        chunk = 5 * self.t_upscale
        y = F.pad(y, (0, 0, 0, 0, 0, 0, 0, -int(y.shape[1]) % chunk))
        y = y.unflatten(1, (-1, chunk))[:, :, self.frames_to_trim:].flatten(1, 2)[:, :-3 * self.t_upscale]
        if self.layout.patch > 1:
            y = F.pixel_shuffle(y.flatten(0, 1), self.layout.patch).unflatten(0, (n, -1))
        return y.clamp(0, 1)


    def _parts(self) -> tuple[list[nn.Module], list[nn.Module], int, int]:
        """The decoder up to its last memory block, the per-frame layers after it, the index in those of the
        last temporal grow (-1: none) and the frames it makes of each: read once per decoder (and per cut)."""
        parts = self.__dict__.get("_split")
        if parts is None:
            layers = list(self.decoder)
            last_mem = max(i for i, block in enumerate(layers) if isinstance(block, MEMORY))
            tail = layers[last_mem + 1:]
            grow_at = max((i for i, block in enumerate(tail) if isinstance(block, TGrow)), default=-1)
            stride = 1
            for block in tail[:grow_at + 1]:
                stride *= block.stride if isinstance(block, TGrow) else 1
            parts = self.__dict__["_split"] = (layers[:last_mem + 1], tail, grow_at, stride)
        return parts


def take(x: torch.Tensor, idx: list[int]) -> torch.Tensor:
    """x[:, idx] from views: indexing a CUDA tensor with a Python list copies the list to the device with a
    blocking host-to-device copy, a hidden sync on every preview. A slice is a view; several frames are a stack
    of views (one device-side copy, queued like any kernel)."""
    if idx == list(range(idx[0], idx[0] + len(idx))):
        return x[:, idx[0]:idx[0] + len(idx)]
    return torch.stack([x[:, k] for k in idx], 1)


def load_taehv(source: str | Path | Mapping[str, torch.Tensor], *, time_upscale: tuple[bool, bool, bool] = (True, True, True),
               space_upscale: tuple[bool, bool, bool] = (True, True, True), name: str = "") -> TAEHV:
    """A TAEHV decoder from madebyollin's weights (a path or a state dict), in eval mode on the CPU. The
    stages' strides come from the keys; the file's name (`name` for a state dict) adds the CogVideoX trim rule.
    Raises TaeError."""
    name = Path(source).name if isinstance(source, (str, Path)) else name
    state = read_state(source) if isinstance(source, (str, Path)) else dict(source)
    module = TAEHV(layout_of(state, name), time_upscale, space_upscale).load(state)
    return module.eval().requires_grad_(False)

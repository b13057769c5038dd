"""madebyollin's tiny autoencoders (TAESD, TAESDXL, TAESD3, TAEF1, TAEF2, TAESANA), so their .pth / .safetensors
load without diffusers' wrapper.

The layer layout follows https://github.com/madebyollin/taesd (taesd.py): state-dict keys are the indices of
one nn.Sequential, so the published weights load as they are. TAEF2 adds a GroupNorm branch (`pool`) to the
three blocks at the lowest resolution (decoder blocks 3-5, encoder blocks 11-13); the same layout is in
ComfyUI's comfy/taesd/taesd.py (`use_midblock_gn`), and the published taef2_*.pth keys confirm it. TAESANA
decodes Sana's DC-AE latents (32 channels at 1/32): the reference's F32Decoder, wider (256, 128, 64) and five
2x upsamples where TAESD has three.

cut() leaves out a decoder's last upsampling stages, sharing its weights, for a preview smaller than the image.

Every TAE takes latents in the diffusion model's own space (what the UNet or transformer sees, unpacked to
(B, C, h, w)), never the VAE's unscaled latents: see latent_spaces.LatentSpace.tae_input.
"""
from __future__ import annotations

from pathlib import Path
from typing import Literal, Mapping

import torch
from torch import nn

Part = Literal["decoder", "encoder"]
Variant = Literal["", "gn", "f32"]  # TAESD's layout, with TAEF2's midblock GroupNorm, or Sana's 32x decoder
# What a state dict's latent channels and variant say about its family. 4 and 16 channels are shared by two
# families each; only a madebyollin file name (taesd_, taesdxl_, taesd3_, taef1_, ...) tells them apart.
CANDIDATES: dict[tuple[int, Variant], tuple[str, ...]] = {
    (4, ""): ("sd15", "sdxl"), (16, ""): ("sd3", "flux1"), (32, "gn"): ("flux2",), (32, "f32"): ("sana",)}
PREFIXES = {"taesd_": "sd15", "taesdxl_": "sdxl", "taesd3_": "sd3", "taef1_": "flux1", "taef2_": "flux2",
            "taesana_": "sana"}


class TaeError(ValueError):
    """A TAE state dict or file this module cannot load; the message is one line a person can act on."""


def conv(n_in: int, n_out: int, **kwargs: object) -> nn.Conv2d:
    return nn.Conv2d(n_in, n_out, 3, padding=1, **kwargs)  # type: ignore[arg-type]


class Clamp(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x / 3) * 3  # soft clamp of the latents to (-3, 3)


class Block(nn.Module):
    def __init__(self, n_in: int, n_out: int, use_midblock_gn: bool = False) -> None:
        super().__init__()
        self.conv = nn.Sequential(conv(n_in, n_out), nn.ReLU(), conv(n_out, n_out), nn.ReLU(), conv(n_out, n_out))
        self.skip = nn.Conv2d(n_in, n_out, 1, bias=False) if n_in != n_out else nn.Identity()
        self.fuse = nn.ReLU()
        self.pool: nn.Sequential | None = None
        if use_midblock_gn:  # TAEF2: a 1x1 bottleneck with GroupNorm, added before the block
            n_gn = n_in * 4
            self.pool = nn.Sequential(nn.Conv2d(n_in, n_gn, 1, bias=False), nn.GroupNorm(4, n_gn),
                                      nn.ReLU(inplace=True), nn.Conv2d(n_gn, n_in, 1, bias=False))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.pool is not None:
            x = x + self.pool(x)
        return self.fuse(self.conv(x) + self.skip(x))


def _blocks(n: int, gn: bool = False) -> list[nn.Module]:
    """Three Blocks of width n at one resolution (gn: TAEF2's midblock GroupNorm in each)."""
    return [Block(n, n, gn) for _ in range(3)]


def _down(gn: bool = False) -> list[nn.Module]:
    """An encoder stage: a strided conv that halves each side, then three Blocks at the lower resolution."""
    return [conv(64, 64, stride=2, bias=False), *_blocks(64, gn)]


def _up(n_in: int, n_out: int, gn: bool = False) -> list[nn.Module]:
    """A decoder stage: three Blocks, a 2x nearest upsample, a conv to the next stage's width."""
    return [*_blocks(n_in, gn), nn.Upsample(scale_factor=2), conv(n_in, n_out, bias=False)]


# The stages are spliced into one flat list: its indices are the published state dicts' keys (encoder.0 ...,
# decoder.N), so the order of every layer here is the weights' own.


def Encoder(latent_channels: int = 4, use_midblock_gn: bool = False) -> nn.Sequential:
    """RGB (B, 3, H, W) in [0, 1], H and W multiples of 8 -> latents (B, C, H/8, W/8), roughly in [-3, 3]."""
    layers = [conv(3, 64), Block(64, 64), *_down(), *_down(), *_down(use_midblock_gn), conv(64, latent_channels)]
    return nn.Sequential(*layers)


def Decoder(latent_channels: int = 4, use_midblock_gn: bool = False) -> nn.Sequential:
    """Latents (B, C, h, w) in the model's space -> RGB (B, 3, 8h, 8w) in [0, 1] (clamp it: the last conv is
    unbounded). Decoder() with no arguments is TAESD for SD1.x/2.x (and SDXL with taesdxl weights)."""
    layers = [Clamp(), conv(latent_channels, 64), nn.ReLU(), *_up(64, 64, use_midblock_gn), *_up(64, 64),
              *_up(64, 64), Block(64, 64), conv(64, 3)]
    return nn.Sequential(*layers)


def F32Decoder(latent_channels: int = 32) -> nn.Sequential:
    """Sana's DC-AE latents (B, C, h, w) -> RGB (B, 3, 32h, 32w) in [0, 1] (clamp it), the reference's layout."""
    layers = [Clamp(), conv(latent_channels, 256), nn.ReLU(), *_up(256, 128), *_up(128, 64), *_up(64, 64),
              *_up(64, 64), *_up(64, 64), Block(64, 64), conv(64, 3)]
    return nn.Sequential(*layers)


def _factor(m: nn.Module) -> int:
    """An upsampling layer's scale factor; 1 for any other layer, and for an nn.Upsample switched off (scale 1,
    as TAEHV's space_upscale leaves one)."""
    if not isinstance(m, nn.Upsample) or m.scale_factor is None:
        return 1
    f = m.scale_factor
    return int(f if isinstance(f, (int, float)) else f[0])


def upsample_factors(layers: nn.Sequential) -> tuple[int, ...]:
    """The scale factor of each upsampling stage of a decoder's layers, in order (TAESD's: (2, 2, 2))."""
    return tuple(f for f in map(_factor, layers) if f > 1)


def cut(layers: nn.Sequential, stages: int) -> nn.Sequential:
    """The same layers with the last `stages` upsampling stages left out: each such nn.Upsample becomes an
    identity, every conv and block stays (their widths do not change), so the blocks after it run at the lower
    resolution and the output is smaller per side by those stages' factors. The modules are shared, not copied:
    the same weights, on the same device, at no memory cost. Indices are kept, as SD.Next's reduced TAESD keeps
    them. Leaving out the conv after each upsample as well breaks the picture (measured on the real TAEF2 weights
    and grace_hopper.jpg at 512x592: 8.0 dB at 1/2 against the whole decode resized, 33.4 dB with the convs
    kept). Raises ValueError past the stages there are."""
    ups = [i for i, m in enumerate(layers) if _factor(m) > 1]
    if not 0 <= stages <= len(ups):
        raise ValueError(f"stages={stages}: this decoder has {len(ups)} upsampling stages to leave out")
    if stages == 0:
        return layers
    gone = set(ups[len(ups) - stages:])
    return nn.Sequential(*(nn.Identity() if i in gone else m for i, m in enumerate(layers)))


def _from_combined(state: Mapping[str, torch.Tensor], part: Part) -> dict[str, torch.Tensor]:
    """madebyollin's combined .safetensors on the Hugging Face hub (taef2.safetensors, and diffusers'
    AutoencoderTiny files) name layers `encoder.layers.N` / `decoder.layers.N`; the decoder's count skips the
    Clamp, so its indices move up by one (convert_diffusers_sd_to_taesd in huggingface.co/madebyollin/taef2)."""
    prefix, offset = f"{part}.layers.", 1 if part == "decoder" else 0
    out = {}
    for key, value in state.items():
        if key.startswith(prefix):
            index, _, rest = key[len(prefix):].partition(".")
            out[f"{int(index) + offset}.{rest}"] = value
    return out


def _layout(state: Mapping[str, torch.Tensor], part: Part) -> tuple[int, Variant]:
    """(latent channels, variant) read from the keys and shapes; raises TaeError."""
    variant: Variant = ""
    if part == "decoder":
        first, gn_key = state.get("1.weight"), "3.pool.0.weight"
        width = int(first.shape[0]) if first is not None else 0
        channels = int(first.shape[1]) if first is not None and width in (64, 256) else None
        if width == 256 and "29.weight" in state:
            variant = "f32"
    else:
        last, gn_key = state.get("14.weight"), "11.pool.0.weight"
        channels = int(last.shape[0]) if last is not None and tuple(last.shape[1:2]) == (64,) else None
    if gn_key in state:
        variant = "gn"
    if channels is None or (channels, variant) not in CANDIDATES:
        found = ("no 64- or 256-wide first conv" if channels is None
                 else f"{channels} latent channels, {variant or 'TAESD'} layout")
        raise TaeError(f"not a madebyollin TAE {part} state dict ({found}); expected taesd_, taesdxl_, taesd3_, "
                       f"taef1_, taef2_ or taesana_{part}.pth / .safetensors from github.com/madebyollin/taesd")
    return channels, variant


def read_state(path: str | Path) -> dict[str, torch.Tensor]:
    """A .pth (loaded with weights_only=True) or .safetensors file, on the CPU. Raises TaeError."""
    p = Path(path)
    if not p.is_file():
        raise TaeError(f"{path}: no such file; download a TAE from github.com/madebyollin/taesd")
    try:
        if p.suffix == ".safetensors":
            from safetensors.torch import load_file

            return load_file(str(p))
        return dict(torch.load(str(p), map_location="cpu", weights_only=True))
    except Exception as e:  # torch and safetensors raise several types for a bad file
        raise TaeError(f"{path}: not a readable checkpoint ({type(e).__name__}); expected a .pth or .safetensors "
                       "TAE from github.com/madebyollin/taesd") from None


def load_tae(source: str | Path | Mapping[str, torch.Tensor], part: Part = "decoder", name: str = ""
             ) -> tuple[nn.Sequential, tuple[str, ...]]:
    """Build and load a TAE decoder (or encoder) from madebyollin's weights, unchanged.

    source: a path (.pth / .safetensors) or a state dict. Latent channels (4, 16, 32) and the TAEF2 GroupNorm
    variant come from the keys and shapes. Returns (module in eval mode on the CPU, candidate families): one
    family for 32 channels (flux2); for 4 and 16 channels two, narrowed to one by a madebyollin file name prefix.
    name: the file's name when `source` is a state dict read from one. Raises TaeError for anything it does not
    recognise.
    """
    state = read_state(source) if isinstance(source, (str, Path)) else dict(source)
    if any(k.startswith(("encoder.layers.", "decoder.layers.")) for k in state):
        state = _from_combined(state, part)
    channels, variant = _layout(state, part)
    module = F32Decoder(channels) if variant == "f32" else (Decoder if part == "decoder" else Encoder)(
        channels, variant == "gn")
    try:
        module.load_state_dict(state)
    except RuntimeError as e:  # torch's first line only names the module; the second says what is wrong
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        detail = lines[1] if len(lines) > 1 else lines[0]
        raise TaeError(f"not a madebyollin TAE {part} state dict ({detail[:200]})") from None
    families = CANDIDATES[(channels, variant)]
    name = Path(source).name if isinstance(source, (str, Path)) else name
    # longest prefix first: taesd_ must not claim taesdxl_ or taesd3_ files
    for prefix in sorted(PREFIXES, key=len, reverse=True):
        if name.startswith(prefix) and PREFIXES[prefix] in families:
            families = (PREFIXES[prefix],)
            break
    return module.eval().requires_grad_(False), families

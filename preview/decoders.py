"""Preview decoders: the step callback's latents -> images (B, 3, H, W) in [0, 1] on the device.

A decoder is built once per model (its constants then) and called as decode(latents, height, width): the
latents as the callback hands them (packed for FLUX), the image size in pixels (FLUX needs it to unpack).
Each pipeline's latent space (families.py) says how the latents reach the TAE, latent2rgb and the VAE.
A clip (a video pipeline's latents) is previewed by a ClipDecode (build_clip): the frames a clips.Pick names.
A registry, not reflection: a user's decoder name is looked up in DECODERS, and a miss lists the valid names.

A decoder can stop short of the image's size (settings.decode_at, a Cut per build): a TAE leaves out its last
upsampling stages down to the preview's size (the same weights, the graph cut: its last blocks run on fewer
pixels, so nothing is thrown away by the resize); any decoder can take latents halved per side first
(half_latents: the full VAE's cheap choice, blurrier). latent2rgb is at latent size already and never upscales.
"""
from __future__ import annotations

import copy
import inspect
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Literal

import torch
import torch.nn.functional as F
from torch import nn

from .clips import Pick
from .names import DECODER_NAMES, DecodeAt, DecoderName, check
from .models import fit, taesd
from .models.families import CHANNELS, vae_of
from .models.latent_formats import LATENT_RGB, latent2rgb
from .models.taehv import FAMILY_FILES, NO_TAE, TAEHV, take as _take
from .models.taesd import PREFIXES
from .models import Model

Decode = Callable[[torch.Tensor, int, int], torch.Tensor]  # (callback latents, height px, width px) -> image
# a clip's preview: (callback latents, height px, width px, the frames to read and show) -> (B, F, 3, H, W)
ClipDecode = Callable[[torch.Tensor, int, int, Pick], torch.Tensor]
Note = Callable[[str], None]  # what a decoder has to say on the row of the preview it is making (a fit)
# madebyollin/taesd's file stem per image family (taesd.PREFIXES, read the other way)
TAE_NAMES: dict[str, str] = {family: prefix.rstrip("_") for prefix, family in PREFIXES.items()}


class DecoderError(ValueError):
    """An unknown decoder, or one this model cannot run; one line a person can act on."""


@dataclass(frozen=True)
class Cut:
    """Where a decoder stops short of the image's size. stages: a TAE's last upsampling stages left out, so its
    remaining blocks run at the lower resolution and its image is `scale` times smaller per side (taesd.cut,
    TAEHV.smaller); half_latents: the latents 2x smaller per side (2x2 means) before the decoder runs whole."""
    stages: int = 0
    scale: int = 1
    half_latents: bool = False

    @property
    def label(self) -> str:
        """What a table or a compile note calls it: whole, 1/2 (a cut), half latents."""
        return "half latents" if self.half_latents else f"1/{self.scale}" if self.stages else "whole"


WHOLE = Cut()


def upsample_factors(name: str, model: Model) -> tuple[int, ...]:
    """The upsampling stages decoder `name` can leave out for this model, their factors in order: its TAE's
    (TAESD's (2, 2, 2); a diffusers AutoencoderTiny's from its config). latent2rgb has none (it is at latent
    size), nor has the full VAE (its cheaper choice is half_latents)."""
    tiny: Any = model.taesd
    if name != "taesd" or tiny is None:
        return ()
    if isinstance(tiny, TAEHV):
        return taesd.upsample_factors(tiny.decoder)
    if isinstance(tiny, nn.Sequential):  # madebyollin's layout
        return taesd.upsample_factors(tiny)
    layers = getattr(getattr(tiny, "decoder", None), "layers", None)  # diffusers' DecoderTiny
    return taesd.upsample_factors(layers) if isinstance(layers, nn.Sequential) else ()


def cut_for(decode_at: DecodeAt, factors: tuple[int, ...], long_side: int, preview_max: int) -> Cut:
    """Where a decoder with these upsampling stages stops for a preview whose full-size decode is long_side px
    on its long side. preview: as many last stages left out as keep that side at least preview_max (none for
    preview_max 0, native; never past the stages there are), so only what is left is resized; full: none;
    half_latents: the latents halved, whatever the stages."""
    if decode_at == "half_latents":
        return Cut(half_latents=True)
    stages, scale = 0, 1
    if decode_at == "preview" and preview_max > 0:
        for f in reversed(factors):
            if long_side < preview_max * scale * f:
                break
            stages, scale = stages + 1, scale * f
    return Cut(stages, scale)


def halve(x: torch.Tensor) -> torch.Tensor:
    """Latents (..., h, w) -> (..., h // 2, w // 2), each value the mean of a 2x2 patch (an odd last row or
    column is left out). Any leading dims: (B, C, h, w), a Wan-style VAE's (B, C, T, h, w), TAEHV's NTCHW."""
    h, w = int(x.shape[-2]), int(x.shape[-1])
    return F.avg_pool2d(x.reshape(-1, h, w), 2).reshape(*x.shape[:-2], h // 2, w // 2)


def _shrink(cut: Cut) -> Callable[[torch.Tensor], torch.Tensor]:
    return halve if cut.half_latents else (lambda z: z)


class _Fp32Decoder(nn.Module):
    """previewlab's own float32 copy of a VAE's decoder half (post_quant_conv + decoder), for VAEs that
    overflow in float16 (SDXL's, with force_upcast). The user's VAE is never cast in place: a cast frees
    the float16 weights while another stream may still read them."""

    def __init__(self, vae: Any) -> None:
        super().__init__()
        pqc = getattr(vae, "post_quant_conv", None)
        self.post_quant_conv = copy.deepcopy(pqc).float() if pqc is not None else None
        self.decoder = copy.deepcopy(vae.decoder).float()
        self.requires_grad_(False).eval()
        self.bytes = sum(p.numel() * p.element_size() for p in self.parameters())

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        if self.post_quant_conv is not None:
            z = self.post_quant_conv(z)
        return self.decoder(z)


_FP32: weakref.WeakKeyDictionary[Any, _Fp32Decoder] = weakref.WeakKeyDictionary()


def needs_fp32(model: Model) -> bool:
    """SDXL's float16 VAE overflows: its pipeline decodes in float32 (force_upcast). SD1.5's never does, and
    the SD3 and FLUX VAEs run in the pipeline's dtype."""
    vae = vae_of(model.pipe)
    return model.family == "sdxl" and vae.dtype == torch.float16 and bool(getattr(vae.config, "force_upcast", False))


def fp32_decoder(pipe: Any) -> _Fp32Decoder:
    """The float32 decoder copy for this pipeline's VAE, made once and shared by previews and final decodes."""
    vae = vae_of(pipe)
    if vae not in _FP32:
        _FP32[vae] = _Fp32Decoder(vae)
    return _FP32[vae]


def copy_mb(pipe: Any) -> float:
    """Memory held by previewlab's float32 decoder copy of this pipeline's VAE (0 when none was made)."""
    vae = vae_of(pipe)
    dec = _FP32.get(vae) if vae is not None else None
    return dec.bytes / 2**20 if dec is not None else 0.0


def _decode_args(model: Model) -> Callable[[torch.Tensor], dict[str, Any]]:
    """What the pipeline's final decode hands vae.decode besides the latents z, read once per decoder built:
    Kandinsky's MoVQ force_not_quantize=True; a timestep-conditioned VAE (LTX-Video 0.9.1 and later) `temb`, the
    pipeline's default decode_timestep 0.0 for each clip of the batch, with no noise mixed in (its
    decode_noise_scale defaults to that timestep), a fill on the device, no host copy; Stable Video Diffusion's
    temporal decoder `num_frames` (a preview decodes each frame alone). A run that passes another
    decode_timestep or decode_noise_scale decodes its final clip with those; previews keep the default."""
    if model.space.quantized:
        return lambda z: {"force_not_quantize": True}
    if model.space.timestep:
        return lambda z: {"temb": torch.zeros(int(z.shape[0]), device=z.device, dtype=z.dtype)}
    param = inspect.signature(vae_of(model.pipe).decode).parameters.get("num_frames")
    if param is not None and param.default is inspect.Parameter.empty:
        return lambda z: {"num_frames": 1}
    return lambda z: {}


VaeMemory = Literal["none", "tiling", "slicing", "tiling+slicing"]
VAE_MEMORY: tuple[VaeMemory, ...] = ("none", "tiling", "slicing", "tiling+slicing")


def vae_memory(pipe: Any) -> str:
    """The VAE's memory mode as a run records it: tiling, slicing, tiling+slicing, or "" (neither, or no VAE)."""
    vae = vae_of(pipe)
    return "+".join(m for m in ("tiling", "slicing") if getattr(vae, f"use_{m}", False) is True)


def set_vae_memory(pipe: Any, mode: str) -> None:
    """diffusers' own switches: tiling decodes overlapping tiles of the latents one by one, slicing a batch one
    image at a time; both lower the decode's peak memory, previews' and the final image's alike."""
    vae, on = vae_of(pipe), mode.split("+")
    (vae.enable_tiling if "tiling" in on else vae.disable_tiling)()
    (vae.enable_slicing if "slicing" in on else vae.disable_slicing)()


def _as_vae_would(vae: Any, dec: _Fp32Decoder, z: torch.Tensor) -> torch.Tensor:
    """The float32 copy decodes as AutoencoderKL.decode would with the VAE's own switches: one image at a time
    with use_slicing, in overlapping tiles with use_tiling (tiled_decode's tiles, blended by the VAE's own
    blend_v and blend_h), so tiling lowers an SDXL float16 VAE's memory too."""
    if getattr(vae, "use_slicing", False) is True and z.shape[0] > 1:
        return torch.cat([_as_vae_would(vae, dec, one) for one in z.split(1)])
    size = getattr(vae, "tile_latent_min_size", 0)
    if getattr(vae, "use_tiling", False) is not True or (z.shape[-1] <= size and z.shape[-2] <= size):
        return dec(z)
    step = int(size * (1 - vae.tile_overlap_factor))
    blend = int(vae.tile_sample_min_size * vae.tile_overlap_factor)
    keep = vae.tile_sample_min_size - blend
    rows = [[dec(z[:, :, i:i + size, j:j + size]) for j in range(0, z.shape[3], step)]
            for i in range(0, z.shape[2], step)]
    out = []
    for i, row in enumerate(rows):
        for j in range(len(row)):
            if i:
                row[j] = vae.blend_v(rows[i - 1][j], row[j], blend)
            if j:
                row[j] = vae.blend_h(row[j - 1], row[j], blend)
        out.append(torch.cat([t[:, :, :keep, :keep] for t in row], dim=3))
    return torch.cat(out, dim=2)


def vae_decoder(model: Model, cut: Cut = WHOLE) -> Decode:
    """The pipeline's own VAE, fed exactly what its final decode feeds it: callback latents -> (B, 3, H, W) in
    [-1, 1] (half_latents: the unscaled latents halved first, (B, 3, H/2, W/2)). Constants and the float32 copy
    (when needed) are made here, once, never per call."""
    vae = vae_of(model.pipe)
    space = model.space
    fp32 = needs_fp32(model)
    dtype = torch.float32 if fp32 else vae.dtype
    to_vae = space.vae_input(model.pipe, model.device, dtype)
    dec = fp32_decoder(model.pipe) if fp32 else None
    args = _decode_args(model)
    shrink = _shrink(cut)

    def decode(latents: torch.Tensor, height: int, width: int) -> torch.Tensor:
        z = shrink(to_vae(latents.to(dtype) if space.cast_first else latents, height, width))
        if dec is not None:
            return _as_vae_would(vae, dec, z)
        z = z.to(vae.dtype)
        image = vae.decode(z, return_dict=False, **args(z))[0]
        return image[:, :, 0] if space.frames else image  # a Wan-style VAE: the image is frame 0

    return decode


def _vae(model: Model, note: Note, cut: Cut) -> Decode:
    decode = vae_decoder(model, cut)
    return lambda latents, h, w: ((decode(latents, h, w) + 1) / 2).clamp(0, 1)


def taesd_refusal(model: Model) -> str:
    """Why decoder taesd cannot run for this model, in one line that names its latent space and what would fit."""
    space = model.space
    if space.family in TAE_NAMES:
        return (f"decoder taesd needs TAE weights for {space.family}: pass --taesd PATH "
                f"({TAE_NAMES[space.family]}_decoder.pth from github.com/madebyollin/taesd, or a diffusers "
                "AutoencoderTiny folder)")
    if space.family in FAMILY_FILES:  # the video TAEs
        return (f"decoder taesd needs TAE weights for {space.family}: pass --taesd PATH "
                f"({FAMILY_FILES[space.family]}.pth from github.com/madebyollin/taehv)")
    if space.family in NO_TAE:
        return f"decoder taesd: {NO_TAE[space.family]}; use latent2rgb or vae"
    fits = ", ".join(f"{n} ({CHANNELS[f]})" for f, n in TAE_NAMES.items() if f in CHANNELS)
    return (f"decoder taesd: no TAE fits latent space {space.describe()}; a TAE must take its {space.channels} "
            f"latent channels (madebyollin's take: {fits}); use latent2rgb or vae")


def _taesd(model: Model, note: Note, cut: Cut) -> Decode:
    tiny: Any = model.taesd
    if tiny is None:
        raise DecoderError(taesd_refusal(model))
    space_in, shrink = model.space.tae_input(model.pipe, model.device, model.dtype), _shrink(cut)

    def to_tae(latents: torch.Tensor, h: int, w: int) -> torch.Tensor:
        return shrink(space_in(latents, h, w)).to(model.dtype)

    if isinstance(tiny, TAEHV):
        # madebyollin/taehv's video TAEs decode the diffusion model's own latents, as madebyollin's image TAEs
        # do (ComfyUI hands its TAEHV process_in(latents)), frames before channels; one latent frame, one frame
        net = tiny.smaller(cut.stages)
        return lambda latents, h, w: net(to_tae(latents, h, w).unsqueeze(1))[:, 0]
    if model.taesd_kind == "madebyollin":
        layers = taesd.cut(tiny, cut.stages)
        return lambda latents, h, w: layers(to_tae(latents, h, w)).clamp(0, 1)
    if cut.stages:
        # diffusers' AutoencoderTiny cut: its decoder's own clamp, then its layers with the last stages left out
        # (its decode() would run them whole, sliced or tiled as its switches say; a preview is neither); the
        # layers make [0, 1], as madebyollin's do
        cut_layers = taesd.cut(tiny.decoder.layers, cut.stages)
        return lambda latents, h, w: cut_layers(torch.tanh(to_tae(latents, h, w) / 3) * 3).clamp(0, 1)
    # diffusers' AutoencoderTiny takes the model's latents as they are and returns [-1, 1]
    return lambda latents, h, w: ((tiny.decode(to_tae(latents, h, w), return_dict=False)[0] + 1) / 2).clamp(0, 1)


def has_factors(model: Model) -> bool:
    """latent2rgb has factors for this model before any preview: its own, its family's, or a fit made earlier."""
    family = model.space.family
    known = family is not None and family in LATENT_RGB or model.space.pixel
    return model.latent_rgb is not None or known or fit.cached(vae_of(model.pipe)) is not None


def _latent2rgb(model: Model, note: Note, cut: Cut) -> Decode:
    """A known family's factors (or the model's own), else factors fitted at the first preview (fit.py): that
    preview's decode_ms holds the fit, and its row's event says so. Its image is at latent size (half of it with
    half_latents): it never upscales, so it is never larger than what the latents hold."""
    space, shrink = model.space, _shrink(cut)
    to_tae = space.tae_input(model.pipe, model.device, model.dtype)
    known = model.latent_rgb or (LATENT_RGB.get(space.family) if space.family is not None else None)
    if known is not None:
        rgb = latent2rgb(known, model.device, model.dtype)
        return lambda latents, h, w: rgb(shrink(to_tae(latents, h, w)))
    vae, full = vae_of(model.pipe), vae_decoder(model)
    fitted: list[Callable[[torch.Tensor], torch.Tensor]] = []

    def decode(latents: torch.Tensor, h: int, w: int) -> torch.Tensor:
        z = to_tae(latents, h, w)
        if not fitted:
            made = fit.cached(vae)
            if made is None:
                made = fit.fit(vae, z[:1], lambda: full(latents[:1], h, w))
                note(made.note(space.name))
            else:
                note(f"latent2rgb factors for {space.name} fitted earlier in this process (R² {made.r2:.3f})")
            fitted.append(latent2rgb(made.factors, model.device, model.dtype))
        return fitted[0](shrink(z))  # fitted on the whole latents, applied to what the cut leaves

    return decode


@dataclass(frozen=True)
class Spec:
    """One decoder: how to build it, and where to go when it costs too much or fails."""
    build: Callable[[Model, Note, Cut], Decode] | None  # None: no previews
    cheaper: DecoderName | None  # the autopilot's next step down when even the widest interval cannot fit
    fallback: DecoderName        # after a failed preview: the safest decoder that still shows something
    needs_taesd: bool = False    # only with TAESD weights


# The one list of decoders: the settings, the bench's flags and defaults, the server's hello (and so the page's
# options), the autopilot and the failure fallback all read it. Adding a decoder is one entry here (and its name
# in DecoderName, which a test keeps equal to these keys).
DECODERS: dict[DecoderName, Spec] = {
    "none": Spec(None, None, "none"),
    "latent2rgb": Spec(_latent2rgb, None, "none"),
    "taesd": Spec(_taesd, "latent2rgb", "latent2rgb", needs_taesd=True),
    "vae": Spec(_vae, "taesd", "latent2rgb"),
}


def check_name(name: str) -> DecoderName:
    return check("decoder", name, DECODER_NAMES, DecoderError)


def cheaper(name: str, has_taesd: bool) -> DecoderName | None:
    """The next cheaper decoder that this model can run, or None at the bottom."""
    nxt = DECODERS[check_name(name)].cheaper
    while nxt is not None and DECODERS[nxt].needs_taesd and not has_taesd:
        nxt = DECODERS[nxt].cheaper
    return nxt


SYNTHETIC_CLIP_NOTE = ("synthetic video model: its TAE (taesd) has random weights and paints a near-black clip that "
                       "does not visibly move; latent2rgb shows the latents' own motion")


def default_for(model: Model) -> tuple[DecoderName, str]:
    """The decoder a run starts with, and why when that needs saying ("" otherwise): TAESD where the model has
    one, except a synthetic clip model's (random weights), whose previews would look broken."""
    if model.taesd is None:
        return "latent2rgb", ""
    if model.synthetic and model.space.video:
        return "latent2rgb", SYNTHETIC_CLIP_NOTE
    return "taesd", ""


def causal(name: str, model: Model) -> bool:
    """The decoder reads a clip whole and in time order (a 3-D VAE, TAEHV): a preview of frame k reads every
    latent frame up to k's. latent2rgb, a 2-D TAESD and a 2-D VAE (AnimateDiff's) decode each frame alone."""
    if name == "vae":
        return model.space.frames
    return name == "taesd" and isinstance(model.taesd, TAEHV)


def _shown(clip: torch.Tensor, pick: Pick) -> torch.Tensor:
    """The frames a pick shows of a decoded clip (B, F, 3, H, W). A decoder that made fewer frames than the
    pick counted on (a VAE whose decode of a prefix is shorter than 1 + (n - 1) x temporal) shows its last frame
    in their place. Shapes only, no device read."""
    last = int(clip.shape[1]) - 1
    idx = [min(k, last) for k in pick.shown]
    return clip if idx == list(range(last + 1)) else _take(clip, idx)


def _reads(z: torch.Tensor, pick: Pick) -> torch.Tensor:
    """The latent frames a pick reads of a clip (B, T, C, h, w): a view for a prefix or one frame."""
    return _take(z, list(pick.reads))


def _vae_clip(model: Model, cut: Cut) -> ClipDecode:
    """A 3-D VAE decodes the prefix of latent frames a pick reads, unscaled as the pipeline's final decode
    unscales the whole clip (per channel, so frame by frame is the same arithmetic); half_latents halves them."""
    vae, space = vae_of(model.pipe), model.space
    args = _decode_args(model)
    dtype = vae.dtype
    to_vae = space.vae_input(model.pipe, model.device, dtype)
    shrink = _shrink(cut)

    def decode(latents: torch.Tensor, height: int, width: int, pick: Pick) -> torch.Tensor:
        z = _reads(space.clip_of(latents, height, width), pick)
        b, n = int(z.shape[0]), int(z.shape[1])
        frames = z.reshape(b * n, *z.shape[2:])
        one = to_vae(frames.to(dtype) if space.cast_first else frames, height, width)  # (B*n, C, 1, h, w)
        clip = shrink(one.reshape(b, n, *one.shape[1:2], *one.shape[3:]).transpose(1, 2))  # (B, C, n, h, w)
        video = vae.decode(clip, return_dict=False, **args(clip))[0]  # (B, 3, F, H, W) in [-1, 1]
        return ((_shown(video.transpose(1, 2), pick) + 1) / 2).clamp(0, 1)

    return decode


def _tae_clip(model: Model, cut: Cut) -> ClipDecode:
    """TAEHV decodes the model's own latents, frames before channels, the prefix a pick reads, making only the
    frames it shows; a cut leaves out its last spatial upsamples (the frames stay the clip's)."""
    tiny, space, shrink = model.taesd, model.space, _shrink(cut)
    assert isinstance(tiny, TAEHV)
    net = tiny.smaller(cut.stages)
    # only the frames shown go through its last stage (TAEHV.forward's keep: exact, and the time grow's other
    # frames never made)
    return lambda latents, h, w, pick: net(shrink(_reads(space.clip_of(latents, h, w), pick)).to(model.dtype),
                                           keep=pick.shown)


def _per_frame(decode: Decode, model: Model) -> ClipDecode:
    """A decoder of one image, run on each latent frame a pick reads (as a batch)."""
    space = model.space

    def clip(latents: torch.Tensor, height: int, width: int, pick: Pick) -> torch.Tensor:
        z = _reads(space.clip_of(latents, height, width), pick)
        b, n = int(z.shape[0]), int(z.shape[1])
        images = decode(z.reshape(b * n, *z.shape[2:]), height, width)  # 4-D latents pass the unpack as they are
        return _shown(images.reshape(b, n, *images.shape[1:]), pick)

    return clip


def build_clip(name: str, model: Model, note: Note = lambda text: None, cut: Cut = WHOLE) -> ClipDecode | None:
    """The clip decode for a decoder name (a video pipeline's), or None for `none`. Raises DecoderError."""
    if DECODERS[check_name(name)].build is None:
        return None
    if causal(name, model):
        return _vae_clip(model, cut) if name == "vae" else _tae_clip(model, cut)
    decode = build(name, model, note, cut)
    assert decode is not None
    return _per_frame(decode, model)


def build(name: str, model: Model, note: Note = lambda text: None, cut: Cut = WHOLE) -> Decode | None:
    """The decode function for a decoder name, or None for `none`. note: where the decoder's word on a
    preview goes (the row's event); cut: where it stops short of the image's size (cut_for). Raises
    DecoderError, and ValueError for a cut past the stages it has."""
    factory = DECODERS[check_name(name)].build
    if factory is not None and model.space.pixel:
        return _pixels(name, note, cut)
    return None if factory is None else factory(model, note, cut)


def _pixels(name: str, note: Note, cut: Cut) -> Decode:
    """Pixel space (IF, DDIM): the latents are the image in [-1, 1], so every decoder is the identity (and the
    preview's resize). Its first preview's row says so."""
    shrink = _shrink(cut)
    told: list[bool] = []

    def decode(latents: torch.Tensor, h: int, w: int) -> torch.Tensor:
        if not told:
            told.append(True)
            note(f"pixel space: the latents are the image, so {name} shows them as they are (no decoder runs)")
        return ((shrink(latents) + 1) / 2).clamp(0, 1)

    return decode

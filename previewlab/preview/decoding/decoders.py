"""Preview decoders: the step callback's latents -> images (B, 3, H, W) in [0, 1] on the device.

A decoder is built once per model (its constants then) and called as decode(latents, height, width): the
latents as the callback hands them (packed for FLUX), the image size in pixels (FLUX needs it to unpack).
Each pipeline's latent space (latent_spaces.py) says how the latents reach the TAE, latent2rgb and the VAE.
A clip (a video pipeline's latents) is previewed by a ClipDecode (build_clip): the frames a clips.Pick names.
A registry, not reflection: a user's decoder name is looked up in DECODERS, and a miss lists the valid names.

A decoder can stop short of the image's size (settings.decode_at, a Cut per build: stops.py). The decoders
themselves: rgb_decoder.py (latent2rgb), tae_decoder.py (taesd), vae_decoder.py (vae, with vae_memory.py's
float32 copy and memory modes); contract.py says what each is called with and raises.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from previewlab.preview.decoding.clips import Pick
from previewlab.preview.decoding.stops import WHOLE, Cut, shrink
from previewlab.preview.decoding.contract import ClipDecode, Decode, DecoderError, Note
from previewlab.preview.models import Model
from previewlab.preview.models.families import vae_of
from previewlab.preview.models.taehv import TAEHV, take as _take
from previewlab.preview.names import DECODER_NAMES, DecoderName, check
from previewlab.preview.decoding.rgb_decoder import build_latent2rgb
from previewlab.preview.decoding.tae_decoder import build_taesd
from previewlab.preview.decoding.vae_decoder import as_frames, build_vae, decode_args


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
    "latent2rgb": Spec(build_latent2rgb, None, "none"),
    "taesd": Spec(build_taesd, "latent2rgb", "latent2rgb", needs_taesd=True),
    "vae": Spec(build_vae, "taesd", "latent2rgb"),
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
    args = decode_args(model)
    dtype = vae.dtype
    to_vae = space.vae_input(model.pipe, model.device, dtype)
    smaller = shrink(cut)

    def decode(latents: torch.Tensor, height: int, width: int, pick: Pick) -> torch.Tensor:
        z = _reads(space.clip_of(latents, height, width), pick)
        b, n = int(z.shape[0]), int(z.shape[1])
        frames = z.reshape(b * n, *z.shape[2:])
        one = to_vae(frames.to(dtype) if space.cast_first else frames, height, width)  # (B*n, C, 1, h, w)
        clip = smaller(one.reshape(b, n, *one.shape[1:2], *one.shape[3:]).transpose(1, 2))  # (B, C, n, h, w)
        video = vae.decode(clip, return_dict=False, **args(clip))[0]  # (B, 3, F, H, W) in [-1, 1], or (B, F, 3, ...)
        return ((_shown(as_frames(video), pick) + 1) / 2).clamp(0, 1)

    return decode


def _tae_clip(model: Model, cut: Cut) -> ClipDecode:
    """TAEHV decodes the model's own latents, frames before channels, the prefix a pick reads, making only the
    frames it shows; a cut leaves out its last spatial upsamples (the frames stay the clip's)."""
    tiny, space, smaller = model.taesd, model.space, shrink(cut)
    assert isinstance(tiny, TAEHV)
    net = tiny.smaller(cut.stages)
    # only the frames shown go through its last stage (TAEHV.forward's keep: exact, and the time grow's other
    # frames never made)
    return lambda latents, h, w, pick: net(smaller(_reads(space.clip_of(latents, h, w), pick)).to(model.dtype),
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
    smaller = shrink(cut)
    told: list[bool] = []

    def decode(latents: torch.Tensor, h: int, w: int) -> torch.Tensor:
        if not told:
            told.append(True)
            note(f"pixel space: the latents are the image, so {name} shows them as they are (no decoder runs)")
        return ((smaller(latents) + 1) / 2).clamp(0, 1)

    return decode

"""Which frames of a clip a preview shows, and what its decoder must read for them.

A video pipeline's step latents hold T latent frames. In every video family previewlab knows, latent frame 0 is
one frame and each later one is `temporal` frames (Wan, HunyuanVideo, CogVideoX: 4; Mochi: 6; LTX-Video: 8), so
the clip has 1 + (T - 1) * temporal frames. A 3-D VAE or TAEHV decodes frames in time order, so a preview
decodes the shortest prefix of latent frames that holds the frames it shows: `first` reads one latent frame,
`middle` about half the clip, `all` and N spread evenly the whole of it. latent2rgb is a projection of each
latent frame on its own: it reads only the latent frames it shows, and its clip has T frames, one per latent frame.

How exact a prefix is depends on the decoder (tests/test_clips.py, tests/test_every_pipeline.py): Wan's VAE and
TAEHV decode the first n latent frames into exactly the first frames of the whole clip's decode. CogVideoX's VAE
and its TAE (taecvx) handle the first frame apart only for an odd number of latent frames, so its prefixes are
rounded up to an odd length (`odd`); its first frames still see the next latent frame, a close approximation.
HunyuanVideo's VAE decodes a clip of more than 4 latent frames in blended tiles of time, and LTX-Video's decoder
looks far ahead in time: their prefixes approximate the whole clip's frames.
"""
from __future__ import annotations

from dataclasses import dataclass

from previewlab.preview.names import FrameChoice


@dataclass(frozen=True)
class Pick:
    """One preview of a clip: the latent frames the decoder reads, and which frames of its output are shown.

    reads: latent frame indices, in order (a prefix for a causal decoder). shown: indices into the decoder's
    output for those reads. length: the decoder's clip for all T latent frames, in frames; seconds: that
    clip's duration, from which the page's playback rate follows."""
    reads: tuple[int, ...]
    shown: tuple[int, ...]
    length: int
    seconds: float

    @property
    def fps(self) -> float:
        """The playback rate that spans the clip's duration with the frames shown (0 for one frame)."""
        return len(self.shown) / self.seconds if len(self.shown) > 1 and self.seconds > 0 else 0.0


def clip_length(latent_frames: int, temporal: int) -> int:
    """Frames a causal decoder makes of T latent frames: 1 + (T - 1) * temporal."""
    return 1 + (latent_frames - 1) * temporal


def _latent_of(frame: int, temporal: int) -> int:
    """The latent frame that holds output frame k: 0 for the first, then `temporal` frames each."""
    return 0 if frame == 0 else (frame - 1) // temporal + 1


def indices(choice: FrameChoice, length: int) -> tuple[int, ...]:
    """The frames of a clip of `length` frames that a choice shows: N spread evenly includes both ends."""
    if choice == "first" or length == 1:
        return (0,)
    if choice == "middle":
        return (length // 2,)
    if choice == "all":
        return tuple(range(length))
    assert isinstance(choice, int)
    n = min(choice, length)
    return tuple(sorted({round(i * (length - 1) / (n - 1)) for i in range(n)}))


def pick(choice: FrameChoice, latent_frames: int, temporal: int, fps: float, *, causal: bool,
         odd: bool = False, tile: int = 1) -> Pick:
    """What a preview of T latent frames reads and shows. causal: a VAE or TAE (reads a prefix, shows frames
    of the pixel clip); else latent2rgb (reads and shows latent frames). fps: the clip's own rate (0: unknown,
    the page then plays at its default). odd: the decoder needs an odd number of latent frames
    (CogVideoX's), so an even prefix reads one more. tile: the decoder decodes only whole tiles of this many
    latent frames (Allegro's VAE: 6), so a prefix reads whole tiles, or the whole clip where that is shorter."""
    t, tf = max(1, latent_frames), max(1, temporal)
    seconds = clip_length(t, tf) / fps if fps > 0 else 0.0
    if causal:
        length = clip_length(t, tf)
        shown = indices(choice, length)
        n = _latent_of(shown[-1], tf) + 1
        if odd and n % 2 == 0 and n < t:
            n += 1
        if tile > 1:
            n = min(t, -(-n // tile) * tile)
        return Pick(tuple(range(n)), shown, length, seconds)
    reads = indices(choice, t)
    return Pick(reads, tuple(range(len(reads))), t, seconds)

"""Latent spaces: what the step callback's latents are, and how they become what a TAE, latent2rgb or the
pipeline's own VAE takes. reading.py reads a pipeline's space from its VAE, its step callback and its own code,
never from a list of pipeline classes; this module is the contract it fills in (the known families are
families.py's).

So img2img, inpaint, ControlNet, PAG and edit variants read the same as their family's txt2img pipeline, and a
VAE of an unusual width is an unnamed latent space, previewed with fitted latent2rgb factors (fit.py) rather
than refused.

Three views of the same step's latents:

- callback: what callback_on_step_end gets. spatial: (B, C, h, w) (SD1.5, SDXL, SD3, Z-Image, HiDream, Sana,
  Lumina 2, ...). packed: 2x2 patches as a sequence, (B, h/2 * w/2, 4C), unpacked by the pipeline class's own
  static `_unpack_latents(latents, height, width, vae_scale_factor)` (FLUX.1 and its Fill, Kontext and
  ControlNet variants, Chroma, Bria, Qwen-Image, whose unpacking gives (B, C, 1, h, w) for its Wan-style VAE).
  flux2: patchified and normalised by the VAE's batch-norm statistics, (B, h/2 * w/2, 4 * 32). A clip:
  (B, C, T, h, w) or (B, T, C, h, w), previewed by the frames the `frames` setting picks (preview/decoding/clips.py).
  ltx: a clip packed as tokens, (B, T/p_t * h/p * w/p, C * p_t * p * p) with the transformer's patch sizes
  (LTX-Video 0.9: p = p_t = 1), unpacked to (B, C, T, h, w) by the pipeline class's own static
  `_unpack_latents(latents, num_frames, height, width, patch_size, patch_size_t)`; T is not handed over, so it
  follows from the sequence length and the image size.
- tae: the model's own latents, unpacked to (B, C, h, w), in [-3, 3] or so. madebyollin's TAEs and ComfyUI's
  latent2rgb factors take these. ComfyUI (latent_preview.py) hands both the sampler's x0, which is in model
  space; used as a VAE, a TAE decodes decoder((x - vae_shift) * vae_scale) with the family's shift and scale
  (nodes.py, VAELoader.load_taesd: taesd3 1.5305/0.0609, taef1 0.3611/0.1159), model space again. ComfyUI's
  FLUX.2 VAE applies the batch norm itself (comfy/sd.py, batch_norm_latent), so its latents are the
  normalised ones, and its TAEF2 decoder (comfy/taesd/taesd.py, DecoderFlux2) only unpatchifies them.
- vae: what the pipeline's final decode hands vae.decode, unscaled exactly as it does it (UNSCALES).

h and w are the image size over the VAE's factor; all shapes assume the pipeline's own rounding of height and
width (to multiples of 2 * factor for packed latents).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Literal

import torch

from previewlab.preview.models.families import SDXL_SCALE, Family, FamilyError, vae_of, vae_scale_factor
from previewlab.preview.models.unscaling import UNSCALES, Unscale, unpatchify, unscaler

Packing = Literal["spatial", "packed", "flux2", "ltx"]
# (callback latents, image height px, image width px) -> latents
Convert = Callable[[torch.Tensor, int, int], torch.Tensor]
Unpack = Callable[[torch.Tensor, int, int, int], torch.Tensor]  # the pipeline's _unpack_latents
# LTX's _unpack_latents(latents, num_frames, height, width, patch_size, patch_size_t), counts in tokens
UnpackClip = Callable[[torch.Tensor, int, int, int, int, int], torch.Tensor]


def _flux2_unpack(z: torch.Tensor, height: int, width: int, vae_scale_factor: int) -> torch.Tensor:
    """Flux2Pipeline._unpack_latents_with_ids: its latent ids are (0, row, column, 0) in row-major order
    (_prepare_latent_ids, a cartesian product), so the scatter is a reshape: (B, N, 4C) -> (B, 4C, h/2, w/2)."""
    b, _, c = z.shape
    f2 = vae_scale_factor * 2
    return z.reshape(b, int(height) // f2, int(width) // f2, c).permute(0, 3, 1, 2)


@dataclass(frozen=True)
class LatentSpace:
    """One pipeline's latent space, as read from its VAE and its step callback.

    family: a known family's name, or None (unnamed: described by what was read). channels: latent channels as
    the VAE sees them; factor: image pixels per latent pixel (the pipeline's vae_scale_factor); packing: how
    the callback hands the latents over; unscale: what the final decode does to them (UNSCALES); frames: the
    VAE takes (B, C, T, h, w) and the image is frame 0; quantized: a VQ model, decoded unquantized; unpack:
    the pipeline class's own _unpack_latents (packed latents), unpack_clip LTX's (ltx); patch, patch_t: the
    transformer's patch sizes in latent pixels and frames (ltx); timestep: the VAE's decoder is conditioned on
    a timestep (LTX-Video 0.9.1 and later), which the pipeline hands vae.decode as `temb`.
    """
    family: Family | None
    channels: int
    factor: int
    packing: Packing
    unscale: Unscale
    vae: str
    frames: bool = False
    quantized: bool = False
    video: bool = False          # the pipeline makes a clip: previews show the frames clips.pick chooses
    frames_first: bool = False   # video latents come (B, T, C, h, w) (CogVideoX), not (B, C, T, h, w)
    temporal: int = 1            # a clip: frames per latent frame after the first (Wan 4, Mochi 6; 1 for images)
    # a clip: the VAE decodes only whole tiles of this many latent frames (Allegro's tiled decode: 24 frames / 4);
    # its decodes read whole tiles, or the whole clip where it is shorter, as the pipeline's own decode reads it
    tile_t: int = 1
    pipeline: str = ""
    patch: int = 1               # ltx: latent pixels per token side (transformer_spatial_patch_size)
    patch_t: int = 1             # ltx: latent frames per token (transformer_temporal_patch_size)
    # the decoder takes a timestep: the pipeline's default decode_timestep is 0.0 with no noise mixed in
    # (decode_noise_scale defaults to it), and previews decode at that default (vae_decoder.decode_args)
    timestep: bool = False
    pixel: bool = False          # pixel space (IF, DDIM): the latents are the image in [-1, 1], no VAE
    # the latents are decoded by no VAE previewlab can call: what makes the final image instead (LTX-2.5's diffusion
    # decoder), said on the page; latent2rgb and the family's TAE preview them, decoder vae cannot
    stage: str = ""
    unit: bool = False           # the VAE decodes to [0, 1], not [-1, 1] (Stable Cascade's Paella VQ-GAN)
    unpack: Unpack | None = field(default=None, compare=False, repr=False)
    unpack_clip: UnpackClip | None = field(default=None, compare=False, repr=False)

    @property
    def name(self) -> str:
        return self.family or "unnamed"

    def describe(self) -> str:
        """One line: "flux1: 16 channels at 1/8, packed 2x2 (FluxPipeline._unpack_latents), decoded as
        latents / scaling_factor + shift_factor by AutoencoderKL"."""
        how = {"spatial": "spatial (B, C, h, w)", "flux2": "packed 2x2 and batch-normalised (FLUX.2)",
               "packed": f"packed 2x2 ({self.pipeline}._unpack_latents)",
               "ltx": f"packed as tokens ({self.pipeline}._unpack_latents)"}[self.packing]
        if self.video:
            layout = "(B, T, C, h, w)" if self.frames_first else "(B, C, T, h, w)"
            if self.packing == "ltx":
                layout = (f"packed as (B, T*h*w, C) tokens of {self.patch_t}x{self.patch}x{self.patch} "
                          f"({self.pipeline}._unpack_latents)")
            how = f"a clip {layout}, {self.temporal} frames per latent frame after the first"
        frame = ", frame 0 of (B, C, T, h, w)" if self.frames and not self.video else ""
        when = " at decode timestep 0" if self.timestep else ""
        if self.stage:
            return f"{self.name}: {self.channels} channels at 1/{self.factor}, {how}; {self.stage}"
        return (f"{self.name}: {self.channels} channels at 1/{self.factor}, {how}{frame}, decoded as "
                f"{UNSCALES[self.unscale]}{when} by {self.vae}")

    def latent_frames(self, z: torch.Tensor, height: int, width: int) -> int:
        """The latent frames of a clip's callback latents (1 for an image's), for an image of height x width px
        (LTX's tokens say it only with the image size); from the shape, no device read."""
        if self.packing == "ltx" and z.dim() == 3:
            return self._token_frames(z, height, width) * self.patch_t
        if not self.video or z.dim() != 5:
            return 1
        return int(self._frames_of(z).shape[1])

    def clip_of(self, z: torch.Tensor, height: int, width: int) -> torch.Tensor:
        """A clip's callback latents as (B, T, C, h, w), frames before channels (a view, no copy; LTX's tokens
        go through the pipeline's own _unpack_latents, a view too for patches of 1)."""
        if self.packing == "ltx" and z.dim() == 3:
            return self._unpack_tokens(z, height, width).transpose(1, 2)
        return self._frames_of(z)

    def _frames_of(self, z: torch.Tensor) -> torch.Tensor:
        """5-D clip latents -> a (B, T, C, h, w) view, the layout read from where the VAE's C channels sit (shapes
        only). The pipeline's own prepare_latents decides a tie (frames_first); otherwise (B, C, T, h, w) as
        most pipelines, (B, T, C, h, w) as CogVideoX and AnyFlow's rollout, or channels last (B, T, h, w, C') as
        Kandinsky 5, which appends conditioning channels and decodes [..., :C]."""
        c = self.channels
        if self.frames_first and z.shape[2] == c:
            return z
        if z.shape[1] == c:
            return z.transpose(1, 2)
        if z.shape[2] == c:
            return z
        if z.shape[-1] >= c:
            return z[..., :c].permute(0, 1, 4, 2, 3)
        raise FamilyError(f"{self.pipeline or 'the pipeline'}: its step callback hands a clip of shape "
                          f"{tuple(z.shape)}, with no axis of the VAE's {c} latent channels")

    def callback_shape(self, height: int, width: int, batch: int = 1, latent_frames: int = 1) -> tuple[int, ...]:
        """The shape of the callback's latents for an image (or a clip of `latent_frames`) of height x width px."""
        h, w = height // self.factor, width // self.factor
        if self.packing == "ltx":
            tokens = max(1, latent_frames // self.patch_t) * (h // self.patch) * (w // self.patch)
            return (batch, tokens, self.channels * self.patch_t * self.patch ** 2)
        if self.packing != "spatial":
            return (batch, (h // 2) * (w // 2), 4 * self.channels)
        return (batch, self.channels, h, w)

    def _token_frames(self, z: torch.Tensor, height: int, width: int) -> int:
        """LTX: token frames T/p_t of packed latents (B, T/p_t * h/p * w/p, D), from the sequence length and the
        image size (shapes only). Raises FamilyError when the sequence is not whole frames of that size."""
        hp, wp = height // self.factor // self.patch, width // self.factor // self.patch
        seq = int(z.shape[1])
        if hp <= 0 or wp <= 0 or seq % (hp * wp):
            raise FamilyError(f"{self.pipeline}: its step callback hands {seq} tokens, not whole latent frames of "
                              f"{hp}x{wp} tokens for a {height}x{width} px clip; give the clip's own size")
        return seq // (hp * wp)

    def _unpack_tokens(self, z: torch.Tensor, height: int, width: int) -> torch.Tensor:
        """LTX: packed latents -> (B, C, T, h, w) by the pipeline's own _unpack_latents. It is the inverse of
        _pack_latents given the counts in tokens (T/p_t, h/p, w/p); for LTX-Video 0.9's patches of 1 those are
        the latent counts the pipeline's final decode passes it."""
        own = self.unpack_clip
        if own is None:
            raise FamilyError(f"{self.pipeline}: no _unpack_latents(latents, num_frames, height, width, patch_size, "
                              "patch_size_t) to unpack its latents")
        hp, wp = height // self.factor // self.patch, width // self.factor // self.patch
        return own(z, self._token_frames(z, height, width), hp, wp, self.patch, self.patch_t)

    @property
    def cast_first(self) -> bool:
        """Whether the final decode casts the latents to the VAE's dtype before it unscales them: all but LTX's,
        which unscales its float32 latents and then casts (see vae_input)."""
        return self.unscale != "mean_std_buffers"

    def _unpack(self, vae_scale_factor: int) -> Convert:
        """Callback latents -> (B, C', h', w') in model space, before any unscaling: FLUX.2's 128 normalised
        channels at 1/16, the others' own channels at 1/factor."""
        if self.packing == "flux2":
            # 4-D: already patchified in place, (B, 4C, h/2, w/2) (ERNIE-Image's pachifier), what the tokens become
            return lambda z, height, width: z if z.dim() == 4 else _flux2_unpack(z, height, width, vae_scale_factor)
        if self.packing == "ltx":  # the clip's first latent frame; 4-D latents (one frame each) as they are
            return lambda z, height, width: z if z.dim() == 4 else self._unpack_tokens(z, height, width)[:, :, 0]
        unpack, c = self.unpack, self.channels
        if self.packing == "packed" and unpack is not None:
            own = unpack

            def packed(z: torch.Tensor, height: int, width: int) -> torch.Tensor:
                h, w = height // vae_scale_factor, width // vae_scale_factor
                if z.dim() == 3 and z.shape[-1] == c and z.shape[1] == h * w:
                    # a token per latent pixel, no 2x2 patch (Bria Fibo unless do_patching): (B, h*w, C)
                    return z.view(z.shape[0], h, w, c).permute(0, 3, 1, 2)
                x = own(z, height, width, vae_scale_factor)
                return x[:, :, 0] if x.dim() == 5 else x  # Qwen-Image's comes (B, C, 1, h, w)
            return packed
        what = f"{self.pipeline}: " if self.pipeline else ""

        def spatial(z: torch.Tensor, height: int, width: int) -> torch.Tensor:
            if z.dim() == 4 and z.shape[1] > c and z.shape[1] % c == 0:
                # one latent per target stacked on the channels (Marigold Intrinsics: albedo, shading, ...):
                # the first target's
                return z[:, :c]
            if z.dim() == 4:  # shape checks only, no device read
                return z
            if self.video and z.dim() == 5:  # a clip: its first latent frame, (B, C, h, w)
                return self._frames_of(z)[:, 0]
            if z.dim() == 5 and z.shape[1] == 1 and z.shape[-1] >= c:
                # one frame, channels last, conditioning channels after the latent ones: Kandinsky 5's image
                # pipelines hand (B, 1, h, w, C'), and keep [..., :C] for the decode
                return z[:, 0, :, :, :c].permute(0, 3, 1, 2)
            if z.dim() == 5 and z.shape[2] == 1 and z.shape[1] == c:  # one frame of (B, C, T, h, w)
                return z[:, :, 0]
            if z.dim() == 6 and z.shape[2] == c:
                # (B, items, C, T, h, w): the reference images, then the one being made (JoyImage Edit), whose
                # first frame the final decode shows
                return z[:, -1, :, 0]
            raise FamilyError(f"{what}its step callback hands latents of shape {tuple(z.shape)}, not (B, C, h, w), "
                              "and the pipeline has no _unpack_latents(latents, height, width, vae_scale_factor) "
                              "to unpack them")
        return spatial

    def tae_input(self, pipe: Any, device: torch.device, dtype: torch.dtype) -> Convert:
        """Callback latents -> (B, channels, h, w) in the model's space: what madebyollin's TAE decoders and the
        latent2rgb factors take. Constants are built here, once; the closure only reshapes and does arithmetic."""
        unpack = self._unpack(vae_scale_factor(pipe))
        if self.packing == "flux2":
            return lambda z, height, width: unpatchify(unpack(z, height, width))
        if self.family == "sdxl" and self.unscale == "mean_std":
            # a VAE with published latent statistics (Playground v2.5): taesdxl knows SDXL's plain scale only
            to_vae = self.vae_input(pipe, device, dtype)
            return lambda z, height, width: to_vae(z, height, width) * SDXL_SCALE
        return unpack

    def vae_input(self, pipe: Any, device: torch.device, dtype: torch.dtype) -> Convert:
        """Callback latents -> exactly what the pipeline's final decode hands vae.decode: (B, channels, h, w),
        or (B, channels, 1, h, w) for a VAE that takes frames; the unpacking here, the unscaling unscaling.py's.

        dtype: the latents' dtype (the transformer's or UNet's); the arithmetic runs in it, as in the pipeline.
        ZImagePipeline, CogView4 and AuraFlow cast to the VAE's dtype before unscaling: for them, pass the
        VAE's dtype and cast the latents to it first (vae_decoder.vae_decoder does). LTX (mean_std_buffers) unscales
        in float32 and casts after (unscaling.unscaler), so pass it the callback's latents uncast
        (LatentSpace.cast_first is False). A VAE with timestep_conditioning also takes a timestep: see `timestep`
        and vae_decoder.decode_args.
        """
        vae = vae_of(pipe)
        unpack = self._unpack(vae_scale_factor(pipe))
        unscaled = unscaler(self.unscale, pipe, vae, device, dtype)
        if self.frames and self.unscale != "batch_norm":  # a VAE that takes (B, C, T, h, w): one frame
            return lambda z, height, width: unscaled(unpack(z, height, width)).unsqueeze(2)
        return lambda z, height, width: unscaled(unpack(z, height, width))

"""Real Wan 2.1 latents (tests/data/wan21, MIT) through the wan21 latent2rgb path: the projected frames look like
a picture, correlated between neighbouring pixels and between neighbouring frames, as noise is not."""
from __future__ import annotations

from pathlib import Path

import torch

from previewlab.preview.models.latent_formats import LATENT_RGB, latent2rgb

DATA = Path(__file__).parent / "data" / "wan21" / "wan21_latents.pth"


def projected(latents: torch.Tensor) -> torch.Tensor:
    """Latents (1, 16, T, h, w) -> wan21 latent2rgb frames (T, 3, h, w). They are the model's own (normalised)
    latents, as a Wan pipeline's step callback hands them and as TAEHV takes them: ComfyUI's Wan21 factors apply
    to them directly."""
    rgb = latent2rgb(LATENT_RGB["wan21"], torch.device("cpu"), torch.float32)
    z = latents.float()
    return torch.stack([rgb(z[:, :, t]) for t in range(z.shape[2])], 1)[0]


def correlations(frames: torch.Tensor) -> tuple[float, float]:
    """Pearson r between horizontally neighbouring pixels, and between neighbouring frames."""
    px = torch.corrcoef(torch.stack([frames[..., :-1].flatten(), frames[..., 1:].flatten()]))[0, 1]
    fr = torch.corrcoef(torch.stack([frames[:-1].flatten(), frames[1:].flatten()]))[0, 1]
    return float(px), float(fr)


def test_wan21_latent2rgb_of_real_latents_is_a_picture_and_noise_is_not():
    real = torch.load(DATA, map_location="cpu", weights_only=True)
    assert real.shape == (1, 16, 16, 40, 64)
    frames = projected(real)
    assert frames.shape == (16, 3, 40, 64) and float(frames.min()) >= 0 and float(frames.max()) <= 1
    px, fr = correlations(frames)
    print(f"wan21 latent2rgb of real Wan 2.1 latents: neighbouring pixels r={px:.3f}, neighbouring frames r={fr:.3f}")
    assert px > 0.9 and fr > 0.95
    # latents of the same spread with no picture in them give none: no structure between pixels or frames
    noise = projected(torch.randn(real.shape, generator=torch.Generator().manual_seed(0)) * float(real.float().std()))
    npx, nfr = correlations(noise)
    assert abs(npx) < 0.1 and abs(nfr) < 0.1

"""latent2rgb factors fitted from the pipeline's own VAE, for a latent space with none known.

ComfyUI needs hand-written factors for every latent format. Here a space without them (an unnamed one, or a
VAE whose width differs from its family's) gets them from its first preview: that step's latents are decoded
once with the VAE, the image is area-downscaled to latent resolution, and a least-squares fit maps each latent
pixel (C channels and a constant) to its RGB in [-1, 1]. The fit is kept per VAE for the life of the process,
so later runs of the same pipeline start with it.

The fit is ridge-regularised a little (1e-4 of the mean diagonal of XᵀX): a tiny image has fewer latent
pixels than channels plus one (Sana's 32 channels at 1/32), where a plain least-squares system is singular.
"""
from __future__ import annotations

import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn.functional as F

from previewlab.preview.models.latent_formats import Factors

RIDGE = 1e-4  # of the mean diagonal of XᵀX: enough to make a rank-deficient system solvable, too small to bias it


@dataclass(frozen=True)
class Fit:
    """Fitted factors, how well they explain the VAE's image (R², 1 is perfect) and what the fit cost."""
    factors: Factors
    r2: float
    ms: float        # host time of the VAE decode, the downscale and the solve
    pixels: int      # latent pixels the fit saw

    def note(self, space: str) -> str:
        """The row's event: that the factors were fitted, for which space, the cost and the fit's R²."""
        return (f"latent2rgb factors fitted for {space} from this preview's VAE decode in {self.ms:.0f} ms "
                f"(R² {self.r2:.3f}, {self.pixels} latent pixels)")


def solve(latents: torch.Tensor, image: torch.Tensor) -> tuple[Factors, float]:
    """latents (1, C, h, w) in model space, image (1, 3, H, W) in [-1, 1] -> (factors, R²).

    rgb = latent . F + bias per latent pixel, as latent_formats.latent2rgb applies it. Runs in float32 on the
    latents' device; the factors come back to the host (a device read: the fit runs once per VAE)."""
    z = latents[:1].float()
    _, c, h, w = z.shape
    target = F.interpolate(image[:1].float(), size=(h, w), mode="area")
    x = torch.cat([z.reshape(c, h * w).T, torch.ones(h * w, 1, device=z.device)], dim=1)  # (hw, C + 1)
    y = target.reshape(3, h * w).T                                                      # (hw, 3)
    gram = x.T @ x
    ridge = RIDGE * gram.diagonal().mean().clamp_min(1e-12)
    sol = torch.linalg.solve(gram + ridge * torch.eye(c + 1, device=z.device), x.T @ y)  # (C + 1, 3)
    residual = ((y - x @ sol) ** 2).sum()
    total = ((y - y.mean(dim=0)) ** 2).sum().clamp_min(1e-12)
    both = torch.cat([sol.flatten(), (1 - residual / total).view(1)]).cpu().tolist()  # the one device read
    r2, rows = both[-1], [both[3 * i:3 * i + 3] for i in range(c + 1)]
    factors = tuple((float(r[0]), float(r[1]), float(r[2])) for r in rows[:c])
    b = rows[c]
    return (factors, (float(b[0]), float(b[1]), float(b[2]))), r2


_FITS: weakref.WeakKeyDictionary[Any, Fit] = weakref.WeakKeyDictionary()


def cached(vae: Any) -> Fit | None:
    """The fit made for this VAE earlier in this process, if any."""
    return _FITS.get(vae)


def fit(vae: Any, latents: torch.Tensor, decode: Callable[[], torch.Tensor]) -> Fit:
    """Fit factors for `vae` from model-space latents (1, C, h, w) and decode() -> their image (1, 3, H, W) in
    [-1, 1] by that VAE, and keep the fit for the life of the process."""
    t0 = time.perf_counter()
    with torch.inference_mode():
        factors, r2 = solve(latents, decode())
    done = Fit(factors, r2, (time.perf_counter() - t0) * 1e3, int(latents.shape[-2] * latents.shape[-1]))
    _FITS[vae] = done
    return done

"""FID: the Fréchet distance between the Gaussians fitted to two sets of features (Heusel et al. 2017, eq. 6).

    d² = ||μ₁ − μ₂||² + Tr(Σ₁ + Σ₂ − 2 (Σ₁ Σ₂)^½)

The trace of the square root is read off the eigenvalues of Σ₁ Σ₂, as torchmetrics does (≥ 1.0): the product of
two symmetric PSD matrices is similar to Σ₁^½ Σ₂ Σ₁^½, so its eigenvalues are real and non-negative up to
round-off, and Tr((Σ₁ Σ₂)^½) is the sum of their square roots. Round-off can leave them slightly negative or
complex when a covariance is singular (fewer samples than dimensions); their real parts are clamped at 0, so the
result is never NaN. Everything is computed in float64.

The value depends on the feature network and on the sample sizes (FID is biased upwards, more so for small
sets): compare FIDs only between sets of the same size, measured with the same network.
"""
from __future__ import annotations

import torch

__all__ = ["gaussian_stats", "frechet_distance", "fid"]


def gaussian_stats(features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean [D], unbiased covariance [D, D]) of features [N, D], in float64; ValueError when N < 2."""
    if features.dim() != 2 or len(features) < 2:
        raise ValueError(f"gaussian_stats: expected features [N, D] with N >= 2, got shape {tuple(features.shape)}")
    rows = features.double()
    return rows.mean(0), torch.cov(rows.T).reshape(rows.shape[1], rows.shape[1])


def frechet_distance(mu1, sigma1, mu2, sigma2) -> torch.Tensor:
    """The squared Fréchet distance between N(mu1, sigma1) and N(mu2, sigma2), a 0-d float64 tensor."""
    mu1, sigma1, mu2, sigma2 = (v.double() for v in (mu1, sigma1, mu2, sigma2))
    root_trace = torch.linalg.eigvals(sigma1 @ sigma2).real.clamp(min=0).sqrt().sum()
    return (mu1 - mu2).square().sum() + sigma1.trace() + sigma2.trace() - 2 * root_trace


def fid(real: torch.Tensor, fake: torch.Tensor) -> torch.Tensor:
    """FID between feature sets real [N, D] and fake [M, D] (the Gaussians fitted to each), a 0-d float64 tensor."""
    return frechet_distance(*gaussian_stats(real), *gaussian_stats(fake))

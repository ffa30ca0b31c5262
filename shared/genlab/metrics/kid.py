"""KID: the squared maximum mean discrepancy with the kernel k(x, y) = (x·y / d + 1)³ (Bińkowski et al. 2018).

The estimator is the unbiased one (a U-statistic: the diagonal k(x_i, x_i) is left out of the within-set means),
so, unlike FID, its expectation does not depend on the sample sizes, and it can be negative when the two sets
come from one distribution. :func:`kid` follows the paper's protocol (the mean and standard deviation over random
subsets of equal size, as torchmetrics' ``KernelInceptionDistance``); :func:`mmd2_unbiased` is the estimate on two
whole sets, of any sizes.
"""
from __future__ import annotations

import torch

__all__ = ["mmd2_unbiased", "kid"]


def _cubic(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a @ b.T / a.shape[1] + 1).pow(3)


def _off_diagonal_mean(gram: torch.Tensor) -> torch.Tensor:
    n = gram.shape[0]
    return (gram.sum() - gram.diagonal().sum()) / (n * (n - 1))


def mmd2_unbiased(real: torch.Tensor, fake: torch.Tensor) -> torch.Tensor:
    """The unbiased MMD² between real [N, D] and fake [M, D] (N, M >= 2) with the cubic kernel, 0-d float64."""
    if len(real) < 2 or len(fake) < 2:
        raise ValueError(f"mmd2_unbiased: each set needs at least 2 rows, got {len(real)} and {len(fake)}")
    x, y = real.double(), fake.double()
    return _off_diagonal_mean(_cubic(x, x)) + _off_diagonal_mean(_cubic(y, y)) - 2 * _cubic(x, y).mean()


def kid(real: torch.Tensor, fake: torch.Tensor, subsets: int = 100, subset_size: int = 1000,
        generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean, population std) over ``subsets`` draws of :func:`mmd2_unbiased` on ``subset_size`` real and
    ``subset_size`` fake rows, each drawn without replacement (``torch.randperm`` with ``generator``, the real
    rows first). ValueError when ``subset_size`` is below 2 or above either set's size."""
    if not 2 <= subset_size <= min(len(real), len(fake)):
        raise ValueError(f"kid: subset_size must lie in 2..{min(len(real), len(fake))} (the smaller set), "
                         f"got {subset_size}; lower subset_size")
    estimates = []
    for _ in range(subsets):
        pick_real = torch.randperm(len(real), generator=generator)[:subset_size]
        pick_fake = torch.randperm(len(fake), generator=generator)[:subset_size]
        estimates.append(mmd2_unbiased(real[pick_real], fake[pick_fake]))
    estimates = torch.stack(estimates)
    return estimates.mean(), estimates.std(unbiased=False)

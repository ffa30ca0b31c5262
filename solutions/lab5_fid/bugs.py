"""Lab 5's catalogued bugs in full, as a student would write them: the instructor's side of the catalogue.

Students see these bugs only as edits of their own functions (``genlab.catalog.lab5_fid``): each body here is
the answer with a small edit, or carries a part of it, so it must not ship (issue 21). The bug samples are made
of these bodies (``bug_cell``), the grader replays calls through them, and ``tests/test_catalogue.py`` checks
that each body and its edit are the same bug.
"""
from __future__ import annotations

import math

import torch


# --- feature_stats ---------------------------------------------------------------------------------
def torch_cov_rows(features):
    x = features.to(torch.float64)
    if x.shape[0] < 2:
        raise ValueError(f"need at least 2 feature vectors, got {x.shape[0]}")
    # torch.cov wants one *variable* per row: on [N, D] it returns the [N, N] covariance of the samples
    return x.mean(dim=0), torch.cov(x)


# --- trace_sqrt_product ----------------------------------------------------------------------------
def no_clamp(sigma1, sigma2):
    s1, s2 = sigma1.to(torch.float64), sigma2.to(torch.float64)
    w, v = torch.linalg.eigh(s1)
    root1 = (v * w.clamp(min=0).sqrt()) @ v.T
    middle = root1 @ s2 @ root1
    eigenvalues = torch.linalg.eigvalsh((middle + middle.T) / 2)   # 0 in exact arithmetic, -1e-15 after round-off
    return eigenvalues.sqrt().sum()                                 # sqrt(-1e-15) is NaN, and so is the sum


def _psd_sqrt(s):
    w, v = torch.linalg.eigh(s)
    return (v * w.clamp(min=0).sqrt()) @ v.T


def product_of_roots(sigma1, sigma2):
    s1, s2 = sigma1.to(torch.float64), sigma2.to(torch.float64)
    # Tr(S1^1/2 S2^1/2) equals Tr((S1 S2)^1/2) only when S1 and S2 commute
    return torch.trace(_psd_sqrt(s1) @ _psd_sqrt(s2))


# --- kid ---------------------------------------------------------------------------------------------
def biased_mmd(real_features, fake_features, subsets=100, subset_size=1000, generator=None):
    x, y = real_features.to(torch.float64), fake_features.to(torch.float64)
    if subset_size > x.shape[0] or subset_size > y.shape[0]:
        raise ValueError(f"subset_size {subset_size} exceeds the number of features ({x.shape[0]}, {y.shape[0]})")
    d = x.shape[1]
    values = []
    for _ in range(subsets):
        a = x[torch.randperm(x.shape[0], generator=generator)[:subset_size]]
        b = y[torch.randperm(y.shape[0], generator=generator)[:subset_size]]
        kxx, kyy, kxy = ((a @ a.T / d + 1) ** 3, (b @ b.T / d + 1) ** 3, (a @ b.T / d + 1) ** 3)
        # the V-statistic: means over all pairs, k(x_i, x_i) included, so E[MMD^2] > 0 even for P = Q
        values.append(kxx.mean() + kyy.mean() - 2 * kxy.mean())
    values = torch.stack(values)
    return values.mean(), values.std(unbiased=False)


# --- extract_features --------------------------------------------------------------------------------
def train_mode_features(model, images, batch_size=256):
    with torch.no_grad():
        # no model.eval(): BatchNorm normalises each batch with that batch's own statistics (and moves its running
        # statistics), so an image's features depend on which images share its batch
        return torch.cat([model(chunk).flatten(1) for chunk in images.split(batch_size)])


def mode_not_restored(model, images, batch_size=256):
    model.eval()  # right for the features, but the caller's model stays in eval mode after the call
    with torch.no_grad():
        return torch.cat([model(chunk).flatten(1) for chunk in images.split(batch_size)])


# --- precision_recall_density_coverage ------------------------------------------------------------------
def precision_recall_swapped(real, fake, k):
    def radii(x):
        d = torch.cdist(x, x)
        d.fill_diagonal_(math.inf)
        return d.kthvalue(k, dim=1).values

    r_real, r_fake = radii(real), radii(fake)
    distances = torch.cdist(real, fake)
    in_real_balls = distances < r_real[:, None]
    # torch-fidelity before PR #70: "precision" from the generated balls, "recall" from the real ones
    return {"precision": (distances < r_fake[None, :]).any(1).double().mean().item(),
            "recall": in_real_balls.any(0).double().mean().item(),
            "density": (in_real_balls.sum(0).double().mean() / k).item(),
            "coverage": (distances.min(1).values < r_real).double().mean().item()}


# --- bootstrap_draws ---------------------------------------------------------------------------------
def half_with_replacement(sizes, n_boot, generator=None):
    # ExplainaBoard's prop_samples = 0.5: max(N / 2, 1) rows per resample, with replacement
    return [torch.randint(n, (n_boot, max(n // 2, 1)), generator=generator) for n in sizes]


BODIES = {fn.__name__: fn for fn in (
    torch_cov_rows,
    no_clamp,
    product_of_roots,
    biased_mmd,
    train_mode_features,
    mode_not_restored,
    precision_recall_swapped,
    half_with_replacement,
)}

"""genlab.metrics, the course's quality measures (Lab 2 imports them), against Lab 5's reference functions and
against torchmetrics, scipy and the prdc package where they define the same quantity."""
from __future__ import annotations

import contextlib
import io
from pathlib import Path

import numpy as np
import pytest
import scipy.linalg
import torch

from genlab import metrics
from genlab.data import load_digits
from genlab.testing.reference import load_reference

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def lab5():
    return load_reference("lab5_fid", str(ROOT))


class Identity(torch.nn.Module):
    """Features handed in directly: torchmetrics then runs its formula on them (it reads num_features)."""

    def __init__(self, num_features):
        super().__init__()
        self.num_features = num_features

    def forward(self, x):
        return x


def torchmetrics_value(metric, real, fake):
    metric.update(real, real=True)
    metric.update(fake, real=False)
    return metric.compute()


def sets(seed, n_real=120, n_fake=80, d=16):
    gen = torch.Generator().manual_seed(seed)
    real = torch.randn(n_real, d, generator=gen, dtype=torch.float64)
    fake = torch.randn(n_fake, d, generator=gen, dtype=torch.float64) * 1.3 + 0.2
    return real, fake


@pytest.mark.parametrize("n_real,n_fake,d", [(120, 80, 16), (300, 64, 64), (40, 30, 64), (5, 9, 3)])
def test_fid_against_lab5_and_scipy(lab5, n_real, n_fake, d):
    real, fake = sets(d, n_real, n_fake, d)
    ours = metrics.fid(real, fake)
    assert ours.dtype == torch.float64 and ours.dim() == 0
    torch.testing.assert_close(ours, lab5.fid(real, fake), rtol=1e-6, atol=1e-6 * d)
    if n_real > d and n_fake > d:           # full-rank covariances: scipy's sqrtm is accurate there
        m1, s1 = real.mean(0).numpy(), np.cov(real.numpy(), rowvar=False)
        m2, s2 = fake.mean(0).numpy(), np.cov(fake.numpy(), rowvar=False)
        classic = ((m1 - m2) ** 2).sum() + np.trace(s1 + s2 - 2 * scipy.linalg.sqrtm(s1 @ s2).real)
        assert abs(ours.item() - classic) < 1e-6 * (1 + abs(classic))


def test_fid_against_torchmetrics():
    from torchmetrics.image.fid import FrechetInceptionDistance

    real, fake = sets(7, 300, 250, 12)
    theirs = torchmetrics_value(FrechetInceptionDistance(feature=Identity(12), normalize=True), real, fake)
    assert abs(metrics.fid(real, fake).item() - theirs.item()) < 1e-4


def test_fid_of_a_set_with_itself_is_zero_even_rank_deficient():
    x = torch.randn(20, 48, generator=torch.Generator().manual_seed(8)) * 5
    got = metrics.fid(x, x)
    assert not torch.isnan(got) and abs(got.item()) < 1e-4


def test_gaussian_stats_against_lab5(lab5):
    real, _ = sets(3, 50, 10, 6)
    for ours, theirs in zip(metrics.gaussian_stats(real.float()), lab5.feature_stats(real.float())):
        torch.testing.assert_close(ours, theirs)
    with pytest.raises(ValueError):
        metrics.gaussian_stats(torch.rand(1, 5))


def test_kid_against_lab5_with_the_same_draws(lab5):
    real, fake = sets(9, 90, 70, 8)
    for subsets, size in ((5, 40), (3, 70)):
        ours = metrics.kid(real, fake, subsets, size, torch.Generator().manual_seed(1))
        theirs = lab5.kid(real, fake, subsets, size, torch.Generator().manual_seed(1))
        for a, b in zip(ours, theirs):
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)
    with pytest.raises(ValueError):
        metrics.kid(real, fake, 2, 71)


def test_kid_against_torchmetrics():
    from torchmetrics.image.kid import KernelInceptionDistance

    real, fake = sets(11, 60, 60, 10)
    metric = KernelInceptionDistance(feature=Identity(10), subsets=1, subset_size=60, normalize=True)
    mean, _ = torchmetrics_value(metric, real, fake)
    ours, std = metrics.kid(real, fake, 1, 60)
    assert abs(ours.item() - mean.item()) < 1e-6 and std.item() == 0.0
    # on whole sets of unequal sizes, the same U-statistic
    assert abs(metrics.mmd2_unbiased(real, fake).item() - ours.item()) < 1e-12


def test_manifold_measures_against_lab5_and_prdc(lab5):
    import prdc

    digits = load_digits(flat=True)[0].double()
    digits = digits + 1e-4 * torch.randn(digits.shape, generator=torch.Generator().manual_seed(61), dtype=torch.float64)
    cases = [(*sets(12, 200, 150, 8), 5), (*sets(13, 120, 120, 32), 3), (digits[:300], digits[1000:1200], 5)]
    for real, fake, k in cases:
        ours = metrics.precision_recall_density_coverage(real, fake, k)
        theirs = lab5.precision_recall_density_coverage(real, fake, k)
        with contextlib.redirect_stdout(io.StringIO()):          # prdc prints the set sizes
            package = prdc.compute_prdc(real.numpy(), fake.numpy(), nearest_k=k)
        for key in ("precision", "recall", "density", "coverage"):
            assert abs(ours[key] - theirs[key]) < 1e-9, (key, ours[key], theirs[key])
            assert abs(ours[key] - float(package[key])) < 1e-9, (key, ours[key], package[key])
    counts = metrics.manifold_counts(*sets(12, 200, 150, 8), 5)
    assert [len(counts[key]) for key in ("precision", "recall", "density", "coverage")] == [150, 200, 150, 200]
    with pytest.raises(ValueError):
        metrics.manifold_counts(torch.rand(4, 2), torch.rand(9, 2), 4)


def test_bootstrap_against_lab5(lab5):
    values = torch.randn(333, generator=torch.Generator().manual_seed(74), dtype=torch.float64)
    for level in (0.95, 0.8, 0.5):
        got = metrics.percentile_interval(values, level)
        want = lab5.percentile_interval(values, level)
        assert abs(got[0] - want[0]) < 1e-12 and abs(got[1] - want[1]) < 1e-12, (got, want)
        np.testing.assert_allclose(got, np.quantile(values.numpy(), [(1 - level) / 2, (1 + level) / 2]), rtol=1e-12)
    assert metrics.percentile_interval(torch.full((50,), 3.0)) == (3.0, 3.0)
    # the paired FID difference: Lab 5's fid_difference_interval(paired=True) draws the real rows, then the fake rows
    real, fake_a = sets(21, 90, 70, 6)
    fake_b = fake_a * 1.1 + 0.05
    got = metrics.paired_replicates({"a": lambda r, f: metrics.fid(real[r], fake_a[f]),
                                     "b": lambda r, f: metrics.fid(real[r], fake_b[f])},
                                    90, 70, 60, torch.Generator().manual_seed(3))
    rows = [torch.randint(0, n, (n,), generator=g) for g in [torch.Generator().manual_seed(3)] for _ in range(60)
            for n in (90, 70)]
    want = torch.stack([lab5.fid(real[r], fake_a[f]) - lab5.fid(real[r], fake_b[f]) for r, f in zip(rows[::2], rows[1::2])])
    torch.testing.assert_close(got["a"] - got["b"], want.double(), rtol=1e-6, atol=1e-9)
    low, high, _ = lab5.fid_difference_interval(real, fake_a, fake_b, 60, 0.95, True, torch.Generator().manual_seed(3))
    assert high < 0 and metrics.percentile_interval(got["a"] - got["b"])[1] < 0, "fake_a is closer on both"


def test_lab5_students_cannot_import_the_course_measures():
    """Lab 5 asks students to write these measures: its graded cells may not import them."""
    from genlab.policy import Policy

    course = ROOT / "autograder" / "course.toml"
    assert not Policy.from_toml(course, "lab5_fid").allows_module("genlab.metrics")
    assert not Policy.from_toml(course, "lab5_fid").allows_module("genlab.metrics.frechet")
    assert Policy.from_toml(course, "lab2_diffusion").allows_module("genlab.metrics")

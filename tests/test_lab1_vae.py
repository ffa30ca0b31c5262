"""Lab 1 (VAE): the numbers its text states, its catalogue's symptoms and its hand-graded cells, checked here.

The notebook measures each of these in its own run; these tests keep the statements true when the code
around them changes (a new loss, another tolerance, a release that loses a manual-grading cell).
"""
from __future__ import annotations

import math
from pathlib import Path

import nbformat
import pytest
import torch
import torch.nn.functional as F

from autograder.core.labs import instructor_bug as bug  # full bodies, where students see edits
from genlab.catalog import bugs_for
from genlab.data import load_digits
from genlab.testing.notebook import LabNotebook, grade_id, nbgrader_meta
from genlab.testing.reference import load_reference

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "solutions" / "lab1_vae" / "lab1_vae.ipynb"
RELEASE = ROOT / "labs" / "lab1_vae" / "lab1_vae.ipynb"
MANUAL = {"derivation_kl_general": 3.0, "beta_sweep_discussion": 2.0, "cb_answer": 3.0, "free_bits_answer": 3.0}


@pytest.fixture(scope="module")
def reference():
    return load_reference("lab1_vae", str(ROOT))


def cells_by_id(path):
    return {grade_id(c): c for c in nbformat.read(str(path), as_version=4).cells if grade_id(c)}


def test_entropy_floor_of_the_grey_level_digits():
    """Section 4 and the beta_sweep hidden test: sum_p H(x_p) is about 13.7 nats per digit (13.66)."""
    images, _ = load_digits()
    x = images.double()
    floor = -(torch.special.xlogy(x, x) + torch.special.xlogy(1 - x, 1 - x)).sum(1).mean().item()
    assert 13.65 < floor < 13.67, floor
    # and it is a floor: BCE at any logits is at least the entropy, pixel by pixel
    logits = torch.randn_like(x) * 3
    bce = F.binary_cross_entropy_with_logits(logits, x, reduction="none").sum(1).mean().item()
    assert bce >= floor


def test_confident_wrong_logit_costs_its_magnitude_per_pixel(reference):
    """The hidden stability test: 200 per pixel (not per pixel pair); the sigmoid-first bug clamps at 100."""
    x = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    logits = torch.tensor([[-200.0, 200.0]], dtype=torch.float64)
    zeros = torch.zeros(1, 2, dtype=torch.float64)
    assert reference.negative_elbo(x, logits, zeros, zeros).item() == pytest.approx(400.0)
    assert bug("lab1_vae", "bce_on_sigmoid").impl(x, logits, zeros, zeros).item() == pytest.approx(200.0)


def test_sigmoid_first_loses_the_gradient_before_the_loss():
    """Section 6.5's table: at logit -50 the bug's loss is still right but its gradient is gone."""
    ell = torch.tensor([[-50.0]], requires_grad=True)
    loss = bug("lab1_vae", "bce_on_sigmoid").impl(torch.ones(1, 1), ell, torch.zeros(1, 1), torch.zeros(1, 1))
    loss.backward()
    assert loss.item() == pytest.approx(50.0, rel=1e-4)
    assert abs(ell.grad.item()) < 1e-6


def _bce_bug_loss_and_grad(target, logit):
    ell = torch.tensor([[logit]], requires_grad=True)
    loss = bug("lab1_vae", "bce_on_sigmoid").impl(torch.full((1, 1), target), ell, torch.zeros(1, 1), torch.zeros(1, 1))
    loss.backward()
    return loss.item(), ell.grad.item()


def test_sigmoid_first_breaks_at_the_clamps_on_both_sides():
    """Section 6.5: target 0 breaks where sigmoid rounds to 1 (about +17); target 1 where p(1 - p) < 1e-12."""
    assert _bce_bug_loss_and_grad(0.0, 10.0) == pytest.approx((10.0, 1.0), rel=1e-3)
    loss, grad = _bce_bug_loss_and_grad(0.0, 17.5)          # sigmoid(17.5) is exactly 1 in float32
    assert loss == 100.0 and grad == 0.0
    p = torch.sigmoid(torch.tensor(-30.0))                   # p(1 - p) < 1e-12: the backward clamp scales the gradient
    loss, grad = _bce_bug_loss_and_grad(1.0, -30.0)
    assert loss == pytest.approx(30.0, rel=1e-4)
    assert grad == pytest.approx(((p - 1) * p * (1 - p) / 1e-12).item(), rel=1e-3)


def _bound_inputs(k=100, dtype=torch.float64):
    torch.manual_seed(0)
    x = (torch.rand(4, 64, dtype=dtype) > 0.5).to(dtype)
    mu, logvar = torch.randn(4, 8, dtype=dtype), torch.randn(4, 8, dtype=dtype)
    z = mu + (0.5 * logvar).exp() * torch.randn(k, 4, 8, dtype=dtype)
    return x, 20 * torch.randn(k, 4, 64, dtype=dtype), z, mu, logvar


def test_iwae_bound_lies_above_the_elbo_and_each_bug_differs_as_documented(reference):
    args = _bound_inputs()
    bound = reference.iwae_bound(*args)
    elbo = bug("lab1_vae", "iwae_mean_of_log_weights").impl(*args)
    assert (bound >= elbo).all()                                  # Jensen: L_k >= L_1 on the same samples
    no_log_k = bug("lab1_vae", "iwae_missing_log_k").impl(*args)
    torch.testing.assert_close(no_log_k - bound, torch.full_like(bound, math.log(100)))
    # with k = 1 the bound is the one-sample ELBO
    one = tuple(a[:1] if a.dim() == 3 else a for a in args)
    torch.testing.assert_close(reference.iwae_bound(*one), bug("lab1_vae", "iwae_mean_of_log_weights").impl(*one))


def test_naive_log_mean_exp_underflows_where_the_bound_is_finite(reference):
    """The visible stability test: log w = -64 softplus(30), about -1920 nats, for every sample."""
    args = (torch.ones(2, 64), torch.full((5, 2, 64), -30.0), torch.zeros(5, 2, 2), torch.zeros(2, 2),
            torch.zeros(2, 2))
    expected = -64 * F.softplus(torch.tensor(30.0)).item()
    assert expected == pytest.approx(-1920, abs=0.1)
    torch.testing.assert_close(reference.iwae_bound(*args), torch.full((2,), expected))
    assert torch.isneginf(bug("lab1_vae", "iwae_naive_log_mean_exp").impl(*args)).all()


def test_manual_cells_are_nbgrader_manually_graded_answers():
    source, release = cells_by_id(SOURCE), cells_by_id(RELEASE)
    for gid, points in MANUAL.items():
        meta = nbgrader_meta(source[gid])
        assert source[gid].cell_type == "markdown"
        assert (meta["solution"], meta["grade"], meta["task"], meta["locked"]) == (True, True, False, False)
        assert meta["points"] == points
        assert release[gid].source.strip() == "YOUR ANSWER HERE", "the model answer must not reach students"
    # the autograder scores test cells only: a manual cell is neither a test nor a function
    lab = LabNotebook.read(SOURCE)
    assert not set(MANUAL) & (set(lab.tests) | set(lab.solutions))


def test_beta_sweep_can_reach_the_training_code():
    """The grader runs only setup, solutions and grade-needs cells: beta_sweep's tests call train_vae."""
    model = cells_by_id(SOURCE)["model"]
    assert "grade-needs" in model.metadata.get("tags", [])
    assert "def train_vae" in model.source and "def active_units" in model.source


def test_failure_modes_run_the_catalogued_bugs_they_name():
    """Section 6 runs each of these from the catalogue (the issue's four included) and measures its symptom."""
    source = "\n".join(c.source for c in nbformat.read(str(SOURCE), as_version=4).cells)
    shown = {b.id for b in bugs_for("lab1_vae") if f'bug("lab1_vae", "{b.id}")' in source}
    assert shown == {"torch_normal_sampler", "exp_logvar_as_std", "recon_mean_per_pixel", "eps_default_dtype",
                     "bce_on_sigmoid", "kl_sign_flipped", "eps_shared_across_batch", "detached_sample",
                     "iwae_naive_log_mean_exp",   # 6.9: on this model, and its log-weights scaled to 784 pixels
                     "log_norm_from_probs", "taylor_where_unguarded", "free_bits_on_total_kl", "mean_is_sigmoid",
                     "log_norm_left_out"}         # 6.10-6.14: the continuous Bernoulli and free bits (issue 26)

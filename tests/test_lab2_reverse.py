"""Lab 2's reverse process (q_posterior, ddpm_loss, p_sample_step), its catalogued bugs, and the numbers its text states.

The reference solution is checked against Hugging Face diffusers' DDPMScheduler.step where diffusers is installed;
the statements the notebook makes in words (which betas the cosine clip changes, what one image hides) are
recomputed here, so the text cannot drift from the numbers.
"""
from __future__ import annotations

import math
import os

import pytest
import torch

from autograder.core.labs import instructor_bug  # full bodies, where students see edits
from genlab.data import load_samples, save_samples
from genlab.models import OracleDenoiser, TinyDenoiser
from genlab.testing import load_reference, wire

os.environ.setdefault("HF_HUB_OFFLINE", "1")
LAB = "lab2_diffusion"
T = 1000


@pytest.fixture(scope="module")
def ref():
    return load_reference(LAB)


@pytest.fixture(scope="module")
def linear(ref):
    betas = ref.make_beta_schedule("linear", T)
    return betas, ref.alpha_bar_from_betas(betas)


# --- the reference against diffusers ------------------------------------------------------------------------
@pytest.mark.parametrize("step", [999, 500, 10, 1, 0])
def test_p_sample_step_matches_diffusers_step(ref, step):
    diffusers = pytest.importorskip("diffusers", reason="diffusers is a test dependency (requirements/ci.txt)")
    scheduler = diffusers.DDPMScheduler(num_train_timesteps=T, beta_schedule="linear", beta_start=1e-4,
                                        beta_end=0.02, clip_sample=False)
    # diffusers' own float32 tables, and the betas its step re-derives from them, so only the formulas differ
    ab = scheduler.alphas_cumprod.double()
    betas = 1 - ab / torch.cat([torch.ones(1, dtype=torch.float64), ab[:-1]])
    torch.manual_seed(step)
    x_t, eps = torch.randn(3, 1, 8, 8), torch.randn(3, 1, 8, 8)
    theirs = scheduler.step(eps, step, x_t, generator=torch.Generator().manual_seed(step))
    z = torch.randn(x_t.shape, generator=torch.Generator().manual_seed(step))
    t = torch.full((3,), step)
    ours = ref.p_sample_step(lambda x, _t: eps, x_t, t, betas, ab, z)
    torch.testing.assert_close(ours, theirs.prev_sample, rtol=1e-4, atol=1e-4)
    mean, variance = ref.q_posterior(theirs.pred_original_sample.double(), x_t.double(), t, betas, ab)
    expected_var = scheduler._get_variance(step).double() if step > 0 else torch.tensor(0.0, dtype=torch.float64)
    torch.testing.assert_close(variance.flatten(), expected_var.expand(3), rtol=1e-4, atol=1e-12)
    torch.testing.assert_close((mean + variance.sqrt() * z).float(), theirs.prev_sample, rtol=1e-4, atol=1e-4)


def test_diffusers_add_noise_has_the_half_precision_bug(linear):
    """The catalogue cites diffusers' add_noise for half_precision_coefficients: check that it behaves so."""
    diffusers = pytest.importorskip("diffusers", reason="diffusers is a test dependency (requirements/ci.txt)")
    scheduler = diffusers.DDPMScheduler(num_train_timesteps=T, beta_schedule="linear", beta_start=1e-4, beta_end=0.02)
    x0, noise, t = torch.zeros(2, 4, dtype=torch.float16), torch.ones(2, 4, dtype=torch.float16), torch.tensor([0, 1])
    theirs = scheduler.add_noise(x0, noise, t)
    bug = instructor_bug(LAB, "half_precision_coefficients").impl(x0, t, noise, linear[1])
    assert torch.equal(theirs, bug)
    assert theirs[0].abs().max().item() == 0.0  # no noise at all at t = 0


# --- properties of the reference --------------------------------------------------------------------------
def test_oracle_step_lands_on_the_posterior_mean(ref, linear):
    betas, ab = linear
    x0, xt = torch.randn(4, 1, 8, 8, dtype=torch.float64), torch.randn(4, 1, 8, 8, dtype=torch.float64)
    t = torch.tensor([0, 1, 500, 999])
    mean, variance = ref.q_posterior(x0, xt, t, betas, ab)
    torch.testing.assert_close(ref.p_sample_step(OracleDenoiser(x0, ab), xt, t, betas, ab, torch.zeros_like(xt)), mean)
    assert variance[0].item() == 0  # t = 0: the clean image, no noise
    torch.testing.assert_close(mean[0], x0[0], rtol=1e-12, atol=1e-12)
    assert ref.ddpm_loss(OracleDenoiser(x0, ab), x0, t, torch.randn_like(x0), ab).item() < 1e-12


def test_posterior_matches_bayes_by_monte_carlo(ref, linear):
    """q(x_{t-1} | x_t, x0) from the formulas vs sampling x_{t-1} ~ q(.|x0), x_t ~ q(.|x_{t-1}) and regressing."""
    betas, ab = linear
    t, n = 300, 200_000
    gen = torch.Generator().manual_seed(0)
    x0 = torch.full((n, 1), 0.7, dtype=torch.float64)
    prev = ab[t - 1].sqrt() * x0 + (1 - ab[t - 1]).sqrt() * torch.randn(n, 1, generator=gen, dtype=torch.float64)
    xt = (1 - betas[t]).sqrt() * prev + betas[t].sqrt() * torch.randn(n, 1, generator=gen, dtype=torch.float64)
    # x_{t-1} given x_t is Gaussian with mean linear in x_t: least squares recovers the weight and the residual variance
    design = torch.cat([xt, torch.ones_like(xt)], dim=1)
    coef = torch.linalg.lstsq(design, prev).solution
    residual = (prev - design @ coef).var().item()
    mean, variance = ref.q_posterior(x0[:1], torch.zeros(1, 1, dtype=torch.float64), torch.tensor([t]), betas, ab)
    weight_xt = ((1 - betas[t]).sqrt() * (1 - ab[t - 1]) / (1 - ab[t])).item()
    assert abs(coef[0].item() - weight_xt) < 0.01
    assert abs(coef[1].item() - mean.item()) < 0.01
    assert abs(residual / variance.item() - 1) < 0.02


# --- the catalogued bugs are real: each changes the reference's output -------------------------------------
def test_new_bugs_differ_from_the_reference(ref, linear):
    betas, ab = linear
    x0, xt, z = torch.randn(3, 1, 8, 8), torch.randn(3, 1, 8, 8), torch.randn(3, 1, 8, 8)
    model = TinyDenoiser(seed=0)
    t = torch.tensor([0, 5, 900])
    bug = lambda bug_id: instructor_bug(LAB, bug_id).impl  # noqa: E731
    assert not torch.allclose(bug("alpha_bar_prev_wraps")(x0, xt, t, betas, ab)[1],
                              ref.q_posterior(x0, xt, t, betas, ab)[1])
    assert not torch.allclose(bug("x0_as_target")(model, x0, t, z, ab), ref.ddpm_loss(model, x0, t, z, ab))
    for bug_id in ("alpha_bar_in_mean", "variance_as_std"):
        assert not torch.allclose(bug(bug_id)(model, xt, t, betas, ab, z), ref.p_sample_step(model, xt, t, betas, ab, z))
    x16 = torch.zeros(3, 4, dtype=torch.float16)
    assert not torch.equal(bug("half_precision_coefficients")(x16, t, torch.ones_like(x16), ab),
                           ref.q_sample(x16, t, torch.ones_like(x16), ab))


# --- the numbers the notebook's text states in words ------------------------------------------------------
def test_cosine_clip_changes_only_the_last_beta(ref):
    raw = instructor_bug(LAB, "unclipped_cosine").impl("cosine", T)
    assert (raw > 0.999).nonzero().flatten().tolist() == [T - 1]
    assert raw[T - 2].item() == pytest.approx(0.75, abs=1e-3) and raw[T - 3].item() == pytest.approx(0.556, abs=1e-3)
    torch.testing.assert_close(ref.make_beta_schedule("cosine", T)[:-1], raw[:-1], rtol=1e-12, atol=1e-15)


def test_silent_broadcast_is_exact_for_one_image(ref, linear):
    _, ab = linear
    x0, noise = torch.randn(1, 3, 64, 64), torch.randn(1, 3, 64, 64)
    t = torch.tensor([700])
    buggy = instructor_bug(LAB, "silent_broadcast").impl(x0, t, noise, ab)
    torch.testing.assert_close(buggy, ref.q_sample(x0, t, noise, ab), rtol=0, atol=0)


def test_first_reverse_step_weights(ref):
    """Section 7.5 states it in words: the posterior mean's weight on x_t, sqrt(alpha_t)(1 - abar_(t-1))/(1 - abar_t),
    is below 1 at every step of every schedule, and the cosine schedule's last beta (0.999) gives eps_hat a large
    weight, beta_T / (sqrt(alpha_T) sqrt(1 - abar_T)), in the first reverse step (about 0.02 for linear)."""
    for kind in ("linear", "scaled_linear", "cosine"):
        betas = ref.make_beta_schedule(kind, T)
        ab = ref.alpha_bar_from_betas(betas)
        ab_prev = torch.cat([torch.ones(1, dtype=ab.dtype), ab[:-1]])
        weight_xt = (1 - betas).sqrt() * (1 - ab_prev) / (1 - ab)
        assert weight_xt.max().item() < 1 and weight_xt[0].item() == 0, kind
        # the same weight as q_posterior's: x0 = 0, x_t = 1 gives the weight of x_t
        t = torch.arange(T)
        mean, _ = ref.q_posterior(torch.zeros(T, 1, dtype=torch.float64), torch.ones(T, 1, dtype=torch.float64), t,
                                  betas, ab)
        torch.testing.assert_close(mean.flatten(), weight_xt)
    weight_eps = {kind: (b[-1] / (1 - b[-1]).sqrt() / (1 - ref.alpha_bar_from_betas(b)[-1]).sqrt()).item()
                  for kind, b in ((k, ref.make_beta_schedule(k, T)) for k in ("linear", "cosine"))}
    assert weight_eps["cosine"] == pytest.approx(31.6, abs=0.1)
    assert weight_eps["linear"] == pytest.approx(0.0202, abs=1e-4)


# --- the helpers the lab uses ----------------------------------------------------------------------------
def test_models_travel_to_the_kernel_by_value():
    x0 = torch.randn(2, 1, 8, 8)
    ab = torch.linspace(0.99, 0.01, 10, dtype=torch.float64)
    for model in (TinyDenoiser(seed=3), OracleDenoiser(x0, ab)):
        encoder = wire.Encoder()
        tree = encoder.encode((model,))
        (rebuilt,) = wire.decode(tree, encoder.tensors, modules={})
        assert type(rebuilt) is type(model) and rebuilt is not model
        x, t = torch.randn(2, 1, 8, 8), torch.tensor([1, 7])
        assert torch.equal(rebuilt(x, t), model(x, t))
        with pytest.raises(ValueError):  # the trusted side never rebuilds a model a kernel sent
            wire.decode(tree, encoder.tensors)


def test_tiny_denoiser_seed_leaves_the_global_generator_alone():
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    TinyDenoiser(seed=123)
    assert torch.equal(torch.rand(3), expected)


def test_save_and_load_samples(tmp_path):
    images = torch.rand(5, 1, 8, 8)
    path = save_samples(images, "unit", {"schedule": "linear"}, folder=tmp_path)
    loaded, meta = load_samples("unit", folder=tmp_path)
    assert path.exists() and torch.equal(loaded, images) and meta == {"schedule": "linear"}
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        save_samples(images * 2 - 1, "bad", folder=tmp_path)
    with pytest.raises(ValueError, match="finite"):
        save_samples(torch.full((1, 1, 8, 8), float("nan")), "nan", folder=tmp_path)
    with pytest.raises(FileNotFoundError, match="no samples named"):
        load_samples("missing", folder=tmp_path)

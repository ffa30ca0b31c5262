"""Lab 2's reference solution against Hugging Face diffusers' DDPMScheduler (a test-only dependency)."""
from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # diffusers must never reach for the network here
diffusers = pytest.importorskip("diffusers", reason="diffusers is a test dependency: pip install diffusers")

from genlab.testing import load_reference  # noqa: E402

KINDS = {"linear": "linear", "scaled_linear": "scaled_linear", "cosine": "squaredcos_cap_v2"}


@pytest.fixture(scope="module")
def ref():
    return load_reference("lab2_diffusion")


@pytest.mark.parametrize("ours,theirs", KINDS.items())
def test_schedules_match_diffusers(ref, ours, theirs):
    scheduler = diffusers.DDPMScheduler(num_train_timesteps=1000, beta_schedule=theirs, beta_start=1e-4,
                                        beta_end=0.02)
    betas = ref.make_beta_schedule(ours, 1000)
    assert betas.dtype == torch.float64 and betas.shape == (1000,)
    torch.testing.assert_close(betas.float(), scheduler.betas, rtol=1e-5, atol=1e-8)
    torch.testing.assert_close(ref.alpha_bar_from_betas(betas).float(), scheduler.alphas_cumprod,
                               rtol=1e-4, atol=1e-8)


@pytest.mark.parametrize("ours,theirs", KINDS.items())
def test_q_sample_matches_add_noise(ref, ours, theirs):
    scheduler = diffusers.DDPMScheduler(num_train_timesteps=1000, beta_schedule=theirs, beta_start=1e-4,
                                        beta_end=0.02)
    torch.manual_seed(0)
    x0, t = torch.randn(6, 3, 16, 16), torch.tensor([0, 1, 10, 500, 998, 999])
    noise = torch.randn_like(x0)
    alpha_bar = ref.alpha_bar_from_betas(ref.make_beta_schedule(ours, 1000))
    got = ref.q_sample(x0, t, noise, alpha_bar)
    torch.testing.assert_close(got, scheduler.add_noise(x0, noise, t), rtol=1e-5, atol=1e-5)

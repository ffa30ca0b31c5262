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


def _trailing_rule(T, n):
    """Section 7.7's trailing rule, written out: round(T - k * (T / n)) - 1 in float64, T / n first, halves to even."""
    import numpy as np

    return (np.round(T - np.arange(n, dtype=np.float64) * (T / n)) - 1).astype(np.int64).tolist()


def _diffusers_trailing(T, n):
    scheduler = diffusers.DDIMScheduler(num_train_timesteps=T, timestep_spacing="trailing", steps_offset=0)
    scheduler.set_timesteps(n)
    return scheduler.timesteps.tolist()


def test_trailing_timesteps_follow_the_stated_rule_and_differ_from_diffusers_where_the_text_says(ref):
    """Section 7.7 states the trailing rule as the reference computes it, and where diffusers' np.arange departs."""
    for T in (*range(1, 65), 1000):                    # the hidden test's grid
        for n in range(1, T + 1):
            assert ref.ddim_timesteps(T, n, "trailing").tolist() == _trailing_rule(T, n), (T, n)
    # the text's example: 27 - 13 * 27 / 26 is exactly 13.5, but 27 / 26 rounded first gives 13.499999999999998
    assert 27 - 13 * 27 / 26 == 13.5 and 27 - 13 * (27 / 26) == 13.499999999999998
    assert ref.ddim_timesteps(27, 26, "trailing")[13].item() == 12
    for T in (1000, 100, 37):                           # the pairs the hidden test compares with diffusers: alike
        for n in sorted({1, 3, 7, 10, 50, T} & set(range(1, T + 1))):
            assert _diffusers_trailing(T, n) == _trailing_rule(T, n), (T, n)
    assert _diffusers_trailing(1000, 48)[3] == 936 and _trailing_rule(1000, 48)[3] == 937
    assert len(_diffusers_trailing(1000, 61)) == 62 and _diffusers_trailing(1000, 61)[-1] == -1

"""Known bugs of Lab 2 (diffusion: schedules, q(x_t | x_0), the posterior, the loss, the sampler), each as code.

Every entry is a mistake found in real diffusion code; the lab's failure-modes cells reproduce each one and
measure its symptom, and the grader names it when a student's outputs match it.
"""
from __future__ import annotations

import math

import torch

from genlab.catalog import Bug, too_slow

KINDS = ("linear", "scaled_linear", "cosine")


def _cosine_alpha_bar(u, s):
    return math.cos((u + s) / (1 + s) * math.pi / 2) ** 2


def _unknown(kind):
    raise ValueError(f"unknown schedule kind {kind!r}; valid kinds: {', '.join(KINDS)}")


# --- make_beta_schedule ----------------------------------------------------------------------------
def unclipped_cosine(kind, num_steps, beta_start=1e-4, beta_end=0.02, s=0.008, max_beta=0.999):
    if kind == "linear":
        return torch.linspace(beta_start, beta_end, num_steps, dtype=torch.float64)
    if kind == "scaled_linear":
        return torch.linspace(beta_start ** 0.5, beta_end ** 0.5, num_steps, dtype=torch.float64) ** 2
    if kind == "cosine":
        betas = [1 - _cosine_alpha_bar((i + 1) / num_steps, s) / _cosine_alpha_bar(i / num_steps, s)
                 for i in range(num_steps)]
        return torch.tensor(betas, dtype=torch.float64)  # no min(..., max_beta): the last beta is 1
    _unknown(kind)


def scaled_linear_typo(kind, num_steps, beta_start=1e-4, beta_end=0.02, s=0.008, max_beta=0.999):
    if kind == "linear":
        return torch.linspace(beta_start, beta_end, num_steps, dtype=torch.float64)
    if kind == "scaled_linear":
        # squares the linearly spaced betas instead of linearly spacing their square roots
        return torch.linspace(beta_start, beta_end, num_steps, dtype=torch.float64) ** 2
    if kind == "cosine":
        betas = [min(1 - _cosine_alpha_bar((i + 1) / num_steps, s) / _cosine_alpha_bar(i / num_steps, s), max_beta)
                 for i in range(num_steps)]
        return torch.tensor(betas, dtype=torch.float64)
    _unknown(kind)


# --- alpha_bar_from_betas --------------------------------------------------------------------------
def low_precision_alpha_bar(betas):
    alphas = 1 - betas.to(torch.float16)          # 1 - 1e-4 rounds to exactly 1.0 in float16
    return torch.cumprod(alphas, dim=0).to(betas.dtype)


# --- q_sample ----------------------------------------------------------------------------------------
def silent_broadcast(x0, t, noise, alpha_bar):
    a = alpha_bar[t]                                # shape [B]
    # [B] lines up with the LAST dimension of x0 ([B, C, H, W] -> W): it runs whenever B == W, and is wrong
    return a.sqrt().to(x0.dtype) * x0 + (1 - a).sqrt().to(x0.dtype) * noise


def off_by_one_t(x0, t, noise, alpha_bar):
    a = alpha_bar[t - 1]                            # 1-indexed thinking on a 0-indexed table: t = 0 wraps to -1
    shape = (-1,) + (1,) * (x0.dim() - 1)
    return a.sqrt().view(shape).to(x0.dtype) * x0 + (1 - a).sqrt().view(shape).to(x0.dtype) * noise


def materialized_broadcast(x0, t, noise, alpha_bar):
    a = alpha_bar[t]
    shape = (-1,) + (1,) * (x0.dim() - 1)
    # .contiguous() copies the stride-0 expanded view into two full-size tensors
    sqrt_a = a.sqrt().to(x0.dtype).view(shape).expand_as(x0).contiguous()
    sqrt_1ma = (1 - a).sqrt().to(x0.dtype).view(shape).expand_as(x0).contiguous()
    return sqrt_a * x0 + sqrt_1ma * noise


def python_loop_over_batch(x0, t, noise, alpha_bar):
    rows = []
    for i in range(x0.shape[0]):
        a = alpha_bar[t[i]]
        rows.append(a.sqrt().to(x0.dtype) * x0[i] + (1 - a).sqrt().to(x0.dtype) * noise[i])
    return torch.stack(rows)


def half_precision_coefficients(x0, t, noise, alpha_bar):
    # the table is cast to the image's dtype first (as diffusers' DDPMScheduler.add_noise does): in float16,
    # alpha_bar[0] = 1 - 1e-4 rounds to exactly 1.0, so 1 - a is 0 and the first steps add no noise at all
    a = alpha_bar.to(device=x0.device, dtype=x0.dtype)[t]
    shape = (-1,) + (1,) * (x0.dim() - 1)
    return a.sqrt().view(shape) * x0 + (1 - a).sqrt().view(shape) * noise


# --- q_posterior ---------------------------------------------------------------------------------------
def alpha_bar_prev_wraps(x0, xt, t, betas, alpha_bar):
    shape = (-1,) + (1,) * (x0.dim() - 1)
    a_t = alpha_bar[t]
    a_prev = alpha_bar[t - 1]                        # t = 0 wraps to alpha_bar[-1] instead of alpha_bar_{-1} = 1
    b_t = betas[t]
    mean = ((a_prev.sqrt() * b_t / (1 - a_t)).view(shape).to(x0.dtype) * x0
            + ((1 - b_t).sqrt() * (1 - a_prev) / (1 - a_t)).view(shape).to(x0.dtype) * xt)
    variance = ((1 - a_prev) / (1 - a_t) * b_t).view(shape).to(x0.dtype)
    return mean, variance


# --- ddpm_loss -------------------------------------------------------------------------------------------
def x0_as_target(model, x0, t, noise, alpha_bar):
    a = alpha_bar.to(x0.device)[t].view((-1,) + (1,) * (x0.dim() - 1))
    xt = a.sqrt().to(x0.dtype) * x0 + (1 - a).sqrt().to(x0.dtype) * noise
    # the network's output is regressed onto the clean image, while the sampler reads it as the noise
    return ((model(xt, t) - x0) ** 2).mean()


# --- p_sample_step ---------------------------------------------------------------------------------------
def alpha_bar_in_mean(model, xt, t, betas, alpha_bar, noise):
    shape = (-1,) + (1,) * (xt.dim() - 1)
    eps = model(xt, t)
    a_t = alpha_bar[t]
    a_prev = torch.where(t > 0, alpha_bar[(t - 1).clamp(min=0)], torch.ones_like(a_t))
    b_t = betas[t]
    # 1 / sqrt(alpha_bar_t) where Ho et al.'s eq. 11 has 1 / sqrt(alpha_t): each step rescales x_t by the
    # whole remaining signal fraction, so the samples blow up
    mean = (xt - (b_t / (1 - a_t).sqrt()).view(shape).to(xt.dtype) * eps) / a_t.sqrt().view(shape).to(xt.dtype)
    sigma = ((1 - a_prev) / (1 - a_t) * b_t).sqrt().view(shape).to(xt.dtype)
    return mean + sigma * noise


def variance_as_std(model, xt, t, betas, alpha_bar, noise):
    shape = (-1,) + (1,) * (xt.dim() - 1)
    eps = model(xt, t)
    a_t = alpha_bar[t]
    a_prev = torch.where(t > 0, alpha_bar[(t - 1).clamp(min=0)], torch.ones_like(a_t))
    b_t = betas[t]
    mean = (xt - (b_t / (1 - a_t).sqrt()).view(shape).to(xt.dtype) * eps) / (1 - b_t).sqrt().view(shape).to(xt.dtype)
    variance = ((1 - a_prev) / (1 - a_t) * b_t).view(shape).to(xt.dtype)
    return mean + variance * noise                   # sigma^2 * z where Algorithm 2 has sigma * z: too little noise


BUGS = [
    Bug("unclipped_cosine", "make_beta_schedule", "cosine schedule without the 0.999 clip",
        "alpha_bar(T) = cos^2(pi/2) is 0, so the last beta is 1: alpha_bar_T = 0 and 1/sqrt(alpha_bar_T) "
        "(used to predict x_0 from the noise) is infinite at the last step.",
        "beta_i = min(1 - alpha_bar((i+1)/T) / alpha_bar(i/T), max_beta) with max_beta = 0.999.",
        "Nichol & Dhariwal 2021, Improved DDPM, Sec. 3.2 (betas clipped to be no larger than 0.999)",
        unclipped_cosine),
    Bug("scaled_linear_typo", "make_beta_schedule", "scaled_linear squares the betas, not their square roots",
        "linspace(beta_start, beta_end) ** 2 makes every beta tiny (beta_start^2 ... beta_end^2), so "
        "alpha_bar_T stays near 1 and the last step is still mostly image, not noise.",
        "linspace(sqrt(beta_start), sqrt(beta_end), T) ** 2.",
        "CompVis latent-diffusion ldm/modules/diffusionmodules/util.py make_beta_schedule; diffusers "
        "DDPMScheduler docs (beta_schedule='scaled_linear')",
        scaled_linear_typo),
    Bug("low_precision_alpha_bar", "alpha_bar_from_betas", "alpha_bar accumulated in float16",
        "1 - beta is rounded to float16 before the product: 1 - 1e-4 becomes exactly 1.0, so the first steps "
        "add no noise at all, and rounding errors compound over the cumulative product.",
        "keep betas and the cumulative product in float64 (or float32); cast only the coefficients.",
        "PyTorch docs: torch.finfo (float16 eps = 2^-10); Ho et al. 2020 official code computes the "
        "schedule in float64",
        low_precision_alpha_bar),
    Bug("silent_broadcast", "q_sample", "alpha_bar[t] multiplied without a reshape",
        "a [B] coefficient broadcasts against the last dimension of x0 ([B, C, H, W] -> W), not the batch: "
        "it raises when B != W and silently mixes the coefficients of different examples when B == W.",
        "reshape to [B, 1, ..., 1]: a.view(-1, *([1] * (x0.dim() - 1))).",
        "PyTorch docs: Broadcasting semantics (trailing dimensions are aligned first)",
        silent_broadcast),
    Bug("off_by_one_t", "q_sample", "alpha_bar[t - 1] with 0-indexed timesteps",
        "the paper's t runs 1..T but the table is 0-indexed: alpha_bar[t - 1] uses the previous step, and "
        "t = 0 wraps to alpha_bar[-1], the last (almost pure-noise) step; t = T no longer raises.",
        "index with t directly: alpha_bar[t] for t in 0..T-1.",
        "Ho et al. 2020, Algorithm 1 (t ~ Uniform({1, ..., T})) vs 0-indexed arrays in code",
        off_by_one_t),
    Bug("materialized_broadcast", "q_sample", "coefficients expanded and copied to the full image shape",
        "the values are right, but .expand(...).contiguous() (or .repeat) copies each coefficient to the "
        "full size of x0, so a call needs two more image-sized buffers than it should.",
        "let broadcasting do it: a.view(B, 1, 1, 1) * x0 (a view with stride 0 costs no memory).",
        "PyTorch docs: Tensor.expand (a view, no new memory) vs Tensor.repeat (copies the data)",
        materialized_broadcast, kinds=("call", "grad_of", "peak_memory")),
    Bug("python_loop_over_batch", "q_sample", "a Python loop over the batch",
        "the values are right, but one small kernel per example is many times slower than one batched op.",
        "index alpha_bar with the whole t tensor and broadcast over the batch.",
        "PyTorch performance tuning guide (vectorise, avoid Python loops)",
        python_loop_over_batch, detect=too_slow),
    Bug("half_precision_coefficients", "q_sample", "alpha_bar cast to the image's half-precision dtype first",
        "the coefficients are computed after alpha_bar is rounded to float16 / bfloat16: alpha_bar[0] = 1 - 1e-4 "
        "becomes exactly 1.0, so sqrt(1 - alpha_bar) = 0 and the first steps add no noise (float16: steps 0-1 "
        "of the linear schedule; bfloat16: many more). The model is then trained on clean images labelled noisy.",
        "index and take the square roots in the table's float64, then cast the two coefficients with "
        ".to(x0.dtype).",
        "diffusers DDPMScheduler.add_noise (alphas_cumprod.to(dtype=original_samples.dtype) before the sqrt); "
        "PyTorch docs: torch.finfo (float16 eps = 2^-10)",
        half_precision_coefficients),
    Bug("alpha_bar_prev_wraps", "q_posterior", "alpha_bar[t - 1] for alpha_bar_{t-1} with no case for t = 0",
        "at t = 0 the previous cumulative product is the empty product, 1 (no noise yet); alpha_bar[t - 1] wraps to "
        "alpha_bar[-1], the last, almost pure-noise step, so the final reverse step gets a variance near 1 instead "
        "of 0 and a mean that multiplies x_t by about (1 - alpha_bar[-1]) / beta_0 (10^4 for the linear schedule).",
        "use alpha_bar_prev = 1 at t = 0: torch.where(t > 0, alpha_bar[(t - 1).clamp(min=0)], 1).",
        "Ho et al. 2020, eq. 7 (alpha_bar_0 := 1 in the paper's 1-indexing); diffusers DDPMScheduler.step "
        "(alpha_prod_t_prev = self.one if prev_t < 0)",
        alpha_bar_prev_wraps),
    Bug("x0_as_target", "ddpm_loss", "the loss regresses the clean image instead of the noise",
        "L_simple is || eps - eps_theta(x_t, t) ||^2; with x0 as the target the network learns to predict the "
        "image, and a sampler that reads its output as the noise subtracts an image from x_t at every step.",
        "compare the model's output with the noise that made x_t: ((model(x_t, t) - noise) ** 2).mean().",
        "Ho et al. 2020, eq. 14 and Algorithm 1 (gradient step on || eps - eps_theta ||^2); diffusers "
        "prediction_type='epsilon' vs 'sample'",
        x0_as_target),
    Bug("alpha_bar_in_mean", "p_sample_step", "1 / sqrt(alpha_bar_t) instead of 1 / sqrt(alpha_t) in the mean",
        "the reverse mean is (x_t - beta_t / sqrt(1 - alpha_bar_t) eps) / sqrt(alpha_t); dividing by "
        "sqrt(alpha_bar_t) rescales x_t by the whole remaining signal fraction at every step, so the samples "
        "grow without bound.",
        "divide by sqrt(alpha_t) = sqrt(1 - beta_t), the one-step factor.",
        "Ho et al. 2020, eq. 11 and Algorithm 2 line 4",
        alpha_bar_in_mean),
    Bug("variance_as_std", "p_sample_step", "the noise is scaled by the variance sigma^2, not the std sigma",
        "x_{t-1} = mean + sigma_t z; sigma_t^2 * z adds far too little noise (at the last steps of the linear "
        "schedule sigma^2 is 0.02 where sigma is 0.14), so the samples come out smoother, with a smaller pixel "
        "spread than the data's.",
        "multiply the standard normal draw by the square root of the posterior variance.",
        "Ho et al. 2020, Algorithm 2 line 4 (+ sigma_t z); diffusers DDPMScheduler.step "
        "(self._get_variance(t) ** 0.5 * variance_noise)",
        variance_as_std),
]

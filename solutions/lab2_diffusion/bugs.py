"""Lab 2's catalogued bugs in full, as a student would write them: the instructor's side of the catalogue.

Students see these bugs only as edits of their own functions (``genlab.catalog.lab2_diffusion``): each body here
is the answer with a small edit (or carries its formula), so it must not ship (issue 21). The bug samples are
made of these bodies (``bug_cell``), the grader replays calls through them, and ``tests/test_catalogue.py``
checks that each body and its edit are the same bug.
"""
from __future__ import annotations

import math

import torch

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
    a_prev = alpha_bar[t - 1]                        # t = 0 wraps to alpha_bar[-1] instead of alpha_bar_0 = 1
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


# --- ddim_timesteps and ddim_step --------------------------------------------------------------------------
def trailing_as_leading(num_train_steps, num_steps, spacing="trailing"):
    if not 1 <= num_steps <= num_train_steps:
        raise ValueError(f"num_steps must lie in 1..{num_train_steps}, got {num_steps}")
    if spacing not in ("leading", "trailing"):
        raise ValueError(f"unknown spacing {spacing!r}; valid spacings: 'leading', 'trailing'")
    # both spacings laid out from 0 upwards in strides of T // n: index T - 1 is never visited
    return (torch.arange(num_steps - 1, -1, -1) * (num_train_steps // num_steps)).long()


def sigma_from_one_step_beta(alpha_bar, t, t_prev, eta):
    a_t = alpha_bar[t]
    a_prev = torch.where(t_prev >= 0, alpha_bar[t_prev.clamp(min=0)], torch.ones_like(a_t))
    a_before = torch.where(t >= 1, alpha_bar[(t - 1).clamp(min=0)], torch.ones_like(a_t))
    beta_t = 1 - a_t / a_before                      # one step of the full chain, not the jump from t_prev to t
    return eta * ((1 - a_prev) / (1 - a_t) * beta_t).sqrt()


def alpha_prev_of_previous_ddpm_step(model, xt, t, t_prev, alpha_bar, eta=0.0, noise=None):
    shape = (-1,) + (1,) * (xt.dim() - 1)
    eps = model(xt, t)
    a_t = alpha_bar[t]
    prev = t - 1                                     # the full chain's previous step, not the t_prev passed in
    a_prev = torch.where(prev >= 0, alpha_bar[prev.clamp(min=0)], torch.ones_like(a_t))
    sigma = eta * ((1 - a_prev) / (1 - a_t) * (1 - a_t / a_prev)).sqrt()
    x0_hat = (xt - (1 - a_t).sqrt().view(shape) * eps) / a_t.sqrt().view(shape)
    x_prev = a_prev.sqrt().view(shape) * x0_hat + (1 - a_prev - sigma ** 2).clamp(min=0).sqrt().view(shape) * eps
    if eta > 0:
        x_prev = x_prev + sigma.view(shape) * noise
    return x_prev.to(xt.dtype)


# --- drop_labels and cfg_eps ------------------------------------------------------------------------------
def labels_never_dropped(y, p_uncond, null_label, generator=None):
    torch.rand(y.shape, generator=generator)         # the draws are made, and ignored: no label is ever dropped
    return y.clone()


def guidance_halves_swapped(model, x, t, y, guidance_scale, null_label):
    both = model(torch.cat([x, x]), torch.cat([t, t]), torch.cat([y, torch.full_like(y, null_label)]))
    eps_u, eps_c = both.chunk(2)                     # the batch was built [conditional, null]: read backwards
    return eps_u + guidance_scale * (eps_c - eps_u)


def guidance_scale_as_w(model, x, t, y, guidance_scale, null_label):
    eps_c, eps_u = model(x, t, y), model(x, t, torch.full_like(y, null_label))
    return (1 + guidance_scale) * eps_c - guidance_scale * eps_u   # Ho & Salimans' w where diffusers' omega is meant


BODIES = {fn.__name__: fn for fn in (
    unclipped_cosine,
    scaled_linear_typo,
    low_precision_alpha_bar,
    silent_broadcast,
    off_by_one_t,
    materialized_broadcast,
    python_loop_over_batch,
    half_precision_coefficients,
    alpha_bar_prev_wraps,
    x0_as_target,
    alpha_bar_in_mean,
    variance_as_std,
    trailing_as_leading,
    sigma_from_one_step_beta,
    alpha_prev_of_previous_ddpm_step,
    labels_never_dropped,
    guidance_halves_swapped,
    guidance_scale_as_w,
)}

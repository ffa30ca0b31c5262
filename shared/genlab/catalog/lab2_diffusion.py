"""Known bugs of Lab 2 (diffusion: schedules, q(x_t | x_0), the posterior, the loss, the sampler), each as the edit of
your own function that makes it.

Every entry is a mistake found in real diffusion code; the lab's failure-modes cells reproduce each one on *your*
functions and measure its symptom, and the grader names it when a student's outputs match it. Written out in
full, each bug would be the answer with one edit, so this catalogue writes it as what it does to a correct
function (feed it another table, another axis, another dtype, another noise); the full bodies stay with the
instructor (``solutions/lab2_diffusion/bugs.py``).
"""
from __future__ import annotations

import torch

from genlab.catalog import Bug, edit, too_slow


# --- make_beta_schedule ----------------------------------------------------------------------------
@edit("make_beta_schedule")
def unclipped_cosine(make_beta_schedule, kind, num_steps, beta_start=1e-4, beta_end=0.02, s=0.008, max_beta=0.999):
    # max_beta ignored: a clip at 1 clips nothing, and the last cosine beta, 1 - f(1) / f((T-1)/T), is exactly 1
    return make_beta_schedule(kind, num_steps, beta_start, beta_end, s, max_beta=1.0)


@edit("make_beta_schedule")
def scaled_linear_typo(make_beta_schedule, kind, num_steps, beta_start=1e-4, beta_end=0.02, s=0.008, max_beta=0.999):
    if kind == "scaled_linear":  # the linear schedule's betas, squared: beta_start^2 ... beta_end^2
        return make_beta_schedule("linear", num_steps, beta_start, beta_end, s, max_beta) ** 2
    return make_beta_schedule(kind, num_steps, beta_start, beta_end, s, max_beta)


# --- alpha_bar_from_betas --------------------------------------------------------------------------
@edit("alpha_bar_from_betas")
def low_precision_alpha_bar(alpha_bar_from_betas, betas):
    # accumulated in float16, where 1 - 1e-4 rounds to exactly 1.0, then returned in the dtype of betas
    return alpha_bar_from_betas(betas.to(torch.float16)).to(betas.dtype)


# --- q_sample ----------------------------------------------------------------------------------------
@edit("q_sample")
def silent_broadcast(q_sample, x0, t, noise, alpha_bar):
    # A [B] coefficient multiplied without a reshape lines up with the LAST dimension of x0 ([B, C, H, W] -> W), not
    # the batch. Unless B == W (or one of them is 1) the product raises, as this one does:
    torch.ones(t.shape, dtype=x0.dtype, device=x0.device) * x0
    # and where it runs it is wrong: your q_sample with the last axis taken for the batch
    return q_sample(x0.movedim(-1, 0), t, noise.movedim(-1, 0), alpha_bar).movedim(0, -1)


@edit("q_sample")
def off_by_one_t(q_sample, x0, t, noise, alpha_bar):
    # alpha_bar[t - 1], 1-indexed thinking on a 0-indexed table, read as Python reads it: t = 0 wraps to index -1,
    # the last (almost pure-noise) step, and t = T is no longer out of range. Your q_sample on the table written
    # twice, at t + T - 1, reads exactly those entries.
    steps = alpha_bar.shape[0]
    return q_sample(x0, t + steps - 1, noise, torch.cat([alpha_bar, alpha_bar]))


@edit("q_sample")
def materialized_broadcast(q_sample, x0, t, noise, alpha_bar):
    # each coefficient copied to the full shape of x0, as .expand(...).contiguous() or .repeat does (your q_sample
    # of ones and zeros is a coefficient at every pixel): two image-sized buffers held while x_t is computed
    copies = [q_sample(torch.ones_like(x0), t, torch.zeros_like(noise), alpha_bar),   # sqrt(alpha_bar[t])
              q_sample(torch.zeros_like(x0), t, torch.ones_like(noise), alpha_bar)]   # sqrt(1 - alpha_bar[t])
    xt = q_sample(x0, t, noise, alpha_bar)
    del copies
    return xt


@edit("q_sample")
def python_loop_over_batch(q_sample, x0, t, noise, alpha_bar):
    # the right values, one example (and one set of small kernels) at a time
    return torch.cat([q_sample(x0[i:i + 1], t[i:i + 1], noise[i:i + 1], alpha_bar) for i in range(x0.shape[0])])


@edit("q_sample")
def half_precision_coefficients(q_sample, x0, t, noise, alpha_bar):
    # the table cast to the image's dtype first (as diffusers' DDPMScheduler.add_noise does): in float16,
    # alpha_bar[0] = 1 - 1e-4 rounds to exactly 1.0, so the first steps add no noise at all
    return q_sample(x0, t, noise, alpha_bar.to(device=x0.device, dtype=x0.dtype))


# --- q_posterior ---------------------------------------------------------------------------------------
@edit("q_posterior")
def alpha_bar_prev_wraps(q_posterior, x0, xt, t, betas, alpha_bar):
    # the previous step's alpha_bar read as alpha_bar[t - 1] with no case for t = 0: index -1 wraps to the last,
    # almost pure-noise entry instead of the empty product 1. Your q_posterior on the tables written twice, at t + T,
    # finds exactly that entry before step t.
    steps = alpha_bar.shape[0]
    return q_posterior(x0, xt, t + steps, torch.cat([betas, betas]), torch.cat([alpha_bar, alpha_bar]))


# --- ddpm_loss -------------------------------------------------------------------------------------------
@edit("ddpm_loss")
def x0_as_target(ddpm_loss, model, x0, t, noise, alpha_bar):
    # the network's output regressed onto the clean image, while the sampler reads it as the noise: your loss with
    # the output shifted by noise - x0 measures its distance to x0
    return ddpm_loss(lambda xt, step: model(xt, step) + (noise - x0), x0, t, noise, alpha_bar)


# --- p_sample_step ---------------------------------------------------------------------------------------
@edit("p_sample_step")
def alpha_bar_in_mean(p_sample_step, model, xt, t, betas, alpha_bar, noise):
    # the mean divided by sqrt(alpha_bar_t) where Ho et al.'s eq. 11 has sqrt(alpha_t): your step's mean times
    # sqrt(alpha_t / alpha_bar_t) (1 at t = 0), plus the same sigma_t * noise. Each step rescales x_t by the whole
    # remaining signal fraction, so the samples blow up
    shape = (-1,) + (1,) * (xt.dim() - 1)
    t_here = t.to(xt.device)
    alpha_t, a_t = (1 - betas.to(xt.device)[t_here]), alpha_bar.to(xt.device)[t_here]
    scale = (alpha_t / a_t).sqrt().view(shape).to(xt.dtype)
    return scale * p_sample_step(model, xt, t, betas, alpha_bar, noise / scale)


@edit("p_sample_step", "q_posterior")
def variance_as_std(p_sample_step, q_posterior, model, xt, t, betas, alpha_bar, noise):
    # sigma_t^2 * z where Algorithm 2 has sigma_t * z: your step, given the draw sigma_t * z, adds sigma_t^2 * z,
    # far too little noise (sigma_t^2 from your q_posterior's variance)
    _, variance = q_posterior(xt, xt, t, betas, alpha_bar)
    return p_sample_step(model, xt, t, betas, alpha_bar, variance.sqrt() * noise)


# --- ddim_timesteps and ddim_step ---------------------------------------------------------------------------
@edit("ddim_timesteps")
def trailing_as_leading(ddim_timesteps, num_train_steps, num_steps, spacing="trailing"):
    # "trailing" laid out from 0 upwards in strides of T // n, as "leading" is: the schedule never visits the last
    # index T - 1, where the sampler's pure noise belongs
    return ddim_timesteps(num_train_steps, num_steps, "leading" if spacing == "trailing" else spacing)


@edit("ddim_sigma")
def sigma_from_one_step_beta(ddim_sigma, alpha_bar, t, t_prev, eta):
    # eq. 16 with the full chain's one-step beta_t = 1 - alpha_bar_t / alpha_bar_{t-1} in place of the strided jump's
    # 1 - alpha_bar_t / alpha_bar_prev (the factor (1 - alpha_bar_prev) / (1 - alpha_bar_t) kept): your sigma of the
    # step t -> t - 1, times sqrt((1 - alpha_bar_prev) / (1 - alpha_bar_{t-1}))
    padded = torch.cat([alpha_bar.new_ones(1), alpha_bar])     # padded[k + 1] is index k; padded[0] = 1, index -1
    before = 1 - padded[t]                                      # 1 - alpha_bar_{t-1}
    ratio = torch.where(before > 0, (1 - padded[(t_prev + 1).clamp(min=0)]) / before.clamp(min=1e-300), torch.zeros_like(before))
    return ddim_sigma(alpha_bar, t, t - 1, eta) * ratio.sqrt()


@edit("ddim_step")
def alpha_prev_of_previous_ddpm_step(ddim_step, model, xt, t, t_prev, alpha_bar, eta=0.0, noise=None):
    # the previous state's alpha_bar read at t - 1, the previous step of the full chain, whatever t_prev the
    # strided schedule visits next: your step, told that t_prev is t - 1
    return ddim_step(model, xt, t, t - 1, alpha_bar, eta, noise)


# --- drop_labels and cfg_eps ------------------------------------------------------------------------------
@edit("drop_labels")
def labels_never_dropped(drop_labels, y, p_uncond, null_label, generator=None):
    # the labels passed through: p_uncond ignored, so training never shows the network the null label
    return drop_labels(y, 0.0, null_label, generator)


@edit("cfg_eps")
def guidance_halves_swapped(cfg_eps, model, x, t, y, guidance_scale, null_label):
    # the two halves of the batched call read in the wrong order: eps_c + omega (eps_u - eps_c), which is your
    # guidance at scale 1 - omega (scale 1 then gives the unconditional prediction)
    return cfg_eps(model, x, t, y, 1.0 - guidance_scale, null_label)


@edit("cfg_eps")
def guidance_scale_as_w(cfg_eps, model, x, t, y, guidance_scale, null_label):
    # the scale used as Ho & Salimans' w: (1 + omega) eps_c - omega eps_u, your guidance at scale omega + 1
    # (scale 1 then guides, where it should give the conditional prediction)
    return cfg_eps(model, x, t, y, guidance_scale + 1.0, null_label)


BUGS = [
    Bug("unclipped_cosine", "make_beta_schedule", "cosine schedule without the 0.999 clip",
        "alpha_bar(T) = cos^2(pi/2) is 0, so the last beta is 1: alpha_bar_T = 0 and 1/sqrt(alpha_bar_T) "
        "(used to predict x_0 from the noise) is infinite at the last step.",
        "the cosine betas must not exceed max_beta (0.999 by default): check what your schedule does with the "
        "max_beta argument, and look at the last beta it returns.",
        "Nichol & Dhariwal 2021, Improved DDPM, Sec. 3.2 (betas clipped to be no larger than 0.999)",
        unclipped_cosine),
    Bug("scaled_linear_typo", "make_beta_schedule", "scaled_linear squares the betas, not their square roots",
        "squaring evenly spaced betas makes every beta tiny (beta_start^2 ... beta_end^2), so alpha_bar_T stays "
        "near 1 and the last step is still mostly image, not noise.",
        "the betas must still run from beta_start to beta_end: check which quantity your scaled_linear schedule "
        "spaces evenly, and what it squares.",
        "CompVis latent-diffusion ldm/modules/diffusionmodules/util.py make_beta_schedule; diffusers "
        "DDPMScheduler docs (beta_schedule='scaled_linear')",
        scaled_linear_typo),
    Bug("low_precision_alpha_bar", "alpha_bar_from_betas", "alpha_bar accumulated in float16",
        "1 - beta is rounded to float16 before the product: 1 - 1e-4 becomes exactly 1.0, so the first steps "
        "add no noise at all, and rounding errors compound over the cumulative product.",
        "look for a cast to a 16-bit dtype on the way from betas to the product: the table keeps the dtype of "
        "betas (float64 here).",
        "PyTorch docs: torch.finfo (float16 eps = 2^-10); Ho et al. 2020 official code computes the "
        "schedule in float64",
        low_precision_alpha_bar),
    Bug("silent_broadcast", "q_sample", "alpha_bar[t] multiplied without a reshape",
        "a [B] coefficient broadcasts against the last dimension of x0 ([B, C, H, W] -> W), not the batch: "
        "it raises when B != W and silently mixes the coefficients of different examples when B == W.",
        "the coefficient of each example must line up with the batch axis of x0, not its last axis: look at its "
        "shape where it meets x0 (a view with singleton dimensions costs no copy).",
        "PyTorch docs: Broadcasting semantics (trailing dimensions are aligned first)",
        silent_broadcast),
    Bug("off_by_one_t", "q_sample", "alpha_bar[t - 1] with 0-indexed timesteps",
        "the paper's t runs 1..T but the table is 0-indexed: alpha_bar[t - 1] uses the previous step, and "
        "t = 0 wraps to alpha_bar[-1], the last (almost pure-noise) step; t = T no longer raises.",
        "timesteps are 0-indexed in this lab, as the table is: check the index you read alpha_bar at, and that "
        "t = T still raises.",
        "Ho et al. 2020, Algorithm 1 (t ~ Uniform({1, ..., T})) vs 0-indexed arrays in code",
        off_by_one_t),
    Bug("materialized_broadcast", "q_sample", "coefficients expanded and copied to the full image shape",
        "the values are right, but .expand(...).contiguous() (or .repeat) copies each coefficient to the "
        "full size of x0, so a call needs two more image-sized buffers than it should.",
        "look for .expand(...).contiguous(), .repeat or anything else that copies the coefficients to the shape of "
        "x0: a view with singleton dimensions broadcasts with stride 0, at no memory cost.",
        "PyTorch docs: Tensor.expand (a view, no new memory) vs Tensor.repeat (copies the data)",
        materialized_broadcast, kinds=("call", "grad_of", "peak_memory")),
    Bug("python_loop_over_batch", "q_sample", "a Python loop over the batch",
        "the values are right, but one small kernel per example is many times slower than one batched op.",
        "replace the loop over examples with operations on the whole batch at once (one lookup in the table for "
        "every timestep, then broadcasting).",
        "PyTorch performance tuning guide (vectorise, avoid Python loops)",
        python_loop_over_batch, detect=too_slow),
    Bug("half_precision_coefficients", "q_sample", "alpha_bar cast to the image's half-precision dtype first",
        "the coefficients are computed after alpha_bar is rounded to float16 / bfloat16: alpha_bar[0] = 1 - 1e-4 "
        "becomes exactly 1.0, so the noise coefficient is 0 and the first steps add no noise (float16: steps 0-1 "
        "of the linear schedule; bfloat16: many more). The model is then trained on clean images labelled noisy.",
        "look at where the table, or the entries you take from it, are cast to the dtype of x0: the coefficients "
        "must be computed in the table's own precision, and only the results cast.",
        "diffusers DDPMScheduler.add_noise (alphas_cumprod.to(dtype=original_samples.dtype) before the sqrt); "
        "PyTorch docs: torch.finfo (float16 eps = 2^-10)",
        half_precision_coefficients),
    Bug("alpha_bar_prev_wraps", "q_posterior",
        "alpha_bar[t - 1] for the previous step's alpha_bar, with no case for t = 0",
        "at t = 0 the previous cumulative product is the empty product, 1 (no noise yet); alpha_bar[t - 1] wraps to "
        "alpha_bar[-1], the last, almost pure-noise step, so the final reverse step gets a variance near 1 instead "
        "of 0 and a mean that multiplies x_t by about (1 - alpha_bar[-1]) / betas[0] (10^4 for the linear schedule).",
        "t = 0 needs its own case: check what your index for the previous step reads at t = 0; before the first "
        "step nothing is noised yet, a value the table does not hold.",
        "Ho et al. 2020, eq. 7 (alpha_bar_0 := 1 in the paper's 1-indexing); diffusers DDPMScheduler.step "
        "(its case for prev_t < 0)",
        alpha_bar_prev_wraps),
    Bug("x0_as_target", "ddpm_loss", "the loss regresses the clean image instead of the noise",
        "with the clean image as the target the network learns to predict the image, and a sampler that reads its "
        "output as the noise subtracts an image from x_t at every step.",
        "check what the model's output is compared with: the network of this lab predicts the noise (section 7.1).",
        "Ho et al. 2020, eq. 14 and Algorithm 1 (gradient step on || eps - eps_theta ||^2); diffusers "
        "prediction_type='epsilon' vs 'sample'",
        x0_as_target),
    Bug("alpha_bar_in_mean", "p_sample_step", "1 / sqrt(alpha_bar_t) instead of 1 / sqrt(alpha_t) in the mean",
        "dividing by sqrt(alpha_bar_t) rescales x_t by the whole remaining signal fraction at every step, not by "
        "one step's, so the samples grow without bound.",
        "check the factor that divides x_t in the mean: one reverse step undoes one forward step, not all the "
        "steps up to t.",
        "Ho et al. 2020, eq. 11 and Algorithm 2 line 4",
        alpha_bar_in_mean),
    Bug("variance_as_std", "p_sample_step", "the noise is scaled by the variance sigma^2, not the std sigma",
        "a draw scaled by the variance adds far too little noise (at the last steps of the linear schedule "
        "sigma^2 is 0.02 where sigma is 0.14), so the samples come out smoother, with a smaller pixel spread than "
        "the data's.",
        "check how the standard normal draw is scaled: a variance and a standard deviation differ by a square "
        "root.",
        "Ho et al. 2020, Algorithm 2 line 4 (+ sigma_t z); diffusers DDPMScheduler.step "
        "(how it scales variance_noise)",
        variance_as_std),
    Bug("trailing_as_leading", "ddim_timesteps", "trailing spacing laid out as leading: index T - 1 is never visited",
        "the schedule starts at (n - 1) * (T // n) (900 for T = 1000, n = 10), not at T - 1: the sampler starts "
        "from pure noise but tells the network it is at an earlier step, where alpha_bar is not yet its smallest.",
        "a trailing schedule starts at the last index, T - 1, and steps down by T / n: check where yours starts and "
        "from which end it is laid out.",
        "Lin et al. 2024, Common Diffusion Noise Schedules and Sample Steps Are Flawed (WACV 2024; "
        "arXiv 2305.08891), Sec. 3.3 and Table 2; diffusers issue #2585 (DDIM timesteps that start at 980, never at 999)",
        trailing_as_leading),
    Bug("sigma_from_one_step_beta", "ddim_sigma",
        "sigma from the one-step beta_t, 1 - alpha_bar_t / alpha_bar_{t-1}, not the strided 1 - alpha_bar_t / alpha_bar_prev",
        "beta_t is the noise one step of the full chain adds, not what a strided jump adds: for 10 steps of the linear "
        "schedule sigma comes out several times too small, so eta = 1 is nearly deterministic and its samples keep "
        "the deterministic sampler's artefacts.",
        "check the last factor of eq. 16: it is 1 - alpha_bar_t / alpha_bar_prev, with the t_prev the sampler passes, "
        "which equals beta_t only when t_prev = t - 1.",
        "diffusers PR #3006 (DDPMScheduler: 'when skipping timesteps, self.betas[t] is the wrong beta') and issue "
        "#5130 (its current_beta_t, from alpha_prod_t / alpha_prod_t_prev, differs from self.betas[t]); diffusers PR "
        "#2076 (DDPMScheduler with fewer inference steps computed the variance from t - 1: its images were noise)",
        sigma_from_one_step_beta),
    Bug("alpha_prev_of_previous_ddpm_step", "ddim_step",
        "the previous state's alpha_bar read at t - 1, not at t_prev",
        "in a strided schedule each step moves x_t only as far as one step of the full chain (alpha_bar[t - 1] in "
        "place of alpha_bar[t_prev]), so a sampler of 10 steps removes a small part of the noise and its samples "
        "stay noisy.",
        "check which entry of the table your step reads for the previous state: the sampler passes t_prev, which is "
        "t - 1 only when every step is visited.",
        "diffusers issues #11347 and #12633 (DDIMScheduler.step's previous timestep, t - T // n, is not the "
        "schedule's next one for linspace spacing, so every step read alpha_prod_t_prev at the wrong index); "
        "lucidrains/denoising-diffusion-pytorch issue #81 (its DDIM sampler read a table shifted by one step)",
        alpha_prev_of_previous_ddpm_step),
    Bug("labels_never_dropped", "drop_labels", "labels never dropped: the null label is never trained",
        "with p_uncond ignored every training label is a digit, so eps(x, t, null) is an untrained embedding's guess, "
        "and guidance extrapolates away from it instead of away from the unconditional prediction.",
        "check that each label is replaced by null_label with probability p_uncond: the share of null labels in the "
        "result should be about p_uncond.",
        "Ho & Salimans 2022, Classifier-Free Diffusion Guidance, Algorithm 1 (c <- null with probability p_uncond)",
        labels_never_dropped),
    Bug("guidance_halves_swapped", "cfg_eps", "the conditional and unconditional halves swapped",
        "eps_c + omega (eps_u - eps_c) is guidance at scale 1 - omega: scale 1 gives the unconditional prediction "
        "and larger scales push the samples away from the class asked for.",
        "check which half of the batched output (or which call) is the conditional prediction: the labels y, or the "
        "null label.",
        "diffusers PR #667 (its CLIP-guided pipeline took the unconditional half of the batched embeddings where the "
        "text half was meant); diffusers pipelines: noise_pred_uncond, noise_pred_text = noise_pred.chunk(2)",
        guidance_halves_swapped),
    Bug("guidance_scale_as_w", "cfg_eps", "the guidance scale used as the paper's w (1 + w convention mixed up)",
        "(1 + omega) eps_c - omega eps_u is guidance at scale omega + 1: scale 1, which should be the plain "
        "conditional prediction, already guides, and every scale is one too large.",
        "this lab uses diffusers' scale omega (eps_u + omega (eps_c - eps_u)); Ho & Salimans' w is omega - 1: check "
        "which one your formula uses.",
        "Ho & Salimans 2022, eq. 6 ((1 + w) eps_c - w eps_u); diffusers issue #5882 and stable-dreamfusion issue #32 "
        "(questions whether diffusers' form departs from the paper's: the replies explain the shift by one); "
        "diffusers issue #12905 and PR #13183 (ZImagePipeline in diffusers 0.36.0: the paper's form of the formula "
        "with the other convention's test guidance_scale > 1, so scales between 0 and 1 were silently ignored)",
        guidance_scale_as_w),
]

"""Known bugs of Lab 1 (VAE reparameterization), each as the edit of your own function that makes it.

Every entry is a mistake found in real VAE code; the lab's failure-modes cells reproduce each one on *your*
functions and measure its symptom, and the grader names it when a student's outputs match it. Written out in
full, each bug would be the answer with one edit, so this catalogue writes it as what it does to a correct
function (negate it, detach it, feed it the wrong noise); the full bodies stay with the instructor
(``solutions/lab1_vae/bugs.py``).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from genlab.catalog import Bug, edit, too_slow


# --- reparameterize --------------------------------------------------------------------------------
@edit("reparameterize")
def torch_normal_sampler(reparameterize, mu, logvar, eps=None):
    std = reparameterize(torch.zeros_like(mu), logvar, torch.ones_like(mu))  # the std, from your function
    return torch.normal(mu, std)  # a fresh draw that no gradient flows through; eps is ignored


@edit("reparameterize")
def exp_logvar_as_std(reparameterize, mu, logvar, eps=None):
    return reparameterize(mu, 2 * logvar, eps)  # exp(logvar), the variance, taken as the standard deviation


@edit("reparameterize")
def eps_default_dtype(reparameterize, mu, logvar, eps=None):
    if eps is None:
        eps = torch.randn(mu.shape)  # float32 on the CPU, whatever mu is
    return reparameterize(mu, logvar, eps)


@edit("reparameterize")
def eps_shared_across_batch(reparameterize, mu, logvar, eps=None):
    if eps is None:  # one draw for every example
        eps = torch.randn(mu.shape[-1], dtype=mu.dtype, device=mu.device).expand_as(mu)
    return reparameterize(mu, logvar, eps)


@edit("reparameterize")
def detached_sample(reparameterize, mu, logvar, eps=None):
    return reparameterize(mu, logvar, eps).detach()  # cuts the graph: the encoder learns nothing


@edit("reparameterize")
def python_loop_over_batch(reparameterize, mu, logvar, eps=None):
    if eps is None:
        eps = torch.randn_like(mu)
    return torch.cat([reparameterize(mu[i:i + 1], logvar[i:i + 1], eps[i:i + 1]) for i in range(mu.shape[0])])


def _same_noise_for_every_example(calls) -> bool:
    """Called without eps on identical rows of mu and logvar, every example got the very same sample."""
    for c in calls:
        if c.kind != "call" or c.error or len(c.args) < 2 or (len(c.args) > 2 and c.args[2] is not None):
            continue
        mu, z = c.args[0], c.result
        if not (isinstance(z, torch.Tensor) and z.dim() >= 2 and z.shape[0] > 1 and z.shape == mu.shape):
            continue
        same_inputs = torch.equal(mu[0], mu[1]) and torch.equal(c.args[1][0], c.args[1][1])
        # Noise was drawn (z is not mu itself) and it is the same draw for every example.
        if same_inputs and torch.equal(z[0], z[1]) and not torch.equal(z[0], mu[0]):
            return True
    return False


# --- gaussian_kl -------------------------------------------------------------------------------------
@edit("gaussian_kl")
def kl_sign_flipped(gaussian_kl, mu, logvar):
    return -gaussian_kl(mu, logvar)  # -KL: <= 0, and minimising it pushes the posterior away from the prior


@edit("gaussian_kl")
def kl_mean_over_latent(gaussian_kl, mu, logvar):
    return gaussian_kl(mu, logvar) / mu.shape[-1]  # a mean over the D latent dimensions, not their sum


@edit("gaussian_kl")
def kl_summed_over_batch(gaussian_kl, mu, logvar):
    return gaussian_kl(mu, logvar).sum()  # one number for the whole batch, not one KL per example


# --- negative_elbo -----------------------------------------------------------------------------------
@edit("negative_elbo")
def recon_mean_per_pixel(negative_elbo, x, x_logits, mu, logvar, beta=1.0):
    # The reconstruction averaged over the P pixels too, the KL still summed over latent dimensions. The same
    # as your loss with the KL weighted P times more, divided by P: mean(recon / P) + beta * mean(KL).
    pixels = x[0].numel()
    return negative_elbo(x, x_logits, mu, logvar, beta * pixels) / pixels


@edit("negative_elbo")
def bce_on_sigmoid(negative_elbo, x, x_logits, mu, logvar, beta=1.0):
    # binary_cross_entropy on sigmoid probabilities: PyTorch clamps each log at -100 and divides the gradient by
    # max(p(1 - p), 1e-12), so confident pixels lose both. Your loss, plus what that does to each pixel's term.
    saturating = F.binary_cross_entropy(torch.sigmoid(x_logits), x.expand_as(x_logits), reduction="none")
    stable = F.binary_cross_entropy_with_logits(x_logits, x.expand_as(x_logits), reduction="none")
    return negative_elbo(x, x_logits, mu, logvar, beta) + (saturating - stable).flatten(1).sum(1).mean()


@edit("negative_elbo")
def elbo_not_negated(negative_elbo, x, x_logits, mu, logvar, beta=1.0):
    return -negative_elbo(x, x_logits, mu, logvar, beta)  # the ELBO itself: minimising it maximises the loss


# --- iwae_bound --------------------------------------------------------------------------------------
def _one_sample_bounds(iwae_bound, x, x_logits, z, mu, logvar):
    """log w_i for each of the k samples, shape [k, B]: your bound with k = 1 is the one-sample log-weight."""
    return torch.stack([iwae_bound(x, x_logits[i:i + 1], z[i:i + 1], mu, logvar) for i in range(z.shape[0])])


@edit("iwae_bound")
def iwae_mean_of_log_weights(iwae_bound, x, x_logits, z, mu, logvar):
    log_w = _one_sample_bounds(iwae_bound, x, x_logits, z, mu, logvar)
    return log_w.mean(dim=0)  # the average of the logs: the ELBO again


@edit("iwae_bound")
def iwae_naive_log_mean_exp(iwae_bound, x, x_logits, z, mu, logvar):
    log_w = _one_sample_bounds(iwae_bound, x, x_logits, z, mu, logvar)
    return log_w.exp().mean(dim=0).log()  # exp(-1000) is 0 in float32 and float64: log gives -inf


@edit("iwae_bound")
def iwae_missing_log_k(iwae_bound, x, x_logits, z, mu, logvar):
    return iwae_bound(x, x_logits, z, mu, logvar) + math.log(z.shape[0])  # a sum of k weights, not a mean


# --- continuous_bernoulli_log_norm, continuous_bernoulli_mean, continuous_bernoulli_negative_elbo ------
@edit("continuous_bernoulli_log_norm")
def log_norm_from_probs(continuous_bernoulli_log_norm, logits):
    lam = torch.sigmoid(logits)  # exactly 1/2 near logit 0; 1 - 2 lam exactly -1 from logit ~17, +1 below ~-18
    return torch.log(2 * torch.atanh(1 - 2 * lam) / (1 - 2 * lam))  # the log of C(lambda), as the paper writes C


@edit("continuous_bernoulli_log_norm")
def taylor_where_unguarded(continuous_bernoulli_log_norm, logits):
    # your values; but torch.where also differentiates a closed form that saw logit 0 (0/0): 0 * NaN = NaN
    unguarded = torch.log(logits / torch.tanh(logits / 2))
    return torch.where(logits.abs() < 0.01, continuous_bernoulli_log_norm(logits), unguarded)


@edit("continuous_bernoulli_mean")
def mean_is_sigmoid(continuous_bernoulli_mean, logits):
    return torch.sigmoid(logits)  # lambda, the Bernoulli's mean, not the continuous Bernoulli's


@edit("continuous_bernoulli_negative_elbo", "continuous_bernoulli_log_norm")
def log_norm_left_out(continuous_bernoulli_negative_elbo, continuous_bernoulli_log_norm, x, x_logits, mu, logvar, beta=1.0):
    # your loss plus the sum of log C it subtracted: the Bernoulli loss of section 4 again
    log_c = continuous_bernoulli_log_norm(x_logits).flatten(1).sum(1).mean()
    return continuous_bernoulli_negative_elbo(x, x_logits, mu, logvar, beta) + log_c


# --- free_bits_kl ------------------------------------------------------------------------------------
@edit("free_bits_kl")
def free_bits_on_total_kl(free_bits_kl, mu, logvar, free_bits):
    # with no free bits your function is the batch mean of the summed KL; one clamp for all D dimensions
    return torch.clamp(free_bits_kl(mu, logvar, 0.0), min=free_bits * mu.shape[-1])


BUGS = [
    Bug("torch_normal_sampler", "reparameterize", "sampling with torch.normal(mu, std)",
        "torch.normal draws a new sample and sends exactly zero gradient to mu and logvar, so the encoder "
        "gets no gradient from the reconstruction term (and any eps you pass is ignored).",
        "the sample must be a differentiable function of mu and logvar: build it from noise drawn apart from them "
        "(the reparameterization trick), not from a sampler that draws from the distribution itself.",
        "Kingma & Welling 2014, Sec. 2.4; torch.distributions docs: sample() vs rsample()",
        torch_normal_sampler),
    Bug("exp_logvar_as_std", "reparameterize", "exp(logvar) used as the standard deviation",
        "exp(logvar) is the variance; the samples then have variance exp(2*logvar), not the exp(logvar) "
        "that the KL term assumes.",
        "logvar is the log of the variance: check how you get the standard deviation from it.",
        "Kingma & Welling 2014, Appendix C (log sigma^2 parameterisation)",
        exp_logvar_as_std),
    Bug("eps_default_dtype", "reparameterize", "eps drawn with torch.randn(mu.shape)",
        "the noise is float32 on the CPU whatever mu is: fp16/bf16 inputs come back as float32 and CUDA "
        "inputs fail with a device mismatch.",
        "draw the noise so that it takes its shape, dtype and device from mu, not from the defaults.",
        "PyTorch docs: torch.randn_like; tensor creation defaults to torch.get_default_dtype() on the CPU",
        eps_default_dtype),
    Bug("eps_shared_across_batch", "reparameterize", "one noise vector shared by the whole batch",
        "every example gets the same eps, so the samples are correlated across the batch and the "
        "Monte-Carlo estimate of the ELBO has far more variance than it should.",
        "compare the shape of the noise you draw with the shape of mu: every element needs its own draw.",
        "Kingma & Welling 2014, Sec. 2.3 (one eps per datapoint)", eps_shared_across_batch,
        detect=_same_noise_for_every_example),
    Bug("detached_sample", "reparameterize", "the sample is detached from the graph",
        ".detach() (or .data) cuts the graph, so no gradient reaches mu or logvar.",
        "look for .detach() or .data on the way from mu and logvar to the sample: it must stay differentiable.",
        "PyTorch autograd docs: detach()", detached_sample),
    Bug("python_loop_over_batch", "reparameterize", "a Python loop over the batch",
        "the values are right, but one small kernel per example is many times slower than one batched op.",
        "replace the loop over examples with operations on the whole batch at once (broadcasting).",
        "PyTorch performance tuning guide (vectorise, avoid Python loops)",
        python_loop_over_batch, detect=too_slow),
    Bug("kl_sign_flipped", "gaussian_kl", "the KL has the wrong sign",
        "the value returned is -KL: it is <= 0, and minimising it pushes the posterior away from the prior.",
        "a KL divergence is never negative: check the sign of your closed form against the lab's derivation.",
        "Kingma & Welling 2014, Appendix B", kl_sign_flipped),
    Bug("kl_mean_over_latent", "gaussian_kl", "the KL is averaged over latent dimensions",
        "the KL of a diagonal Gaussian is a sum over dimensions; a mean divides it by D and weakens the "
        "prior term relative to the reconstruction.",
        "look at how you reduce over the latent dimensions: the KLs of independent dimensions add up.",
        "Kingma & Welling 2014, Appendix B", kl_mean_over_latent),
    Bug("kl_summed_over_batch", "gaussian_kl", "the KL is summed over the batch too",
        "the function must return one KL per example, shape [B]; summing everything returns a scalar.",
        "the result has one KL per example (shape [B]): check which dimensions you reduce.",
        "the lab's specification (shape [B])",
        kl_summed_over_batch),
    Bug("recon_mean_per_pixel", "negative_elbo", "reconstruction averaged per pixel, KL summed",
        "a per-pixel mean divides the reconstruction term by the number of pixels while the KL keeps its "
        "full size, so the KL dominates and the posterior collapses (few active latent units).",
        "look at how the reconstruction term is reduced over pixels: it must count each of them, as the KL counts "
        "each latent dimension.",
        "Bowman et al. 2016 (posterior collapse); PyTorch docs: BCEWithLogitsLoss reduction",
        recon_mean_per_pixel),
    Bug("bce_on_sigmoid", "negative_elbo", "binary_cross_entropy(sigmoid(logits))",
        "binary_cross_entropy clamps each log at -100 and, in its backward pass, divides by max(p(1 - p), 1e-12): "
        "once p(1 - p) < 1e-12 the sigmoid's own derivative no longer cancels, and the gradient of a confident, "
        "wrong pixel vanishes (float32: from a logit of about +17 for target 0, where sigmoid rounds to exactly 1, "
        "and about -28 for target 1); where p rounds to exactly 0 or 1 the loss is stuck at 100.",
        "compute the loss from the logits, with the numerically stable loss PyTorch provides for logits, not from "
        "sigmoid probabilities.",
        "torch/_decomp/decompositions.py: binary_cross_entropy (log clamped at -100) and "
        "binary_cross_entropy_backward (EPSILON = 1e-12), as in aten/src/ATen/native/Loss.cpp; PyTorch docs: "
        "BCELoss and BCEWithLogitsLoss (numerically stable)",
        bce_on_sigmoid),
    Bug("elbo_not_negated", "negative_elbo", "the ELBO returned instead of its negative",
        "the loss has the wrong sign; an optimiser minimising it makes reconstructions worse.",
        "check the sign: the function returns the loss an optimiser minimises, the negative of the ELBO.",
        "Kingma & Welling 2014, Eq. 3", elbo_not_negated),
    Bug("iwae_mean_of_log_weights", "iwae_bound", "the log-weights averaged instead of the weights",
        "the mean over k of log w_k is the Monte Carlo ELBO, whatever k is: by Jensen's inequality it lies "
        "below the importance-weighted bound, and it does not tighten as k grows.",
        "the mean over the k samples belongs inside the log, over the weights, not outside it, over the log-weights.",
        "Burda, Grosse & Salakhutdinov 2016, Eq. 8 and Theorem 1 (L_1 is the ELBO; L_k increases with k)",
        iwae_mean_of_log_weights),
    Bug("iwae_naive_log_mean_exp", "iwae_bound", "log(mean(exp(log_w))) computed directly",
        "exp of a log-weight below about -104 nats (float32) or -745 (float64) is exactly 0: when every weight of "
        "an example underflows (a confident, wrong decoder; images of hundreds of pixels), the bound comes back "
        "as -inf (and its gradient as NaN).",
        "never exponentiate log-weights: reduce them in the log domain, with an operation that "
        "subtracts the maximum first.",
        "PyTorch docs: torch.logsumexp (numerically stabilized); Burda et al. 2016, Sec. 5",
        iwae_naive_log_mean_exp),
    Bug("iwae_missing_log_k", "iwae_bound", "logsumexp without the 1/k",
        "logsumexp over k samples is the log of a sum, not of a mean: the result is too large by exactly "
        "log k and is no longer a lower bound on log p(x).",
        "the bound is the log of a *mean* of the k weights: check the factor 1/k.",
        "Burda, Grosse & Salakhutdinov 2016, Eq. 8 (the 1/k inside the log)",
        iwae_missing_log_k),
    Bug("log_norm_from_probs", "continuous_bernoulli_log_norm", "log C computed as the log of C(lambda)",
        "C(lambda) = 2 artanh(1 - 2 lambda) / (1 - 2 lambda) from lambda = sigmoid(logits): lambda rounds to exactly 1/2 "
        "near logit 0 (0/0: NaN), and in float32 1 - 2 lambda rounds to exactly -1 from a logit of about 17 (sigmoid rounds to 1) "
        "and to exactly 1 from about -18 (artanh = -inf or inf: log C = inf).",
        "work in logits, where C = l / tanh(l / 2) is finite for every l != 0, and use the Taylor expansion near 0.",
        "Loaiza-Ganem & Cunningham 2019, Sec. 3 (C(lambda), C(1/2) = 2 as a limit); torch/distributions/"
        "continuous_bernoulli.py: _cont_bern_log_norm (log C as a difference of logs, a Taylor series inside lims=(0.499, 0.501))",
        log_norm_from_probs),
    Bug("taylor_where_unguarded", "continuous_bernoulli_log_norm", "the closed form evaluated inside the Taylor window",
        "torch.where picks the Taylor value near logit 0, but the backward pass multiplies the discarded closed form's "
        "gradient by 0, and at logit 0 that gradient is NaN: 0 * NaN = NaN, so one logit of exactly 0 gives NaN gradients.",
        "give the closed form a harmless input inside the window (torch.where on the input too), so no branch sees 0.",
        "torch/distributions/continuous_bernoulli.py: _cut_probs (lambda replaced by lims[0] inside the window before "
        "the closed form); pytorch/pytorch #52248 (torch.where's gradient is NaN where the branch it did not pick is); "
        "JAX FAQ, 'Gradients contain NaN where using where'",
        taylor_where_unguarded),
    Bug("mean_is_sigmoid", "continuous_bernoulli_mean", "sigmoid(logits) taken as the mean",
        "lambda = sigmoid(logits) is the Bernoulli's mean, not the continuous Bernoulli's: E[x] = lambda / (2 lambda - 1) + "
        "1 / (2 artanh(1 - 2 lambda)) is pulled toward 1/2 (0.657 at logit 2, where lambda = 0.881).",
        "compute E[x] from the continuous Bernoulli's density, as the lab derives it, not the Bernoulli's.",
        "Loaiza-Ganem & Cunningham 2019, Sec. 3 (the mean); torch.distributions.ContinuousBernoulli docstring "
        "('probs' does not correspond to a probability)",
        mean_is_sigmoid),
    Bug("log_norm_left_out", "continuous_bernoulli_negative_elbo", "the normalising constant left out",
        "without - sum log C the loss is the Bernoulli's of section 4: not a bound on a density of grey levels (at logits 0 "
        "it is 64 log 2 instead of 0), and its gradient differs by that of log C.",
        "the continuous Bernoulli's log-likelihood is the Bernoulli's plus log C: check that your loss subtracts it, per pixel.",
        "Loaiza-Ganem & Cunningham 2019 (the 'pervasive error' of the title: the Bernoulli likelihood on [0, 1] data, "
        "missing the normalising constant)",
        log_norm_left_out),
    Bug("free_bits_on_total_kl", "free_bits_kl", "free bits applied to the KL summed over dimensions",
        "max(D * lambda, total KL) clamps the sum, not each dimension: once the total passes D * lambda, nothing holds a "
        "dimension at lambda, and a few dimensions can hold all the free nats while the rest carry almost none.",
        "clamp each latent dimension's (each group's) batch-mean KL at free_bits, then sum over dimensions.",
        "Kingma et al. 2016, Improved Variational Inference with Inverse Autoregressive Flow, its appendix (free bits: "
        "max(lambda, minibatch-mean KL) per group of latents, summed over the groups)",
        free_bits_on_total_kl),
]

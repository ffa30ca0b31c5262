"""Known bugs of Lab 1 (VAE reparameterization), each as the code that makes it.

Every entry is a mistake found in real VAE code; the lab's failure-modes cells reproduce each one and
measure its symptom, and the grader names it when a student's outputs match it.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from genlab.catalog import Bug, too_slow


# --- reparameterize --------------------------------------------------------------------------------
def torch_normal_sampler(mu, logvar, eps=None):
    std = torch.exp(0.5 * logvar)
    return torch.normal(mu, std)  # a fresh draw that no gradient flows through


def exp_logvar_as_std(mu, logvar, eps=None):
    if eps is None:
        eps = torch.randn_like(mu)
    return mu + torch.exp(logvar) * eps  # exp(logvar) is the variance, not the standard deviation


def eps_default_dtype(mu, logvar, eps=None):
    if eps is None:
        eps = torch.randn(mu.shape)  # float32 on the CPU, whatever mu is
    return mu + torch.exp(0.5 * logvar) * eps


def eps_shared_across_batch(mu, logvar, eps=None):
    if eps is None:
        eps = torch.randn(mu.shape[-1], dtype=mu.dtype, device=mu.device)  # one draw for every example
    return mu + torch.exp(0.5 * logvar) * eps


def detached_sample(mu, logvar, eps=None):
    if eps is None:
        eps = torch.randn_like(mu)
    return (mu + torch.exp(0.5 * logvar) * eps).detach()  # cuts the graph: the encoder learns nothing


def python_loop_over_batch(mu, logvar, eps=None):
    if eps is None:
        eps = torch.randn_like(mu)
    rows = [mu[i] + torch.exp(0.5 * logvar[i]) * eps[i] for i in range(mu.shape[0])]
    return torch.stack(rows)


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
def kl_sign_flipped(mu, logvar):
    return 0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp(), dim=-1)


def kl_mean_over_latent(mu, logvar):
    return -0.5 * torch.mean(1 + logvar - mu.pow(2) - logvar.exp(), dim=-1)


def kl_summed_over_batch(mu, logvar):
    return -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())


# --- negative_elbo -----------------------------------------------------------------------------------
def _kl(mu, logvar):
    return -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp(), dim=-1)


def recon_mean_per_pixel(x, x_logits, mu, logvar, beta=1.0):
    recon = F.binary_cross_entropy_with_logits(x_logits, x, reduction="mean")  # averaged over pixels too
    return recon + beta * _kl(mu, logvar).mean()


def bce_on_sigmoid(x, x_logits, mu, logvar, beta=1.0):
    probs = torch.sigmoid(x_logits)  # saturates to exactly 0 or 1 for large logits
    recon = F.binary_cross_entropy(probs, x, reduction="none").sum(dim=-1)
    return (recon + beta * _kl(mu, logvar)).mean()


def elbo_not_negated(x, x_logits, mu, logvar, beta=1.0):
    recon = F.binary_cross_entropy_with_logits(x_logits, x, reduction="none").sum(dim=-1)
    return -(recon + beta * _kl(mu, logvar)).mean()  # the ELBO itself: minimising it maximises the loss


# --- iwae_bound --------------------------------------------------------------------------------------
def _log_weights(x, x_logits, z, mu, logvar):
    """log w_k = log p(x | z_k) + log p(z_k) - log q(z_k | x), shape [k, B]: what every variant shares."""
    log_px_z = -F.binary_cross_entropy_with_logits(x_logits, x.expand_as(x_logits), reduction="none")
    log_pz = -0.5 * (z.pow(2) + math.log(2 * math.pi))
    log_qz = -0.5 * ((z - mu).pow(2) / logvar.exp() + logvar + math.log(2 * math.pi))
    return log_px_z.flatten(2).sum(-1) + (log_pz - log_qz).sum(-1)


def iwae_mean_of_log_weights(x, x_logits, z, mu, logvar):
    return _log_weights(x, x_logits, z, mu, logvar).mean(dim=0)  # the average of the logs: the ELBO again


def iwae_naive_log_mean_exp(x, x_logits, z, mu, logvar):
    log_w = _log_weights(x, x_logits, z, mu, logvar)
    return log_w.exp().mean(dim=0).log()  # exp(-1000) is 0 in float32 and float64: log gives -inf


def iwae_missing_log_k(x, x_logits, z, mu, logvar):
    return torch.logsumexp(_log_weights(x, x_logits, z, mu, logvar), dim=0)  # a sum of k weights, not a mean


BUGS = [
    Bug("torch_normal_sampler", "reparameterize", "sampling with torch.normal(mu, std)",
        "torch.normal draws a new sample and sends exactly zero gradient to mu and logvar, so the encoder "
        "gets no gradient from the reconstruction term (and any eps you pass is ignored).",
        "return mu + std * eps with eps = torch.randn_like(mu), or Normal(mu, std).rsample().",
        "Kingma & Welling 2014, Sec. 2.4; torch.distributions docs: sample() vs rsample()",
        torch_normal_sampler),
    Bug("exp_logvar_as_std", "reparameterize", "exp(logvar) used as the standard deviation",
        "exp(logvar) is the variance; the samples then have variance exp(2*logvar), not the exp(logvar) "
        "that the KL term assumes.",
        "std = torch.exp(0.5 * logvar).", "Kingma & Welling 2014, Appendix C (log sigma^2 parameterisation)",
        exp_logvar_as_std),
    Bug("eps_default_dtype", "reparameterize", "eps drawn with torch.randn(mu.shape)",
        "the noise is float32 on the CPU whatever mu is: fp16/bf16 inputs come back as float32 and CUDA "
        "inputs fail with a device mismatch.",
        "eps = torch.randn_like(mu) (same shape, dtype and device).",
        "PyTorch docs: torch.randn_like; tensor creation defaults to torch.get_default_dtype() on the CPU",
        eps_default_dtype),
    Bug("eps_shared_across_batch", "reparameterize", "one noise vector shared by the whole batch",
        "every example gets the same eps, so the samples are correlated across the batch and the "
        "Monte-Carlo estimate of the ELBO has far more variance than it should.",
        "draw eps with the full shape of mu: torch.randn_like(mu).",
        "Kingma & Welling 2014, Sec. 2.3 (one eps per datapoint)", eps_shared_across_batch,
        detect=_same_noise_for_every_example),
    Bug("detached_sample", "reparameterize", "the sample is detached from the graph",
        ".detach() (or .data) cuts the graph, so no gradient reaches mu or logvar.",
        "remove .detach(); the whole point of the trick is a differentiable sample.",
        "PyTorch autograd docs: detach()", detached_sample),
    Bug("python_loop_over_batch", "reparameterize", "a Python loop over the batch",
        "the values are right, but one small kernel per example is many times slower than one batched op.",
        "write mu + std * eps on the whole tensors; broadcasting does the loop in C++.",
        "PyTorch performance tuning guide (vectorise, avoid Python loops)",
        python_loop_over_batch, detect=too_slow),
    Bug("kl_sign_flipped", "gaussian_kl", "the KL has the wrong sign",
        "0.5 * sum(1 + logvar - mu^2 - exp(logvar)) is -KL: it is <= 0, and minimising it pushes the "
        "posterior away from the prior.",
        "KL = -0.5 * sum(1 + logvar - mu^2 - exp(logvar)); a KL is never negative.",
        "Kingma & Welling 2014, Appendix B", kl_sign_flipped),
    Bug("kl_mean_over_latent", "gaussian_kl", "the KL is averaged over latent dimensions",
        "the KL of a diagonal Gaussian is a sum over dimensions; a mean divides it by D and weakens the "
        "prior term relative to the reconstruction.",
        "sum over the last dimension: .sum(dim=-1).", "Kingma & Welling 2014, Appendix B", kl_mean_over_latent),
    Bug("kl_summed_over_batch", "gaussian_kl", "the KL is summed over the batch too",
        "the function must return one KL per example, shape [B]; summing everything returns a scalar.",
        "reduce only the last dimension: .sum(dim=-1).", "the lab's specification (shape [B])",
        kl_summed_over_batch),
    Bug("recon_mean_per_pixel", "negative_elbo", "reconstruction averaged per pixel, KL summed",
        "a per-pixel mean divides the reconstruction term by the number of pixels while the KL keeps its "
        "full size, so the KL dominates and the posterior collapses (few active latent units).",
        "sum the reconstruction over data dimensions, then take the batch mean of recon + beta * KL.",
        "Bowman et al. 2016 (posterior collapse); PyTorch docs: BCEWithLogitsLoss reduction",
        recon_mean_per_pixel),
    Bug("bce_on_sigmoid", "negative_elbo", "binary_cross_entropy(sigmoid(logits))",
        "sigmoid saturates to exactly 0 or 1 for large logits; PyTorch then clamps log(0) to -100, so the "
        "loss and its gradient are wrong for confident pixels.",
        "use F.binary_cross_entropy_with_logits(x_logits, x, reduction='none'): it uses the log-sum-exp trick.",
        "PyTorch docs: BCELoss (log clamped at -100) and BCEWithLogitsLoss (numerically stable)",
        bce_on_sigmoid),
    Bug("elbo_not_negated", "negative_elbo", "the ELBO returned instead of its negative",
        "the loss has the wrong sign; an optimiser minimising it makes reconstructions worse.",
        "return the batch mean of (reconstruction loss + beta * KL), both >= 0.",
        "Kingma & Welling 2014, Eq. 3", elbo_not_negated),
    Bug("iwae_mean_of_log_weights", "iwae_bound", "the log-weights averaged instead of the weights",
        "the mean over k of log w_k is the Monte Carlo ELBO, whatever k is: by Jensen's inequality it lies "
        "below the importance-weighted bound, and it does not tighten as k grows.",
        "average the weights inside the log: logsumexp over the k samples, minus log k.",
        "Burda, Grosse & Salakhutdinov 2016, Eq. 8 and Theorem 1 (L_1 is the ELBO; L_k increases with k)",
        iwae_mean_of_log_weights),
    Bug("iwae_naive_log_mean_exp", "iwae_bound", "log(mean(exp(log_w))) computed directly",
        "log-weights of a digit are hundreds of nats below 0; exp underflows to exactly 0 and the bound "
        "comes back as -inf (and its gradient as NaN).",
        "torch.logsumexp(log_w, dim=0) - math.log(k): it subtracts the maximum before exponentiating.",
        "PyTorch docs: torch.logsumexp (numerically stabilized); Burda et al. 2016, Sec. 5",
        iwae_naive_log_mean_exp),
    Bug("iwae_missing_log_k", "iwae_bound", "logsumexp without the 1/k",
        "logsumexp over k samples is the log of a sum, not of a mean: the result is too large by exactly "
        "log k and is no longer a lower bound on log p(x).",
        "subtract math.log(k), where k = z.shape[0].",
        "Burda, Grosse & Salakhutdinov 2016, Eq. 8 (the 1/k inside the log)",
        iwae_missing_log_k),
]

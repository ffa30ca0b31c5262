"""Lab 1's catalogued bugs in full, as a student would write them: the instructor's side of the catalogue.

Students see these bugs only as edits of their own functions (``genlab.catalog.lab1_vae``): each body here is
the answer with a small edit, so it must not ship (issue 21). The bug samples are made of these bodies
(``bug_cell``), the grader replays calls through them, and ``tests/test_catalogue.py`` checks that each body and
its edit are the same bug.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F


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


# --- continuous_bernoulli_log_norm, continuous_bernoulli_mean, continuous_bernoulli_negative_elbo ------
def log_norm_from_probs(logits):
    lam = torch.sigmoid(logits)  # exactly 1/2 near logit 0; 1 - 2 lam exactly -1 from logit ~17, +1 below ~-18
    return torch.log(2 * torch.atanh(1 - 2 * lam) / (1 - 2 * lam))  # the log of C: 0/0 at 1/2, log(inf) at 0 and 1


def taylor_where_unguarded(logits):
    near_half = logits.abs() < 0.01
    closed_form = torch.log(logits / torch.tanh(logits / 2))  # evaluated at logit 0 too: NaN there, and in backward
    taylor = math.log(2.0) + logits.pow(2) / 12 - 7 * logits.pow(4) / 1440
    return torch.where(near_half, taylor, closed_form)


def mean_is_sigmoid(logits):
    return torch.sigmoid(logits)  # lambda, the Bernoulli's mean, not the continuous Bernoulli's


def log_norm_left_out(x, x_logits, mu, logvar, beta=1.0):
    recon = F.binary_cross_entropy_with_logits(x_logits, x, reduction="none").flatten(1).sum(1)  # no - log C
    return (recon + beta * _kl(mu, logvar)).mean()


# --- free_bits_kl ------------------------------------------------------------------------------------
def free_bits_on_total_kl(mu, logvar, free_bits):
    total = _kl(mu, logvar).mean()  # the KL summed over dimensions, batch mean
    return torch.clamp(total, min=free_bits * mu.shape[-1])  # one clamp for all: D * free_bits nats in total


BODIES = {fn.__name__: fn for fn in (
    torch_normal_sampler,
    exp_logvar_as_std,
    eps_default_dtype,
    eps_shared_across_batch,
    detached_sample,
    python_loop_over_batch,
    kl_sign_flipped,
    kl_mean_over_latent,
    kl_summed_over_batch,
    recon_mean_per_pixel,
    bce_on_sigmoid,
    elbo_not_negated,
    iwae_mean_of_log_weights,
    iwae_naive_log_mean_exp,
    iwae_missing_log_k,
    log_norm_from_probs,
    taylor_where_unguarded,
    mean_is_sigmoid,
    log_norm_left_out,
    free_bits_on_total_kl,
)}

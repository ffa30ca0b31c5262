"""Lab 1 students made for the class report's tests (tests/test_clusters.py, tests/test_similarity.py), graded in
the same run as the ``graded_class`` fixture's samples (one grading run: issue 19).

- ``KL_TWICE``: three students whose ``gaussian_kl`` drops the 1/2 (twice the KL), each written differently;
- ``ELBO_PER_EXAMPLE``: three whose ``negative_elbo`` returns one loss per example (no batch mean), each written
  differently. Neither bug is in the catalogue, and the code differs, so only behaviour can group them;
- ``UNIQUE``: two students with a wrong function each that nobody else shares;
- ``RENAMED``: two students with the same correct ``iwae_bound``, written unlike the reference, one with every
  variable renamed: the pair similarity must list, and the only one.
"""
from __future__ import annotations

KL_TWICE = {
    "kl_twice_a": "def gaussian_kl(mu, logvar):\n"
                  "    return -torch.sum(1 + logvar - mu.pow(2) - logvar.exp(), dim=-1)\n",
    "kl_twice_b": "def gaussian_kl(mu, logvar):\n"
                  "    var = torch.exp(logvar)\n"
                  "    return (mu ** 2 + var - logvar - 1).sum(dim=1)\n",
    "kl_twice_c": "def gaussian_kl(mu, logvar):\n"
                  "    terms = []\n"
                  "    for d in range(mu.shape[-1]):\n"
                  "        m, lv = mu[..., d], logvar[..., d]\n"
                  "        terms.append(m * m + lv.exp() - lv - 1.0)\n"
                  "    return torch.stack(terms, dim=-1).sum(-1)\n",
}

ELBO_PER_EXAMPLE = {
    "elbo_per_example_a": "def negative_elbo(x, x_logits, mu, logvar, beta=1.0):\n"
                          "    recon = F.binary_cross_entropy_with_logits(x_logits, x, reduction=\"none\").flatten(1)\n"
                          "    return recon.sum(dim=1) + beta * gaussian_kl(mu, logvar)\n",
    "elbo_per_example_b": "def negative_elbo(x, x_logits, mu, logvar, beta=1.0):\n"
                          "    per_pixel = F.binary_cross_entropy_with_logits(x_logits, x, reduction=\"none\")\n"
                          "    rec = per_pixel.reshape(per_pixel.shape[0], -1).sum(-1)\n"
                          "    kl = gaussian_kl(mu, logvar)\n"
                          "    return rec + kl * beta\n",
    "elbo_per_example_c": "def negative_elbo(x, x_logits, mu, logvar, beta=1.0):\n"
                          "    log_p = x * F.logsigmoid(x_logits) + (1 - x) * F.logsigmoid(-x_logits)\n"
                          "    nll = -log_p.view(len(x), -1).sum(1)\n"
                          "    loss = nll + beta * gaussian_kl(mu, logvar)\n"
                          "    return loss\n",
}

UNIQUE = {
    "unique_kl_no_one": {"gaussian_kl": "def gaussian_kl(mu, logvar):\n"
                                        "    return -0.5 * torch.sum(logvar - mu.pow(2) - logvar.exp(), dim=-1)\n"},
    "unique_elbo_beta_on_recon": {
        "negative_elbo": "def negative_elbo(x, x_logits, mu, logvar, beta=1.0):\n"
                         "    bce = F.binary_cross_entropy_with_logits(x_logits, x, reduction=\"none\").flatten(1)\n"
                         "    return (beta * bce.sum(1) + gaussian_kl(mu, logvar)).mean()\n"},
}

_IWAE = """def iwae_bound(x, x_logits, z, mu, logvar):
    num_samples = z.shape[0]
    target = x.unsqueeze(0).expand_as(x_logits)
    recon_ll = -F.binary_cross_entropy_with_logits(x_logits, target, reduction="none")
    recon_ll = recon_ll.reshape(num_samples, x.shape[0], -1).sum(dim=-1)
    prior = torch.distributions.Normal(torch.zeros_like(mu), torch.ones_like(mu))
    posterior = torch.distributions.Normal(mu, torch.exp(0.5 * logvar))
    log_weights = recon_ll + prior.log_prob(z).sum(dim=-1) - posterior.log_prob(z).sum(dim=-1)
    return torch.logsumexp(log_weights, dim=0) - math.log(num_samples)
"""
_RENAMES = {"num_samples": "k_count", "target": "x_rep", "recon_ll": "log_lik", "prior": "p_z", "posterior": "q_z",
            "log_weights": "lw"}


def _renamed(source: str) -> str:
    import re

    return re.sub(r"\b(" + "|".join(_RENAMES) + r")\b", lambda m: _RENAMES[m.group(1)], source)


RENAMED = {"iwae_own_words": {"iwae_bound": _IWAE}, "iwae_renamed_copy": {"iwae_bound": _renamed(_IWAE)}}


def specs() -> dict[str, dict]:
    """Student name -> sample spec (``autograder.release.sample_submissions.build``): the solution cells replaced."""
    found = {name: {"cells": {"gaussian_kl": src}} for name, src in KL_TWICE.items()}
    found |= {name: {"cells": {"negative_elbo": src}} for name, src in ELBO_PER_EXAMPLE.items()}
    found |= {name: {"cells": cells} for name, cells in {**UNIQUE, **RENAMED}.items()}
    return found


def write_all(root, out) -> list[str]:
    """Writes every student above as a Lab 1 submission under ``out/<student>/lab1_vae/``."""
    from autograder.core.labs import LabFolder
    from autograder.release.sample_submissions import write

    lab = LabFolder(root, "lab1_vae")
    for name, spec in specs().items():
        write(lab, name, spec, out)
    return list(specs())

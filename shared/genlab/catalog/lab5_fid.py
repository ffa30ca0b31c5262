"""Known bugs of Lab 5 (FID and KID), each as the code that makes it.

Every entry is a mistake found in real FID/KID code or in its issue trackers; the lab's failure-mode cells
reproduce each one and measure its symptom, and the grader names it when a student's outputs match it.
"""
from __future__ import annotations

import torch

from genlab.catalog import Bug
from genlab.testing.wire import modules_in


# --- feature_stats ---------------------------------------------------------------------------------
def torch_cov_rows(features):
    x = features.to(torch.float64)
    if x.shape[0] < 2:
        raise ValueError(f"need at least 2 feature vectors, got {x.shape[0]}")
    # torch.cov wants one *variable* per row: on [N, D] it returns the [N, N] covariance of the samples
    return x.mean(dim=0), torch.cov(x)


def one_pass_float32(features):
    x = features.to(torch.float32)  # running sums kept in float32, as batch-wise accumulators often are
    n = x.shape[0]
    if n < 2:
        raise ValueError(f"need at least 2 feature vectors, got {n}")
    mu = x.sum(dim=0) / n
    second = x.T @ x / n                                    # E[x x^T]
    sigma = (second - torch.outer(mu, mu)) * (n / (n - 1))  # E[x x^T] - mu mu^T: cancels catastrophically
    return mu.to(torch.float64), sigma.to(torch.float64)


# --- trace_sqrt_product ----------------------------------------------------------------------------
def eigvalsh_nonsymmetric(sigma1, sigma2):
    product = sigma1.to(torch.float64) @ sigma2.to(torch.float64)  # not symmetric, so not for eigvalsh
    # eigvalsh reads only the lower triangle, i.e. the eigenvalues of another (symmetric) matrix
    return torch.linalg.eigvalsh(product).sqrt().sum()


def no_clamp(sigma1, sigma2):
    s1, s2 = sigma1.to(torch.float64), sigma2.to(torch.float64)
    w, v = torch.linalg.eigh(s1)
    root1 = (v * w.clamp(min=0).sqrt()) @ v.T
    middle = root1 @ s2 @ root1
    eigenvalues = torch.linalg.eigvalsh((middle + middle.T) / 2)   # 0 in exact arithmetic, -1e-15 after round-off
    return eigenvalues.sqrt().sum()                                 # sqrt(-1e-15) is NaN, and so is the sum


def _psd_sqrt(s):
    w, v = torch.linalg.eigh(s)
    return (v * w.clamp(min=0).sqrt()) @ v.T


def product_of_roots(sigma1, sigma2):
    s1, s2 = sigma1.to(torch.float64), sigma2.to(torch.float64)
    # Tr(S1^1/2 S2^1/2) equals Tr((S1 S2)^1/2) only when S1 and S2 commute
    return torch.trace(_psd_sqrt(s1) @ _psd_sqrt(s2))


# --- kid ---------------------------------------------------------------------------------------------
def biased_mmd(real_features, fake_features, subsets=100, subset_size=1000, generator=None):
    x, y = real_features.to(torch.float64), fake_features.to(torch.float64)
    if subset_size > x.shape[0] or subset_size > y.shape[0]:
        raise ValueError(f"subset_size {subset_size} exceeds the number of features ({x.shape[0]}, {y.shape[0]})")
    d = x.shape[1]
    values = []
    for _ in range(subsets):
        a = x[torch.randperm(x.shape[0], generator=generator)[:subset_size]]
        b = y[torch.randperm(y.shape[0], generator=generator)[:subset_size]]
        kxx, kyy, kxy = ((a @ a.T / d + 1) ** 3, (b @ b.T / d + 1) ** 3, (a @ b.T / d + 1) ** 3)
        # the V-statistic: means over all pairs, k(x_i, x_i) included, so E[MMD^2] > 0 even for P = Q
        values.append(kxx.mean() + kyy.mean() - 2 * kxy.mean())
    values = torch.stack(values)
    return values.mean(), values.std(unbiased=False)


# --- extract_features --------------------------------------------------------------------------------
def train_mode_features(model, images, batch_size=256):
    with torch.no_grad():
        # no model.eval(): BatchNorm normalises each batch with that batch's own statistics (and moves its running
        # statistics), so an image's features depend on which images share its batch
        return torch.cat([model(chunk).flatten(1) for chunk in images.split(batch_size)])


def mode_not_restored(model, images, batch_size=256):
    model.eval()  # right for the features, but the caller's model stays in eval mode after the call
    with torch.no_grad():
        return torch.cat([model(chunk).flatten(1) for chunk in images.split(batch_size)])


def left_in_eval(calls) -> bool:
    """The symptom replay cannot see (the features are right): a model sent in train mode came back in eval."""
    for call in calls:
        sent = modules_in((call.args, call.kwargs))
        if call.kind == "call" and call.error is None and sent and call.modes_after:
            if sent[0].training and call.modes_after[0].get("") is False:
                return True
    return False


BUGS = [
    Bug("torch_cov_rows", "feature_stats", "torch.cov(features) on [N, D] features",
        "torch.cov treats each ROW as a variable, so on [N, D] features it returns the [N, N] covariance of the "
        "samples, silently; the FID then compares matrices whose size depends on N.",
        "torch.cov(features.T), or (x - mu).T @ (x - mu) / (N - 1).",
        "PyTorch docs: torch.cov (input: rows are variables, columns observations); numpy.cov rowvar=True",
        torch_cov_rows),
    Bug("one_pass_float32", "feature_stats", "one-pass covariance E[xx^T] - mu mu^T in float32",
        "subtracting two large, nearly equal float32 numbers cancels the leading digits: on features with a "
        "large mean the covariance loses most of its precision (FID then depends on the batch size or the offset).",
        "cast to float64 first and centre the features before multiplying: (x - mu).T @ (x - mu) / (N - 1).",
        "torchmetrics #1620 (FID 1.9 vs 10 by batch size with float32 sums); torcheval #192 (float64 fix)",
        one_pass_float32),
    Bug("eigvalsh_nonsymmetric", "trace_sqrt_product", "eigvalsh on the non-symmetric product S1 @ S2",
        "eigvalsh assumes a symmetric matrix and reads only one triangle: on S1 @ S2 it returns the eigenvalues "
        "of a different matrix, some negative, so the trace is wrong (or NaN after sqrt).",
        "use eigvalsh on the symmetric S1^1/2 S2 S1^1/2, or eigvals(S1 @ S2) and keep the real part.",
        "torch-fidelity #46 (eigvalsh gave eigenvalues -1.2, -0.7, ... on CIFAR-10)",
        eigvalsh_nonsymmetric),
    Bug("no_clamp", "trace_sqrt_product", "square roots of eigenvalues taken without clamping at 0",
        "a rank-deficient covariance (N <= D, or equal features) has eigenvalues that are 0 in exact arithmetic "
        "and -1e-17 after round-off; their square root is NaN and the whole FID is NaN.",
        "clamp the eigenvalues at 0 before sqrt: w.clamp(min=0).sqrt().",
        "pytorch-fid #105 and torch-fidelity #44 (negative FID from round-off on singular covariances)",
        no_clamp),
    Bug("product_of_roots", "trace_sqrt_product", "Tr(S1^1/2 S2^1/2) in place of Tr((S1 S2)^1/2)",
        "the two traces agree only when S1 and S2 commute (e.g. both diagonal); for general covariances "
        "Tr(S1^1/2 S2^1/2) <= Tr((S1 S2)^1/2), so the FID comes out too large.",
        "take the square root of the product: eigenvalues of S1^1/2 S2 S1^1/2, clamped, square-rooted, summed.",
        "Dowson & Landau 1982; Olkin & Pukelsheim 1982 (the Frechet distance between Gaussians)",
        product_of_roots),
    Bug("biased_mmd", "kid", "the biased (V-statistic) MMD^2, diagonal k(x_i, x_i) included",
        "including the diagonal terms makes E[MMD^2] positive even when both sets come from one distribution, "
        "so KID is biased just like FID, which is what KID was designed to avoid.",
        "exclude the diagonal: (sum(Kxx) - trace(Kxx)) / (m (m - 1)) + the same for Kyy - 2 mean(Kxy).",
        "Binkowski et al. 2018, Demystifying MMD GANs, Sec. 2.3 (unbiased estimator, Gretton et al. 2012 Lemma 6)",
        biased_mmd),
    Bug("train_mode_features", "extract_features", "features extracted with the network in train mode",
        "without model.eval(), BatchNorm normalises each batch with the batch's own mean and variance: an image's "
        "features (and the FID) change with the batch size and with which images share its batch.",
        "call model.eval() before the forward passes (and put the caller's mode back afterwards).",
        "wolny/pytorch-3dunet #53 (BatchNorm without eval() gave predictions that made no sense); torchmetrics' "
        "NoTrainInceptionV3 overrides train() so that FID's network can never leave eval mode",
        train_mode_features),
    Bug("mode_not_restored", "extract_features", "the caller's model left in eval mode",
        "the features are right, but the function switched the caller's model to eval() and never switched it "
        "back: training that continues after an evaluation runs without dropout and with frozen BatchNorm.",
        "remember was_training = model.training, and call model.train(was_training) in a finally: block.",
        "fartashf/vsepp #4 (validation left the model in eval mode; results changed noticeably once fixed); "
        "wkentaro/pytorch-fcn #56 (return to train mode after validation)",
        mode_not_restored, detect=left_in_eval),
]

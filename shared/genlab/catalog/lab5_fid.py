"""Known bugs of Lab 5 (FID and KID), each as the edit of your own function that makes it, or as the code.

Every entry is a mistake found in real FID/KID code or in its issue trackers; the lab's failure-mode cells
reproduce each one on *your* functions and measure its symptom, and the grader names it when a student's outputs
match it. Written out in full, several of these bugs would be the answer with one edit, so this catalogue writes
them as what they do to a correct function (transpose its input, run it on a model that ignores eval(), add the
pairs it leaves out); the full bodies stay with the instructor (``solutions/lab5_fid/bugs.py``).
"""
from __future__ import annotations

import warnings

import torch
import torch.nn as nn

from genlab.catalog import Bug, edit
from genlab.testing.wire import modules_in


# --- feature_stats ---------------------------------------------------------------------------------
@edit("feature_stats")
def torch_cov_rows(feature_stats, features):
    mean = feature_stats(features)[0]  # the mean is right (and N < 2 raises, as it should)
    # torch.cov wants one *variable* per row: on [N, D] features it treats the N samples as the variables, each
    # observed D times, and returns their [N, N] covariance: the covariance of the transposed features
    return mean, feature_stats(features.T)[1]


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


@edit("trace_sqrt_product")
def no_clamp(trace_sqrt_product, sigma1, sigma2):
    # A rank-deficient covariance (N <= D) gives the product eigenvalues that are exactly 0. Round-off returns them
    # as +-1e-15, and with more than a handful of them at least one comes out negative: its square root, not
    # clamped, is NaN, and so is the sum. (A product that is exactly zero keeps exact zeros: no NaN.)
    product = sigma1.to(torch.float64) @ sigma2.to(torch.float64)
    singular = bool(product.any()) and int(torch.linalg.matrix_rank(product)) < product.shape[0]
    trace = trace_sqrt_product(sigma1, sigma2)
    return trace * torch.nan if singular else trace


def product_of_roots(sigma1, sigma2):
    import scipy.linalg

    # Tr(S1^1/2 S2^1/2) equals Tr((S1 S2)^1/2) only when S1 and S2 commute. Each matrix's own root, from scipy (real
    # up to round-off for a symmetric PSD matrix; it warns that a singular one "may not have a square root")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        root1, root2 = (scipy.linalg.sqrtm(s.to(torch.float64).cpu().numpy()).real for s in (sigma1, sigma2))
    return torch.tensor((root1 * root2.T).sum(), dtype=torch.float64)  # the trace of root1 @ root2


# --- kid ---------------------------------------------------------------------------------------------
def _within(kid, a):
    """The mean of k(a_i, a_j) over the pairs i != j of one set, from your kid: against a set of zero vectors,
    k(a_i, 0) = (0 + 1)^3 = 1 for every i, so kid returns within(a) + 1 - 2 * 1 (the whole sets, one subset)."""
    return kid(a, torch.zeros_like(a), 1, a.shape[0], torch.Generator())[0] + 1


def _all_pairs(kid, a):
    """The mean of k(a_i, a_j) over all m^2 pairs, i = j included. With S the sum over all pairs and T its part
    with i = j, within(a) = (S - T) / (m (m - 1)), and within(each point twice) = (4S - 2T) / (2m (2m - 1)):
    two equations, solved for S."""
    m = a.shape[0]
    twice = _within(kid, torch.cat([a, a]))
    once = _within(kid, a) if m > 1 else 0.0
    return ((2 * m - 1) * twice - (m - 1) * once) / m


@edit("kid")
def biased_mmd(kid, real_features, fake_features, subsets=100, subset_size=1000, generator=None):
    x, y = real_features.to(torch.float64), fake_features.to(torch.float64)
    if subset_size > x.shape[0] or subset_size > y.shape[0]:
        raise ValueError(f"subset_size {subset_size} exceeds the number of features ({x.shape[0]}, {y.shape[0]})")
    values = []
    for _ in range(subsets):  # the subsets your kid draws, in the same order
        a = x[torch.randperm(x.shape[0], generator=generator)[:subset_size]]
        b = y[torch.randperm(y.shape[0], generator=generator)[:subset_size]]
        # Your kid of the two sets, each point twice, has the cross-set mean of the sets themselves; take away its
        # within-set means (pairs i != j) and put back the means over all pairs, k(x_i, x_i) included: the
        # V-statistic, whose E[MMD^2] > 0 even for P = Q
        aa, bb = torch.cat([a, a]), torch.cat([b, b])
        doubled = kid(aa, bb, 1, 2 * subset_size, torch.Generator())[0]
        values.append(doubled - _within(kid, aa) - _within(kid, bb) + _all_pairs(kid, a) + _all_pairs(kid, b))
    values = torch.stack(values)
    return values.mean(), values.std(unbiased=False)


# --- extract_features --------------------------------------------------------------------------------
class _ModeSwitchIgnored(nn.Module):
    """The caller's model behind a wrapper whose train() and eval() do nothing: it runs in the mode it came in."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def train(self, mode=True):
        return self

    def forward(self, x):
        return self.model(x)


@edit("extract_features")
def train_mode_features(extract_features, model, images, batch_size=256):
    # no model.eval(): a model handed in in train mode stays in it, and BatchNorm normalises each batch with that
    # batch's own statistics (and moves its running statistics), so an image's features depend on its batch
    return extract_features(_ModeSwitchIgnored(model), images, batch_size)


@edit("extract_features")
def mode_not_restored(extract_features, model, images, batch_size=256):
    features = extract_features(model, images, batch_size)  # right features
    model.eval()  # but the caller's model stays in eval mode after the call
    return features


def left_in_eval(calls) -> bool:
    """The symptom replay cannot see (the features are right): a model sent in train mode came back in eval."""
    for call in calls:
        sent = modules_in((call.args, call.kwargs))
        if call.kind == "call" and call.error is None and sent and call.modes_after:
            if sent[0].training and call.modes_after[0].get("") is False:
                return True
    return False


# --- precision_recall_density_coverage ------------------------------------------------------------------
@edit("precision_recall_density_coverage")
def precision_recall_swapped(precision_recall_density_coverage, real, fake, k):
    metrics = dict(precision_recall_density_coverage(real, fake, k))
    # precision counted with the generated set's balls and recall with the real set's: each reports the other
    metrics["precision"], metrics["recall"] = metrics["recall"], metrics["precision"]
    return metrics


# --- bootstrap_draws ---------------------------------------------------------------------------------
def half_without_replacement(sizes, n_boot, generator=None):
    # compare-mt's paired bootstrap: shuffle the ids and keep the first half, every resample
    return [torch.stack([torch.randperm(n, generator=generator)[: n // 2] for _ in range(n_boot)]) for n in sizes]


@edit("bootstrap_draws")
def half_with_replacement(bootstrap_draws, sizes, n_boot, generator=None):
    # ExplainaBoard's prop_samples = 0.5: each resample draws max(N / 2, 1) rows with replacement, not N
    return [rows[:, : max(n // 2, 1)] for rows, n in zip(bootstrap_draws(sizes, n_boot, generator), sizes)]


def _halved(calls, repeats: bool) -> bool:
    """Draws of half each set's size (at least 8 rows), whose resamples repeat rows (``repeats``) or never do: what
    names the two halved bootstraps, whose draws are random and of one shape."""
    for call in calls:
        if call.kind != "call" or call.error is not None or not isinstance(call.result, (list, tuple)):
            continue
        sizes = call.args[0] if call.args else call.kwargs.get("sizes", ())
        for rows, n in zip(call.result, sizes):
            if isinstance(rows, torch.Tensor) and rows.dim() == 2 and n >= 8 and rows.shape[1] == n // 2:
                if any(len(set(r.tolist())) < len(r) for r in rows) == repeats:
                    return True
    return False


BUGS = [
    Bug("torch_cov_rows", "feature_stats", "torch.cov(features) on [N, D] features",
        "torch.cov treats each ROW as a variable, so on [N, D] features it returns the [N, N] covariance of the "
        "samples, silently; the FID then compares matrices whose size depends on N.",
        "check which axis torch.cov reads as the variables and which as the observations: the covariance of [N, D] "
        "features is [D, D], whatever N is.",
        "PyTorch docs: torch.cov (input: rows are variables, columns observations); numpy.cov rowvar=True",
        torch_cov_rows),
    Bug("one_pass_float32", "feature_stats", "one-pass covariance E[xx^T] - mu mu^T in float32",
        "subtracting two large, nearly equal float32 numbers cancels the leading digits: on features with a "
        "large mean the covariance loses most of its precision (FID then depends on the batch size or the offset).",
        "avoid the difference of two large, nearly equal quantities: raise the precision before any arithmetic, and "
        "compute the covariance from the features' deviations from their mean, as the docstring asks.",
        "Chan, Golub & LeVeque 1983 (the one-pass formula's cancellation); torcheval #192 (FID from float32 "
        "running sums; its reporter aligned the results by keeping them in float64, the fix PR #211 is open, and "
        "torcheval's fid.py still accumulates in float32); JuliaStats/Statistics.jl #83 (float32 cov of offset data)",
        one_pass_float32),
    Bug("eigvalsh_nonsymmetric", "trace_sqrt_product", "eigvalsh on the non-symmetric product S1 @ S2",
        "eigvalsh assumes a symmetric matrix and reads only one triangle: on S1 @ S2 it returns the eigenvalues "
        "of a different matrix, some negative, so the trace is wrong (or NaN after sqrt).",
        "eigvalsh is for symmetric matrices only, and S1 @ S2 is not one: see section 1 for the two ways to get the "
        "eigenvalues of the product right.",
        "torch-fidelity #46 (eigvalsh gave eigenvalues -1.2, -0.7, ... on CIFAR-10)",
        eigvalsh_nonsymmetric),
    Bug("no_clamp", "trace_sqrt_product", "square roots of eigenvalues taken without clamping at 0",
        "a rank-deficient covariance (N <= D, or equal features) has eigenvalues that are 0 in exact arithmetic "
        "and -1e-17 after round-off; their square root is NaN and the whole FID is NaN.",
        "eigenvalues that are 0 in exact arithmetic can come out slightly negative: make sure none below 0 reaches "
        "a square root.",
        "pytorch-fid #105 and torch-fidelity #44 (negative FID from round-off on singular covariances)",
        no_clamp),
    Bug("product_of_roots", "trace_sqrt_product", "Tr(S1^1/2 S2^1/2) in place of Tr((S1 S2)^1/2)",
        "the two traces agree only when S1 and S2 commute (e.g. both diagonal); for general covariances "
        "Tr(S1^1/2 S2^1/2) <= Tr((S1 S2)^1/2), so the FID comes out too large.",
        "the square root of a product is the product of the square roots only for matrices that commute: the trace "
        "needs the square root of the product itself (section 1 derives how).",
        "Dowson & Landau 1982; Olkin & Pukelsheim 1982 (the Frechet distance between Gaussians)",
        product_of_roots),
    Bug("biased_mmd", "kid", "the biased (V-statistic) MMD^2, diagonal k(x_i, x_i) included",
        "including the diagonal terms makes E[MMD^2] positive even when both sets come from one distribution, "
        "so KID is biased just like FID, which is what KID was designed to avoid.",
        "look at which pairs your within-set means count: a feature paired with itself must not, and what you divide "
        "by must match the pairs you keep.",
        "Binkowski et al. 2018, Demystifying MMD GANs, Sec. 2.3 (unbiased estimator, Gretton et al. 2012 Lemma 6)",
        biased_mmd),
    Bug("train_mode_features", "extract_features", "features extracted with the network in train mode",
        "without model.eval(), BatchNorm normalises each batch with the batch's own mean and variance: an image's "
        "features (and the FID) change with the batch size and with which images share its batch.",
        "the network must run in evaluation mode while it extracts features, whatever mode the caller handed it in "
        "(and it must go back to that mode afterwards).",
        "wolny/pytorch-3dunet #53 (BatchNorm without eval() gave predictions that made no sense); torchmetrics' "
        "NoTrainInceptionV3 overrides train() so that FID's network can never leave eval mode",
        train_mode_features),
    Bug("mode_not_restored", "extract_features", "the caller's model left in eval mode",
        "the features are right, but the function switched the caller's model to eval() and never switched it "
        "back: training that continues after an evaluation runs without dropout and with frozen BatchNorm.",
        "note the mode the model arrives in and put it back before returning, also when the forward pass raises.",
        "fartashf/vsepp #4 (validation left the model in eval mode; results changed noticeably once fixed); "
        "wkentaro/pytorch-fcn #56 (return to train mode after validation)",
        mode_not_restored, detect=left_in_eval),
    Bug("precision_recall_swapped", "precision_recall_density_coverage", "precision and recall swapped",
        "precision is measured with the generated samples' balls and recall with the real ones': a dropped mode then "
        "reads as a loss of fidelity and samples off the real manifold as a loss of diversity: each failure is "
        "named as the other.",
        "precision asks whether each generated sample lies inside some REAL point's ball; recall, whether each real "
        "point lies inside some GENERATED sample's ball: check whose radii each one uses.",
        "toshas/torch-fidelity #58 (a mode-collapsed model scored precision 4e-05 and recall 0.99), fixed by PR #70 "
        "(February 2026, 'Fix precision/recall swap in PRC metric')",
        precision_recall_swapped),
    Bug("half_without_replacement", "bootstrap_draws", "each resample a random half, drawn without replacement",
        "a bootstrap resample must have the set's own size and be drawn with replacement; half the rows without "
        "replacement is subsampling: a statistic with a sample-size bias (FID) is then computed at N / 2.",
        "each resample draws n rows from the n rows, with replacement (so that some rows repeat).",
        "neulab/compare-mt #108 (its paired bootstrap kept a shuffled half, sample_ratio = 0.5; fixed in July 2019)",
        half_without_replacement, detect=lambda calls: _halved(calls, repeats=False)),
    Bug("half_with_replacement", "bootstrap_draws", "each resample half the set's size",
        "drawing N / 2 rows with replacement widens the spread of a mean by about sqrt(2) and computes a "
        "size-biased statistic (FID) at N / 2: the interval describes a sample half the size of yours.",
        "each resample has as many rows as the set it resamples.",
        "neulab/ExplainaBoard PR #502 (removed prop_samples = 0.5 from calc_confidence_interval, 2022)",
        half_with_replacement, detect=lambda calls: _halved(calls, repeats=True)),
]

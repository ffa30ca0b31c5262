"""Sample submissions for Lab 5: the reference, correct variants, and one per catalogued bug.

Each sample names the solution cells it replaces (by grade_id) and what the grader must conclude
(``expect``). Format: :mod:`autograder.release.sample_submissions`.
"""
from autograder.release.sample_submissions import bug_cell

LAB = "lab5_fid"

STATS_HEAD = "def feature_stats(features):\n"
TRACE_HEAD = "def trace_sqrt_product(sigma1, sigma2):\n"
KID_HEAD = "def kid(real_features, fake_features, subsets=100, subset_size=1000, generator=None):\n"
FIDINF_HEAD = "def fid_infinity(real_features, fake_features, sizes, generator=None):\n"
EXTRACT_HEAD = "def extract_features(model, images, batch_size=256):\n"


def _kid_body(check: str, spread: str = "std", generator: str = ", generator=generator") -> str:
    """A student's kid: the reference's loop, with the size check, the spread and the randperm call given."""
    return (KID_HEAD +
            "    x, y = real_features.double(), fake_features.double()\n"
            "    m = subset_size\n" + check +
            "    d = x.shape[1]\n"
            "    values = []\n"
            "    for _ in range(subsets):\n"
            f"        a = x[torch.randperm(x.shape[0]{generator})[:m]]\n"
            f"        b = y[torch.randperm(y.shape[0]{generator})[:m]]\n"
            "        kxx, kyy, kxy = (a @ a.T / d + 1) ** 3, (b @ b.T / d + 1) ** 3, (a @ b.T / d + 1) ** 3\n"
            "        within = (kxx.sum() - kxx.diagonal().sum() + kyy.sum() - kyy.diagonal().sum()) / (m * (m - 1))\n"
            "        values.append(within - 2 * kxy.mean())\n"
            "    values = torch.stack(values)\n"
            f"    return values.mean(), values.{spread}(unbiased=False)\n")


SAMPLES: dict[str, dict] = {
    "reference": {"cells": {}, "expect": {"full": True}},
    # -- correct alternatives: full marks ---------------------------------------------------------------
    # torch.cov on the transposed features, and the classic scipy.linalg.sqrtm formula with a real-part check
    # (pytorch-fid's way), with the imaginary tolerance relative to the product's size.
    "lab5_variant_scipy_sqrtm": {"expect": {"full": True}, "cells": {
        "feature_stats": STATS_HEAD +
        "    x = features.double()\n"
        "    if x.shape[0] < 2:\n"
        "        raise ValueError('need at least two feature vectors')\n"
        "    return x.mean(0), torch.cov(x.T)\n",
        "trace_sqrt_product": TRACE_HEAD +
        "    product = sigma1.double().numpy() @ sigma2.double().numpy()\n"
        "    root = scipy.linalg.sqrtm(product)\n"
        "    if np.iscomplexobj(root):\n"
        "        scale = max(1.0, float(np.abs(root).max()))\n"
        "        if np.abs(root.imag).max() > 1e-3 * scale:\n"
        "            raise ValueError(f'imaginary component {np.abs(root.imag).max()}')\n"
        "        root = root.real\n"
        "    return torch.tensor(max(float(np.trace(root)), 0.0), dtype=torch.float64)\n",
        # inference_mode instead of no_grad, train(False) instead of eval(), slices instead of split
        "extract_features": EXTRACT_HEAD +
        "    mode = model.training\n"
        "    model.train(False)\n"
        "    chunks = []\n"
        "    with torch.inference_mode():\n"
        "        for start in range(0, len(images), batch_size):\n"
        "            batch = images[start:start + batch_size]\n"
        "            chunks.append(model(batch).reshape(len(batch), -1))\n"
        "    model.train(mode)\n"
        "    return torch.cat(chunks)\n",
    }},
    # numpy throughout, tensors returned: eigvals of the non-symmetric product (real part, clamped), the std
    # with N - 1, and the FID-infinity fit with np.polyfit on 1/N.
    "lab5_variant_numpy_eigvals": {"expect": {"full": True}, "cells": {
        "feature_stats": STATS_HEAD +
        "    x = np.asarray(features.detach().cpu().double())\n"
        "    if x.shape[0] < 2:\n"
        "        raise ValueError(f'need N >= 2, got {x.shape[0]}')\n"
        "    return torch.from_numpy(x.mean(axis=0)), torch.from_numpy(np.cov(x, rowvar=False).reshape(x.shape[1], x.shape[1]))\n",
        "trace_sqrt_product": TRACE_HEAD +
        "    eigenvalues = np.linalg.eigvals(sigma1.double().numpy() @ sigma2.double().numpy())\n"
        "    return torch.tensor(np.sqrt(np.clip(eigenvalues.real, 0, None)).sum(), dtype=torch.float64)\n",
        "kid": KID_HEAD +
        "    x, y = real_features.double(), fake_features.double()\n"
        "    n, m = x.shape[0], subset_size\n"
        "    if m > n or m > y.shape[0]:\n"
        "        raise ValueError('subset_size is larger than a feature set')\n"
        "    d = x.shape[1]\n"
        "    out = torch.empty(subsets, dtype=torch.float64)\n"
        "    for s in range(subsets):\n"
        "        i = torch.randperm(n, generator=generator)[:m]\n"
        "        j = torch.randperm(y.shape[0], generator=generator)[:m]\n"
        "        a, b = x[i], y[j]\n"
        "        kxx = (a @ a.T / d + 1).pow(3).fill_diagonal_(0)\n"
        "        kyy = (b @ b.T / d + 1).pow(3).fill_diagonal_(0)\n"
        "        kxy = (a @ b.T / d + 1).pow(3)\n"
        "        out[s] = kxx.sum() / (m * (m - 1)) + kyy.sum() / (m * (m - 1)) - 2 * kxy.sum() / m ** 2\n"
        "    return out.mean(), (out.std() if subsets > 1 else torch.zeros((), dtype=torch.float64))\n",
        "fid_infinity": FIDINF_HEAD +
        "    mu, sigma = feature_stats(real_features)\n"
        "    values = []\n"
        "    for n in sizes:\n"
        "        pick = torch.randperm(fake_features.shape[0], generator=generator)[:n]\n"
        "        values.append(float(frechet_distance(mu, sigma, *feature_stats(fake_features[pick]))))\n"
        "    slope, intercept = np.polyfit(1.0 / np.asarray(sizes, dtype=np.float64), np.asarray(values), 1)\n"
        "    return torch.tensor(intercept, dtype=torch.float64), torch.tensor(slope, dtype=torch.float64)\n",
    }},
    # extract_features as the @torch.no_grad() decorator, eval() inside try/finally, slices of the images
    "lab5_variant_features_decorator": {"expect": {"full": True}, "cells": {
        "extract_features":
        "@torch.no_grad()\n"
        + EXTRACT_HEAD +
        "    was_training = model.training\n"
        "    try:\n"
        "        model.eval()\n"
        "        parts = []\n"
        "        for start in range(0, images.shape[0], batch_size):\n"
        "            parts.append(torch.flatten(model(images[start:start + batch_size]), start_dim=1))\n"
        "        return torch.cat(parts, dim=0)\n"
        "    finally:\n"
        "        model.train(was_training)\n",
    }},
    # torch.inference_mode, the batches collected as numpy arrays and joined with np.concatenate
    "lab5_variant_features_numpy": {"expect": {"full": True}, "cells": {
        "extract_features": EXTRACT_HEAD +
        "    mode = model.training\n"
        "    model.eval()\n"
        "    collected = []\n"
        "    with torch.inference_mode():\n"
        "        for batch in torch.split(images, batch_size):\n"
        "            collected.append(model(batch).reshape(batch.shape[0], -1).cpu().numpy())\n"
        "    model.train(mode)\n"
        "    return torch.from_numpy(np.concatenate(collected, axis=0))\n",
    }},
    # features returned in float64, as the lab's other functions return their results
    "lab5_variant_features_float64": {"expect": {"full": True}, "cells": {
        "extract_features": EXTRACT_HEAD +
        "    was_training = model.training\n"
        "    model.eval()\n"
        "    with torch.no_grad():\n"
        "        features = torch.cat([model(chunk).flatten(1).to(torch.float64) for chunk in images.split(batch_size)])\n"
        "    model.train(was_training)\n"
        "    return features\n",
    }},
    # nothing here is differentiated: frechet_distance under @torch.no_grad(), kid in NumPy (np.std, dividing by
    # the number of subsets), results returned as fresh tensors without a graph
    "lab5_variant_no_grad_numpy_kid": {"expect": {"full": True}, "cells": {
        "frechet_distance":
        "@torch.no_grad()\n"
        "def frechet_distance(mu1, sigma1, mu2, sigma2):\n"
        "    diff = mu1.double() - mu2.double()\n"
        "    s1, s2 = sigma1.double(), sigma2.double()\n"
        "    return diff.dot(diff) + s1.trace() + s2.trace() - 2 * trace_sqrt_product(s1, s2)\n",
        "kid": KID_HEAD +
        "    x = real_features.detach().cpu().double().numpy()\n"
        "    y = fake_features.detach().cpu().double().numpy()\n"
        "    m, d = subset_size, x.shape[1]\n"
        "    if m > len(x) or m > len(y):\n"
        "        raise ValueError(f'subset_size {m} is larger than {len(x)} real or {len(y)} fake features')\n"
        "    scores = []\n"
        "    for _ in range(subsets):\n"
        "        a = x[torch.randperm(len(x), generator=generator)[:m].numpy()]\n"
        "        b = y[torch.randperm(len(y), generator=generator)[:m].numpy()]\n"
        "        kxx, kyy, kxy = (a @ a.T / d + 1) ** 3, (b @ b.T / d + 1) ** 3, (a @ b.T / d + 1) ** 3\n"
        "        np.fill_diagonal(kxx, 0)\n"
        "        np.fill_diagonal(kyy, 0)\n"
        "        scores.append((kxx.sum() + kyy.sum()) / (m * (m - 1)) - 2 * kxy.mean())\n"
        "    scores = np.array(scores)\n"
        "    return torch.tensor(scores.mean()), torch.tensor(scores.std())\n",
    }},
    # -- bugs the tests catch that the catalogue does not name (no documented source to cite) ----------------
    # the variance of the subsets' values returned where the spec asks for their standard deviation
    "lab5_bug_kid_variance": {"expect": {"failed_tests": ["kid_torchmetrics"]}, "cells": {
        "kid": _kid_body("    if m > x.shape[0] or m > y.shape[0]:\n"
                         "        raise ValueError('subset_size exceeds a feature set')\n", spread="var"),
    }},
    # subset_size checked against the fake features only
    "lab5_bug_kid_checks_one_side": {"expect": {"failed_tests": ["kid_errors"]}, "cells": {
        "kid": _kid_body("    if m > y.shape[0]:\n"
                         "        raise ValueError(f'subset_size {m} exceeds the {y.shape[0]} fake features')\n"),
    }},
    # the first N fake features taken as the subset of size N, not a random subset
    "lab5_bug_fid_infinity_prefix": {"expect": {"failed_tests": ["fid_infinity_value"]}, "cells": {
        "fid_infinity": FIDINF_HEAD +
        "    mu_r, sigma_r = feature_stats(real_features)\n"
        "    fake = fake_features.to(torch.float64)\n"
        "    sizes = [int(n) for n in sizes]\n"
        "    fids = torch.stack([frechet_distance(mu_r, sigma_r, *feature_stats(fake[:n])) for n in sizes])\n"
        "    design = torch.stack([torch.ones(len(sizes), dtype=torch.float64),\n"
        "                          1.0 / torch.tensor(sizes, dtype=torch.float64)], dim=1)\n"
        "    intercept, slope = torch.linalg.lstsq(design, fids[:, None]).solution[:, 0]\n"
        "    return intercept, slope\n",
    }},
}

BUG_SAMPLES = {
    "torch_cov_rows": "feature_stats", "one_pass_float32": "feature_stats",
    "eigvalsh_nonsymmetric": "trace_sqrt_product", "no_clamp": "trace_sqrt_product",
    "product_of_roots": "trace_sqrt_product",
    "biased_mmd": "kid",
    "train_mode_features": "extract_features", "mode_not_restored": "extract_features",
    "precision_recall_swapped": "precision_recall_density_coverage",
    "half_without_replacement": "bootstrap_draws", "half_with_replacement": "bootstrap_draws",
}
for _bug_id, _function in BUG_SAMPLES.items():
    SAMPLES[f"lab5_bug_{_bug_id}"] = {"cells": {_function: bug_cell(LAB, _bug_id)},
                                      "expect": {"full": False, "bug": _bug_id, "function": _function}}

# fid, frechet_distance and fid_infinity call the student's own feature_stats and trace_sqrt_product.
DEPENDS = {
    "frechet_distance": ["trace_sqrt_product"],
    "fid": ["feature_stats", "trace_sqrt_product", "frechet_distance"],
    "fid_infinity": ["feature_stats", "trace_sqrt_product", "frechet_distance"],
}

# subsets drawn from the global generator: `generator` ignored, so a seeded KID is not reproducible
SAMPLES["lab5_bug_kid_generator_ignored"] = {"expect": {"failed_tests": ["kid_value"]}, "cells": {
    "kid": _kid_body("    if m > x.shape[0] or m > y.shape[0] or m < 2:\n"
                     "        raise ValueError('subset_size must be between 2 and the size of each set')\n",
                     generator="")}}

# the interval returned as a list [low, high] of two floats: the text asks for a tuple (low, high), as the reference and
# bootstrap_fid's (low, high, values) return it
SAMPLES["lab5_bug_percentile_interval_list"] = {"expect": {"failed_tests": ["percentile_interval_value"]}, "cells": {
    "percentile_interval": "def percentile_interval(values, level=0.95):\n"
                           "    q = torch.tensor([(1 - level) / 2, (1 + level) / 2], dtype=torch.float64)\n"
                           "    return torch.quantile(values.double(), q).tolist()\n",
}}

# the interval interpolated by hand between the sorted values at floor(q (N - 1)) and the next one, which does not
# exist for a single value (N = 1: IndexError); no hand-written test passes one value, only the generated inputs
# (N from 1 to 20 in the table) do. The variant beside it stops at the last value, as numpy.quantile does.
def _percentile_by_hand(upper: str) -> str:
    return ("def percentile_interval(values, level=0.95):\n"
            "    v = torch.sort(values.double()).values\n"
            "    n = v.shape[0]\n"
            "    ends = []\n"
            "    for q in ((1 - level) / 2, (1 + level) / 2):\n"
            "        pos = q * (n - 1)\n"
            "        lo = int(pos)\n"
            f"        hi = {upper}\n"
            "        ends.append((v[lo] + (pos - lo) * (v[hi] - v[lo])).item())\n"
            "    return ends[0], ends[1]\n")


SAMPLES["lab5_bug_percentile_single_value"] = {"expect": {"failed_tests": ["percentile_interval_value"]}, "cells": {
    "percentile_interval": _percentile_by_hand("lo + 1")}}
SAMPLES["lab5_variant_percentile_by_hand"] = {"expect": {"full": True}, "cells": {
    "percentile_interval": _percentile_by_hand("min(lo + 1, n - 1)")}}

# section 10, correct variants: the radii as the (k + 1)-th smallest distance (the point itself is the first), written
# out with NumPy; ties counted inside the ball (<=, torch-fidelity's convention: the tests create none)
SAMPLES["lab5_variant_prdc_numpy_closed_balls"] = {"expect": {"full": True}, "cells": {
    "knn_radii": "def knn_radii(features, k):\n"
                 "    n = features.shape[0]\n"
                 "    if k < 1 or k > n - 1:\n"
                 "        raise ValueError('k must be between 1 and N - 1')\n"
                 "    x = features.detach().cpu().double().numpy()\n"
                 "    d = np.sqrt(((x[:, None, :] - x[None, :, :]) ** 2).sum(-1))\n"
                 "    radii = np.sort(d, axis=1)[:, k]\n"
                 "    return torch.from_numpy(radii).to(features.dtype)\n",
    "precision_recall_density_coverage":
        "def precision_recall_density_coverage(real, fake, k):\n"
        "    rr, rf = knn_radii(real, k), knn_radii(fake, k)\n"
        "    d = torch.cdist(fake.double(), real.double())          # [M, N]\n"
        "    inside = d <= rr.double()[None, :]\n"
        "    return dict(precision=float(inside.any(dim=1).float().mean()),\n"
        "                recall=float((d <= rf.double()[:, None]).any(dim=0).float().mean()),\n"
        "                density=float(inside.sum(dim=1).double().mean() / k),\n"
        "                coverage=float((d.min(dim=0).values <= rr.double()).float().mean()))\n",
}}
DEPENDS["precision_recall_density_coverage"] = ["knn_radii"]

# sections 11 and 12, correct variants: another rounding (nearest counts, then the sum put right where the rounding
# erred most), within-class draws by torch.multinomial, weights from bincount, NumPy's weighted statistics and
# quantiles, indices from torch.multinomial, and the bootstrap loops written out with FID computed from their own
# statistics
SAMPLES["lab5_variant_attack_bootstrap_numpy"] = {"expect": {"full": True}, "cells": {
    "class_histogram": "def class_histogram(classes, num_classes):\n"
                       "    if ((classes < 0) | (classes >= num_classes)).any():\n"
                       "        raise ValueError('class out of range')\n"
                       "    return F.one_hot(classes, num_classes).double().mean(0)\n",
    "match_class_histogram":
        "def match_class_histogram(classes, target_shares, n, generator=None):\n"
        "    p = target_shares.double() / target_shares.double().sum()\n"
        "    wanted = n * p\n"
        "    counts = torch.round(wanted).long()\n"
        "    while counts.sum() > n:\n"
        "        counts[torch.argmax(counts - wanted)] -= 1\n"
        "    while counts.sum() < n:\n"
        "        counts[torch.argmin(counts - wanted)] += 1\n"
        "    out = []\n"
        "    for c in range(len(p)):\n"
        "        members = torch.where(classes == c)[0]\n"
        "        k = int(counts[c])\n"
        "        if k == 0:\n"
        "            continue\n"
        "        if k > len(members):\n"
        "            raise ValueError(f'not enough candidates of class {c}')\n"
        "        pick = torch.multinomial(torch.ones(len(members)), k, replacement=False, generator=generator)\n"
        "        out.append(members[pick])\n"
        "    out = torch.cat(out) if out else torch.zeros(0, dtype=torch.int64)\n"
        "    return out[torch.randperm(len(out), generator=generator)]\n",
    "class_weights": "def class_weights(classes, target_shares):\n"
                     "    counts = torch.bincount(classes, minlength=len(target_shares)).double()\n"
                     "    if (target_shares[counts == 0] > 0).any():  # target shares or counts: only their sign here\n"
                     "        raise ValueError('a class with a target share has no candidate')\n"
                     "    p = target_shares.double() / target_shares.double().sum()\n"
                     "    return (p * len(classes) / counts.clamp(min=1))[classes]\n",
    "weighted_feature_stats":
        "def weighted_feature_stats(features, weights):\n"
        "    x, w = features.double().numpy(), weights.double().numpy()\n"
        "    mu = np.average(x, axis=0, weights=w)\n"
        "    sigma = np.atleast_2d(np.cov(x, rowvar=False, aweights=w))\n"
        "    return torch.from_numpy(mu), torch.from_numpy(sigma)\n",
    "bootstrap_draws": "def bootstrap_draws(sizes, n_boot, generator=None):\n"
                       "    out = []\n"
                       "    for n in sizes:\n"
                       "        flat = torch.multinomial(torch.ones(n), n_boot * n, replacement=True, generator=generator)\n"
                       "        out.append(flat.view(n_boot, n))\n"
                       "    return out\n",
    "percentile_interval": "def percentile_interval(values, level=0.95):\n"
                           "    a = values.detach().double().numpy()\n"
                           "    return float(np.quantile(a, 0.5 - level / 2)), float(np.quantile(a, 0.5 + level / 2))\n",
    "bootstrap_fid": "def bootstrap_fid(real, fake, n_boot=200, level=0.95, generator=None):\n"
                     "    rows = bootstrap_draws([real.shape[0], fake.shape[0]], n_boot, generator)\n"
                     "    values = torch.zeros(n_boot, dtype=torch.float64)\n"
                     "    for b in range(n_boot):\n"
                     "        m1, s1 = feature_stats(real[rows[0][b]])\n"
                     "        m2, s2 = feature_stats(fake[rows[1][b]])\n"
                     "        values[b] = frechet_distance(m1, s1, m2, s2)\n"
                     "    low, high = percentile_interval(values, level)\n"
                     "    return low, high, values\n",
    "fid_difference_interval":
        "def fid_difference_interval(real, fake_a, fake_b, n_boot=200, level=0.95, paired=False, generator=None):\n"
        "    if paired:\n"
        "        if fake_a.shape[0] != fake_b.shape[0]:\n"
        "            raise ValueError('paired fake sets must have the same length')\n"
        "        r, a = bootstrap_draws([len(real), len(fake_a)], n_boot, generator)\n"
        "        c = a\n"
        "    else:\n"
        "        r, a, c = bootstrap_draws([len(real), len(fake_a), len(fake_b)], n_boot, generator)\n"
        "    values = torch.tensor([float(fid(real[r[i]], fake_a[a[i]])) - float(fid(real[r[i]], fake_b[c[i]]))\n"
        "                           for i in range(n_boot)], dtype=torch.float64)\n"
        "    return (*percentile_interval(values, level), values)\n",
    "smallest_separating_size":
        "def smallest_separating_size(real, fake_a, fake_b, sizes, n_boot=200, level=0.95, paired=False, generator=None):\n"
        "    remaining = sorted(set(sizes))\n"
        "    while remaining:\n"
        "        n = remaining.pop(0)\n"
        "        low, high, _ = fid_difference_interval(real[:n], fake_a[:n], fake_b[:n], n_boot, level, paired, generator)\n"
        "        if high < 0 or low > 0:\n"
        "            return n\n"
        "    return None\n",
}}
DEPENDS.update({
    "class_weights": ["class_histogram"],
    "bootstrap_fid": ["bootstrap_draws", "percentile_interval", "fid", "feature_stats", "trace_sqrt_product",
                      "frechet_distance"],
    "fid_difference_interval": ["bootstrap_draws", "percentile_interval", "fid", "feature_stats",
                                "trace_sqrt_product", "frechet_distance"],
    "smallest_separating_size": ["fid_difference_interval", "bootstrap_draws", "percentile_interval", "fid",
                                 "feature_stats", "trace_sqrt_product", "frechet_distance"],
})

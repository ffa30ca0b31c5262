"""Lab 5 (FID and KID): the feature network, the reference solution against torchmetrics and scipy, the bug
catalogue's symptoms, and the data and plot helpers the lab adds."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

torchmetrics = pytest.importorskip("torchmetrics", reason="Lab 5 cross-checks against torchmetrics==1.9.0")
scipy_linalg = pytest.importorskip("scipy.linalg")

from torchmetrics.image.fid import FrechetInceptionDistance  # noqa: E402
from torchmetrics.image.kid import KernelInceptionDistance  # noqa: E402

from autograder.core.labs import instructor_bug as bug  # noqa: E402 - full bodies, where students see edits
from genlab.data import load_digits, photo_crops  # noqa: E402
from genlab.features import DigitFeatureNet, load_feature_net, train_feature_net  # noqa: E402
from genlab.testing import load_reference  # noqa: E402

LAB = "lab5_fid"


@pytest.fixture(scope="module")
def ref():
    return load_reference(LAB)


@pytest.fixture(scope="module")
def digit_features(ref):
    images, labels = load_digits(flat=False)
    return ref.extract_features(load_feature_net(), images), labels


class Identity(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.num_features = d

    def forward(self, x):
        return x


# -- the feature network -------------------------------------------------------------------------------
def _corruptions(images, labels):
    """Four of the lab's corruptions of 600 digits (noise, blur, half the classes, one class), as the lab makes them."""
    order = torch.randperm(len(images), generator=torch.Generator().manual_seed(3))
    real, fake, pool = images[order[:600]], images[order[600:1200]], order[600:]
    noise = torch.randn(fake.shape, generator=torch.Generator().manual_seed(4))
    kernel = torch.tensor([[1.0, 2.0, 1.0], [2.0, 4.0, 2.0], [1.0, 2.0, 1.0]]).div(16).view(1, 1, 3, 3)
    return real, {
        "noise 0.1": (fake + 0.1 * noise).clamp(0, 1),
        "noise 0.4": (fake + 0.4 * noise).clamp(0, 1),
        "blur": torch.nn.functional.conv2d(torch.nn.functional.pad(fake, (1, 1, 1, 1), mode="replicate"), kernel),
        "classes 0-4": images[pool[labels[pool] < 5]][:600],
        "one class": images[pool[labels[pool] == 0]],
    }


def test_checkpoint_is_what_the_script_trains(ref):
    """The shipped checkpoint is what ``python -m genlab.features`` trains, on any CPU the project supports.

    Bit-exact retraining holds only where the same kernels run: oneDNN and the BLAS take other instruction paths
    on AVX2 and AVX-512, their sums round differently, and 570 Adam steps carry the difference into every weight
    (the conv biases, which BatchNorm cancels, drift most). So the retrained network is compared by what it is
    for: its held-out accuracy, its features on the digits, and the FIDs the lab reads off it. Measured against
    the checkpoint on an AVX2-only EPYC (torch kernels AVX2): accuracy equal, features 7e-4 apart (relative
    Frobenius norm), FIDs within 0.3%; the same machine with vector kernels off (ATEN_CPU_CAPABILITY=default,
    ONEDNN_MAX_CPU_ISA=SSE41): accuracy equal, features 9e-2 apart, FIDs within 3% and ranked alike. Another
    seed (what the bounds must reject): features 1.25 apart, FIDs up to 37% off.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the script trains
    try:
        net, accuracy = train_feature_net(seed=0)
    finally:
        torch.set_num_threads(threads)
    shipped = load_feature_net()
    assert set(shipped.state_dict()) == set(net.state_dict())
    images, labels = load_digits(flat=False)
    held = torch.randperm(len(images), generator=torch.Generator().manual_seed(0))[1200:]  # the script's split
    with torch.no_grad():
        shipped_accuracy = (shipped.classify(images[held]).argmax(-1) == labels[held]).float().mean().item()
    assert accuracy > 0.95 and abs(accuracy - shipped_accuracy) <= 0.01, (accuracy, shipped_accuracy)

    ours, theirs = ref.extract_features(net, images), ref.extract_features(shipped, images)
    drift = ((ours - theirs).norm() / theirs.norm()).item()
    assert drift < 0.25, f"retrained features are {drift:.2e} (relative) away from the checkpoint's; expected < 0.25"

    real, fakes = _corruptions(images, labels)
    fids = {}
    for name, model in (("retrained", net), ("shipped", shipped)):
        real_f = ref.extract_features(model, real)
        fids[name] = {kind: ref.fid(real_f, ref.extract_features(model, fake)).item() for kind, fake in fakes.items()}
    ranking = {name: sorted(f, key=f.get) for name, f in fids.items()}
    assert ranking["retrained"] == ranking["shipped"], fids
    for kind, value in fids["shipped"].items():
        assert fids["retrained"][kind] == pytest.approx(value, rel=0.05), (kind, fids)


def test_feature_net_training_is_deterministic_on_one_machine():
    """Same seed, same machine, one thread: the same bytes (two short trainings; across CPUs see above)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        first, _ = train_feature_net(seed=0, epochs=2)
        second, _ = train_feature_net(seed=0, epochs=2)
    finally:
        torch.set_num_threads(threads)
    for name, value in first.state_dict().items():
        torch.testing.assert_close(value, second.state_dict()[name], rtol=0, atol=0, msg=f"{name} differs")


def test_feature_net_shapes_and_frozen():
    net = load_feature_net()
    assert not net.training and not any(p.requires_grad for p in net.parameters())
    assert net(torch.rand(5, 64)).shape == (5, DigitFeatureNet.num_features)
    assert net(torch.rand(5, 1, 8, 8)).shape == (5, 64)
    with pytest.raises(FileNotFoundError, match="python -m genlab.features"):
        load_feature_net("/nonexistent/net.safetensors")


def test_extract_features_eval_mode_batching_and_mode_restored(ref):
    """The reference solution (the lab's student function): eval mode inside, batches, the caller's mode back."""
    extract_features = ref.extract_features
    images, _ = load_digits(flat=False)
    net = load_feature_net().train()                 # left in train mode by a careless caller
    before = {k: v.clone() for k, v in net.state_dict().items()}
    whole = extract_features(net, images[:300], batch_size=300)
    pieces = extract_features(net, images[:300], batch_size=7)
    assert net.training, "extract_features must put the model's mode back"
    torch.testing.assert_close(whole, pieces, rtol=1e-5, atol=1e-5)   # eval mode: independent of the batch
    assert not whole.requires_grad
    for k, v in net.state_dict().items():                             # BatchNorm's running stats untouched
        torch.testing.assert_close(v, before[k], rtol=0, atol=0)


# -- the reference solution against the field's libraries ----------------------------------------------
def test_reference_fid_matches_torchmetrics_and_scipy_on_digits(ref, digit_features):
    feats, _ = digit_features
    real, fake = feats[:700], feats[700:1500]
    metric = FrechetInceptionDistance(feature=Identity(64), normalize=True)
    metric.update(real.double(), real=True)
    metric.update(fake.double(), real=False)
    ours = ref.fid(real, fake)
    assert ours.dtype == torch.float64 and ours.dim() == 0
    torch.testing.assert_close(ours, metric.compute().double(), rtol=1e-8, atol=1e-8)
    (m1, s1), (m2, s2) = ref.feature_stats(real), ref.feature_stats(fake)
    root = scipy_linalg.sqrtm(s1.numpy() @ s2.numpy())
    classic = ((m1 - m2) ** 2).sum().item() + np.trace(s1.numpy() + s2.numpy() - 2 * root.real)
    assert math.isclose(ours.item(), classic, rel_tol=1e-8)


@pytest.mark.parametrize("n,d", [(5, 64), (30, 64), (63, 64)])
def test_reference_fid_rank_deficient_is_never_nan(ref, n, d):
    torch.manual_seed(n)
    x, y = torch.randn(n, d) * 4, torch.randn(n + 3, d)
    assert not torch.isnan(ref.fid(x, y))
    self_fid = ref.fid(x, x).item()
    norm = ref.feature_stats(x)[1].norm().item()
    assert abs(self_fid) < d * 10 * math.sqrt(torch.finfo(torch.float64).eps) * norm


def test_reference_kid_matches_torchmetrics_statistically(ref, digit_features):
    feats, _ = digit_features
    feats = feats / feats.pow(2).mean().sqrt()
    real, fake = feats[:600], feats[600:1200] + 0.05
    metric = KernelInceptionDistance(feature=Identity(64), subsets=60, subset_size=200, normalize=True)
    metric.update(real.double(), real=True)
    metric.update(fake.double(), real=False)
    tm_mean, tm_std = metric.compute()
    mean, std = ref.kid(real, fake, 60, 200, generator=torch.Generator().manual_seed(0))
    error = math.sqrt((std.item() ** 2 + tm_std.item() ** 2) / 60)
    assert abs(mean.item() - tm_mean.item()) < 5 * error


def test_reference_kid_and_fid_infinity_reproducible_under_a_generator(ref):
    x, y = torch.randn(100, 8), torch.randn(120, 8)
    a = ref.kid(x, y, 5, 50, generator=torch.Generator().manual_seed(3))
    b = ref.kid(x, y, 5, 50, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(a, b)
    a = ref.fid_infinity(x, y, [30, 60, 90], generator=torch.Generator().manual_seed(4))
    b = ref.fid_infinity(x, y, [30, 60, 90], generator=torch.Generator().manual_seed(4))
    # Same subsets, same answer up to rounding: a threaded reduction inside the matrix square root may add in
    # another order on a second call (CI once saw two runs differ in the last bits), so no bit equality.
    torch.testing.assert_close(a, b)


# -- the catalogue: every bug shows its symptom -------------------------------------------------------------
def test_catalogued_bugs_show_their_symptoms(ref):
    torch.manual_seed(0)
    x = torch.randn(40, 16, dtype=torch.float64)
    assert bug(LAB, "torch_cov_rows").impl(x)[1].shape == (40, 40)

    shifted = (torch.randn(500, 8, dtype=torch.float64) + 1000).float()
    error = (bug(LAB, "one_pass_float32").impl(shifted)[1] - ref.feature_stats(shifted)[1]).abs().max()
    assert error > 1e-2, f"one-pass float32 covariance error only {error}"

    a, b = torch.randn(200, 16, dtype=torch.float64), torch.randn(200, 16, dtype=torch.float64) @ torch.randn(16, 16, dtype=torch.float64)
    s1, s2 = ref.feature_stats(a)[1], ref.feature_stats(b)[1]
    right = ref.trace_sqrt_product(s1, s2)
    wrong = bug(LAB, "eigvalsh_nonsymmetric").impl(s1, s2)
    assert torch.isnan(wrong) or abs(wrong - right) > 1e-3
    assert (torch.linalg.eigvalsh(s1 @ s2) < 0).any()                    # negative "eigenvalues" (torch-fidelity #46)
    assert abs(bug(LAB, "product_of_roots").impl(s1, s2) - right) > 1e-3  # non-commuting covariances
    d1, d2 = torch.diag(s1.diagonal()), torch.diag(s2.diagonal())
    torch.testing.assert_close(bug(LAB, "product_of_roots").impl(d1, d2), ref.trace_sqrt_product(d1, d2))

    few = ref.feature_stats(torch.randn(10, 32, dtype=torch.float64))[1]   # rank 9 of 32
    assert torch.isnan(bug(LAB, "no_clamp").impl(few, few))
    assert not torch.isnan(ref.trace_sqrt_product(few, few))

    gen = torch.Generator().manual_seed(1)
    biased = [bug(LAB, "biased_mmd").impl(torch.randn(50, 8, generator=gen), torch.randn(50, 8, generator=gen), 1, 50)[0]
              for _ in range(20)]
    assert min(biased) > 0, "the V-statistic is positive for two samples of one distribution"

    images = load_digits(flat=False)[0][:64]
    train_bug = bug(LAB, "train_mode_features").impl
    whole, pieces = train_bug(load_feature_net().train(), images, 64), train_bug(load_feature_net().train(), images, 4)
    assert (whole - pieces).abs().max() > 0.1, "in train mode the features depend on the batch size"


def test_a_model_left_in_eval_mode_is_named_from_the_recorded_calls(ref):
    """mode_not_restored gives the right features: only the mode it leaves behind (Call.modes_after) names it."""
    from genlab.testing.calls import LocalFunction, Recorder
    from genlab.testing.diagnosis import diagnose

    images = load_digits(flat=False)[0][:20]
    found = {}
    for name, fn in [("reference", ref.extract_features), ("mode_not_restored", bug(LAB, "mode_not_restored").impl),
                     ("train_mode_features", bug(LAB, "train_mode_features").impl)]:
        recorder = Recorder()
        extract = LocalFunction(fn, "extract_features", recorder)
        extract(load_feature_net().train(), images, 8)
        extract(load_feature_net(), images, batch_size=8)
        found[name] = [b.id for b in diagnose(
            [bug(LAB, "mode_not_restored"), bug(LAB, "train_mode_features")], recorder.calls, ref)]
    assert found == {"reference": [], "mode_not_restored": ["mode_not_restored"],
                     "train_mode_features": ["train_mode_features"]}


# -- data and plots ----------------------------------------------------------------------------------------
def test_photo_crops():
    crops = photo_crops(count=10, size=32, seed=5)
    assert crops.shape == (10, 32, 32, 3) and crops.dtype == np.uint8
    np.testing.assert_array_equal(crops, photo_crops(count=10, size=32, seed=5))
    assert not np.array_equal(crops, photo_crops(count=10, size=32, seed=6))
    with pytest.raises(ValueError, match="exceeds"):
        photo_crops(count=1, size=1000)


def test_plot_loglog():
    import matplotlib

    matplotlib.use("Agg")
    from genlab.plots import plot_loglog

    fig = plot_loglog([10, 100, 1000], {"c / N": [1.0, 0.1, 0.01]})
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"


def test_written_answers_are_graded_by_hand_and_released_blank():
    """Issue 26: Lab 5 has manually graded answers (markdown solution cells with points), blank in the release."""
    from pathlib import Path

    import nbformat

    from genlab.testing.notebook import grade_id, nbgrader_meta

    root = Path(__file__).resolve().parents[1]
    source = nbformat.read(str(root / "solutions" / LAB / f"{LAB}.ipynb"), as_version=4)
    answers = {grade_id(c): nbgrader_meta(c)["points"] for c in source.cells
               if c.cell_type == "markdown" and nbgrader_meta(c).get("solution") and nbgrader_meta(c).get("grade")}
    assert len(answers) >= 2 and all(points > 0 for points in answers.values()), answers
    released = {grade_id(c): c.source for c in nbformat.read(str(root / "labs" / LAB / f"{LAB}.ipynb"), as_version=4).cells
                if grade_id(c) in answers}
    assert set(released) == set(answers)
    assert all("Model answer" not in text for text in released.values()), released

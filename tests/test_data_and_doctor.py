"""Tests for genlab.data, genlab.plots, genlab.widgets and genlab.doctor.

Everything here runs offline on a CPU in a few seconds. Each test checks a
property a wrong implementation would break (range, layout, ordering, counts),
not merely that a call returns.
"""

import io

import matplotlib

matplotlib.use("Agg")  # headless: must happen before pyplot is imported anywhere

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from genlab import data, doctor, plots, widgets  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


# ---------------------------------------------------------------------------
# data.load_digits
# ---------------------------------------------------------------------------

def test_digits_shape_range_and_labels():
    x, y = data.load_digits()
    assert x.shape == (1797, 64) and x.dtype == torch.float32
    assert y.shape == (1797,) and y.dtype == torch.long
    assert x.min().item() == 0.0 and x.max().item() == 1.0  # scaled by 16, not 255 or max()
    # 0..16 divided by 16 -> every pixel is an exact multiple of 1/16.
    assert torch.equal(x * 16, (x * 16).round())
    assert sorted(y.unique().tolist()) == list(range(10))


def test_digits_are_scikit_learns_own_read_without_importing_it():
    import subprocess
    import sys

    from sklearn.datasets import load_digits as sklearn_digits

    bunch = sklearn_digits()
    arr, labels = data.load_digits(as_tensor=False)
    assert np.array_equal(arr * 16, bunch.data) and np.array_equal(labels, bunch.target)
    # the point of reading the file: no kernel pays for importing scikit-learn (and SciPy) to get the digits
    probe = "import sys, genlab.data as d; d.load_digits(); print('sklearn' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"


def test_digits_layouts_agree():
    flat, _ = data.load_digits()
    grid, _ = data.load_digits(flat=False, dtype=torch.float64)
    assert grid.shape == (1797, 1, 8, 8) and grid.dtype == torch.float64
    assert torch.equal(grid.reshape(1797, 64).float(), flat)  # row-major, no transpose
    arr, labels = data.load_digits(as_tensor=False)
    assert isinstance(arr, np.ndarray) and isinstance(labels, np.ndarray)


# ---------------------------------------------------------------------------
# data.sample_image
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["china", "flower"])
@pytest.mark.parametrize("gray", [False, True])
def test_sample_image_shape_and_signed_range(name, gray):
    img = data.sample_image(name, size=32, gray=gray)
    assert img.shape == ((1 if gray else 3), 32, 32) and img.dtype == torch.float32
    assert img.min() >= -1.0 and img.max() <= 1.0
    # The diffusion convention: a photo with dark and light areas spans both signs.
    assert img.min() < -0.5 and img.max() > 0.4


def test_sample_image_gray_is_luma_and_photos_differ():
    rgb = data.sample_image("flower", size=24)
    gray = data.sample_image("flower.jpg", size=24, gray=True)
    luma = (data.to_unit_range(rgb) * torch.tensor([0.299, 0.587, 0.114]).view(3, 1, 1)).sum(0, keepdim=True)
    torch.testing.assert_close(data.to_signed_range(luma), gray, atol=1e-4, rtol=0)
    assert not torch.allclose(data.sample_image("china", size=24), rgb)
    with pytest.raises(ValueError, match="china"):
        data.sample_image("lena")


def test_range_helpers_round_trip():
    x = torch.linspace(-1, 1, 11)
    torch.testing.assert_close(data.to_signed_range(data.to_unit_range(x)), x)
    assert data.to_unit_range(torch.tensor([-3.0, 3.0])).tolist() == [0.0, 1.0]  # clamped


# ---------------------------------------------------------------------------
# data.load_smiles
# ---------------------------------------------------------------------------

def test_smiles_full_file_is_valid_canonical_and_unique():
    Chem = pytest.importorskip("rdkit.Chem")
    smiles = data.load_smiles()
    assert len(smiles) > 4000
    assert len(set(smiles)) == len(smiles)
    for s in smiles:
        mol = Chem.MolFromSmiles(s)
        assert mol is not None, s
        assert Chem.MolToSmiles(mol) == s, f"not canonical: {s}"


def test_smiles_filters_and_cache_isolation():
    pytest.importorskip("rdkit")
    full = data.load_smiles()
    short = data.load_smiles(max_len=30)
    assert short == [s for s in full if len(s) <= 30]  # same order, nothing else dropped
    assert 0 < len(short) < len(full)
    assert data.load_smiles(max_count=10) == full[:10]
    assert data.load_smiles(max_count=5, max_len=30) == short[:5]
    full.clear()  # the caller owns the list; the cache must be unaffected
    assert len(data.load_smiles()) > 4000
    with pytest.raises(ValueError, match="max_len"):
        data.load_smiles(max_len=-1)


# ---------------------------------------------------------------------------
# plots
# ---------------------------------------------------------------------------

def _grid(fig):
    return fig.axes[0].images[0].get_array()


def test_show_images_layouts_and_ranges():
    digits, _ = data.load_digits()
    fig = plots.show_images(digits[:10], nrow=5, title="digits")
    assert isinstance(fig, Figure) and fig.axes[0].get_title() == "digits"
    assert _grid(fig).shape == (2 * 9 + 1, 5 * 9 + 1)  # 2 rows x 5 cols of 8x8 tiles, 1px padding

    # [-1, 1] input is mapped to [0, 1]: -1 -> black, 0 -> mid gray (not clipped to black).
    signed = torch.zeros(4, 1, 6, 6)
    signed[0] = -1.0
    g = _grid(plots.show_images(signed, nrow=4))
    assert g.shape == (8, 4 * 7 + 1)
    assert g[1:7, 1:7].max() == 0.0 and np.allclose(g[1:7, 8:14], 0.5)

    photo = data.sample_image("china", size=16)
    g = _grid(plots.show_images(photo[None].repeat(3, 1, 1, 1)))
    assert g.shape == (18, 3 * 17 + 1, 3)
    # channels-first -> channels-last must be a transpose, not a reshape that scrambles pixels
    np.testing.assert_allclose(g[1:17, 1:17], data.to_unit_range(photo).permute(1, 2, 0).numpy(), atol=1e-6)
    assert plots.show_images(np.zeros((2, 5, 5)))  # [N, H, W]

    _, ax = plt.subplots()
    assert plots.show_images(digits[:3], ax=ax) is ax.figure
    with pytest.raises(ValueError, match="perfect square"):
        plots.show_images(torch.zeros(3, 10))


def test_plot_curves_and_heatmap():
    steps = np.arange(5)
    fig = plots.plot_curves(steps, {"train": [5, 4, 3, 2, 1], "val": torch.tensor([6.0, 5, 4, 3, 3])},
                            logy=True, xlabel="epoch", ylabel="loss", title="t")
    ax = fig.axes[0]
    assert [line.get_label() for line in ax.get_lines()] == ["train", "val"]
    assert ax.get_yscale() == "log" and ax.get_xlabel() == "epoch"
    np.testing.assert_array_equal(ax.get_lines()[1].get_ydata(), [6, 5, 4, 3, 3])
    with pytest.raises(ValueError, match="3 points"):
        plots.plot_curves(steps, {"bad": [1, 2, 3]})

    att = torch.softmax(torch.randn(3, 4), dim=-1)
    fig = plots.heatmap(att, xlabels=list("abcd"), ylabels=["x", "y", "z"], title="attention")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == list("abcd")
    np.testing.assert_allclose(ax.images[0].get_array(), att.numpy())
    assert len(fig.axes) == 2  # the colorbar
    with pytest.raises(ValueError, match="2-D"):
        plots.heatmap(torch.zeros(2, 3, 4))


# ---------------------------------------------------------------------------
# widgets
# ---------------------------------------------------------------------------

def test_interactive_plot_redraws_on_change():
    calls = []

    def draw(fig, t, schedule, scale):
        calls.append((t, schedule, scale))
        fig.add_subplot().plot(np.arange(t + 2))

    box = widgets.interactive_plot(
        draw, widgets.slider("t", 0, 10, 1, 3), schedule=widgets.dropdown("ignored", ["linear", "cosine"]),
        scale=(0.0, 2.0),
    )
    assert calls == [(3, "linear", 0.0)]  # drawn once on construction
    assert "image/png" in box.output.outputs[0]["data"]
    box.controls["t"].value = 7
    box.controls["schedule"].value = "cosine"
    assert calls[1:] == [(7, "linear", 0.0), (7, "cosine", 0.0)]
    assert len(box.output.outputs) == 1  # replaced, not appended
    assert len(box.figure.axes) == 1  # cleared between draws


def test_interactive_plot_errors():
    def draw(fig, k):
        if k > 1:
            raise RuntimeError("boom")

    box = widgets.interactive_plot(draw, k=[0, 1, 2])
    box.controls["k"].value = 2  # error in a callback: shown in the widget, not raised
    out = box.output.outputs[0]
    assert out["name"] == "stderr" and "boom" in out["text"]
    with pytest.raises(RuntimeError):
        widgets.interactive_plot(draw, k=[2])  # error on the first draw: raised
    with pytest.raises(TypeError, match="slider"):
        widgets.interactive_plot(draw, k="nope")


# ---------------------------------------------------------------------------
# doctor
# ---------------------------------------------------------------------------

def _by_name(findings):
    return {f.name: f for f in findings}


def test_doctor_reports_torch_and_cuda(monkeypatch):
    monkeypatch.delenv("GENLAB_GPU_CHECKS", raising=False)
    found = _by_name(doctor.doctor())
    assert found["torch"].status == "ok" and found["torch"].detail == torch.__version__
    assert {"python", "cuda", "bf16", "rdkit", "flash_attn", "bubblewrap"} <= found.keys()
    if torch.cuda.is_available():
        assert found["cuda"].status == "ok" and "gpu" in found
    else:
        assert found["cuda"].status == "note" and "not available" in found["cuda"].detail
    assert doctor.exit_code(list(found.values())) == 0

    report = io.StringIO()
    doctor.print_report(list(found.values()), file=report)
    text = report.getvalue()
    assert torch.__version__ in text and "No blocking problems" in text


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_doctor_blocks_when_gpu_checks_requested_without_gpu(monkeypatch):
    monkeypatch.setenv("GENLAB_GPU_CHECKS", "1")
    findings = doctor.doctor()
    assert _by_name(findings)["cuda"].status == "error"
    assert doctor.exit_code(findings) == 1


def test_doctor_old_torch_blocks_but_optional_extras_do_not(monkeypatch):
    monkeypatch.delenv("GENLAB_GPU_CHECKS", raising=False)
    monkeypatch.setattr(torch, "__version__", "2.3.1+cu121")
    findings = doctor.doctor()
    torch_finding = _by_name(findings)["torch"]
    assert torch_finding.status == "error" and "2.4" in torch_finding.fix
    assert doctor.exit_code(findings) == 1
    missing_optional = doctor.Finding("flash_attn", "note", "not installed", "optional")
    assert doctor.exit_code([missing_optional]) == 0
    with pytest.raises(ValueError, match="status"):
        doctor.Finding("x", "fatal", "")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_doctor_describes_the_gpu():
    found = _by_name(doctor.doctor())
    assert found["cuda"].status == "ok" and str(torch.version.cuda) in found["cuda"].detail
    name = torch.cuda.get_device_name(0)
    assert name in found["gpu"].detail and "GiB" in found["gpu"].detail
    assert found["bf16"].status == ("ok" if torch.cuda.is_bf16_supported() else "note")
    assert doctor.exit_code(list(found.values())) == 0


def test_load_smiles_without_rdkit_says_how_to_install(monkeypatch):
    import sys

    data._canonical_smiles.cache_clear()
    monkeypatch.setitem(sys.modules, "rdkit", None)  # makes `import rdkit` raise ImportError
    try:
        with pytest.raises(ImportError, match="pip install rdkit"):
            data.load_smiles()
    finally:
        data._canonical_smiles.cache_clear()  # do not cache anything computed without rdkit

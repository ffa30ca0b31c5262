""".ci/gpu-check on a CPU machine: the dry run lists every check, a real run refuses without a GPU, and the
parts that can run here (the nbval output recorder, the bf16 check rehearsed on CPU) work.

The real run needs a CUDA GPU (`make gpu-check`, or the gpu workflow); its evidence is gpu-report.md.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / ".ci" / "gpu-check"
CHECKS = ["doctor", "nbval", "gpu-tests", "timing", "bf16", "flash-attn", "claims"]


def _run(*args, python=sys.executable, **kw):
    return subprocess.run([python, str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True, timeout=300, **kw)


def test_dry_run_lists_every_check_and_exits_0():
    done = _run("--dry-run")
    assert done.returncode == 0, done.stderr
    listed = [line.split()[1] for line in done.stdout.splitlines() if line.strip()[:2].rstrip(".").isdigit()]
    assert listed == CHECKS, done.stdout
    for needle in ("nbval", "pytest -m gpu", "20", "bfloat16", "flash-attn-4", "C1", "C4", "C5", "C6",
                   "gpu-report.md", "480 s"):
        assert needle in done.stdout, f"{needle!r} missing from the dry run:\n{done.stdout}"
    for lab in sorted(p.name for p in (ROOT / "solutions").iterdir() if (p / f"{p.name}.ipynb").exists()):
        assert lab in done.stdout


def test_dry_run_needs_no_torch(tmp_path):
    """The listing works with a bare Python (a CI runner before installing anything): torch is imported late."""
    python = shutil.which("python3")
    if python is None:
        pytest.skip("no python3 on PATH")
    blocker = tmp_path / "torch.py"
    blocker.write_text("raise ImportError('torch must not be imported by --dry-run')\n")
    done = _run("--dry-run", "--only", "timing,claims", python=python,
                env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    listed = [line.split()[1] for line in done.stdout.splitlines() if line.strip()[:2].rstrip(".").isdigit()]
    assert listed == ["timing", "claims"], done.stdout


def test_make_target_passes_the_dry_run():
    if shutil.which("make") is None:
        pytest.skip("no make")
    done = subprocess.run(["make", "-s", "gpu-check", "ARGS=--dry-run"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and "would run 7 checks" in done.stdout, done.stdout + done.stderr


def test_unknown_check_is_refused():
    done = _run("--only", "nbval,warp-drive")
    assert done.returncode == 2 and "warp-drive" in done.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible: the real check would run")
def test_without_a_gpu_the_real_run_refuses_and_says_what_to_do(tmp_path):
    done = _run("--report", str(tmp_path / "r.md"))
    assert done.returncode == 1
    assert "no CUDA device" in done.stderr and "--dry-run" in done.stderr
    assert not (tmp_path / "r.md").exists(), "no report may claim a GPU run that did not happen"


def test_nbval_output_recorder(tmp_path):
    """The claims check reads what nbval's cells printed, recorded by .ci/gpu_check_outputs.py."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# a"),
                                         nbformat.v4.new_code_cell("print('first', 1 + 1)"),
                                         nbformat.v4.new_code_cell("x = 3\nx * 2")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, str(tmp_path / "t.ipynb"))
    out = tmp_path / "outputs.jsonl"
    # the inner pytest is a controller of its own, not one of this run's xdist workers
    outer = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    env = {**outer, "GENLAB_NBVAL_OUTPUTS": str(out),
           "PYTHONPATH": os.pathsep.join([str(ROOT / ".ci"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "gpu_check_outputs",
                           "--nbval-lax", "t.ipynb"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-2000:]
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["notebook"], r["cell"], r["outcome"], r["text"]) for r in records] == [
        ("t.ipynb", 0, "passed", "first 2\n"), ("t.ipynb", 1, "passed", "6")]


def test_bf16_check_rehearsed_on_cpu(tmp_path):
    """The bf16 check's own code, run on CPU (--device cpu): every lab function listed, kept bfloat16, close."""
    report = tmp_path / "r.md"
    done = _run("--only", "bf16", "--device", "cpu", "--report", str(report),
                env={**os.environ, "OMP_NUM_THREADS": "1"})
    text = report.read_text()
    assert done.returncode == 0, text
    assert "CPU REHEARSAL" in text and "not GPU evidence" in text
    rows = [line for line in text.splitlines() if line.startswith("| lab") and "`" in line]
    names = {row.split("|")[2].strip(" `") for row in rows}
    assert {"reparameterize", "gaussian_kl", "negative_elbo", "q_sample", "causal_attention"} <= names, text
    assert all("bfloat16 on cpu" in row and row.rstrip().endswith("| ok |") for row in rows), text

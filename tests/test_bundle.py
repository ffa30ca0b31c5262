"""The student bundle (issue 21): what a graded class hands out, installed in a fresh venv outside the course.

``genlab release --student-bundle DIR`` writes the notebooks, a wheel of the student package and a README; it
is checked for leaks (no solution function or near copy, no hidden test line), and a planted solution is found.
Installed alone, without the repository: ``genlab doctor`` passes, ``autograder`` is not there, and the
self-check names a catalogued bug that the catalogue ships only as an edit (from the bundle's fingerprints).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import nbformat
import pytest

from autograder import bundle as bundles
from autograder.labs import discover

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return bundles.student_bundle(ROOT, tmp_path_factory.mktemp("bundle") / "genlab-labs")


def test_the_bundle_is_clean_and_holds_the_notebooks_as_released(bundle):
    assert bundle.clean, bundle.summary()
    for lab in discover(ROOT):
        assert (bundle.path / "labs" / lab.id / f"{lab.id}.ipynb").read_bytes() == lab.release.read_bytes()
    names = zipfile.ZipFile(bundle.wheel).namelist()
    assert not [n for n in names if n.startswith("autograder")], "the grader does not ship"
    assert not [n for n in names if "solutions" in n or n.endswith("bugs.py")], "nor the instructor's files"
    assert "genlab/cli.py" in names and any(n.startswith("genlab/assets/fingerprints/") for n in names)
    assert "pip install wheels/" in (bundle.path / "README.md").read_text()


def test_a_planted_solution_is_found_in_a_notebook_and_in_the_wheel(bundle, tmp_path):
    from autograder.sample_submissions import reference_sources
    from autograder.labs import LabFolder

    copy = tmp_path / "planted"
    shutil.copytree(bundle.path, copy)
    lab = LabFolder(ROOT, "lab1_vae")
    solution = reference_sources(lab)["gaussian_kl"].replace("gaussian_kl", "helper").replace("mu", "m")
    notebook = copy / "labs" / "lab1_vae" / "lab1_vae.ipynb"
    nb = nbformat.read(notebook, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(solution))
    nbformat.write(nb, notebook)
    before = {m.solution.name for m in bundle.leaks}  # none, once the bundle is clean (the test above)
    found = bundles.check(ROOT, bundles.StudentBundle(copy, bundle.wheel, bundle.notebooks))
    planted = [m for m in found.leaks if m.solution.name not in before]
    assert [m.solution.name for m in planted] == ["gaussian_kl"] and not found.clean
    assert "planted/labs/lab1_vae/lab1_vae.ipynb" in planted[0].closest.where and planted[0].ratio == 1.0

    shutil.copyfile(bundle.path / "labs" / "lab1_vae" / "lab1_vae.ipynb", notebook)  # undo, then the wheel
    wheel = copy / "wheels" / bundle.wheel.name
    with zipfile.ZipFile(wheel, "a") as whl:
        whl.writestr("genlab/extra.py", "import torch\n\n" + solution)
    found = bundles.check(ROOT, bundles.StudentBundle(copy, wheel, bundle.notebooks))
    planted = [m for m in found.leaks if m.solution.name not in before]
    assert [m.solution.name for m in planted] == ["gaussian_kl"] and "extra.py" in planted[0].closest.where


def test_a_hidden_test_line_is_found(bundle, tmp_path):
    line = sorted(bundles.hidden_test_lines(ROOT))[0]
    copy = tmp_path / "hidden"
    shutil.copytree(bundle.path, copy)
    (copy / "notes.md").write_text(f"a student's notes\n    {line}\n")
    found = bundles.check(ROOT, bundles.StudentBundle(copy, bundle.wheel, bundle.notebooks))
    assert found.hidden_lines == [(line, str(copy / "notes.md"))] and not found.clean


@pytest.fixture(scope="module")
def student_venv(bundle, tmp_path_factory):
    """A fresh venv with the bundle's wheel installed. Offline, its dependencies come from this venv's
    site-packages through a .pth line (the editable install of the repository there is not activated: .pth
    files of a directory added that way are not run)."""
    venv = tmp_path_factory.mktemp("student") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    Path(site, "course-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", str(bundle.wheel)],
                   check=True)
    return venv


def _run(venv: Path, bundle, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("GENLAB_ROOT", "PYTHONPATH")}
    env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', '')}"
    return subprocess.run(list(args), cwd=bundle.path, env=env, capture_output=True, text=True, timeout=timeout)


def test_installed_alone_the_student_package_works_without_the_course(student_venv, bundle):
    where = _run(student_venv, bundle, "python", "-c", "import genlab, importlib.util; print(genlab.__file__); "
                 "print(importlib.util.find_spec('autograder'))")
    assert where.returncode == 0, where.stderr
    assert where.stdout.split()[0].startswith(str(student_venv)) and where.stdout.split()[1] == "None", where.stdout
    doctor = _run(student_venv, bundle, "genlab", "doctor")
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr


def test_the_self_check_names_a_bug_the_bundle_ships_only_as_an_edit(student_venv, bundle, tmp_path):
    """kl_sign_flipped is an edit in the catalogue: without a reference, its fingerprint names it."""
    from autograder.labs import LabFolder
    from autograder.sample_submissions import bug_cell, reference_sources
    from genlab.catalog import Edit, bug

    entry = bug("lab1_vae", "kl_sign_flipped")
    assert isinstance(entry.impl, Edit)
    nb = nbformat.read(bundle.path / "labs" / "lab1_vae" / "lab1_vae.ipynb", as_version=4)
    sources = {**reference_sources(LabFolder(ROOT, "lab1_vae")), "gaussian_kl": bug_cell("lab1_vae", entry.id)}
    # the setup, every solution cell (the bug in gaussian_kl's) and gaussian_kl's visible tests: the rest of the
    # lab (training, failure modes) says nothing here and takes minutes
    grade_ids = {c.metadata.get("nbgrader", {}).get("grade_id") for c in nb.cells}
    nb.cells = [c for c in nb.cells if c.cell_type == "code" and (lambda gid: gid == "setup" or gid in sources or (
        gid or "").startswith("gaussian_kl"))(c.metadata.get("nbgrader", {}).get("grade_id"))]
    assert grade_ids >= {c.metadata["nbgrader"]["grade_id"] for c in nb.cells}
    for cell in nb.cells:
        if cell.metadata["nbgrader"].get("solution"):
            cell.source = sources[cell.metadata["nbgrader"]["grade_id"]]
    mine = tmp_path / "my-work" / "lab1_vae.ipynb"  # a student's copy, named as the lab, in a folder of theirs
    mine.parent.mkdir()
    nbformat.write(nb, mine)
    check = _run(student_venv, bundle, "genlab", "check", str(mine))
    assert check.returncode == 0, check.stdout + check.stderr
    assert "FAILED" in check.stdout and f"Diagnosis: {entry.title}" in check.stdout, check.stdout

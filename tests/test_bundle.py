"""The student bundle (issue 21): what a graded class hands out, installed in a fresh venv outside the course.

``genlab release --student-bundle DIR`` writes the notebooks, a wheel of the student package and a README; it
is checked for leaks (no solution function or near copy, no hidden test line), and a planted solution is found.
Installed alone, without the repository: ``genlab doctor`` passes, ``autograder`` is not there, and the
self-check names a catalogued bug that the catalogue ships only as an edit (from the bundle's fingerprints).
"""
from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import nbformat
import pytest

from autograder.release import bundle as bundles
from autograder.release import leaks
from autograder.core.labs import discover
from autograder.grading.pipeline import imported_modules

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


def test_the_wheel_requires_what_every_lab_imports(bundle):
    """``pip install genlab-*.whl`` must bring every library a released notebook imports (peft, torchmetrics,
    diffusers, rdkit...), or a student's fresh venv cannot run Labs 2-5 (the tests' venv borrows the course's
    packages, which would hide it)."""
    from importlib.metadata import packages_distributions

    metadata = next(n for n in zipfile.ZipFile(bundle.wheel).namelist() if n.endswith(".dist-info/METADATA"))
    required = {re.split(r"[ ;<>=!~\[]", line.split(":", 1)[1].strip())[0].lower().replace("_", "-")
                for line in zipfile.ZipFile(bundle.wheel).read(metadata).decode().splitlines()
                if line.startswith("Requires-Dist:") and "extra ==" not in line}
    providers = packages_distributions()
    missing = {}
    for lab in discover(ROOT):
        for cell in nbformat.read(str(lab.release), as_version=4).cells:
            if cell.cell_type != "code":
                continue
            top = {name.split(".")[0] for name in imported_modules(cell.source, optional=False)}
            for module in top - set(sys.stdlib_module_names) - {"genlab"}:
                dists = {d.lower().replace("_", "-") for d in providers.get(module, [module])}
                if not dists & required:
                    missing.setdefault(lab.id, set()).add(module)
    assert not missing, f"the student wheel does not require what these labs import: {missing}; add them to " \
                        "pyproject.toml's `labs` extra (the wheel requires it)"


def _inline(source: str) -> str:
    """A solution cell's body as top-level code, the way a test cell could spell it out: ``return x`` made
    ``result = x``, inside a loop."""
    (fn,) = ast.parse(source).body
    body = [ast.Assign([ast.Name("result", ast.Store())], s.value) if isinstance(s, ast.Return) else s
            for s in leaks._body(fn)]
    return "for trial in range(2):\n" + textwrap.indent(ast.unparse(ast.fix_missing_locations(
        ast.Module(body, []))), "    ") + "\nprint(result)\n"


def test_a_planted_solution_is_found_in_a_notebook_and_in_the_wheel(bundle, tmp_path):
    """Planted as a function, and as code outside any function (a cell's top level, a module's): the measure
    compared functions alone before issue 21's last change, and the inline ones were not found."""
    from autograder.release.sample_submissions import reference_sources
    from autograder.core.labs import LabFolder

    copy = tmp_path / "planted"
    shutil.copytree(bundle.path, copy)
    lab1, lab5 = reference_sources(LabFolder(ROOT, "lab1_vae")), reference_sources(LabFolder(ROOT, "lab5_fid"))
    solution = lab1["gaussian_kl"].replace("gaussian_kl", "helper").replace("mu", "m")
    notebook = copy / "labs" / "lab1_vae" / "lab1_vae.ipynb"
    nb = nbformat.read(notebook, as_version=4)
    nb.cells += [nbformat.v4.new_code_cell(solution), nbformat.v4.new_code_cell(_inline(lab5["kid"]))]
    nbformat.write(nb, notebook)
    before = {m.solution.name for m in bundle.leaks}  # none, once the bundle is clean (the test above)
    found = bundles.check(ROOT, bundles.StudentBundle(copy, bundle.wheel, bundle.notebooks))
    planted = {m.solution.name: m for m in found.leaks if m.solution.name not in before}
    assert sorted(planted) == ["gaussian_kl", "kid"] and not found.clean, found.summary()
    assert "planted/labs/lab1_vae/lab1_vae.ipynb" in planted["gaussian_kl"].closest.where
    assert planted["gaussian_kl"].ratio == 1.0
    assert planted["kid"].closest.where.startswith(f"{notebook} cell {len(nb.cells) - 1} lines ")

    shutil.copyfile(bundle.path / "labs" / "lab1_vae" / "lab1_vae.ipynb", notebook)  # undo, then the wheel
    wheel = copy / "wheels" / bundle.wheel.name
    with zipfile.ZipFile(wheel, "a") as whl:
        whl.writestr("genlab/extra.py", "import torch\n\n" + solution)
        whl.writestr("genlab/more.py", "import torch\n\n" + _inline(lab1["negative_elbo"]))
    found = bundles.check(ROOT, bundles.StudentBundle(copy, wheel, bundle.notebooks))
    planted = {m.solution.name: m for m in found.leaks if m.solution.name not in before}
    # continuous_bernoulli_negative_elbo is negative_elbo minus log C: the same body, inline, shows both (issue 26)
    assert sorted(planted) in (["gaussian_kl", "negative_elbo"],
                               ["continuous_bernoulli_negative_elbo", "gaussian_kl", "negative_elbo"]), found.summary()
    assert "extra.py" in planted["gaussian_kl"].closest.where and "more.py" in planted["negative_elbo"].closest.where


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


def _run(venv: Path, bundle, *args: str, timeout: int = 600, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("GENLAB_ROOT", "PYTHONPATH")}
    env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', '')}"
    return subprocess.run(list(args), cwd=cwd or bundle.path, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_installed_alone_the_student_package_works_without_the_course(student_venv, bundle):
    where = _run(student_venv, bundle, "python", "-c", "import genlab, importlib.util; print(genlab.__file__); "
                 "print(importlib.util.find_spec('autograder'))")
    assert where.returncode == 0, where.stderr
    assert where.stdout.split()[0].startswith(str(student_venv)) and where.stdout.split()[1] == "None", where.stdout
    doctor = _run(student_venv, bundle, "genlab", "doctor")
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr


def test_the_self_check_names_a_bug_the_bundle_ships_only_as_an_edit(student_venv, bundle, tmp_path):
    """kl_sign_flipped is an edit in the catalogue: without a reference, its fingerprint names it."""
    from autograder.core.labs import LabFolder
    from autograder.release.sample_submissions import bug_cell, reference_sources
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


def test_the_self_check_names_a_bug_whose_fingerprint_is_an_error(student_venv, bundle):
    """masked_fill_minus_1e9 (Lab 3, an edit) raises in float16: its fingerprint is the error, which the bundle
    stored as sorted pairs before, so that the self-check never named it. Here genlab.check, as a notebook calls
    it, in a plain Python process of the student's venv (no kernel: a third of the time of genlab check)."""
    from autograder.core.labs import LabFolder
    from autograder.release.sample_submissions import bug_cell, reference_sources
    from genlab.catalog import Edit, bug
    from genlab.testing.notebook import LabNotebook

    lab, entry = LabFolder(ROOT, "lab3_attention"), bug("lab3_attention", "masked_fill_minus_1e9")
    assert isinstance(entry.impl, Edit)
    folder = bundle.path / "labs" / lab.id
    sources = {**reference_sources(lab), entry.function: bug_cell(lab.id, entry.id)}
    script = "\n".join([LabNotebook.read(folder / f"{lab.id}.ipynb").setup_source, *sources.values(),
                        f"genlab.check({entry.function!r})"])
    check = _run(student_venv, bundle, "python", "-c", script, cwd=folder)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "ERROR    causal_attention_dtype" in check.stdout and f"Diagnosis: {entry.title}" in check.stdout, \
        check.stdout


# -- the student flow in JupyterLab, from the bundle alone ---------------------------------------------------
# The whole of Lab 5 (its failure modes, FIDs of the shipped checkpoint, torchmetrics' cross-checks): the
# quickest whole lab (48 s in tests/test_browser.py), and the one that reads a file the wheel must carry.
BROWSER_LAB = "lab5_fid"


@pytest.fixture(scope="module")
def student_lab(student_venv, bundle, tmp_path_factory):
    """JupyterLab started from the student's venv (``python -m jupyterlab``: its kernel is that venv's Python,
    with the wheel's genlab), in a copy of the bundle's ``labs/`` outside the repository and without
    ``GENLAB_ROOT``, as the bundle's README has the student start it. Its settings are tests/conftest.py's
    ``jupyter_lab``'s; that fixture starts the repository's venv, so it is not reused as is."""
    import secrets
    import time

    from conftest import LAB_SETTINGS, JupyterLab, _free_port

    base = tmp_path_factory.mktemp("student-jupyterlab")
    root, settings = base / "labs", base / "settings"
    shutil.copytree(bundle.path / "labs", root)
    for name, value in LAB_SETTINGS.items():
        (settings / name).parent.mkdir(parents=True, exist_ok=True)
        (settings / name).write_text(json.dumps(value))
    port, token = _free_port(), secrets.token_hex(16)
    env = {k: v for k, v in os.environ.items() if k not in ("GENLAB_ROOT", "PYTHONPATH", "VIRTUAL_ENV")}
    env.update({"PATH": f"{student_venv / 'bin'}:/usr/bin:/bin", "OMP_NUM_THREADS": env.get("OMP_NUM_THREADS", "1"),
                "MPLBACKEND": "module://matplotlib_inline.backend_inline", "JUPYTERLAB_SETTINGS_DIR": str(settings),
                "JUPYTERLAB_WORKSPACES_DIR": str(base / "workspaces"), "JUPYTER_RUNTIME_DIR": str(base / "runtime"),
                "JUPYTER_DATA_DIR": str(base / "data"),  # no kernelspec of this machine's user: the venv's own
                # JupyterLab's page and widget extensions: data files, which pip puts under the venv's share/ and
                # the .pth line above does not bring (the student's ``pip install jupyterlab`` does)
                "JUPYTERLAB_DIR": str(Path(sys.prefix, "share", "jupyter", "lab")),
                "JUPYTER_PATH": str(Path(sys.prefix, "share", "jupyter"))})
    command = [str(student_venv / "bin" / "python"), "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
               f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
               f"--ServerApp.root_dir={root}", "--ServerApp.allow_root=True"]
    runtime, deadline = base / "runtime", time.monotonic() + 90
    with (base / "server.log").open("w") as log, subprocess.Popen(
            command, cwd=base, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True) as server:
        # ready once the server has written its runtime file (jpserver-PID.json), which it does when it listens
        while not list(runtime.glob("jpserver-*.json")) and server.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        if not list(runtime.glob("jpserver-*.json")):
            os.killpg(server.pid, 9)
            raise RuntimeError(f"JupyterLab did not start: {(base / 'server.log').read_text()[-3000:]}")
        lab = JupyterLab(f"http://127.0.0.1:{port}", token, root)
        try:
            yield lab
        finally:
            server.terminate()  # SIGTERM: the server shuts its kernels down first
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, 9)  # its own session: the server and its kernels


def test_a_student_runs_a_lab_in_jupyterlab_from_the_bundle(student_lab, student_venv, browser, tmp_path):
    """The bundle's notebook with its solution cells filled with the reference, run whole in Chromium (Run All
    Cells) in the student's JupyterLab: setup, solutions, visible tests, the demonstrations and failure modes,
    and the lab's self-check. Every cell runs, none shows an error, the self-check passes everything, and the
    kernel's genlab is the wheel's, in the student's venv. tests/test_browser.py runs every lab the same way
    from the repository, on the same notebooks byte for byte."""
    import test_browser as web

    nb = web.filled_notebook(BROWSER_LAB)  # the released notebook (the bundle's, byte for byte) filled in
    nb.cells.append(nbformat.v4.new_code_cell("import sys\nprint('kernel:', sys.executable, genlab.__file__)"))
    assert nb.cells[-2].metadata["nbgrader"]["grade_id"] == "selfcheck"
    student_lab.put_notebook(f"{BROWSER_LAB}/{BROWSER_LAB}.ipynb", nb)
    page = web.offline_page(browser)
    try:
        with web.screenshot_on_failure(page, tmp_path / f"failed-{BROWSER_LAB}.png"):
            web.open_notebook(page, student_lab, f"{BROWSER_LAB}/{BROWSER_LAB}.ipynb", workspace="student")
            web.run_all(page, timeout_s=web.CPU_BUDGET_S["default"] + 60)
        prompts, errors = page.evaluate(f"() => {web.PROMPTS}"), web.page_errors(page)
        seconds = web.wall_time_from_page(page)
        selfcheck, kernel = (page.locator(".jp-CodeCell").nth(i).locator(".jp-OutputArea").text_content()
                             for i in (-2, -1))
    finally:
        page.close()
    print(f"{BROWSER_LAB} from the bundle: {len(prompts)} code cells run in {seconds} s; {kernel.strip()}")
    assert not errors, "cells show errors in the student's JupyterLab:\n" + "\n\n".join(errors)
    not_run = [i for i, p in enumerate(prompts) if not re.fullmatch(r"\[\d+\]:", p)]
    assert not not_run, f"code cells {not_run} did not run (prompts {[prompts[i] for i in not_run]})"
    assert "PASS" in selfcheck and not re.search(r"^(FAILED|ERROR) ", selfcheck, re.M), selfcheck
    _, python, package = kernel.split()
    assert python.startswith(str(student_venv)) and package.startswith(str(student_venv)), kernel

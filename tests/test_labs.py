"""A lab is one folder, discovered: its samples cover its catalogue, and a new folder needs no other edit."""
from __future__ import annotations

import csv
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest

from autograder.core.labs import discover, lab_ids
from autograder.release.release import release
from autograder.release.sample_submissions import BUILD_KEYS, generate
from genlab.catalog import bugs_for

ROOT = Path(__file__).resolve().parents[1]
LABS = discover(ROOT)


def test_labs_are_discovered_from_their_folders():
    assert [lab.id for lab in LABS] == sorted(p.parent.name for p in (ROOT / "solutions").glob("*/*.ipynb")
                                              if p.stem == p.parent.name)
    assert {"lab1_vae", "lab2_diffusion", "lab3_attention"} <= set(lab_ids(ROOT))


@pytest.mark.parametrize("lab", LABS, ids=lambda lab: lab.id)
def test_every_lab_has_samples_with_expectations(lab):
    samples = lab.samples
    assert samples, f"{lab.id} has no samples: add {lab.samples_file.relative_to(ROOT)}"
    assert samples.get("reference", {}).get("expect") == {"full": True}, "the reference must expect full marks"
    for name, spec in samples.items():
        assert "expect" in spec, f"{lab.id} sample {name} says nothing about what the grader must conclude"
        assert set(spec) <= BUILD_KEYS, f"{lab.id} sample {name}: unknown keys {set(spec) - BUILD_KEYS}"
    assert any(spec["expect"].get("full") and name != "reference" for name, spec in samples.items()), \
        f"{lab.id} needs at least one correct variant besides the reference"


@pytest.mark.parametrize("lab", LABS, ids=lambda lab: lab.id)
def test_every_catalogued_bug_has_a_sample(lab):
    expected = {spec["expect"].get("bug") for spec in lab.samples.values()}
    missing = [b.id for b in bugs_for(lab.id) if b.id not in expected]
    assert not missing, f"{lab.id}: catalogued bugs without a sample in samples.py: {missing}"


DUMMY = "lab9_dummy"


def _dummy_course(root: Path) -> None:
    """A minimal lab folder: a source notebook in nbgrader's format and its samples, nothing else."""
    def cell(source, **nbgrader):
        return nbformat.v4.new_code_cell(textwrap.dedent(source), metadata={"nbgrader": {
            "locked": not nbgrader.get("solution", False), "schema_version": 3, "solution": False, "grade": False,
            "task": False, **nbgrader}})

    nb = nbformat.v4.new_notebook(cells=[
        cell("import torch\nimport genlab\nfrom genlab import check_close\ngenlab.setup('lab9_dummy')\n",
             grade_id="setup"),
        cell("def double(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION\n",
             grade_id="double", solution=True),
        cell("check_close(double(torch.ones(3)), torch.full((3,), 2.0))\n"
             "### BEGIN HIDDEN TESTS\ncheck_close(double(torch.arange(4.0)), reference.double(torch.arange(4.0)))\n"
             "### END HIDDEN TESTS\n", grade_id="double_value", grade=True, points=2),
        cell("print('a demonstration the tests do not need')\n", grade_id="demo"),
    ])
    folder = root / "solutions" / DUMMY
    folder.mkdir(parents=True)
    nbformat.write(nb, str(folder / f"{DUMMY}.ipynb"))
    (folder / "samples.py").write_text(textwrap.dedent('''
        SAMPLES = {
            "reference": {"cells": {}, "expect": {"full": True}},
            "dummy_add_one": {"cells": {"double": "def double(x):\\n    return x + 1\\n"},
                              "expect": {"failed_tests": ["double_value"]}},
        }
    '''))


@pytest.mark.slow
def test_a_new_lab_folder_is_released_sampled_and_graded_with_no_other_edit(tmp_path):
    _dummy_course(tmp_path)
    assert lab_ids(tmp_path) == [DUMMY]
    release(tmp_path)
    written = generate(tmp_path, tmp_path / "samples")
    assert {p.parent.parent.name for p in written} == {"reference", "dummy_add_one"}
    out = tmp_path / "out"
    run = subprocess.run([sys.executable, "-m", "autograder.cli", "--root", str(tmp_path), "grade",
                          str(tmp_path / "samples"), "--out", str(out), "--quiet"],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    with (out / "grades.csv").open() as f:
        rows = {(r["student"], r["test"]): r for r in csv.DictReader(f)}
    assert rows["reference", "double_value"]["status"] == "passed"
    assert rows["dummy_add_one", "double_value"]["status"] == "failed"
    assert float(rows["dummy_add_one", "double_value"]["score"]) == 0


def test_the_student_package_never_imports_the_grader():
    """Trust flows one way: genlab (installed by every student) must not depend on autograder."""
    import ast

    offenders = []
    for path in sorted((ROOT / "shared" / "genlab").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            offenders += [f"{path.relative_to(ROOT)}:{node.lineno}" for n in names if n.split(".")[0] == "autograder"]
    assert not offenders, f"genlab imports the grader at {offenders}"
    run = subprocess.run([sys.executable, "-c", "import sys, genlab, genlab.testing.server, genlab.selfcheck, "
                          "genlab.testing.diagnosis; print(sorted(m for m in sys.modules if m.startswith('autograder')))"],
                         capture_output=True, text=True, timeout=120)
    assert run.stdout.strip() == "[]", run.stdout + run.stderr

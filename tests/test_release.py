"""One source of truth: labs/ and the sample submissions are generated, and must not drift."""
from __future__ import annotations

import os
import re
from pathlib import Path

import nbformat
import pytest

from autograder.core.labs import discover, lab_ids
from autograder.release.release import release
from autograder.release.sample_submissions import HERE as SAMPLES, write
from genlab.testing.notebook import LabNotebook, function_of, is_solution, is_test

ROOT = Path(__file__).resolve().parents[1]
LABS = lab_ids(ROOT)


def _strip(nb):
    return [(c.cell_type, c.source, c.metadata.get("nbgrader", {}).get("grade_id")) for c in nb.cells]


@pytest.mark.parametrize("lab", LABS)
def test_labs_match_release(lab, tmp_path):
    release(ROOT, [lab], out_dir=tmp_path)
    fresh = nbformat.read(str(tmp_path / lab / f"{lab}.ipynb"), as_version=4)
    committed = nbformat.read(str(ROOT / "labs" / lab / f"{lab}.ipynb"), as_version=4)
    assert _strip(fresh) == _strip(committed), f"labs/{lab} is out of date: run `make release`"


@pytest.mark.parametrize("lab", LABS)
def test_student_notebook_has_no_solutions_hidden_tests_or_outputs(lab):
    nb = nbformat.read(str(ROOT / "labs" / lab / f"{lab}.ipynb"), as_version=4)
    text = "\n".join(c.source for c in nb.cells)
    assert "BEGIN SOLUTION" not in text and "BEGIN HIDDEN TESTS" not in text
    assert "reference." not in text, "a visible test uses the reference solution"
    assert not any(c.get("outputs") for c in nb.cells if c.cell_type == "code")
    assert sum("raise NotImplementedError" in c.source for c in nb.cells if is_solution(c)) == \
        sum(1 for c in nb.cells if is_solution(c))


@pytest.mark.parametrize("lab", LABS)
def test_grading_conventions(lab):
    nb = LabNotebook.read(ROOT / "solutions" / lab / f"{lab}.ipynb")
    assert nb.setup_source, "the lab needs a locked setup cell with grade_id 'setup'"
    functions = list(nb.solutions)
    for name, source in nb.solutions.items():
        assert re.search(rf"^(def|class) {name}\b", source, re.M), f"solution cell {name} must define {name}"
    for test, spec in nb.tests.items():
        assert function_of(test, functions), f"test {test} does not start with a function's name"
        assert spec["points"] > 0
    assert {spec["function"] for spec in nb.tests.values()} == set(functions), "a function has no test"


@pytest.mark.parametrize("lab", discover(ROOT), ids=lambda lab: lab.id)
def test_samples_match_their_definitions(lab, tmp_path):
    """The committed sample tree is exactly what the definitions generate (run `make samples` after edits)."""
    for name, spec in lab.samples.items():
        fresh = write(lab, name, spec, tmp_path)
        if fresh is None:
            assert not (SAMPLES / name / lab.id / f"{lab.id}.ipynb").exists()
            continue
        committed = SAMPLES / fresh.relative_to(tmp_path)
        if "link" in spec:
            assert committed.is_symlink() and os.readlink(committed) == spec["link"], f"sample {name} is stale"
            continue
        if "raw" in spec:
            assert committed.read_text() == fresh.read_text()
            continue
        assert _strip(nbformat.read(str(fresh), 4)) == _strip(nbformat.read(str(committed), 4)), \
            f"sample {name} is stale: run `make samples`"

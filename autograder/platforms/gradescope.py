"""Gradescope's autograder: ``genlab release --gradescope LAB DIR`` writes ``DIR/autograder.zip``, whose
``run_autograder`` grades ``/autograder/submission`` and writes ``/autograder/results/results.json``.

Followed field by field: Gradescope's "Autograder Specifications"
(https://gradescope-autograders.readthedocs.io/en/latest/specs/; its source, docs/specs.md of
github.com/gradescope/autograder_samples, read at commit af5dee4): the zip holds ``setup.sh`` and
``run_autograder`` at its root and is extracted into ``/autograder/source``; ``run_autograder`` is copied to
``/autograder/run_autograder`` and runs in ``/autograder``; the submission is in ``/autograder/submission``; the
results go to ``/autograder/results/results.json``; standard output (``/autograder/results/stdout``) is shown to
instructors only. And "Code Autograder Best Practices"
(https://gradescope-autograders.readthedocs.io/en/latest/best_practices/): student code runs as a non-root
user and the source and results folders are closed to it (here :mod:`autograder.wall.container`, or bubblewrap).

``results.json`` (:func:`results_json`), from genlab's own :class:`~autograder.core.results.Result`:

- ``score``: the autograded points (the sum of the tests' scores); ``execution_time``: seconds, grading included;
- ``output`` (``output_format`` ``"html"``): which wall graded, then the feedback page's summary
  (:func:`autograder.platforms.common.summary_html`) of the tests a student may see now;
- ``tests``: one per graded test, in notebook order: ``score``, ``max_score``, ``status`` (``passed`` or
  ``failed``), ``name`` (the test's grade_id), ``number``, ``output`` (``output_format`` ``"text"``: genlab's status,
  the message and each named bug with what to try), ``tags`` (the function tested), ``visibility`` (a test whose
  cell students see: ``visible``; a hidden test, whose cell they see empty: ``[platform] hidden_tests_visibility``
  of course.toml, ``after_due_date`` by default), ``extra_data`` (genlab's status and diagnosis ids);
- ``test_output_format`` and ``test_name_format`` ``"text"``; ``stdout_visibility`` ``"hidden"`` (the grader's
  log is for instructors); ``extra_data``: the wall, repairs and interference, for instructors;
- no top-level ``visibility`` (each test has its own) and no ``leaderboard``.
"""
from __future__ import annotations

import os
import sys
import tempfile
import zipfile
from pathlib import Path

from autograder.platforms import common
from autograder.platforms.common import Graded
from autograder.platforms.package import VENV, write_tree

RUN_AUTOGRADER = """#!/usr/bin/env bash
# genlab's Gradescope autograder for {lab} (written by `genlab release --gradescope`;
# autograder/platforms/gradescope.py): grades /autograder/submission and writes /autograder/results/results.json.
# GENLAB_PLATFORM_ROOT prefixes those paths (a fresh folder, in genlab's tests); GENLAB_PYTHON names the Python
# setup.sh installed.
set -u
# -P: the working directory is not put on the import path; the grader comes from PYTHONPATH alone.
root="${{GENLAB_PLATFORM_ROOT:-}}"
export PYTHONPATH="${{root%/}}/autograder/source"
exec "${{GENLAB_PYTHON:-{venv}/bin/python}}" -P -m autograder.platforms.gradescope --lab {lab}
"""


def build(course: Path, lab: str, out_dir: Path) -> Path:
    """``out_dir/autograder.zip`` for ``lab``: the tree of :mod:`autograder.platforms.package`, ``setup.sh`` and
    ``run_autograder`` at the root of the archive (executable)."""
    out_dir = Path(out_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / "autograder.zip"
    with tempfile.TemporaryDirectory() as tmp:
        tree = write_tree(course, lab, Path(tmp) / "tree", "run_autograder",
                          RUN_AUTOGRADER.format(lab=lab, venv=VENV))
        with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
            for path in sorted(tree.rglob("*")):
                if path.is_file():
                    info = zipfile.ZipInfo.from_file(path, str(path.relative_to(tree)))
                    info.compress_type = zipfile.ZIP_DEFLATED
                    info.external_attr = (0o100755 if os.access(path, os.X_OK) else 0o100644) << 16
                    archive.writestr(info, path.read_bytes())
    return target


def results_json(graded: Graded) -> dict:
    """Gradescope's results.json for one graded submission (see the module's docstring, field by field)."""
    extra = {"genlab": {"lab": graded.lab, "wall": graded.wall.mode, "wall_reason": graded.wall.why,
                        "refused": graded.wall.refused, "failure": graded.failure}}
    data = {"score": 0.0, "execution_time": round(graded.seconds),
            "output": common.summary_html(graded, graded.shown_now()), "output_format": "html",
            "test_output_format": "text", "test_name_format": "text", "stdout_visibility": "hidden",
            "extra_data": extra}
    result = graded.result
    if result is None:
        return data
    extra["genlab"].update(notes=result.notes, evidence=result.evidence)
    data["score"] = result.total
    data["tests"] = [
        {"score": result.score(o.test), "max_score": result.points[o.test],
         "status": "passed" if common.passed(result, o.test) else "failed", "name": o.test, "name_format": "text",
         "number": str(i), "output": common.test_output(result, o.test), "output_format": "text",
         "tags": [graded.tests[o.test]["function"]],
         "visibility": graded.settings.hidden_tests_visibility if graded.tests[o.test]["hidden"] else "visible",
         "extra_data": {"status": str(o.status), "diagnosis": [b.id for b in o.diagnosis]}}
        for i, o in enumerate(result.outcomes, start=1)]
    return data


def run(root: Path, lab: str) -> int:
    """Grades ``root/autograder/submission`` and writes ``root/autograder/results/results.json``."""
    base = Path(root) / "autograder"
    results = base / "results"
    wrong = common.not_a_platform_tree("run_autograder")
    if not wrong and common.COURSE != (base / "source").resolve():
        wrong = f"the grader runs from {common.COURSE}, not from {base / 'source'}"
    if wrong:
        print(f"genlab: {wrong}", file=sys.stderr)
        return 2
    return common.grade_and_write(lab, base / "submission", results, results_json,
                                  lock_also=[base / "submission_metadata.json"])


def main(argv=None) -> int:
    return common.entry_main(argv, "python -m autograder.platforms.gradescope",
                             "Grade /autograder/submission as Gradescope's run_autograder", "/autograder", run)


if __name__ == "__main__":
    sys.exit(main())

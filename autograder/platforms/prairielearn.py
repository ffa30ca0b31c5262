"""PrairieLearn's external grader: ``genlab release --prairielearn LAB DIR`` writes the grading image's build
context and a question that uses it; the image's entry point, ``run_prairielearn``, grades ``/grade/student`` and
writes ``/grade/results/results.json``.

Followed field by field: PrairieLearn's "External Grading" page
(https://prairielearn.readthedocs.io/en/latest/externalGrading/; its source, docs/externalGrading.md of
github.com/PrairieLearn/PrairieLearn): a question's ``info.json`` names an image and an ``entrypoint``
(``externalGradingOptions``; ``timeout`` at most 600 s, networking off by default); the student's files are in
``/grade/student``, the question's ``tests/`` in ``/grade/tests``, its data in ``/grade/data/data.json``; the
entry point must create ``/grade/results`` and write ``results.json`` there, at most 1 MB. And the
``pl-file-upload`` and ``pl-external-grader-results`` elements (PrairieLearn's elements page).

``results.json`` (:func:`results_json`), from genlab's own :class:`~autograder.core.results.Result`:

- ``gradable``: true, unless nothing could be graded: no wall may grade here, the grader failed, or the file
  handed in is no notebook (missing, unreadable), which PrairieLearn then marks "invalid, not gradable"
  without costing the student an attempt, with the reasons in ``format_errors``;
- ``score``: the autograded points over the lab's, in [0, 1];
- ``message``: which wall graded, and the feedback page's score line; ``output``: the feedback page's summary as
  plain text (:func:`autograder.platforms.common.summary_text`);
- ``tests``: one per graded test, in notebook order: ``name`` (the test's grade_id), ``description`` (the
  function tested), ``points``, ``max_points``, ``message`` (genlab's status and the named bugs), ``output``
  (the message and each named bug with what to try).

What the format cannot carry: a test's visibility. PrairieLearn shows every test of ``tests`` when a
submission is graded, so the hidden tests are shown at once, with their messages, and so is the summary of
every test (``[platform] hidden_tests_visibility`` of course.toml applies to Gradescope only). Nor HTML: the
summary is plain text.
"""
from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path

from autograder.core.results import Status
from autograder.platforms import common
from autograder.platforms.common import Graded
from autograder.platforms.package import VENV, write_tree

IMAGE_DIR = "/opt/genlab-grader"   # where the image holds the grader (the Dockerfile's COPY)
MAX_RESULTS_BYTES = 1_000_000      # PrairieLearn reads at most 1 MB of results.json

RUN_PRAIRIELEARN = """#!/usr/bin/env bash
# genlab's PrairieLearn external grader for {lab} (written by `genlab release --prairielearn`;
# autograder/platforms/prairielearn.py): grades /grade/student and writes /grade/results/results.json.
# GENLAB_PLATFORM_ROOT prefixes /grade (a fresh folder, in genlab's tests); GENLAB_PYTHON names the Python
# setup.sh installed. The grader runs from the folder this script is in.
set -u
# -P: the working directory is not put on the import path; the grader comes from PYTHONPATH alone.
here="$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)"
export PYTHONPATH="$here"
exec "${{GENLAB_PYTHON:-{venv}/bin/python}}" -P -m autograder.platforms.prairielearn --lab {lab}
"""

DOCKERFILE = """# genlab's PrairieLearn external grader for {lab} (written by `genlab release --prairielearn`):
# build this folder as an image, push it where PrairieLearn pulls images from, and name it in the
# question's info.json.
FROM ubuntu:24.04
COPY . {image_dir}
RUN bash {image_dir}/setup.sh && rm -rf /var/lib/apt/lists/*
"""

QUESTION_HTML = """<pl-question-panel>
  <p>Upload your notebook <code>{lab}.ipynb</code>, as saved by JupyterLab.</p>
  <pl-file-upload file-names="{lab}.ipynb"></pl-file-upload>
</pl-question-panel>
<pl-submission-panel>
  <pl-external-grader-results></pl-external-grader-results>
</pl-submission-panel>
"""


def build(course: Path, lab: str, out_dir: Path) -> Path:
    """``out_dir/image/``: the image's build context (the tree of :mod:`autograder.platforms.package`,
    ``run_prairielearn`` and a ``Dockerfile``), and ``out_dir/question/``: a question's ``info.json`` (external
    grading with that image) and ``question.html``. ``out_dir`` must not hold either yet. Returns ``out_dir``."""
    out_dir = Path(out_dir).resolve()
    image = write_tree(course, lab, out_dir / "image", "run_prairielearn", RUN_PRAIRIELEARN.format(lab=lab, venv=VENV))
    (image / "Dockerfile").write_text(DOCKERFILE.format(lab=lab, image_dir=IMAGE_DIR))
    question = out_dir / "question"
    question.mkdir()
    info = {"uuid": str(uuid.uuid4()), "type": "v3", "title": f"genlab {lab}", "topic": "genlab",
            "gradingMethod": "External", "singleVariant": True,
            "externalGradingOptions": {"enabled": True, "image": f"genlab-grader-{lab}",
                                       "entrypoint": f"{IMAGE_DIR}/run_prairielearn", "timeout": 600}}
    (question / "info.json").write_text(json.dumps(info, indent=2) + "\n")
    (question / "question.html").write_text(QUESTION_HTML.format(lab=lab))
    return out_dir


def results_json(graded: Graded) -> dict:
    """PrairieLearn's results.json for one graded submission (see the module's docstring, field by field)."""
    result = graded.result
    if result is None:
        return {"gradable": False, "message": graded.reason, "format_errors": [graded.reason]}
    if result.notebook is None and all(o.status in (Status.ERROR, Status.MISSING) for o in result.outcomes):
        reasons = list(dict.fromkeys(o.message for o in result.outcomes if o.message)) or ["no notebook"]
        return {"gradable": False, "message": "; ".join(reasons), "format_errors": reasons}
    tests = []
    for o in result.outcomes:
        named = "; ".join(f"{b.title} ({b.id})" for b in o.diagnosis)
        tests.append({"name": o.test,
                      "description": graded.tests[o.test]["function"]
                      + (" (a hidden test)" if graded.tests[o.test]["hidden"] else ""),
                      "points": result.score(o.test), "max_points": result.points[o.test],
                      "message": str(o.status) + (f": {named}" if named else ""),
                      "output": common.test_output(result, o.test)})
    data = {"gradable": True, "score": round(result.total / result.max_total, 6) if result.max_total else 0.0,
            "message": f"{graded.wall.describe()}\n{common.score_text(result)}",
            "output": common.summary_text(graded, head=False), "tests": tests}
    return _within_limit(data)


def _within_limit(data: dict) -> dict:
    """``data`` cut to PrairieLearn's 1 MB: test outputs to 2000 characters each, then the summary, if needed."""
    def size() -> int:
        return len(json.dumps(data).encode())

    for key, items in (("output", data["tests"]), ("output", [data])):
        if size() <= MAX_RESULTS_BYTES:
            break
        for item in items:
            if len(item[key]) > 2000:
                item[key] = item[key][:2000] + "\n[cut: results.json holds at most 1 MB]"
    return data


def run(root: Path, lab: str) -> int:
    """Grades ``root/grade/student`` and writes ``root/grade/results/results.json``."""
    grade = Path(root) / "grade"
    wrong = common.not_a_platform_tree("run_prairielearn")
    if wrong:
        print(f"genlab: {wrong}", file=sys.stderr)
        return 2
    return common.grade_and_write(lab, grade / "student", grade / "results", results_json,
                                  lock_also=[grade / "data", grade / "tests", grade / "serverFilesCourse"])


def main(argv=None) -> int:
    return common.entry_main(argv, "python -m autograder.platforms.prairielearn",
                             "Grade /grade/student as PrairieLearn's external grader", "/grade", run)


if __name__ == "__main__":
    sys.exit(main())

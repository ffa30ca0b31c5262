"""``genlab grade SUBMISSIONS --out DIR``: grade a folder laid out as nbgrader's ``submitted/`` tree.

Writes, under DIR:
- ``grades.csv``: one row per student and test: student,lab,test,score,max_score,status,diagnosis
- ``results.json``: the same with messages, repairs made to the notebook and tampering evidence
- ``gradebook.db``: nbgrader's gradebook (scores as auto_score), so nbgrader's tools keep working
- ``autograded/<student>/<lab>/<lab>.ipynb`` and ``feedback/<student>/<lab>/<lab>.html`` (nbgrader's feedback)
"""
from __future__ import annotations

import atexit
import csv
import json
import logging
import os
import sys
import time
import warnings
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import nbformat

from autograder import pipeline
from autograder.kernel import Limits
from autograder.release import generate, lab_ids
from autograder.sandbox import SandboxConfig, launcher, prepare_workdir, require as require_sandbox

CSV_COLUMNS = ["student", "lab", "test", "score", "max_score", "status", "diagnosis"]

# Per worker process: each lab's definition, reference namespace and reference kernel, loaded once.
_labs: dict[str, tuple] = {}


def _launcher(sandbox_config: SandboxConfig | None, workdir: Path):
    if sandbox_config is None:
        return None
    prepare_workdir(workdir)
    return launcher(sandbox_config, workdir)


def _lab_state(root: Path, lab: str, scratch: Path, limits: Limits, sandbox_config):
    if lab not in _labs:
        definition = pipeline.Lab.load(root, lab)
        ref_dir = pipeline.scratch_dir(scratch, f"reference-{lab}")
        # The reference kernel runs in the same sandbox, so both sides of a timing ratio pay the same costs.
        ref_kernel = pipeline.ReferenceKernel(definition, ref_dir, limits, _launcher(sandbox_config, ref_dir))
        atexit.register(ref_kernel.shutdown)
        _labs[lab] = (definition, pipeline.load_lab_reference(definition), ref_kernel)
    return _labs[lab]


def grade_one(root: Path, submissions: Path, student: str, lab: str, scratch: Path, limits: Limits,
              sandbox_config: SandboxConfig | None):
    os.environ["GENLAB_ROOT"] = str(root)
    definition, reference, ref_kernel = _lab_state(root, lab, scratch, limits, sandbox_config)
    workdir = pipeline.scratch_dir(scratch, student)
    try:
        return pipeline.grade_notebook(student, definition, submissions / student / lab / f"{lab}.ipynb",
                                       workdir=workdir, limits=limits, reference=reference,
                                       reference_kernel=ref_kernel, launcher=_launcher(sandbox_config, workdir))
    finally:
        pipeline.remove(workdir)


def find_work(submissions: Path, labs: list[str], every_student: bool) -> list[tuple[str, str]]:
    """(student, lab) pairs to grade. With ``--lab``, every student is graded on it (a student without the
    notebook gets status missing); without it, each student on the labs they handed in a folder for."""
    students = sorted(p.name for p in submissions.iterdir() if p.is_dir() and not p.name.startswith("."))
    return [(s, lab) for s in students for lab in labs if every_student or (submissions / s / lab).is_dir()]


def grade_all(root: Path, submissions: Path, out: Path, *, workers: int = 1, labs: list[str] | None = None,
              limits: Limits | None = None, progress=True, unsafe: bool = False,
              sandbox_config: SandboxConfig | None = None) -> list[pipeline.Result]:
    root, submissions, out = Path(root).resolve(), Path(submissions).resolve(), Path(out).resolve()
    limits = limits or Limits()
    if require_sandbox(unsafe):
        sandbox_config = sandbox_config or SandboxConfig()
        sandbox_config.hide = [root / "solutions", root / "autograder", root / ".git", out, submissions,
                               *sandbox_config.hide]
    else:
        sandbox_config = None
        print("WARNING: grading WITHOUT a sandbox (--unsafe): student code can read the hidden tests and write "
              "the gradebook.", file=sys.stderr)
    unknown = sorted(set(labs or []) - set(lab_ids(root)))
    if unknown:
        raise SystemExit(f"unknown lab(s) {unknown}: the labs are {lab_ids(root)}")
    every_student = bool(labs)
    labs = labs or [lab for lab in lab_ids(root)
                    if any((p / lab).exists() for p in submissions.iterdir() if p.is_dir())]
    out.mkdir(parents=True, exist_ok=True)
    scratch = out / ".scratch"
    scratch.mkdir(exist_ok=True)
    work = find_work(submissions, labs, every_student)
    results: list[pipeline.Result] = []
    started = time.monotonic()

    def report(done: int, result: pipeline.Result):
        if progress:
            eta = (time.monotonic() - started) / done * (len(work) - done)
            print(f"[{done}/{len(work)}] {result.student}/{result.lab}: "
                  f"{sum(result.score(o.test) for o in result.outcomes):g}/{sum(result.points.values()):g} "
                  f"({result.seconds:.1f} s, ETA {eta:.0f} s)", file=sys.stderr, flush=True)

    if workers <= 1:
        for i, (student, lab) in enumerate(work, 1):
            results.append(grade_one(root, submissions, student, lab, scratch, limits, sandbox_config))
            report(i, results[-1])
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            futures = [pool.submit(grade_one, root, submissions, s, lab, scratch, limits, sandbox_config)
                       for s, lab in work]
            for i, future in enumerate(as_completed(futures), 1):
                results.append(future.result())
                report(i, results[-1])
    results.sort(key=lambda r: (r.student, r.lab))
    write_outputs(root, out, results, labs)
    return results


# -- outputs -----------------------------------------------------------------------------------------
def write_csv(out: Path, results) -> Path:
    path = out / "grades.csv"
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(CSV_COLUMNS)
        for r in results:
            for o in r.outcomes:
                writer.writerow([r.student, r.lab, o.test, f"{r.score(o.test):g}", f"{r.points[o.test]:g}",
                                 o.status, ";".join(b.id for b in o.diagnosis)])
    return path


def _summary_cell(result: pipeline.Result):
    total = sum(result.score(o.test) for o in result.outcomes)
    lines = [f"# Feedback: {result.lab}", f"**Score: {total:g} / {sum(result.points.values()):g}**", "",
             "| test | status | points | diagnosis |", "|---|---|---|---|"]
    for o in result.outcomes:
        lines.append(f"| `{o.test}` | {o.status} | {result.score(o.test):g}/{result.points[o.test]:g} | "
                     f"{'; '.join(b.title for b in o.diagnosis)} |")
    if result.notes:
        lines += ["", "**Repairs made before grading:**"] + [f"- {n}" for n in result.notes]
    if result.evidence:
        lines += ["", "**Interference with the grader (reported to the instructor):**"] + \
                 [f"- `{e}`" for e in result.evidence]
    return nbformat.v4.new_markdown_cell("\n".join(lines))


def write_gradebook_and_feedback(root: Path, out: Path, results, labs) -> None:
    from nbgrader.api import Gradebook
    from nbgrader.apps import NbGrader  # noqa: F401
    from nbgrader.converters import GenerateFeedback
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config import Config

    db_url = f"sqlite:///{out / 'gradebook.db'}"
    for lab in labs:
        generate(root, lab, out / ".release", db_url)  # records the lab's cells and points in the gradebook
    warnings.filterwarnings("ignore", module="nbgrader.*")  # SQLAlchemy notices from nbgrader's own code
    with Gradebook(db_url, "genlab") as gb:
        for r in results:
            gb.update_or_create_student(r.student)
            try:
                gb.remove_submission(r.lab, r.student)
            except Exception:  # noqa: BLE001 - no earlier submission
                pass
            gb.add_submission(r.lab, r.student)
            for o in r.outcomes:
                grade = gb.find_grade(o.test, r.lab, r.lab, r.student)
                grade.auto_score = r.score(o.test)
            gb.db.commit()
    for r in results:
        if r.notebook is None:
            continue
        path = out / "autograded" / r.student / r.lab / f"{r.lab}.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        nb = r.notebook
        nb.cells.insert(0, _summary_cell(r))
        nbformat.write(nb, str(path))
    c = Config()
    c.CourseDirectory.root = str(out)
    c.CourseDirectory.db_url = db_url
    c.CourseDirectory.course_id = "genlab"
    c.GenerateFeedback.force = True
    for lab in labs:
        c.CourseDirectory.assignment_id = lab
        coursedir = CourseDirectory(config=c)
        converter = GenerateFeedback(coursedir=coursedir, config=c)
        converter.log.setLevel(logging.ERROR)
        converter.start()


def write_outputs(root: Path, out: Path, results, labs) -> None:
    write_csv(out, results)
    (out / "results.json").write_text(pipeline.dumps(results))
    write_gradebook_and_feedback(root, out, results, labs)


def gradebook_table(results) -> str:
    """Students by tests: scores, statuses other than passed, and diagnoses, as a plain-text table."""
    if not results:
        return "no submissions"
    lines = []
    for lab in sorted({r.lab for r in results}):
        rows = [r for r in results if r.lab == lab]
        tests = [o.test for o in rows[0].outcomes]
        width = max(len(r.student) for r in rows) + 2
        lines.append(f"== {lab} ==")
        lines.append(" " * width + "  ".join(f"{i + 1:>4}" for i in range(len(tests))) + "   total")
        for r in rows:
            cells = []
            for o in r.outcomes:
                mark = f"{r.score(o.test):g}" if o.passed else {"failed": "x", "error": "E", "timeout": "T",
                                                                  "killed": "K", "tampered": "!",
                                                                  "missing": "-"}.get(o.status, "?")
                cells.append(f"{mark:>4}")
            total = sum(r.score(o.test) for o in r.outcomes)
            lines.append(f"{r.student:<{width}}" + "  ".join(cells) + f"   {total:g}/{sum(r.points.values()):g}")
        lines.append("tests: " + ", ".join(f"{i + 1}={t}" for i, t in enumerate(tests)))
        lines.append("marks: number = points earned, x failed, E error, T timeout, K killed, ! tampered, - missing")
        diag = [(r.student, o.test, o.diagnosis, o.status) for r in rows for o in r.outcomes if o.diagnosis]
        if diag:
            lines.append("diagnoses:")
            seen = set()
            for student, test, bugs, _ in diag:
                for b in bugs:
                    if (student, b.id) not in seen:
                        seen.add((student, b.id))
                        lines.append(f"  {student}: {b.id} ({b.title})")
        tampered = [r for r in rows if r.evidence]
        for r in tampered:
            lines.append(f"  {r.student}: TAMPERED: {r.evidence[0]}")
    return "\n".join(lines)


def write_json(path: Path, data) -> None:
    path.write_text(json.dumps(data, indent=2))

"""What a grading run writes: grades.csv, results.json, nbgrader's gradebook, feedback pages, the class report.

Every form of a result comes from the :class:`~autograder.results.Result` itself; this module only puts
them in their files, and turns graded notebooks into nbgrader's feedback HTML.
"""
from __future__ import annotations

import copy
import csv
import glob
import json
import logging
import os
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import nbformat

from autograder import gradebook
from autograder.class_report import write_class_report
from autograder.sanitize import inert_notebook, seal_pages
from autograder.results import CSV_COLUMNS, Result


def _summary_cell(result: Result):
    lines = [f"# Feedback: {result.lab}", f"**Score: {result.total:g} / {result.max_total:g}**", "",
             "| test | status | points | diagnosis |", "|---|---|---|---|"]
    for o in result.outcomes:
        lines.append(f"| `{o.test}` | {o.status} | {result.score(o.test):g}/{result.points[o.test]:g} | "
                     f"{'; '.join(b.title for b in o.diagnosis)} |")
    if result.notes:
        lines += ["", "**Repairs made before grading:**"] + [f"- {n}" for n in result.notes]
    if result.evidence:
        lines += ["", "**Interference with the grader (reported to the instructor):**"] + \
                 [f"- `{e}`" for e in result.evidence]
    if result.notebook is None:  # nothing ran: the reason is the whole feedback
        reasons = [m for m in dict.fromkeys(o.message for o in result.outcomes if o.message)
                   if m not in result.evidence]
        if reasons:
            lines += ["", "**Why nothing was graded:**"] + [f"- {m}" for m in reasons]
    return nbformat.v4.new_markdown_cell("\n".join(lines))


def _write_reason_pages(out: Path, results) -> None:
    """A feedback page for notebooks that never ran (missing, unreadable, refused), saying why and what to do.

    nbgrader's GenerateFeedback only knows notebooks it autograded, so without this those students would get
    no page at all.
    """
    from nbconvert import HTMLExporter

    exporter = HTMLExporter()
    for r in results:
        if r.notebook is not None:
            continue
        page = nbformat.v4.new_notebook(cells=[_summary_cell(r)])
        path = out / "feedback" / r.student / r.lab / f"{r.lab}.html"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(exporter.from_notebook_node(page)[0])


def _feedback_pages(out: Path, db_url: str, lab: str, student: str = "*") -> None:
    """nbgrader's GenerateFeedback for one lab and one student (a glob: ``*`` is everyone) under ``out``."""
    from nbgrader.apps import NbGrader  # noqa: F401 - registers nbgrader's config classes
    from nbgrader.converters import GenerateFeedback
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config import Config

    warnings.filterwarnings("ignore", module="nbgrader.*")
    c = Config()
    c.CourseDirectory.root = str(out)
    c.CourseDirectory.db_url = db_url
    c.CourseDirectory.course_id = "genlab"
    c.CourseDirectory.assignment_id = lab
    # Only this run's students: in a shared (sharded) gradebook other machines own the rest.
    c.CourseDirectory.student_id = student
    c.GenerateFeedback.force = True
    converter = GenerateFeedback(coursedir=CourseDirectory(config=c), config=c)
    converter.log.setLevel(logging.ERROR)
    converter.start()


def write_feedback(out: Path, db_url: str, results, pool: ProcessPoolExecutor | None = None) -> None:
    """Autograded notebooks (with a summary on top) and nbgrader's feedback HTML, per student and lab. With a
    ``pool``, the pages are rendered by its processes, one page per task (about a second each)."""
    for r in results:
        if r.notebook is None:
            continue
        path = out / "autograded" / r.student / r.lab / f"{r.lab}.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        nb = copy.deepcopy(r.notebook)
        nb.cells.insert(0, _summary_cell(r))
        nbformat.write(inert_notebook(nb), str(path))  # the feedback is rendered from it
    graded = [r for r in results if r.notebook is not None]
    if pool is not None:  # one page per task, so the processes stay evenly busy
        for page in [pool.submit(_feedback_pages, out, db_url, r.lab, glob.escape(r.student)) for r in graded]:
            page.result()
    else:  # one converter per lab: nbgrader's per-run cost paid once
        for lab in dict.fromkeys(r.lab for r in graded):
            _feedback_pages(out, db_url, lab)
    _write_reason_pages(out, results)
    seal_pages(out / "feedback")  # no student script runs when a page is opened (autograder.sanitize)


def write_outputs(root: Path, out: Path, results: list[Result], labs: list[str], db_url: str | None = None,
                  workers: int = 1) -> None:
    """Everything a grading run leaves in ``out``: grades.csv, results.json, the gradebook, feedback pages and
    the class report. The pages and the report are drawn by one process per core this process may use (or per
    worker, if more): grading is over, so its workers' cores are free."""
    warnings.filterwarnings("ignore", module="nbgrader.*")  # SQLAlchemy notices from nbgrader's own code
    with (out / "grades.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(CSV_COLUMNS)
        for r in results:
            writer.writerows(r.csv_rows())
    (out / "results.json").write_text(json.dumps([r.to_json() for r in results], indent=2))
    db_url = db_url or default_db_url(out)
    gradebook.record(db_url, root, labs, results, out / ".release")
    processes = min(max(workers, len(os.sched_getaffinity(0))), sum(r.notebook is not None for r in results))
    if processes <= 1:
        write_feedback(out, db_url, results)
        write_class_report(out, db_url)  # class-report.html and .csv: from the gradebook and results.json
        return
    with ProcessPoolExecutor(max_workers=processes) as pool:
        report = pool.submit(write_class_report, out, db_url)
        write_feedback(out, db_url, results, pool)
        report.result()


def default_db_url(out: Path) -> str:
    """The gradebook a run writes when no ``--db`` is given: ``out/gradebook.db``."""
    return f"sqlite:///{Path(out) / 'gradebook.db'}"

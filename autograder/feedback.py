"""What a grading run writes: grades.csv, results.json, nbgrader's gradebook, feedback pages, the class report.

Every form of a result comes from the :class:`~autograder.results.Result` itself; this module only puts
them in their files, and turns graded notebooks into nbgrader's feedback HTML.
"""
from __future__ import annotations

import copy
import csv
import glob
import html
import json
import logging
import os
import re
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import nbformat

from autograder import gradebook
from autograder.class_report import write_class_report
from autograder.sanitize import inert_notebook, seal_pages
from autograder.results import CSV_COLUMNS, Result


def score_line(result: Result, score=None, late=None) -> str:
    """The page's one score line: what is autograded, what hand grading is pending or gave, any late penalty.

    ``score`` is the gradebook's :class:`autograder.export.LabScore` (hand-graded points and the penalty live
    there), ``late`` the :class:`autograder.late.Late` of this submission; without them, the autograded
    points of ``result`` alone."""
    got, of = (score.auto, score.auto_max) if score is not None else (result.total, result.max_total)
    auto = f"{got:g} / {of:g} autograded"
    if score is None or not score.manual_max and not score.penalty:
        line = f"Score: {auto}"
    elif score.pending:
        line = (f"Score: {auto}; {score.pending:g} point{'s' * (score.pending != 1)} of hand-graded answers "
                f"still to be graded (out of {score.max_total:g} in all)")
    else:
        line = f"Score: {score.auto + score.manual:g} / {score.max_total:g} ({auto}"
        line += f", {score.manual:g} / {score.manual_max:g} hand-graded)" if score.manual_max else ")"
    if late is not None and late.describe():
        line += f"; {late.describe()}"
        if score is not None and score.penalty:
            line += f" ({-score.penalty:g} points)"
            if not score.pending:
                line += f": {score.final:g} / {score.max_total:g}"
    return f"**{line}**"


def _summary_cell(result: Result, score=None, late=None):
    lines = [f"# Feedback: {result.lab}", score_line(result, score, late), "",
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


_HEADER_SCORE = re.compile(r"(<h4>[^<]*?)\(Score: [^)<]*\)(</h4>)")


def _one_score_line(page: Path, line: str) -> None:
    """The page's nbgrader header ("lab1_vae (Score: 19.0 / 34.0)") made to carry the summary's score line."""
    if page.is_file():
        text = page.read_text()
        page.write_text(_HEADER_SCORE.sub(lambda m: f"{m[1]}({html.escape(line)}){m[2]}", text, count=1))


def _write_reason_pages(out: Path, results, scores=None, lates=None) -> None:
    """A feedback page for notebooks that never ran (missing, unreadable, refused), saying why and what to do.

    nbgrader's GenerateFeedback only knows notebooks it autograded, so without this those students would get
    no page at all.
    """
    from nbconvert import HTMLExporter

    exporter = HTMLExporter()
    for r in results:
        if r.notebook is not None:
            continue
        key = (r.student, r.lab)
        page = nbformat.v4.new_notebook(cells=[_summary_cell(r, (scores or {}).get(key), (lates or {}).get(key))])
        path = out / "feedback" / r.student / r.lab / f"{r.lab}.html"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(exporter.from_notebook_node(page)[0])


def _feedback_pages(out: Path, db_url: str, lab: str, student: str = "*") -> None:
    """nbgrader's GenerateFeedback for one lab and one student (a glob: ``*`` is everyone) under ``out``."""
    from nbgrader.apps import NbGrader  # noqa: F401 - registers nbgrader's config classes
    from nbgrader.converters import GenerateFeedback
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config import Config

    from autograder.html_export import FeedbackHTMLExporter

    warnings.filterwarnings("ignore", module="nbgrader.*")
    c = Config()
    c.CourseDirectory.root = str(out)
    c.CourseDirectory.db_url = db_url
    c.CourseDirectory.course_id = "genlab"
    c.CourseDirectory.assignment_id = lab
    # Only this run's students: in a shared (sharded) gradebook other machines own the rest.
    c.CourseDirectory.student_id = student
    c.GenerateFeedback.force = True
    c.GenerateFeedback.exporter_class = FeedbackHTMLExporter  # nbconvert's, without its second parse (issue 19)
    converter = GenerateFeedback(coursedir=CourseDirectory(config=c), config=c)
    converter.log.setLevel(logging.ERROR)
    converter.start()


def write_feedback(out: Path, db_url: str, results, pool: ProcessPoolExecutor | None = None,
                   lates: dict | None = None) -> None:
    """Autograded notebooks (with a summary on top) and nbgrader's feedback HTML, per student and lab. With a
    ``pool``, the pages are rendered by its processes, one page per task (about a second each). ``lates``:
    {(student, lab): Late} from :func:`autograder.late.apply`, shown in the score line."""
    from autograder.export import lab_scores

    scores, lates = lab_scores(db_url), lates or {}
    for r in results:
        if r.notebook is None:
            continue
        path = out / "autograded" / r.student / r.lab / f"{r.lab}.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        nb = copy.deepcopy(r.notebook)
        nb.cells.insert(0, _summary_cell(r, scores.get((r.student, r.lab)), lates.get((r.student, r.lab))))
        nbformat.write(inert_notebook(nb), str(path))  # the feedback is rendered from it
    graded = [r for r in results if r.notebook is not None]
    if pool is not None:  # one page per task, so the processes stay evenly busy
        for page in [pool.submit(_feedback_pages, out, db_url, r.lab, glob.escape(r.student)) for r in graded]:
            page.result()
    else:  # one converter per lab: nbgrader's per-run cost paid once
        for lab in dict.fromkeys(r.lab for r in graded):
            _feedback_pages(out, db_url, lab)
    for r in graded:  # nbgrader's header counts ungraded answers as 0: it says what the summary says instead
        key = (r.student, r.lab)
        _one_score_line(out / "feedback" / r.student / r.lab / f"{r.lab}.html",
                        score_line(r, scores.get(key), lates.get(key)).strip("*"))
    _write_reason_pages(out, results, scores, lates)
    seal_pages(out / "feedback")  # no student script runs when a page is opened (autograder.sanitize)


def write_outputs(root: Path, out: Path, results: list[Result], labs: list[str], db_url: str | None = None,
                  workers: int = 1, submissions: Path | None = None) -> None:
    """Everything a grading run leaves in ``out``: grades.csv, results.json, the gradebook, feedback pages and
    the class report. The pages and the report are drawn by one process per core this process may use (or per
    worker, if more): grading is over, so its workers' cores are free. With ``submissions`` (the graded
    ``submitted/`` tree), course.toml's deadlines are applied from its timestamp.txt files (autograder.late)."""
    warnings.filterwarnings("ignore", module="nbgrader.*")  # SQLAlchemy notices from nbgrader's own code
    with (out / "grades.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(CSV_COLUMNS)
        for r in results:
            writer.writerows(r.csv_rows())
    (out / "results.json").write_text(json.dumps([r.to_json() for r in results], indent=2))
    db_url = db_url or default_db_url(out)
    gradebook.record(db_url, root, labs, results, out / ".release")
    lates = apply_deadlines(root, db_url, submissions) if submissions is not None else {}
    processes = min(max(workers, len(os.sched_getaffinity(0))), sum(r.notebook is not None for r in results))
    if processes <= 1:
        write_feedback(out, db_url, results, lates=lates)
        write_class_report(out, db_url)  # class-report.html and .csv: from the gradebook and results.json
        return
    with ProcessPoolExecutor(max_workers=processes) as pool:
        report = pool.submit(write_class_report, out, db_url)
        write_feedback(out, db_url, results, pool, lates)
        report.result()


def default_db_url(out: Path) -> str:
    """The gradebook a run writes when no ``--db`` is given: ``out/gradebook.db``."""
    return f"sqlite:///{Path(out) / 'gradebook.db'}"


def apply_deadlines(root: Path, db_url: str, submissions: Path, course_toml: Path | None = None) -> dict:
    """course.toml's ``[deadlines]`` applied to the gradebook from ``submissions``' timestamp.txt files."""
    from autograder import late

    course_toml = course_toml or Path(root) / "autograder" / "course.toml"
    deadlines = late.Deadlines.load(course_toml)
    if not deadlines.due:  # a course with no due date: nobody is late, and the gradebook is left as it is
        return {}
    return late.apply(db_url, deadlines, Path(submissions))


def refresh(root: Path, out: Path, submissions: Path | None = None, db_url: str | None = None,
            course_toml: Path | None = None) -> list[Result]:
    """``genlab feedback``: the feedback pages of a run redrawn from its gradebook, without grading anything.

    After a TA has graded the written answers in formgrader, or a due date or an extension has changed: the
    late penalties are applied again (from ``submissions``' timestamps; written, not added), and every page's
    score line shows the hand-graded points and the penalty the gradebook now holds."""
    out = Path(out).resolve()
    db_url = db_url or default_db_url(out)
    results = []
    for data in json.loads((out / "results.json").read_text()):
        path = out / "autograded" / data["student"] / data["lab"] / f"{data['lab']}.ipynb"
        nb = None
        if path.is_file():
            nb = nbformat.read(str(path), as_version=4)
            if nb.cells and nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith("# Feedback:"):
                nb.cells.pop(0)  # the summary of the last run: drawn again below
        results.append(Result.from_json(data, nb))
    warnings.filterwarnings("ignore", module="nbgrader.*")
    lates = apply_deadlines(root, db_url, submissions, course_toml) if submissions is not None else {}
    write_feedback(out, db_url, results, lates=lates)
    return results

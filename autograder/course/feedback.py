"""What a grading run writes: grades.csv, results.json, nbgrader's gradebook, feedback pages, the class report.

Every form of a result comes from the :class:`~autograder.core.results.Result` itself; this module only puts
them in their files, and turns graded notebooks into nbgrader's feedback HTML.
"""
from __future__ import annotations

import csv
import glob
import html
import json
import logging
import os
import re
import warnings
from concurrent.futures import ProcessPoolExecutor
from functools import lru_cache
from pathlib import Path

import nbformat

from autograder.course import gradebook
from autograder.insight.class_report import write_class_report
from autograder.core.sanitize import inert_notebook, seal_pages
from autograder.core.results import CSV_COLUMNS, Result


def score_line(result: Result, score=None, late=None) -> str:
    """The page's one score line: what is autograded, what hand grading is pending or gave, any late penalty.

    ``score`` is the gradebook's :class:`autograder.course.export.LabScore` (hand-graded points and the penalty live
    there), ``late`` the :class:`autograder.course.late.Late` of this submission; without them, the autograded
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


# The page's own stylesheet: fixed text of the grader's, never a student's. It goes in the page's head after the
# body is cleaned (autograder.core.sanitize.seal_page), and the page's CSP allows it by its sha256 alone.
STYLESHEET = """
.genlab-fix-first { border-left: 4px solid #c9302c; background: #fdf6f6; padding: 0.5em 1em; margin: 1em 0; }
.genlab-fix-first h2 { font-size: 1.25em; margin: 0.3em 0 0.5em; }
.genlab-fix-first ol > li { margin-bottom: 0.8em; }
.genlab-fix-first .genlab-bug { background: #fff; border: 1px solid #e4b9b9; padding: 0.4em 0.7em;
  margin: 0.3em 0; }
.genlab-fix-first .genlab-seen { color: #555; }
table.genlab-tests { border-collapse: collapse; margin: 1em 0; }
table.genlab-tests th, table.genlab-tests td { padding: 0.35em 0.9em; border: 1px solid #ccc; text-align: left;
  vertical-align: top; }
table.genlab-tests thead th { background: #eee; }
table.genlab-tests td.genlab-points { text-align: right; white-space: nowrap; }
table.genlab-tests tr.genlab-passed td.genlab-status { color: #276b27; }
table.genlab-tests tr.genlab-not-passed td.genlab-status { color: #b52a2a; font-weight: bold; }
table.genlab-tests tr.genlab-not-passed td { background: #fdf6f6; }
"""


def _text(text: str) -> str:
    """The grader's or a student's text as HTML text: escaped, its line breaks kept, no blank line (a blank
    line would end the summary's HTML block in the markdown cell, and the rest would be read as markdown)."""
    return "<br>".join(html.escape(line) for line in str(text).splitlines() if line.strip())


@lru_cache(maxsize=None)
def _depends(lab: str) -> dict:
    """Functions that call another student function (the lab's ``DEPENDS``), {} when the lab has none."""
    from autograder.core.labs import LabFolder

    try:
        return LabFolder(Path(__file__).resolve().parents[2], lab).depends
    except Exception:  # noqa: BLE001 - no samples module here: the summary just names no dependency
        return {}


def _function_of(result: Result) -> dict[str, str]:
    """test -> the student function it tests: the longest solution grade_id that prefixes the test's."""
    from genlab.testing.notebook import function_of, grade_id, is_solution

    functions = [grade_id(c) for c in result.notebook.cells if is_solution(c)] if result.notebook else []
    functions += [b.function for o in result.outcomes for b in o.diagnosis]
    return {o.test: function_of(o.test, functions) or o.test for o in result.outcomes}


def _fix_first(result: Result) -> str:
    """"What to fix first": the failed tests grouped by the function they test, functions with a named bug first
    (its explanation from the lab's catalogue above the tests), then in notebook order. One HTML block."""
    failed = [o for o in result.outcomes if o.status != "passed"]
    if not failed or result.notebook is None:
        return ""
    of = _function_of(result)
    groups: dict[str, list] = {}
    for o in failed:
        groups.setdefault(of[o.test], []).append(o)
    named = {f: list({b.id: b for o in tests for b in o.diagnosis}.values()) for f, tests in groups.items()}
    order = sorted(groups, key=lambda f: not named[f])   # stable: notebook order within each kind
    depends = _depends(result.lab)
    items = []
    for function in order:
        tests = groups[function]
        lost = sum(result.points[o.test] for o in tests)
        item = [f"<li><strong><code>{html.escape(function)}</code></strong>: {len(tests)} test"
                f"{'s' * (len(tests) != 1)} failed, {lost:g} point{'s' * (lost != 1)} lost"]
        for b in named[function]:
            item.append(f'<div class="genlab-bug"><strong>{_text(b.title)}</strong> ({html.escape(b.id)}): '
                        f"{_text(b.symptom)}<br><em>What to try:</em> {_text(b.fix)}<br>"
                        f"<small>Documented in: {_text(b.reference)}</small></div>")
        calls = [g for g in depends.get(function, []) if g in groups]
        if calls:
            names = " and ".join(filter(None, [", ".join(calls[:-1]), calls[-1]]))
            item.append(f"<p>{html.escape(function)} calls {html.escape(names)}, which "
                        f"fail{'s' * (len(calls) == 1)} too: its failures may come from there, so fix "
                        f"{'that' if len(calls) == 1 else 'those'} first.</p>")
        seen = result.behaviour.get(function, {}).get("relations", {})
        if seen and not named[function]:
            item.append('<p class="genlab-seen">Your outputs against the reference\'s on the grader\'s inputs: '
                        + ", ".join(f"{html.escape(k)} ({n}&times;)" for k, n in seen.items()) + ".</p>")
        item.append("<ul>" + "".join(f"<li><code>{html.escape(o.test)}</code> ({html.escape(str(o.status))}): "
                                     f"{_text(o.message)}</li>" for o in tests) + "</ul></li>")
        items.append("".join(item))
    return ('<div class="genlab-fix-first"><h2>What to fix first</h2><ol>' + "\n".join(items) + "</ol></div>")


def _tests_table(result: Result) -> str:
    """Every test's row: test, status, points, and the message (named bugs' titles first). One HTML block."""
    rows = []
    for o in result.outcomes:
        kind = "genlab-passed" if o.status == "passed" else "genlab-not-passed"
        message = "; ".join(f"<strong>{_text(b.title)}</strong>" for b in o.diagnosis)
        if o.message and o.status != "passed":
            message += (" &mdash; " if message else "") + _text(o.message)
        rows.append(f'<tr class="{kind}"><td><code>{html.escape(o.test)}</code></td>'
                    f'<td class="genlab-status">{html.escape(str(o.status))}</td>'
                    f'<td class="genlab-points">{result.score(o.test):g}/{result.points[o.test]:g}</td>'
                    f"<td>{message}</td></tr>")
    return ('<table class="genlab-tests"><thead><tr><th>test</th><th>status</th><th>points</th><th>message</th>'
            "</tr></thead><tbody>" + "\n".join(rows) + "</tbody></table>")


def _summary_cell(result: Result, score=None, late=None):
    lines = [f"# Feedback: {result.lab}", score_line(result, score, late), ""]
    for block in (_fix_first(result), _tests_table(result)):  # HTML blocks: no blank line inside either
        if block:
            lines += [block, ""]
    # As HTML blocks of escaped text, not markdown: a note or an evidence line can quote the student's notebook,
    # and a backtick or a [link](...) in it must stay text.
    if result.notes:
        lines += ["", "**Repairs made before grading:**", "",
                  "<ul>" + "".join(f"<li>{_text(n)}</li>" for n in result.notes) + "</ul>", ""]
    if result.evidence:
        lines += ["", "**Interference with the grader (reported to the instructor):**", "",
                  "<ul>" + "".join(f"<li><code>{_text(e)}</code></li>" for e in result.evidence) + "</ul>", ""]
    if result.notebook is None:  # nothing ran: the reason is the whole feedback
        reasons = [m for m in dict.fromkeys(o.message for o in result.outcomes if o.message)
                   if m not in result.evidence]
        if reasons:
            lines += ["", "**Why nothing was graded:**"] + [f"- {html.escape(m)}" for m in reasons]
    return nbformat.v4.new_markdown_cell("\n".join(lines))


def summary(result: Result, score=None, late=None) -> str:
    """The summary a feedback page opens with, as markdown with HTML blocks: title, score line, what to fix
    first, every test's row, repairs and interference. Platforms' results carry it too (autograder/platforms)."""
    return _summary_cell(result, score, late).source


_HEADER_SCORE = re.compile(r"(<h4>[^<]*?)\(Score: [^)<]*\)(</h4>)")


def _one_score_line(page: Path, line: str) -> None:
    """The page's nbgrader header ("lab1_vae (Score: 19.0 / 34.0)") made to carry the summary's score line
    ("lab1_vae — Score: 19 / 29 autograded; ..."): the line has parentheses of its own."""
    if page.is_file():
        text = page.read_text()
        page.write_text(_HEADER_SCORE.sub(lambda m: f"{m[1]}— {html.escape(line)}{m[2]}", text, count=1))


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

    from autograder.course.html_export import FeedbackHTMLExporter

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


def write_autograded(out: Path, results, scores: dict, lates: dict) -> None:
    """``out/autograded/<student>/<lab>/<lab>.ipynb``: each graded notebook, made inert, with a summary on top.
    The feedback pages are rendered from them, and the class report reads them for a result that carries no
    solutions of its own."""
    for r in results:
        if r.notebook is None:
            continue
        path = out / "autograded" / r.student / r.lab / f"{r.lab}.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        # The summary goes on top after the student's outputs and cells were made inert and put within the
        # page's budget for Markdown: it is the grader's own text, escaped, and must never be cut.
        nb = inert_notebook(r.notebook)
        nb.cells.insert(0, _summary_cell(r, scores.get((r.student, r.lab)), lates.get((r.student, r.lab))))
        nbformat.write(nb, str(path))


def write_feedback(out: Path, db_url: str, results, pool: ProcessPoolExecutor | None = None,
                   lates: dict | None = None) -> None:
    """Autograded notebooks (with a summary on top) and nbgrader's feedback HTML, per student and lab. With a
    ``pool``, the pages are rendered by its processes, one page per task (about a second each). ``lates``:
    {(student, lab): Late} from :func:`autograder.course.late.apply`, shown in the score line."""
    from autograder.course.export import lab_scores

    scores, lates = lab_scores(db_url), lates or {}
    write_autograded(out, results, scores, lates)
    _write_pages(out, db_url, results, scores, lates, pool)


def _write_pages(out: Path, db_url: str, results, scores: dict, lates: dict,
                 pool: ProcessPoolExecutor | None) -> None:
    """The feedback pages, rendered from the autograded notebooks :func:`write_autograded` wrote."""
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
    seal_pages(out / "feedback", STYLESHEET)  # no student script runs when a page is opened (autograder.core.sanitize)


def write_outputs(root: Path, out: Path, results: list[Result], labs: list[str], db_url: str | None = None,
                  workers: int = 1, submissions: Path | None = None, course_toml: Path | None = None) -> None:
    """Everything a grading run leaves in ``out``: grades.csv, results.json, the gradebook, feedback pages and
    the class report. The pages and the report are drawn by one process per core this process may use (or per
    worker, if more): grading is over, so its workers' cores are free. With ``submissions`` (the graded
    ``submitted/`` tree), the deadlines of ``course_toml`` (default: autograder/course.toml) are applied from its
    timestamp.txt files (autograder.course.late)."""
    warnings.filterwarnings("ignore", module="nbgrader.*")  # SQLAlchemy notices from nbgrader's own code
    with (out / "grades.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(CSV_COLUMNS)
        for r in results:
            writer.writerows(r.csv_rows())
    (out / "results.json").write_text(json.dumps([r.to_json() for r in results], indent=2))
    db_url = db_url or gradebook.default_db_url(out)
    gradebook.record(db_url, root, labs, results, out / ".release")
    gradebook.write_formgrader_config(out, db_url)
    lates = apply_deadlines(root, db_url, submissions, course_toml) if submissions is not None else {}
    processes = min(max(workers, len(os.sched_getaffinity(0))), sum(r.notebook is not None for r in results))
    if processes <= 1:
        write_feedback(out, db_url, results, lates=lates)
        write_class_report(out, db_url)  # class-report.html and .csv: from the gradebook and results.json
        return
    # The report reads autograded/ (for a result without solutions of its own): every notebook is written
    # before it starts, never while it reads (they once raced: a half-written notebook showed no code).
    from autograder.course.export import lab_scores

    scores = lab_scores(db_url)
    write_autograded(out, results, scores, lates)
    with ProcessPoolExecutor(max_workers=processes) as pool:
        report = pool.submit(write_class_report, out, db_url)
        _write_pages(out, db_url, results, scores, lates, pool)
        report.result()


def apply_deadlines(root: Path, db_url: str, submissions: Path, course_toml: Path | None = None) -> dict:
    """course.toml's ``[deadlines]`` applied to the gradebook from ``submissions``' timestamp.txt files."""
    from autograder.course import late

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
    db_url = db_url or gradebook.default_db_url(out)
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

"""``genlab export``: grades out of nbgrader's gradebook, in files an LMS imports, and per test for the instructor.

Every number comes from the gradebook (:func:`lab_scores`), where ``genlab grade`` writes the autograded
points, formgrader the hand-graded ones, and :mod:`autograder.course.late` the late penalty. A lab's score is
``autograded + hand-graded - late penalty`` (at least 0); while any hand-graded answer of it is still
ungraded, the lab's cell is left **blank, not 0**, so an import neither posts a partial score as final nor
overwrites one.

- ``--format canvas``: Canvas's gradebook import CSV, in the layout of Canvas's own gradebook export, which
  the guides have teachers export, edit and import again (Ohio State's "Import a CSV file to Carmen grades":
  Student name, ID or SIS User ID, then SIS Login ID, Section, one column per assignment; a new assignment
  column creates a new assignment): ``Student, ID, SIS User ID, SIS Login ID, Section``, one column per lab,
  named as Canvas names them, ``<Assignment name> (<Canvas assignment id>)``, and the export's
  ``Points Possible`` row first. ``ID`` is the Canvas user id (the roster's ``lms_id``).
- ``--format moodle``: a CSV for Moodle's grade import ("Import > CSV file"). Moodle matches each row by the
  column the teacher maps to a user field, one of ``userid``, ``useridnumber``, ``useremail``, ``username``
  (moodle/moodle ``grade/import/csv/classes/load_data.php``, ``map_user_data_with_value``): map
  ``Email address`` to email, or ``ID number`` (the roster's ``sis_user_id``) to ID number; then each lab's
  column to its grade item.
- ``--format csv``: one row per student, lab and graded cell (autograded test or hand-graded answer), with
  the late penalty as a row of its own.

Lab columns are named by ``--column LAB=NAME`` (e.g. ``--column "lab1_vae=Lab 1: VAE (48213)"``), else the
lab id. Students are named through the roster of ``genlab collect`` (:class:`autograder.course.collect.Roster`);
a graded student missing from it is reported, never silently left out.
"""
from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import create_engine, select
from sqlalchemy.pool import NullPool

from autograder.course.collect import Roster


@dataclass
class LabScore:
    student: str
    lab: str
    auto: float = 0.0
    auto_max: float = 0.0
    manual: float = 0.0         # hand-graded points given so far
    manual_max: float = 0.0
    pending: float = 0.0        # points of hand-graded answers not graded yet
    penalty: float = 0.0        # late penalty, points (nbgrader's late_submission_penalty)

    @property
    def max_total(self) -> float:
        return self.auto_max + self.manual_max

    @property
    def final(self) -> float | None:
        """Autograded + hand-graded - penalty (at least 0); None while hand grading is pending."""
        return None if self.pending else max(0.0, self.auto + self.manual - self.penalty)


@dataclass
class CellScore:
    student: str
    lab: str
    cell: str
    kind: str            # "auto" (written by genlab grade) or "manual" (a hand-graded answer)
    score: float | None  # None: not graded yet
    max_score: float


def db_url_for(run_dir_or_db: str) -> str:
    if "://" in run_dir_or_db:
        return run_dir_or_db
    from autograder.course.gradebook import default_db_url

    return default_db_url(Path(run_dir_or_db).resolve())


def cell_scores(db_url: str) -> list[CellScore]:
    """Every graded cell of every submission. A cell genlab autograded has an ``auto_score``; one without is a
    hand-graded answer, graded once formgrader has given it a ``manual_score`` (which also overrides an
    autograded one, as in nbgrader's ``Grade.score``)."""
    from nbgrader.api import Assignment, Grade, GradeCell, SubmittedAssignment, SubmittedNotebook

    engine = create_engine(db_url, poolclass=NullPool)
    try:
        query = (select(SubmittedAssignment.student_id, Assignment.name, GradeCell.name, GradeCell.max_score,
                        Grade.auto_score, Grade.manual_score)
                 .join(Assignment, SubmittedAssignment.assignment_id == Assignment.id)
                 .join(SubmittedNotebook, SubmittedNotebook.assignment_id == SubmittedAssignment.id)
                 .join(Grade, Grade.notebook_id == SubmittedNotebook.id)
                 .join(GradeCell, Grade.cell_id == GradeCell.id)
                 .order_by(SubmittedAssignment.student_id, Assignment.name, GradeCell.name))
        with engine.connect() as conn:
            rows = list(conn.execute(query))
    finally:
        engine.dispose()
    out = []
    for student, lab, cell, max_score, auto, manual in rows:
        kind = "auto" if auto is not None else "manual"
        out.append(CellScore(student, lab, cell, kind, manual if manual is not None else auto, float(max_score)))
    return out


def _penalties(db_url: str) -> dict[tuple[str, str], float]:
    from nbgrader.api import Assignment, SubmittedAssignment, SubmittedNotebook

    engine = create_engine(db_url, poolclass=NullPool)
    try:
        query = (select(SubmittedAssignment.student_id, Assignment.name, SubmittedNotebook.late_submission_penalty)
                 .join(Assignment, SubmittedAssignment.assignment_id == Assignment.id)
                 .join(SubmittedNotebook, SubmittedNotebook.assignment_id == SubmittedAssignment.id))
        with engine.connect() as conn:
            return {(s, lab): float(p or 0.0) for s, lab, p in conn.execute(query)}
    finally:
        engine.dispose()


def lab_scores(db_url: str) -> dict[tuple[str, str], LabScore]:
    """{(student, lab): LabScore} for every submission in the gradebook."""
    scores: dict[tuple[str, str], LabScore] = {}
    for c in cell_scores(db_url):
        s = scores.setdefault((c.student, c.lab), LabScore(c.student, c.lab))
        if c.kind == "auto":
            s.auto += c.score
            s.auto_max += c.max_score
        else:
            s.manual_max += c.max_score
            if c.score is None:
                s.pending += c.max_score
            else:
                s.manual += c.score
    for key, penalty in _penalties(db_url).items():
        if key in scores:
            scores[key].penalty = penalty
    return scores


def _points(x: float | None) -> str:
    return "" if x is None else f"{round(x, 4):g}"


def _columns(labs: list[str], names: dict[str, str]) -> list[str]:
    return [names.get(lab, lab) for lab in labs]


def _roster_rows(scores, roster: Roster) -> tuple[list, list[str]]:
    """The roster's students in its order, and the graded students it lacks (reported to the instructor)."""
    known = {s.student_id for s in roster.students}
    return roster.students, sorted({student for student, _ in scores} - known)


def canvas(scores: dict, roster: Roster, labs: list[str], names: dict[str, str]) -> tuple[str, list[str]]:
    students, unknown = _roster_rows(scores, roster)
    maxima = {lab: next((s.max_total for (_, l), s in scores.items() if l == lab), None) for lab in labs}
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["Student", "ID", "SIS User ID", "SIS Login ID", "Section"] + _columns(labs, names))
    w.writerow(["Points Possible", "", "", "", ""] + [_points(maxima[lab]) for lab in labs])
    for s in students:
        w.writerow([s.name, s.lms_id, s.sis_user_id, s.sis_login_id, s.section]
                   + [_points(scores[(s.student_id, lab)].final) if (s.student_id, lab) in scores else ""
                      for lab in labs])
    return buf.getvalue(), unknown


def moodle(scores: dict, roster: Roster, labs: list[str], names: dict[str, str]) -> tuple[str, list[str]]:
    students, unknown = _roster_rows(scores, roster)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["Full name", "ID number", "Email address"] + _columns(labs, names))
    for s in students:
        w.writerow([s.name, s.sis_user_id, s.email]
                   + [_points(scores[(s.student_id, lab)].final) if (s.student_id, lab) in scores else ""
                      for lab in labs])
    return buf.getvalue(), unknown


def per_test(db_url: str, results_json: Path | None = None) -> str:
    """One row per student, lab and graded cell, with genlab's status for autograded tests (from results.json)."""
    status = {}
    if results_json is not None and Path(results_json).is_file():
        for r in json.loads(Path(results_json).read_text()):
            for t in r["tests"]:
                status[(r["student"], r["lab"], t["test"])] = (t["status"], ";".join(t["diagnosis"]))
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["student", "lab", "cell", "kind", "score", "max_score", "status", "diagnosis"])
    penalties = _penalties(db_url)
    last = None
    for c in cell_scores(db_url):
        if last and last != (c.student, c.lab) and penalties.get(last):
            w.writerow([*last, "late penalty", "penalty", _points(-penalties[last]), "", "", ""])
        last = (c.student, c.lab)
        st, diag = status.get((c.student, c.lab, c.cell), ("graded" if c.score is not None else "pending", ""))
        w.writerow([c.student, c.lab, c.cell, c.kind, _points(c.score), _points(c.max_score), st, diag])
    if last and penalties.get(last):
        w.writerow([*last, "late penalty", "penalty", _points(-penalties[last]), "", "", ""])
    return buf.getvalue()


def export(fmt: str, run_dir_or_db: str, roster: Roster, labs: list[str] | None = None,
           names: dict[str, str] | None = None) -> tuple[str, list[str]]:
    """(the file's text, graded students the roster lacks)."""
    db_url = db_url_for(run_dir_or_db)
    if fmt == "csv":
        results = None if "://" in run_dir_or_db else Path(run_dir_or_db) / "results.json"
        return per_test(db_url, results), []
    scores = lab_scores(db_url)
    labs = labs or sorted({lab for _, lab in scores})
    if not roster.students:
        raise SystemExit(f"genlab export --format {fmt} needs --roster roster.csv (lms_id,name,email,student_id,"
                         "sis_user_id,sis_login_id,section): the LMS matches students by its own ids")
    return (canvas if fmt == "canvas" else moodle)(scores, roster, labs, names or {})

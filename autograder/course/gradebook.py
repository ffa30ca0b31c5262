"""Recording grades in nbgrader's gradebook at any SQLAlchemy URL (``sqlite:///...``, ``postgresql://...``).

Sharded grading has several machines record into one PostgreSQL gradebook at once. nbgrader itself is not
safe for that: opening a ``Gradebook`` on an empty database creates the tables without any locking, and
``generate_assignment`` deletes and re-creates a notebook's cells while it has no submissions. So:

- the setup step (schema, course, the lab's cells and points) runs under one database-wide lock: a
  PostgreSQL advisory lock, or an fcntl lock file next to a SQLite file; it is skipped when the gradebook
  already holds the lab's grade cells with the solution's points, so later shards never touch rows that
  earlier shards' submissions point at;
- each result then replaces that student's submission for the lab (remove + add), so recording twice gives
  the same rows; on PostgreSQL recording runs concurrently and a result that loses a race (two shards
  creating one student) is retried; SQLite allows one writer, so there the whole call holds the file lock.
"""
from __future__ import annotations

import fcntl
import time
import warnings
from contextlib import contextmanager
from pathlib import Path

import nbformat
from sqlalchemy import create_engine, func, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool

COURSE = "genlab"
LOCK_KEY = 0x67656E6C6162  # b"genlab": one advisory-lock key shared by every genlab process on the server
ATTEMPTS = 5


def default_db_url(out: Path) -> str:
    """The gradebook a run writes when no ``--db`` is given: ``out/gradebook.db``."""
    return f"sqlite:///{Path(out) / 'gradebook.db'}"


@contextmanager
def _lock(db_url: str, staging: Path):
    url = make_url(db_url)
    if url.get_backend_name() == "postgresql":
        engine = create_engine(url, poolclass=NullPool)
        try:
            # Session-level lock on its own autocommit connection: it is not tied to any transaction of
            # nbgrader's, and the server drops it by itself if this process dies while holding it.
            with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": LOCK_KEY})
                try:
                    yield
                finally:
                    conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": LOCK_KEY})
        finally:
            engine.dispose()
        return
    if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
        path = Path(url.database + ".lock")
    else:  # other servers: serializes this machine's processes only
        path = Path(staging) / "gradebook.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # released when the file closes, or when the process dies
        yield


def _solution_points(root: Path, lab: str) -> dict[str, float]:
    nb = nbformat.read(str(root / "solutions" / lab / f"{lab}.ipynb"), as_version=4)
    meta = [c.metadata.get("nbgrader", {}) for c in nb.cells]
    return {m["grade_id"]: float(m.get("points", 0)) for m in meta if m.get("grade")}


def _setup(db_url: str, root: Path, labs: list[str], staging: Path) -> None:
    from nbgrader.api import Gradebook, MissingEntry

    from autograder.release.release import generate

    with Gradebook(db_url, COURSE) as gb:  # creates the schema and the course on a new database
        stale = []
        for lab in labs:
            try:
                stored = {c.name: c.max_score for c in gb.find_notebook(lab, lab).grade_cells}
            except MissingEntry:
                stored = None
            if stored != _solution_points(root, lab):
                stale.append(lab)
    for lab in stale:
        generate(root, lab, Path(staging) / ".release", db_url)


def _by_hand(gb, r) -> tuple[dict, dict]:
    """What a TA gave this submission in formgrader (scores, extra credit, comments), kept across a regrade:
    nbgrader's own autograde keeps them too (it updates a submission, where genlab replaces it)."""
    from nbgrader.api import MissingEntry

    try:
        nb = gb.find_submission_notebook(r.lab, r.lab, r.student)
    except MissingEntry:
        return {}, {}
    grades = {g.name: (g.manual_score, g.extra_credit) for g in nb.grades
              if g.manual_score is not None or g.extra_credit is not None}
    return grades, {c.name: c.manual_comment for c in nb.comments if c.manual_comment}


def _record_one(gb, r) -> None:
    from nbgrader.api import MissingEntry

    gb.update_or_create_student(r.student)
    grades, comments = _by_hand(gb, r)
    try:
        gb.remove_submission(r.lab, r.student)
    except MissingEntry:  # no earlier submission
        pass
    gb.add_submission(r.lab, r.student)
    for o in r.outcomes:
        grade = gb.find_grade(o.test, r.lab, r.lab, r.student)
        # Scored here, so no TA needs to: nbgrader's own autograde (SaveAutoGrades) clears the flag the same
        # way. Left True (the column's default), formgrader listed every submission as needing manual grading.
        grade.auto_score, grade.needs_manual_grade = r.score(o.test), False
    for name, (manual, extra) in grades.items():
        grade = gb.find_grade(name, r.lab, r.lab, r.student)
        grade.manual_score, grade.extra_credit, grade.needs_manual_grade = manual, extra, False
    for name, text in comments.items():
        gb.find_comment(name, r.lab, r.lab, r.student).manual_comment = text
    gb.db.commit()


def prepare(db_url: str, root: Path, labs: list[str], staging: Path) -> None:
    """What :func:`record` does first (the schema, the course, the labs' grade cells: seconds, mostly nbgrader's
    generate_assignment), done ahead: a grading run starts it while its notebooks are graded."""
    warnings.filterwarnings("ignore", module="nbgrader.*")
    with _lock(db_url, staging):
        _setup(db_url, Path(root), sorted(labs), Path(staging))


def record(db_url: str, root: Path, labs: list[str], results, staging: Path) -> None:
    """Writes ``results`` (each ``.student``, ``.lab``, ``.outcomes``, ``.score(test)``) into the gradebook
    at ``db_url``, replacing each student's earlier submission for that lab. ``staging`` is a scratch folder
    of this machine's (the release notebooks nbgrader writes while recording a lab)."""
    root, staging = Path(root), Path(staging)
    sqlite = make_url(db_url).get_backend_name() == "sqlite"
    warnings.filterwarnings("ignore", module="nbgrader.*")  # SQLAlchemy notices from nbgrader's own code
    with _lock(db_url, staging):
        _setup(db_url, root, sorted(set(labs) | {r.lab for r in results}), staging)
        if sqlite:
            _record_all(db_url, results)
    if not sqlite:
        _record_all(db_url, results)


def _record_all(db_url: str, results) -> None:
    from nbgrader.api import Gradebook, InvalidEntry

    retry_on = (InvalidEntry, DBAPIError)  # nbgrader wraps IntegrityError in InvalidEntry
    with Gradebook(db_url, COURSE) as gb:
        for r in results:
            for attempt in range(ATTEMPTS):
                try:
                    _record_one(gb, r)
                    break
                except retry_on:
                    gb.db.rollback()
                    if attempt == ATTEMPTS - 1:
                        raise
                    time.sleep(0.05 * 2 ** attempt)


def totals(db_url: str) -> dict[tuple[str, str], float]:
    """{(student, lab): summed auto_score} for every submission in the gradebook."""
    from nbgrader.api import Assignment, Grade, SubmittedAssignment, SubmittedNotebook

    engine = create_engine(db_url, poolclass=NullPool)  # a plain reader: no schema creation as Gradebook does
    try:
        query = (select(SubmittedAssignment.student_id, Assignment.name, func.sum(Grade.auto_score))
                 .join(Assignment, SubmittedAssignment.assignment_id == Assignment.id)
                 .join(SubmittedNotebook, SubmittedNotebook.assignment_id == SubmittedAssignment.id)
                 .join(Grade, Grade.notebook_id == SubmittedNotebook.id)
                 .group_by(SubmittedAssignment.student_id, Assignment.name))
        with engine.connect() as conn:
            return {(s, lab): float(total or 0) for s, lab, total in conn.execute(query)}
    finally:
        engine.dispose()


def write_formgrader_config(out: Path, db_url: str) -> Path:
    """``out/nbgrader_config.py``: what formgrader needs to hand-grade a run's submissions where they are. ``out``
    is nbgrader's layout already (``autograded/<student>/<lab>/``), and the gradebook is the run's own, so a TA
    starts ``jupyter server`` in ``out`` with the formgrader extension and nothing else to set. ``out`` is the
    grader's user's alone (mode 0700), so a PostgreSQL URL's password written here is no wider known."""
    path = Path(out) / "nbgrader_config.py"
    path.write_text("c = get_config()  # noqa: F821 - written by genlab grade, for formgrader (docs/ta-guide.md)\n"
                    f"c.CourseDirectory.root = {str(Path(out).resolve())!r}\n"
                    f"c.CourseDirectory.course_id = {COURSE!r}\n"
                    f"c.CourseDirectory.db_url = {db_url!r}\n")
    return path

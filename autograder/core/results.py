"""What grading one notebook concludes, and every form it is written in.

One :class:`Result` per student and lab owns its own forms: CSV rows (``grades.csv``), JSON (``results.json``
and the resume cache), the gradebook's scores, and a line of the console table. Statuses are typed
(:class:`Status`), never read back out of a message.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

import nbformat

from genlab.catalog import bug as catalogued_bug
from genlab.testing.runner import Outcome


class Status(StrEnum):
    PASSED = "passed"      # the test ran and every check held
    FAILED = "failed"      # a check failed on the student's result
    ERROR = "error"        # the student's code raised, or the notebook could not be read
    TIMEOUT = "timeout"    # a limit on time stopped the student's code
    KILLED = "killed"      # the kernel died: crash, os._exit, the memory limit
    TAMPERED = "tampered"  # the notebook interferes with the grader: no test earns points
    REFUSED = "refused"    # the code it tests is outside the policy for graded code (course.toml [policy]): not run
    MISSING = "missing"    # no notebook was handed in for this lab


MARKS = {Status.FAILED: "x", Status.ERROR: "E", Status.TIMEOUT: "T", Status.KILLED: "K", Status.TAMPERED: "!",
         Status.REFUSED: "R", Status.MISSING: "-"}
CSV_COLUMNS = ["student", "lab", "test", "score", "max_score", "status", "diagnosis"]
MAX_SOLUTION_CHARS = 20000   # one solution cell, as results.json keeps it


@dataclass
class Result:
    student: str
    lab: str
    outcomes: list[Outcome]
    points: dict[str, float]
    notes: list[str] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)
    notebook: nbformat.NotebookNode | None = None   # the graded notebook (None: nothing ran)
    seconds: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)   # seconds per pipeline step
    # failing function -> {"calls": n, "relations": {label: count}}: its outputs against the reference's on the
    # same inputs (autograder.grading.behaviour), for the class report's clusters; labels only, a few hundred bytes
    behaviour: dict[str, dict] = field(default_factory=dict)

    @classmethod
    def every_test(cls, student: str, lab: str, points: dict[str, float], status: Status, message: str,
                   notes=(), evidence=()) -> "Result":
        """One status for every test: a notebook missing, unreadable, refused, or one the grader failed on."""
        return cls(student, lab, [Outcome(t, status, message) for t in points], dict(points), list(notes),
                   list(evidence))

    def score(self, test: str) -> float:
        outcome = next(o for o in self.outcomes if o.test == test)
        return self.points[test] if outcome.status == Status.PASSED else 0.0

    @property
    def total(self) -> float:
        return sum(self.score(o.test) for o in self.outcomes)

    @property
    def max_total(self) -> float:
        return sum(self.points.values())

    # -- forms ----------------------------------------------------------------------------------------
    def csv_rows(self) -> list[list[str]]:
        return [[self.student, self.lab, o.test, f"{self.score(o.test):g}", f"{self.points[o.test]:g}", str(o.status),
                 ";".join(b.id for b in o.diagnosis)] for o in self.outcomes]

    def to_json(self) -> dict:
        return {"student": self.student, "lab": self.lab, "seconds": round(self.seconds, 2),
                "phases": {k: round(v, 3) for k, v in self.phases.items()},
                "notes": self.notes, "evidence": self.evidence,
                "tests": [{"test": o.test, "status": str(o.status), "score": self.score(o.test),
                           "max_score": self.points[o.test], "message": o.message,
                           "diagnosis": [b.id for b in o.diagnosis], "seconds": round(o.seconds, 3)}
                          for o in self.outcomes],
                "behaviour": self.behaviour, "solutions": self.solutions()}

    def solutions(self) -> dict[str, str]:
        """The student's solution cells by grade_id (none when nothing ran): the class report's clusters show
        them and its similarity check compares them, on the instructor's pages only. Cut to a page each."""
        from genlab.testing.notebook import grade_id, is_solution

        if self.notebook is None:
            return {}
        return {grade_id(c): c.source[:MAX_SOLUTION_CHARS] for c in self.notebook.cells if is_solution(c)}

    @classmethod
    def from_json(cls, data: dict, notebook: nbformat.NotebookNode | None = None) -> "Result":
        lab = data["lab"]
        outcomes = [Outcome(t["test"], Status(t["status"]), t["message"], t.get("seconds", 0.0),
                            [catalogued_bug(lab, b) for b in t["diagnosis"]]) for t in data["tests"]]
        return cls(data["student"], lab, outcomes, {t["test"]: t["max_score"] for t in data["tests"]},
                   data["notes"], data["evidence"], notebook, data["seconds"], data.get("phases", {}),
                   data.get("behaviour", {}))

    def marks(self) -> list[str]:
        """One mark per test for the console table: points earned, or what stopped the test."""
        return [f"{self.score(o.test):g}" if o.passed else MARKS.get(Status(o.status), "?") for o in self.outcomes]


def table(results: list[Result]) -> str:
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
            lines.append(f"{r.student:<{width}}" + "  ".join(f"{m:>4}" for m in r.marks())
                         + f"   {r.total:g}/{r.max_total:g}")
        lines.append("tests: " + ", ".join(f"{i + 1}={t}" for i, t in enumerate(tests)))
        lines.append("marks: number = points earned, " + ", ".join(f"{m} {s}" for s, m in MARKS.items()))
        named = dict.fromkeys((r.student, b.id, b.title) for r in rows for o in r.outcomes for b in o.diagnosis)
        if named:
            lines.append("diagnoses:")
            lines += [f"  {student}: {bug_id} ({title})" for student, bug_id, title in named]
        lines += [f"  {r.student}: TAMPERED: {r.evidence[0]}" for r in rows if r.evidence]
    return "\n".join(lines)

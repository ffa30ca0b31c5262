"""Due dates, extensions and the late penalty (course.toml ``[deadlines]``), applied from nbgrader's timestamps.

A submission's time is its ``timestamp.txt`` (nbgrader's file, written by ``genlab collect`` or by nbgrader's
own collect). Its due date is the lab's (``[deadlines.due]``), or the student's extension for that lab
(``[deadlines.extensions]``: a new due date, or a number of hours added). The rule (``[deadlines.penalty]``):

- ``percent`` of the lab's score is taken off per started ``per`` ("hour" or "day") after the due date and
  ``grace_minutes``, at most ``max_percent``: 3 h 12 min late at 2.5% per hour is 4 started hours, -10%;
- ``grace_days``: days each student may be late over the whole term without penalty, spent on the labs in
  the order of their due dates, one per started day late, until none are left.

The penalty is recorded where nbgrader keeps it: ``SubmittedNotebook.late_submission_penalty``, in points
(nbgrader's own CSV export reports ``score = raw score - penalty``), with the timestamp, the lab's due date
and the extension on the submission. It is computed from the timestamps and the raw score alone and
*written*, never added to what is there, so applying it again (a regrade, hand-graded points arriving) gives
the same rows; a student's grace days are recounted from all their timestamps each time, so none is spent
twice.
"""
from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

UNITS = {"hour": 3600.0, "day": 86400.0}


def _time(text, where: str) -> datetime:
    when = text if isinstance(text, datetime) else datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    if when.tzinfo is None:
        raise ValueError(f"{where}: {text!r} has no UTC offset; write it as 2026-10-01T23:59:00+02:00 (Z for UTC)")
    return when.astimezone(timezone.utc)


@dataclass(frozen=True)
class Rule:
    per: str = "hour"
    percent: float = 0.0
    max_percent: float = 100.0
    grace_minutes: float = 0.0
    grace_days: int = 0

    def __post_init__(self):
        if self.per not in UNITS:
            raise ValueError(f"[deadlines.penalty] per = {self.per!r}: use \"hour\" or \"day\"")


@dataclass(frozen=True)
class Late:
    """How late one submission was, and what that costs."""
    seconds: float = 0.0          # after the (extended) due date
    percent: float = 0.0          # of the lab's score, taken off
    grace_days_used: int = 0
    extended: bool = False

    def describe(self) -> str:
        """'submitted 3 h 12 min late: −10%'; 'submitted by the extended due date: no penalty' for a student with an
        extension who met it; '' when on time."""
        if self.seconds <= 0:
            return "submitted by the extended due date: no penalty" if self.extended else ""
        minutes = int(self.seconds // 60)
        days, hours, mins = minutes // 1440, minutes % 1440 // 60, minutes % 60
        span = " ".join(f"{n} {u}" for n, u in ((days, "d"), (hours, "h"), (mins, "min")) if n) or "under 1 min"
        text = f"submitted {span} after the extended due date" if self.extended else f"submitted {span} late"
        if self.grace_days_used:
            text += f" ({self.grace_days_used} grace day{'s' * (self.grace_days_used > 1)} used)"
        return text + (f": −{self.percent:g}%" if self.percent else ": no penalty")


@dataclass(frozen=True)
class Deadlines:
    due: dict[str, datetime] = field(default_factory=dict)
    extensions: dict[str, dict[str, object]] = field(default_factory=dict)   # student -> lab -> time or hours
    rule: Rule = Rule()

    @classmethod
    def load(cls, course_toml: Path) -> "Deadlines":
        path = Path(course_toml)
        table = tomllib.loads(path.read_text()).get("deadlines", {}) if path.exists() else {}
        due = {lab: _time(t, f"{path} [deadlines.due] {lab}") for lab, t in table.get("due", {}).items()}
        extensions = {}
        for student, labs in table.get("extensions", {}).items():
            extensions[student] = {lab: v if isinstance(v, (int, float)) else _time(v, f"{path} extension {student}")
                                   for lab, v in labs.items()}
        return cls(due, extensions, Rule(**table.get("penalty", {})))

    def due_for(self, student: str, lab: str) -> datetime | None:
        due = self.due.get(lab)
        given = self.extensions.get(student, {}).get(lab)
        if due is None or given is None:
            return due
        return due + timedelta(hours=given) if isinstance(given, (int, float)) else max(due, given)

    def assess(self, student: str, submitted: dict[str, datetime]) -> dict[str, Late]:
        """{lab: Late} for one student's submissions ({lab: time, UTC}), grace days spent in due-date order."""
        rule, left, out = self.rule, self.rule.grace_days, {}
        for lab in sorted(submitted, key=lambda lab: (self.due.get(lab) or datetime.max.replace(tzinfo=timezone.utc), lab)):
            due = self.due_for(student, lab)
            if due is None:
                out[lab] = Late()
                continue
            seconds = max(0.0, (submitted[lab] - due).total_seconds())
            late = max(0.0, seconds - rule.grace_minutes * 60)
            used = min(left, math.ceil(late / UNITS["day"])) if late else 0
            left -= used
            late = max(0.0, late - used * UNITS["day"])
            units = math.ceil(late / UNITS[rule.per]) if late else 0
            out[lab] = Late(seconds, min(rule.max_percent, units * rule.percent), used,
                            due != self.due.get(lab))
        return out


def read_timestamp(folder: Path) -> datetime | None:
    """nbgrader's ``timestamp.txt`` in ``folder`` (UTC), as nbgrader itself parses it."""
    from nbgrader.utils import parse_utc

    path = Path(folder) / "timestamp.txt"
    if not path.is_file():
        return None
    text = path.read_text().strip()
    return parse_utc(text).replace(tzinfo=timezone.utc) if text else None


def _naive(when: datetime | None) -> datetime | None:
    return when.astimezone(timezone.utc).replace(tzinfo=None) if when else None   # nbgrader stores naive UTC


def apply(db_url: str, deadlines: Deadlines, submissions: Path) -> dict[tuple[str, str], Late]:
    """Writes due dates, timestamps, extensions and penalties into the gradebook; {(student, lab): Late}."""
    from nbgrader.api import Gradebook

    from autograder.course.gradebook import COURSE

    lates: dict[tuple[str, str], Late] = {}
    with Gradebook(db_url, COURSE) as gb:
        times: dict[str, dict[str, datetime]] = {}
        rows = [(a, s) for a in gb.assignments for s in a.submissions]
        for assignment, sub in rows:
            assignment.duedate = _naive(deadlines.due.get(assignment.name))
            when = read_timestamp(Path(submissions) / sub.student.id / assignment.name)
            sub.timestamp = _naive(when) or sub.timestamp
            if sub.timestamp is not None:
                times.setdefault(sub.student.id, {})[assignment.name] = sub.timestamp.replace(tzinfo=timezone.utc)
        for student, labs in times.items():
            for lab, late in deadlines.assess(student, labs).items():
                lates[(student, lab)] = late
        for assignment, sub in rows:
            late = lates.get((sub.student.id, assignment.name), Late())
            due, extended = deadlines.due.get(assignment.name), deadlines.due_for(sub.student.id, assignment.name)
            sub.extension = (extended - due) if due and extended and extended != due else None
            for nb in sub.notebooks:
                raw = sum(g.score or 0.0 for g in nb.grades)
                nb.late_submission_penalty = round(raw * late.percent / 100, 4) if late.percent else None
        gb.db.commit()
    return lates

"""Due dates, extensions and late penalties (autograder/late.py): the rule, and the gradebook it writes."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from autograder.late import Deadlines, Late, Rule, apply

UTC = timezone.utc
DUE = datetime(2026, 10, 1, 22, 0, tzinfo=UTC)   # "2026-10-02T00:00:00+02:00"


def _deadlines(**rule) -> Deadlines:
    return Deadlines({"lab1_vae": DUE, "lab2_diffusion": DUE + timedelta(days=14)},
                     {"aoneil": {"lab1_vae": 48}, "zberg": {"lab1_vae": datetime(2026, 10, 5, tzinfo=UTC)}},
                     Rule(**rule))


def test_per_started_hour_capped_and_described():
    d = _deadlines(per="hour", percent=2.5, max_percent=50)
    late = d.assess("jmuller", {"lab1_vae": DUE + timedelta(hours=3, minutes=12)})["lab1_vae"]
    assert late.percent == 10 and late.describe() == "submitted 3 h 12 min late: −10%"   # 4 started hours
    assert d.assess("jmuller", {"lab1_vae": DUE + timedelta(days=3)})["lab1_vae"].percent == 50   # the cap
    on_time = d.assess("jmuller", {"lab1_vae": DUE - timedelta(seconds=1)})["lab1_vae"]
    assert on_time == Late() and on_time.describe() == ""
    assert d.assess("jmuller", {"lab3_attention": DUE + timedelta(days=9)})["lab3_attention"] == Late()  # no due date


def test_per_day_and_grace_minutes():
    d = _deadlines(per="day", percent=10, grace_minutes=15)
    assert d.assess("x", {"lab1_vae": DUE + timedelta(minutes=14)})["lab1_vae"].percent == 0
    assert d.assess("x", {"lab1_vae": DUE + timedelta(minutes=16)})["lab1_vae"].percent == 10
    assert d.assess("x", {"lab1_vae": DUE + timedelta(days=1, minutes=16)})["lab1_vae"].percent == 20


def test_extensions_in_hours_or_as_a_date():
    d = _deadlines(per="hour", percent=5)
    assert d.assess("aoneil", {"lab1_vae": DUE + timedelta(hours=47)})["lab1_vae"].percent == 0
    late = d.assess("aoneil", {"lab1_vae": DUE + timedelta(hours=49)})["lab1_vae"]
    assert late.percent == 5 and late.extended
    assert d.assess("zberg", {"lab1_vae": datetime(2026, 10, 4, 23, tzinfo=UTC)})["lab1_vae"].percent == 0


def test_grace_days_are_spent_in_due_date_order_once_per_term():
    d = _deadlines(per="day", percent=10, grace_days=2)
    lates = d.assess("jmuller", {"lab2_diffusion": DUE + timedelta(days=15, hours=1),    # 2 started days late
                                 "lab1_vae": DUE + timedelta(hours=5)})                   # 1 started day late
    assert (lates["lab1_vae"].grace_days_used, lates["lab1_vae"].percent) == (1, 0)      # due first: spent first
    assert (lates["lab2_diffusion"].grace_days_used, lates["lab2_diffusion"].percent) == (1, 10)
    assert "1 grace day used" in lates["lab2_diffusion"].describe()


def test_course_toml_loads_and_rejects_times_without_an_offset(tmp_path):
    path = tmp_path / "course.toml"
    path.write_text('[deadlines.due]\nlab1_vae = "2026-10-02T00:00:00+02:00"\n'
                    '[deadlines.extensions]\naoneil = { lab1_vae = 48 }\n'
                    '[deadlines.penalty]\nper = "day"\npercent = 10\n')
    d = Deadlines.load(path)
    assert d.due["lab1_vae"] == DUE and d.rule.per == "day" and d.due_for("aoneil", "lab1_vae") == DUE + timedelta(hours=48)
    path.write_text('[deadlines.due]\nlab1_vae = "2026-10-02T00:00:00"\n')
    with pytest.raises(ValueError, match="offset"):
        Deadlines.load(path)
    path.write_text('[deadlines.penalty]\nper = "week"\n')
    with pytest.raises(ValueError, match="hour"):
        Deadlines.load(path)


def gradebook(tmp_path, manual: dict | None = None):
    """A gradebook as genlab grade writes one (auto_score on tests), without grading a notebook: lab1_vae with
    tests t1 (2 points), t2 (3) and a hand-graded answer `written` (5)."""
    from nbgrader.api import Gradebook

    url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    auto = {"jmuller": {"t1": 2.0, "t2": 0.0}, "aoneil": {"t1": 2.0, "t2": 3.0}}
    manual = {"jmuller": 4.0} if manual is None else manual
    with Gradebook(url, "genlab") as gb:
        gb.add_assignment("lab1_vae")
        gb.add_notebook("lab1_vae", "lab1_vae")
        for name, points, kind in (("t1", 2, "code"), ("t2", 3, "code"), ("written", 5, "markdown")):
            gb.add_grade_cell(name, "lab1_vae", "lab1_vae", max_score=points, cell_type=kind)
        for student, tests in auto.items():
            gb.add_student(student)
            gb.add_submission("lab1_vae", student)
            for test, score in tests.items():
                gb.find_grade(test, "lab1_vae", "lab1_vae", student).auto_score = score
            if student in manual:
                gb.find_grade("written", "lab1_vae", "lab1_vae", student).manual_score = manual[student]
        gb.db.commit()
    return url


def _stamp(submissions, student, when: str):
    folder = submissions / student / "lab1_vae"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "timestamp.txt").write_text(when + "\n")


def test_apply_records_the_penalty_in_nbgrader_fields_and_never_twice(tmp_path):
    from nbgrader.api import Gradebook

    url = gradebook(tmp_path)
    subs = tmp_path / "submitted"
    _stamp(subs, "jmuller", "2026-10-02 01:12:00.000000 UTC")   # 3 h 12 min after DUE
    _stamp(subs, "aoneil", "2026-10-03 01:00:00.000000 UTC")    # 27 h late, within the 48 h extension
    d = _deadlines(per="hour", percent=2.5, max_percent=50)
    for _ in range(2):   # a second run (a regrade, hand grades arriving) writes the same, adds nothing
        lates = apply(url, d, subs)
        with Gradebook(url, "genlab") as gb:
            jm, ao = gb.find_submission("lab1_vae", "jmuller"), gb.find_submission("lab1_vae", "aoneil")
            assert jm.late_submission_penalty == pytest.approx(0.6)     # 10% of 2 + 0 + 4
            assert jm.total_seconds_late == 3 * 3600 + 12 * 60
            assert ao.late_submission_penalty == 0 and ao.extension == timedelta(hours=48)
            assert ao.total_seconds_late == 0
    assert lates[("jmuller", "lab1_vae")].describe() == "submitted 3 h 12 min late: −10%"

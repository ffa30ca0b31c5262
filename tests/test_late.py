"""Due dates, extensions and late penalties (autograder/course/late.py): the rule, and the gradebook it writes."""
from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import pytest

from autograder.course.late import Deadlines, Late, Rule, apply

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
    met = d.assess("aoneil", {"lab1_vae": DUE + timedelta(hours=47)})["lab1_vae"]
    assert met.percent == 0 and met.describe() == "submitted by the extended due date: no penalty"
    late = d.assess("aoneil", {"lab1_vae": DUE + timedelta(hours=49)})["lab1_vae"]
    assert late.percent == 5 and late.extended
    assert late.describe() == "submitted 1 h after the extended due date: −5%"   # counted from the new date
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


@pytest.mark.slow
def test_a_term_end_to_end_collect_grade_hand_grade_feedback_export(tmp_path):
    """One Lab 1 notebook (the reference sample) through the whole term: a Canvas zip with a late student,
    graded, the written answers hand-graded (through nbgrader's Gradebook API, as formgrader writes them), the
    page redrawn twice (the penalty is not applied twice) and exported for Canvas."""
    import io
    import zipfile
    from pathlib import Path

    from nbgrader.api import Gradebook

    from autograder.wall import sandbox
    from autograder.cli import main
    from autograder.course.grade import grade_all

    if sandbox.probe():
        pytest.skip(f"no sandbox here: {sandbox.probe()}")
    root = Path(__file__).resolve().parents[1]
    sample = (root / "autograder" / "samples" / "reference" / "lab1_vae" / "lab1_vae.ipynb").read_bytes()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr(zipfile.ZipInfo("müllerjosé_LATE_1001_88123_lab1_vae.ipynb", (2026, 12, 1, 9, 0, 0)), sample)
    (tmp_path / "lab1.zip").write_bytes(buf.getvalue())
    (tmp_path / "roster.csv").write_text("lms_id,name,email,student_id,sis_user_id,sis_login_id,section\n"
                                         "1001,\"Müller, José\",jose@uni.example,jmuller,S1,jmuller,A\n")
    (tmp_path / "times.csv").write_text("id,submitted_at\n1001,2026-10-02T03:12:00+02:00\n")   # 3 h 12 min late
    course = tmp_path / "course.toml"
    course.write_text('[deadlines.due]\nlab1_vae = "2026-10-02T00:00:00+02:00"\n'   # 2026-10-01 22:00 UTC
                      '[deadlines.penalty]\nper = "hour"\npercent = 2.5\nmax_percent = 50\n')
    subs, out = tmp_path / "submitted", tmp_path / "out"
    assert main(["collect", str(tmp_path / "lab1.zip"), "--lab", "lab1_vae", "--into", str(subs),
                 "--roster", str(tmp_path / "roster.csv"), "--times", str(tmp_path / "times.csv")]) == 0
    [result] = grade_all(root, subs, out, labs=["lab1_vae"], progress=False)
    assert result.total == result.max_total, result.marks()
    feedback = ["feedback", str(out), "--submissions", str(subs), "--course", str(course)]
    assert main(feedback) == 0
    page = (out / "feedback" / "jmuller" / "lab1_vae" / "lab1_vae.html").read_text()
    assert f"{result.total:g} / {result.max_total:g} autograded; 11 points of hand-graded answers still" in page
    assert "submitted 3 h 12 min late: −10%" in page
    canvas = ["export", str(out), "--format", "canvas", "--roster", str(tmp_path / "roster.csv")]
    assert main([*canvas, "--out", str(tmp_path / "pending.csv")]) == 0
    assert (tmp_path / "pending.csv").read_text().splitlines()[2] == '"Müller, José",1001,S1,jmuller,A,'
    with Gradebook(f"sqlite:///{out / 'gradebook.db'}", "genlab") as gb:   # what formgrader writes
        gb.find_grade("derivation_kl_general", "lab1_vae", "lab1_vae", "jmuller").manual_score = 3.0
        gb.find_grade("beta_sweep_discussion", "lab1_vae", "lab1_vae", "jmuller").manual_score = 1.5
        gb.find_grade("cb_answer", "lab1_vae", "lab1_vae", "jmuller").manual_score = 3.0
        gb.find_grade("free_bits_answer", "lab1_vae", "lab1_vae", "jmuller").manual_score = 2.5
        gb.db.commit()
    raw = result.total + 10
    for _ in range(2):
        assert main(feedback) == 0
        with Gradebook(f"sqlite:///{out / 'gradebook.db'}", "genlab") as gb:
            assert gb.find_submission("lab1_vae", "jmuller").late_submission_penalty == pytest.approx(raw / 10)
    page = (out / "feedback" / "jmuller" / "lab1_vae" / "lab1_vae.html").read_text()
    assert f"Score: {raw:g} / {result.max_total + 11:g} ({result.total:g} / {result.max_total:g} autograded, " \
           f"10 / 11 hand-graded); submitted 3 h 12 min late: −10% ({-raw / 10:g} points): " \
           f"{raw * 0.9:g} / {result.max_total + 11:g}" in page
    header = re.search(r"<h4>[^<]*</h4>", page)[0]   # nbgrader's own score line says the same
    assert "autograded" in header and "10 / 11 hand-graded" in header and "−10%" in header, header
    assert main([*canvas, "--out", str(tmp_path / "graded.csv")]) == 0
    assert (tmp_path / "graded.csv").read_text().splitlines()[2] == f'"Müller, José",1001,S1,jmuller,A,{raw * 0.9:g}'


def test_a_regrade_keeps_the_hand_graded_points_and_the_penalty_is_rewritten_not_added(tmp_path):
    from types import SimpleNamespace

    from nbgrader.api import Gradebook

    from autograder.course.gradebook import _record_one

    url = gradebook(tmp_path)
    subs = tmp_path / "submitted"
    _stamp(subs, "jmuller", "2026-10-02 01:12:00.000000 UTC")
    d = _deadlines(per="hour", percent=2.5, max_percent=50)
    apply(url, d, subs)
    regraded = SimpleNamespace(student="jmuller", lab="lab1_vae", outcomes=[SimpleNamespace(test="t1"),
                               SimpleNamespace(test="t2")], score=lambda test: {"t1": 2.0, "t2": 3.0}[test])
    with Gradebook(url, "genlab") as gb:   # what genlab grade does to a submission graded again
        _record_one(gb, regraded)
        assert gb.find_grade("written", "lab1_vae", "lab1_vae", "jmuller").manual_score == 4.0
    apply(url, d, subs)
    with Gradebook(url, "genlab") as gb:
        assert gb.find_submission("lab1_vae", "jmuller").late_submission_penalty == pytest.approx(0.9)  # 10% of 9


def test_genlab_grade_applies_the_course_deadlines_and_a_course_without_due_dates_changes_nothing(tmp_path):
    """write_outputs (the end of every `genlab grade`) calls apply_deadlines with the graded submissions: the
    penalty is in the gradebook before any `genlab feedback`. Without a due date the gradebook is left alone."""
    from nbgrader.api import Gradebook

    from autograder.course.feedback import apply_deadlines

    url = gradebook(tmp_path)
    subs = tmp_path / "submitted"
    _stamp(subs, "jmuller", "2026-10-02 01:12:00.000000 UTC")
    course = tmp_path / "course" / "autograder" / "course.toml"
    course.parent.mkdir(parents=True)
    course.write_text("[deadlines.penalty]\nper = \"hour\"\npercent = 2.5\n")
    with Gradebook(url, "genlab") as gb:
        before = gb.find_submission("lab1_vae", "jmuller").late_submission_penalty
    assert apply_deadlines(tmp_path / "course", url, subs) == {}
    with Gradebook(url, "genlab") as gb:
        assert gb.find_submission("lab1_vae", "jmuller").late_submission_penalty == before
    course.write_text('[deadlines.due]\nlab1_vae = "2026-10-02T00:00:00+02:00"\n'
                      '[deadlines.penalty]\nper = "hour"\npercent = 2.5\nmax_percent = 50\n')
    lates = apply_deadlines(tmp_path / "course", url, subs)
    assert lates[("jmuller", "lab1_vae")].percent > 0
    with Gradebook(url, "genlab") as gb:
        assert gb.find_submission("lab1_vae", "jmuller").late_submission_penalty > 0

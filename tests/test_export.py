"""``genlab export``: Canvas and Moodle import CSVs and the per-test CSV, against files written out by hand."""
from __future__ import annotations

import json

from autograder.cli import main
from autograder.course.late import apply
from test_late import _deadlines, _stamp, gradebook

ROSTER = ("lms_id,name,email,student_id,sis_user_id,sis_login_id,section\n"
          "1001,\"Müller, José\",jose@uni.example,jmuller,S1,jmuller,A\n"
          "1002,\"O'Neil, Anne-Marie\",anne@uni.example,aoneil,S2,aoneil,A\n"
          "1003,\"van der Berg, Zoë\",zoe@uni.example,zberg,S3,zberg,B\n")

# Worked by hand. jmuller: t1 2 + t2 0 + written 4 = 6, submitted 3 h 12 min late at 2.5% per started hour
# (4 hours, -10%): 6 - 0.6 = 5.4. aoneil: written not graded yet, so blank (not 0). zberg: no submission.
CANVAS = """Student,ID,SIS User ID,SIS Login ID,Section,Lab 1: VAE (48213)
Points Possible,,,,,10
"Müller, José",1001,S1,jmuller,A,5.4
"O'Neil, Anne-Marie",1002,S2,aoneil,A,
"van der Berg, Zoë",1003,S3,zberg,B,
"""
MOODLE = """Full name,ID number,Email address,lab1_vae
"Müller, José",S1,jose@uni.example,5.4
"O'Neil, Anne-Marie",S2,anne@uni.example,
"van der Berg, Zoë",S3,zoe@uni.example,
"""
PER_TEST = """student,lab,cell,kind,score,max_score,status,diagnosis
aoneil,lab1_vae,t1,auto,2,2,passed,
aoneil,lab1_vae,t2,auto,3,3,passed,
aoneil,lab1_vae,written,manual,,5,pending,
jmuller,lab1_vae,t1,auto,2,2,passed,
jmuller,lab1_vae,t2,auto,0,3,failed,lab1_vae.wrong_sign
jmuller,lab1_vae,written,manual,4,5,graded,
jmuller,lab1_vae,late penalty,penalty,-0.6,,,
"""


def _run(tmp_path, manual=None):
    run = tmp_path / "run"
    run.mkdir()
    gradebook(run, manual)
    subs = tmp_path / "submitted"
    _stamp(subs, "jmuller", "2026-10-02 01:12:00.000000 UTC")
    apply(f"sqlite:///{run / 'gradebook.db'}", _deadlines(per="hour", percent=2.5, max_percent=50), subs)
    tests = {"jmuller": [("t1", "passed", []), ("t2", "failed", ["wrong_sign"])],
             "aoneil": [("t1", "passed", []), ("t2", "passed", [])]}
    (run / "results.json").write_text(json.dumps([
        {"student": s, "lab": "lab1_vae", "tests": [{"test": t, "status": st, "diagnosis": [f"lab1_vae.{d}" for d in ds]}
                                                    for t, st, ds in rows]} for s, rows in tests.items()]))
    (tmp_path / "roster.csv").write_text(ROSTER, encoding="utf-8")
    return run


def _export(tmp_path, run, fmt, *extra):
    out = tmp_path / f"{fmt}.csv"
    assert main(["export", str(run), "--format", fmt, "--out", str(out), *extra]) == 0
    return out.read_text(encoding="utf-8")


def test_canvas_moodle_and_per_test_exports_match_the_hand_computed_files(tmp_path):
    run = _run(tmp_path)
    roster = ["--roster", str(tmp_path / "roster.csv")]
    assert _export(tmp_path, run, "canvas", *roster, "--column", "lab1_vae=Lab 1: VAE (48213)") == CANVAS
    assert _export(tmp_path, run, "moodle", *roster) == MOODLE
    assert _export(tmp_path, run, "csv") == PER_TEST


def test_hand_graded_points_appear_once_graded(tmp_path):
    run = _run(tmp_path, manual={"jmuller": 4.0, "aoneil": 3.5})
    text = _export(tmp_path, run, "moodle", "--roster", str(tmp_path / "roster.csv"))
    assert "\"O'Neil, Anne-Marie\",S2,anne@uni.example,8.5\n" in text   # 2 + 3 + 3.5, on time


def test_a_graded_student_missing_from_the_roster_is_reported(tmp_path, capsys):
    run = _run(tmp_path)
    (tmp_path / "roster.csv").write_text("".join(line + "\n" for line in ROSTER.splitlines() if "aoneil" not in line),
                                         encoding="utf-8")
    _export(tmp_path, run, "canvas", "--roster", str(tmp_path / "roster.csv"))
    assert "aoneil is graded but not in the roster" in capsys.readouterr().err

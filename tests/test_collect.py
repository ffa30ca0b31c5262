"""``genlab collect``: Canvas and Moodle download-all zips (built here, in each LMS's naming) into nbgrader's tree."""
from __future__ import annotations

import csv
import io
import json
import stat
import zipfile
from datetime import datetime

import nbformat
import pytest

from autograder.cli import main
from autograder.course.collect import Roster, collect, parse_name, read_times
from autograder.core.limits import Limits

LAB = "lab1_vae"
MAX = Limits().max_notebook_bytes
ROSTER = ("lms_id,name,email,student_id,sis_user_id,sis_login_id,section\n"
          "1001,José Müller,jose@uni.example,jmuller,S1,jmuller,A\n"
          "1002,Anne-Marie O'Neil,anne@uni.example,aoneil,S2,aoneil,A\n"
          "1003,Zoë van der Berg,zoe@uni.example,zberg,S3,zberg,B\n")


def _nb(tag: str) -> bytes:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(f"x = {tag!r}")])
    return nbformat.writes(nb).encode()


def _zip(entries: dict, when=(2026, 10, 1, 12, 0, 0), links=()) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in entries.items():
            info = zipfile.ZipInfo(name, date_time=when if not isinstance(data, tuple) else data[1])
            zf.writestr(info, data if not isinstance(data, tuple) else data[0])
        for name, target in links:
            info = zipfile.ZipInfo(name, date_time=when)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zf.writestr(info, target)
    return buf.getvalue()


@pytest.fixture
def roster(tmp_path):
    path = tmp_path / "roster.csv"
    path.write_text(ROSTER, encoding="utf-8")
    return Roster.read(path)


def _code(path) -> str:
    return "".join(json.loads(path.read_text())["cells"][0]["source"])


def test_canvas_names_parse_as_canvas_writes_them():
    # content_zipper.rb: sortable name, lower case, non-word characters removed; _LATE_; user id; attachment id
    p = parse_name("müllerjosé_LATE_1001_88123_lab1_vae.ipynb")
    assert (p["lms"], p["id"], p["name"], p["late"], p["order"], p["orig"]) == \
        ("canvas", "1001", "müllerjosé", True, 88123, "lab1_vae.ipynb")
    p = parse_name("oneilannemarie_1002_88124_lab1_vae (1).ipynb")
    assert (p["id"], p["late"], p["orig"]) == ("1002", False, "lab1_vae (1).ipynb")


def test_moodle_names_parse_in_both_layouts():
    p = parse_name("José Müller_5501_assignsubmission_file/lab1_vae.ipynb")
    assert (p["lms"], p["id"], p["name"], p["orig"]) == ("moodle", "5501", "José Müller", "lab1_vae.ipynb")
    p = parse_name("Zoë van der Berg_5503_assignsubmission_file_lab1_vae.ipynb")
    assert (p["lms"], p["id"], p["name"], p["orig"]) == ("moodle", "5503", "Zoë van der Berg", "lab1_vae.ipynb")


def test_a_canvas_zip_with_a_late_a_resubmitted_and_an_unknown_student(tmp_path, roster):
    src = tmp_path / "submissions.zip"
    src.write_bytes(_zip({
        "müllerjosé_LATE_1001_88123_lab1_vae.ipynb": (_nb("jose"), (2026, 10, 2, 3, 0, 0)),
        "oneilannemarie_1002_88124_lab1_vae.ipynb": (_nb("anne old"), (2026, 9, 30, 10, 0, 0)),
        "oneilannemarie_1002_88200_lab1_vae-1.ipynb": (_nb("anne new"), (2026, 10, 1, 9, 0, 0)),
        "smithpat_1999_88300_lab1_vae.ipynb": _nb("stranger"),
        "bergzoëvander_1003_88400_notes.pdf": b"%PDF-1.4",
    }))
    into = tmp_path / "submitted"
    entries = collect(src, LAB, into, roster, MAX)
    outcome = {e.name: e.outcome for e in entries}
    assert _code(into / "jmuller" / LAB / f"{LAB}.ipynb") == "x = 'jose'"
    assert (into / "jmuller" / LAB / "timestamp.txt").read_text().strip() == "2026-10-02 03:00:00.000000 UTC"
    assert _code(into / "aoneil" / LAB / f"{LAB}.ipynb") == "x = 'anne new'"     # the latest counts
    kept = list((into / ".superseded" / "aoneil" / LAB).iterdir())              # and the earlier one is kept
    assert len(kept) == 1 and "anne old" in kept[0].read_text()
    assert outcome["smithpat_1999_88300_lab1_vae.ipynb"] == "unmatched"           # reported, never dropped
    assert any("stranger" in p.read_text(errors="replace") for p in (into / ".unmatched").iterdir())
    assert outcome["bergzoëvander_1003_88400_notes.pdf"] == "not a notebook"
    assert not (into / "zberg").exists()
    manifest = list(csv.DictReader((into / f".collect-{LAB}.csv").open(encoding="utf-8")))
    assert len(manifest) == 5 and {r["lms_marked_late"] for r in manifest} == {"yes", ""}
    # nbgrader reads the timestamp it would have written itself
    from nbgrader.utils import parse_utc
    assert parse_utc((into / "jmuller" / LAB / "timestamp.txt").read_text().strip()) == \
        datetime(2026, 10, 2, 3, 0)   # nbgrader keeps naive UTC


def test_a_moodle_zip_in_folders_matches_by_participant_id_or_name(tmp_path):
    path = tmp_path / "roster.csv"
    path.write_text("lms_id,name,email,student_id\n5501,José Müller,jose@uni.example,jmuller\n"
                    ",Zoë van der Berg,zoe@uni.example,zberg\n", encoding="utf-8")
    src = tmp_path / "COURSE-Lab 1-42.zip"
    src.write_bytes(_zip({
        "José Müller_5501_assignsubmission_file/lab1_vae.ipynb": _nb("jose"),
        "Zoë van der Berg_5503_assignsubmission_file/sub dir/Lab 1 final.ipynb": _nb("zoe"),
        "Zoë van der Berg_5503_assignsubmission_onlinetext/onlinetext.html": b"<p>hi</p>",
    }))
    into = tmp_path / "submitted"
    entries = collect(src, LAB, into, Roster.read(path), MAX)
    assert _code(into / "jmuller" / LAB / f"{LAB}.ipynb") == "x = 'jose'"
    assert _code(into / "zberg" / LAB / f"{LAB}.ipynb") == "x = 'zoe'"            # by name: no id in the roster
    assert [e.outcome for e in entries if "onlinetext" in e.name] == ["not a notebook"]


def test_without_a_roster_each_student_is_their_lms_id(tmp_path):
    src = tmp_path / "s.zip"
    src.write_bytes(_zip({"José Müller_5501_assignsubmission_file_lab1_vae.ipynb": _nb("jose")}))
    collect(src, LAB, tmp_path / "out", Roster.read(None), MAX)
    assert (tmp_path / "out" / "5501" / LAB / f"{LAB}.ipynb").is_file()


def test_hostile_entries_are_refused_and_nothing_escapes(tmp_path, roster):
    src = tmp_path / "evil.zip"
    big = b'{"cells": [], "x": "' + b"a" * (MAX + 10) + b'"}'
    src.write_bytes(_zip({
        "../../müllerjosé_1001_1_lab1_vae.ipynb": _nb("up"),
        "/etc/müllerjosé_1001_2_lab1_vae.ipynb": _nb("abs"),
        "oneilannemarie_1002_3_lab1_vae.ipynb": big,
        "bergzoëvander_1003_4_lab1_vae.ipynb": b"not json",
    }, links=[("müllerjosé_1001_5_lab1_vae.ipynb", "/work/main/solutions/lab1_vae/lab1_vae.ipynb")]))
    into = tmp_path / "x" / "submitted"
    entries = collect(src, LAB, into, roster, MAX)
    assert {e.outcome for e in entries} == {"refused"}, [(e.name, e.outcome) for e in entries]
    written = [p for p in tmp_path.rglob("*") if p.is_file() and p.name not in (src.name, "roster.csv", f".collect-{LAB}.csv")]
    assert all(p.is_relative_to(into / ".unmatched") for p in written), written   # nothing graded, nothing out
    why = {e.name: e.why for e in entries}
    assert "'..'" in why["../../müllerjosé_1001_1_lab1_vae.ipynb"]
    assert "absolute" in why["/etc/müllerjosé_1001_2_lab1_vae.ipynb"]
    assert "MiB" in why["oneilannemarie_1002_3_lab1_vae.ipynb"]
    assert "link" in why["müllerjosé_1001_5_lab1_vae.ipynb"]
    assert "not a notebook" in why["bergzoëvander_1003_4_lab1_vae.ipynb"]


def test_times_override_the_zip_and_a_folder_source_works(tmp_path, roster, capsys):
    folder = tmp_path / "unzipped"
    folder.mkdir()
    (folder / "müllerjosé_LATE_1001_7_lab1_vae.ipynb").write_bytes(_nb("jose"))
    (folder / "evil.ipynb").symlink_to("/etc/passwd")
    (tmp_path / "roster.csv").write_text(ROSTER, encoding="utf-8")
    (tmp_path / "times.csv").write_text("id,submitted_at\n1001,2026-10-02T05:12:00+02:00\n")
    into = tmp_path / "submitted"
    assert main(["collect", str(folder), "--lab", LAB, "--into", str(into), "--roster",
                 str(tmp_path / "roster.csv"), "--times", str(tmp_path / "times.csv")]) == 0
    assert (into / "jmuller" / LAB / "timestamp.txt").read_text().strip() == "2026-10-02 03:12:00.000000 UTC"
    printed = capsys.readouterr().out
    assert "1 collected" in printed and "refused: evil.ipynb" in printed
    with pytest.raises(SystemExit, match="offset"):
        (tmp_path / "bad.csv").write_text("id,submitted_at\n1001,2026-10-02T05:12:00\n")
        read_times(tmp_path / "bad.csv", roster)

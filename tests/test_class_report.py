"""The class report (autograder/insight/class_report.py) on real graded output: a few Lab 1 samples graded by
``genlab grade`` (the ``graded_class`` fixture). Each figure of the report is recounted here from ``results.json``
and the gradebook, by another route, and the page must be safe to open."""
from __future__ import annotations

import csv
import json
import re
import shutil
from collections import defaultdict

import pytest

from autograder.insight.class_report import write_class_report
from autograder.course.gradebook import totals
from genlab.catalog import bugs_for

pytestmark = pytest.mark.slow


def _rows(out):
    with (out / "class-report.csv").open() as f:
        return list(csv.DictReader(f))


def test_scores_are_the_gradebook_totals(graded_class):
    scores = {r["name"]: float(r["count"]) for r in _rows(graded_class) if r["kind"] == "score"}
    assert scores == {s: v for (s, lab), v in totals(f"sqlite:///{graded_class / 'gradebook.db'}").items()
                      if lab == "lab1_vae"}


def test_pass_rates_and_bug_frequencies_recounted_from_results(graded_class):
    results = json.loads((graded_class / "results.json").read_text())
    passed, diagnosed = defaultdict(int), defaultdict(set)
    for r in results:
        tampered = any(t["status"] == "tampered" for t in r["tests"])  # void verdicts: not counted as bugs
        for t in r["tests"]:
            passed[t["test"]] += t["status"] == "passed"
            for bug_id in [] if tampered else t["diagnosis"]:
                diagnosed[bug_id].add(r["student"])
    rows = _rows(graded_class)
    tests = {r["name"]: r for r in rows if r["kind"] == "test_passed"}
    for test, count in passed.items():
        assert (int(tests[test]["count"]), int(tests[test]["of"])) == (count, len(results)), test
    bugs = {r["name"]: r for r in rows if r["kind"] == "bug"}
    # every catalogued bug has a row, 0% included, with the function it belongs to
    assert {b.id: b.function for b in bugs_for("lab1_vae")} == {k: v["function"] for k, v in bugs.items()
                                                                if k in {b.id for b in bugs_for("lab1_vae")}}
    for bug_id, row in bugs.items():
        who = diagnosed.get(bug_id, set())
        assert int(row["count"]) == len(who) and set(filter(None, row["students"].split(";"))) == who, bug_id
    # the sample with the flipped KL is named, and is 1 student of the class
    assert bugs["kl_sign_flipped"]["students"] == "bug_kl_sign_flipped"
    assert float(bugs["kl_sign_flipped"]["percent"]) == round(100 / len(results), 1)


def test_grading_time_per_notebook(graded_class):
    results = {r["student"]: r["seconds"] for r in json.loads((graded_class / "results.json").read_text())}
    times = {r["name"]: float(r["count"]) for r in _rows(graded_class) if r["kind"] == "seconds"}
    assert times == pytest.approx(results) and all(v > 0 for v in times.values())


def test_page_is_static_and_escaped(graded_class):
    page = (graded_class / "class-report.html").read_text()
    assert "<script" not in page.lower() and "<img src=x" not in page  # the student named <img src=x ...>
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "Content-Security-Policy" in page
    assert not re.search(r"""(src|href)=["']?(https?:|//)""", page), "the page must not load anything"
    assert len(re.findall(r'src="data:image/png;base64,', page)) >= 4  # scores, pass rates, bugs, times


def test_sharded_results_combine(graded_class, tmp_path):
    """Two machines' results.json, each beside its own autograded notebooks, one gradebook: the report covers
    every student once, and is the single run's, item analysis, clusters and similar pairs included."""
    results = json.loads((graded_class / "results.json").read_text())
    half = len(results) // 2
    files = []
    for i, part in enumerate((results[:half], results[half:])):
        shard = tmp_path / f"shard{i}"
        for r in part:
            shutil.copytree(graded_class / "autograded" / r["student"], shard / "autograded" / r["student"])
        files.append(shard / "results.json")
        files[-1].write_text(json.dumps(part))
    (tmp_path / "gradebook.db").write_bytes((graded_class / "gradebook.db").read_bytes())
    write_class_report(tmp_path, results_files=files)
    rows = _rows(tmp_path)
    assert rows == _rows(graded_class)
    assert {r["kind"] for r in rows} >= {"item", "cluster", "similar_pair"}
    without_figures = [re.sub(r'src="data:image/png;base64,[^"]*"', "", (d / "class-report.html").read_text())
                       for d in (tmp_path, graded_class)]
    assert without_figures[0] == without_figures[1]


# -- the report and the feedback pages drawn at once (issue 45: they raced over autograded/) -----------------
def _report_that_lists_autograded(out, db_url=None):
    """write_class_report, first writing down which autograded notebooks exist as it starts (in a pool's
    process: this module is reached by name there, after the fork)."""
    (out / "seen-by-report.json").write_text(json.dumps(sorted(
        str(p.relative_to(out)) for p in (out / "autograded").glob("*/*/*.ipynb"))))
    return write_class_report(out, db_url)


def test_the_report_starts_after_every_autograded_notebook_is_written(tmp_path, monkeypatch):
    import nbformat

    from autograder.core.results import Result, Status
    from autograder.course import feedback
    from genlab.testing.notebook import LabNotebook

    root = feedback.Path(__file__).resolve().parents[1]
    lab = "lab1_vae"
    points = {t: spec["points"] for t, spec in LabNotebook.read(root / "solutions" / lab / f"{lab}.ipynb").tests.items()}
    notebook = nbformat.read(str(root / "labs" / lab / f"{lab}.ipynb"), as_version=4)
    results = []
    for student in ("ada", "bob", "cy"):
        r = Result.every_test(student, lab, points, Status.PASSED, "")
        r.notebook = notebook
        results.append(r)
    monkeypatch.setattr(feedback, "write_class_report", _report_that_lists_autograded)
    out = tmp_path / "out"
    out.mkdir()
    feedback.write_outputs(root, out, results, [lab], workers=2)   # two processes: the report beside the pages
    seen = json.loads((out / "seen-by-report.json").read_text())
    assert seen == [f"autograded/{s}/{lab}/{lab}.ipynb" for s in ("ada", "bob", "cy")], seen
    assert (out / "class-report.html").exists() and len(list((out / "feedback").glob("*/*/*.html"))) == 3

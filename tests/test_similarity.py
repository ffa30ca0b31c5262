"""Similar solutions (autograder/insight/similarity.py) on the class the ``graded_class`` fixture grades: the two students
with the same ``iwae_bound`` under renamed variables are listed, and no other pair: not the two copies of the
reference (boilerplate), not the students who share a bug but wrote it each in their own words."""
from __future__ import annotations

import csv

import pytest

import class_students
from autograder.insight.similarity import similar_pairs

pytestmark = pytest.mark.slow


def test_renamed_pair_listed_and_no_other(graded_class):
    with (graded_class / "class-report.csv").open() as f:
        pairs = [r for r in csv.DictReader(f) if r["kind"] == "similar_pair"]
    assert [set(r["students"].split(";")) for r in pairs] == [set(class_students.RENAMED)]
    assert float(pairs[0]["statistic"]) > 0.9
    page = (graded_class / "class-report.html").read_text()
    assert page.count("<mark>") >= 2 and "evidence to read, not a finding" in page


def test_renaming_does_not_hide_a_copy_and_boilerplate_is_left_out():
    own, renamed = (cells["iwae_bound"] for cells in class_students.RENAMED.values())
    given = "def iwae_bound(x, x_logits, z, mu, logvar):\n    raise NotImplementedError()\n"
    pairs = similar_pairs({"a": [own], "b": [renamed], "c": [given]}, [given])
    assert [(p.a, p.b) for p in pairs] == [("a", "b")] and min(pairs[0].similarity) > 0.9
    assert similar_pairs({"a": [own], "b": [renamed]}, [own]) == []   # all of it boilerplate: nothing to show

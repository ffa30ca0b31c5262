"""Item analysis (autograder/insight/items.py) in the class report, on results built here (no grading): a deliberately
broken test is flagged, one that rewards the weaker students is flagged, and good tests are not."""
from __future__ import annotations

import csv
import io
import math

import pytest

from autograder.insight.class_report import CSV_COLUMNS, render
from autograder.insight.items import analyse, point_biserial

LAB = "lab_items"   # no lab folder of that name: the report needs only the scores
GOOD = ["t_easy", "t_medium", "t_hard"]


def _class(n: int = 12):
    """n students of rising ability: student i passes the good tests a stronger student passes too; nobody
    passes ``t_broken`` (it checks something wrong); ``t_backwards`` is passed by the weakest half only."""
    scores = {}
    for i in range(n):
        ability = i / (n - 1)
        row = {"t_easy": ability >= 0.2, "t_medium": ability >= 0.45, "t_hard": ability >= 0.7,
               "t_broken": False, "t_backwards": ability < 0.5}
        scores[(f"s{i:02d}", LAB)] = {t: (2.0 if ok else 0.0, 2.0) for t, ok in row.items()}
    return scores


def _csv(rows):
    text = io.StringIO()
    writer = csv.writer(text)
    writer.writerow(CSV_COLUMNS)
    writer.writerows(rows)
    return list(csv.DictReader(io.StringIO(text.getvalue())))


def test_broken_and_backwards_tests_flagged():
    html, rows = render(_class(), {}, {})
    items = {r["name"]: r for r in _csv(rows) if r["kind"] == "item"}
    assert set(items) == set(GOOD) | {"t_broken", "t_backwards"}
    assert items["t_broken"]["detail"] == "nearly everyone fails" and items["t_broken"]["count"] == "0"
    # nobody passed: no variance, so no correlation (an empty cell, not 0) and no discrimination flag
    assert items["t_broken"]["statistic"] == ""
    assert "negative discrimination" in items["t_backwards"]["detail"]
    assert float(items["t_backwards"]["statistic"]) < -0.5
    for t in GOOD:
        assert items[t]["detail"] == "" and float(items[t]["statistic"]) > 0, items[t]
    assert float(items["t_easy"]["percent"]) > float(items["t_hard"]["percent"])  # difficulty = pass rate
    assert "Item analysis per test" in html and "none (no variance)" in html


def test_point_biserial_is_pearson_against_the_rest():
    scores = _class()
    students = sorted(s for s, _ in scores)
    item = [1.0 if scores[(s, LAB)]["t_medium"][0] else 0.0 for s in students]
    rest = [sum(v for t, (v, _) in scores[(s, LAB)].items() if t != "t_medium") for s in students]
    n = len(item)
    mx, my = sum(item) / n, sum(rest) / n
    r = sum((a - mx) * (b - my) for a, b in zip(item, rest)) / math.sqrt(
        sum((a - mx) ** 2 for a in item) * sum((b - my) ** 2 for b in rest))
    found = {it.test: it for it in analyse(list(scores[(students[0], LAB)]), students,
                                           lambda s, t: scores[(s, LAB)][t])}
    assert found["t_medium"].discrimination == pytest.approx(r)
    assert point_biserial([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]) is None   # no variance in the item
    assert point_biserial([0.0, 1.0, 1.0], [2.0, 2.0, 2.0]) is None   # no variance in the rest


def test_no_flags_on_a_handful_of_students():
    html, rows = render({k: v for k, v in list(_class().items())[:3]}, {}, {})
    assert all(r["detail"] == "" for r in _csv(rows) if r["kind"] == "item")

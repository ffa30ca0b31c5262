"""Item analysis: how each test of a lab behaves over the class, to find a bad test before students do.

For each test (an "item", in the language of classical test theory, as PrairieLearn reports per question):

- **difficulty**: the pass rate, the share of students graded on it who earned its points;
- **discrimination**: the point-biserial correlation between the test's score (1 passed, 0 not) and the rest of
  the student's total for that lab (the total minus this test's points, so the test is not correlated with
  itself). A good test is passed more by students who do well on the rest: r > 0. Where either side has no
  variance (everyone passed, everyone failed, or every rest total is the same) the correlation is undefined:
  it is reported as none (an empty cell), never as 0, and raises no discrimination flag;
- **flags**: ``nearly everyone fails`` (pass rate at most ``FAIL_RATE``: the test may be broken, or the lab's
  text may not say what it checks) and ``negative discrimination`` (r < ``NEGATIVE_R``: the students who do
  well elsewhere fail it more often; a test that rewards a mistake, or depends on something else).

Neither flag is a verdict: each points to a test worth reading again. With fewer than ``MIN_STUDENTS`` students
graded on a test no flag is raised (a pass rate of 0 of 2 says little).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

FAIL_RATE = 0.10        # "nearly everyone fails": at most 10% pass
NEGATIVE_R = -0.05      # below this, the discrimination counts as negative (not a rounding of 0)
MIN_STUDENTS = 5        # fewer graded students: no flag


@dataclass(frozen=True)
class Item:
    test: str
    passed: int
    graded: int
    difficulty: float | None          # pass rate in [0, 1]; None when nobody was graded on it
    discrimination: float | None      # point-biserial r; None when undefined (no variance)
    flags: tuple[str, ...]


def point_biserial(item: list[float], rest: list[float]) -> float | None:
    """Pearson's r between a 0/1 item score and the rest totals (the point-biserial correlation); None when
    either has no variance, where r is undefined."""
    n = len(item)
    if n < 2:
        return None
    mx, my = sum(item) / n, sum(rest) / n
    sxy = sum((a - mx) * (b - my) for a, b in zip(item, rest))
    sxx, syy = sum((a - mx) ** 2 for a in item), sum((b - my) ** 2 for b in rest)
    if sxx <= 1e-12 or syy <= 1e-12:
        return None
    return sxy / math.sqrt(sxx * syy)


def analyse(tests: list[str], students: list[str], score) -> list[Item]:
    """One :class:`Item` per test. ``score(student, test)`` -> (earned, max) or None when not graded."""
    items = []
    for t in tests:
        xs, rests = [], []
        for s in students:
            mine = score(s, t)
            if mine is None or mine[1] <= 0:
                continue
            others = [score(s, u) for u in tests if u != t]
            xs.append(1.0 if mine[0] >= mine[1] else 0.0)
            rests.append(sum(o[0] for o in others if o is not None))
        passed, graded = int(sum(xs)), len(xs)
        difficulty = passed / graded if graded else None
        r = point_biserial(xs, rests)
        flags = []
        if graded >= MIN_STUDENTS and difficulty is not None and difficulty <= FAIL_RATE:
            flags.append("nearly everyone fails")
        if graded >= MIN_STUDENTS and r is not None and r < NEGATIVE_R:
            flags.append("negative discrimination")
        items.append(Item(t, passed, graded, difficulty, r, tuple(flags)))
    return items

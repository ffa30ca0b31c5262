"""A generated class for measuring the class report at scale (no grading): scores, results.json entries and
solution cells of N students for every lab, shaped like what a grading run leaves behind.

Each student has an ability; each test passes with a probability that grows with it. A function's failure is
one of a few mistakes (a catalogued bug, named as the grader would, or one of ``UNKNOWN`` uncatalogued
behaviours), and its solution cell is the reference's with lines of the student's own; ``COPIES`` pairs per
lab hand in the same cell under renamed variables.
"""
from __future__ import annotations

import random
import re

from autograder.insight.class_report import ROOT, lab_info
from autograder.core.labs import LabFolder, lab_ids
from autograder.release.sample_submissions import reference_sources
from genlab.catalog import bugs_for
from genlab.testing.notebook import LabNotebook

UNKNOWN = [{"scaled by 2": 3}, {"negated": 2, "gradient [0] negated": 2}, {"not averaged over dim -1": 3},
           {"dtype differs": 2}, {"other": 4}]
COPIES = 10
OPS = ["sum", "mean", "exp", "log1p", "tanh", "sigmoid", "abs", "sqrt", "clamp_min"]


def _expression(rng: random.Random, depth: int = 2) -> str:
    """A random expression: its shape (operators, calls, nesting) differs from student to student, as names
    alone do not (the similarity check ignores names)."""
    if depth == 0 or rng.random() < 0.3:
        return rng.choice([f"x{rng.randrange(9)}", f"{rng.random():.{rng.randrange(1, 4)}f}", str(rng.randrange(100))])
    form = rng.randrange(4)
    if form == 0:
        return f"({_expression(rng, depth - 1)} {rng.choice('+-*/')} {_expression(rng, depth - 1)})"
    if form == 1:
        return f"torch.{rng.choice(OPS)}({_expression(rng, depth - 1)})"
    if form == 2:
        return f"{_expression(rng, depth - 1)}[{rng.randrange(4)}:{rng.randrange(4, 9)}]"
    return f"{_expression(rng, depth - 1)}.sum(dim={rng.randrange(-2, 2)}, keepdim={rng.random() < 0.5})"


def _own_lines(rng: random.Random, n: int) -> str:
    """Lines a student might write, each different."""
    return "".join(f"    x{i} = {_expression(rng, 3)}\n" for i in range(n))


def generate(n_students: int = 300, seed: int = 0, planted: list | None = None):
    """(scores, details, sources) as :func:`autograder.insight.class_report.render` takes them; ``planted`` gets each
    (lab, student, their renamed copy) whose copied cells hold code of the student's own."""
    rng = random.Random(seed)
    scores, details, sources = {}, {}, {}
    for lab in lab_ids(ROOT):
        folder = LabFolder(ROOT, lab)
        tests = LabNotebook.read(folder.source).tests
        info = lab_info(lab)
        reference = reference_sources(folder)
        bugs = {}
        for b in bugs_for(lab):
            bugs.setdefault(b.function, []).append(b.id)
        copied = {}
        for i in range(n_students):
            student = f"student{i:03d}"
            ability = rng.random()
            fails = {f for f in sorted(set(info.tests_of.values())) if rng.random() > 0.4 + 0.6 * ability}
            mistake = {f: rng.randrange(len(UNKNOWN) + len(bugs.get(f, []))) for f in sorted(fails)}
            entry_tests, behaviour = [], {}
            for t, spec in tests.items():
                f = spec["function"]
                failed = f in fails and rng.random() < 0.8
                known = mistake.get(f, 0) >= len(UNKNOWN)
                entry_tests.append({"test": t, "status": "failed" if failed else "passed",
                                    "score": 0.0 if failed else spec["points"], "max_score": spec["points"],
                                    "message": "expected ..., got ..." if failed else "",
                                    "diagnosis": [bugs[f][mistake[f] - len(UNKNOWN)]] if failed and known else [],
                                    "seconds": 0.1})
            for f in fails:
                if mistake[f] < len(UNKNOWN):
                    behaviour[f] = {"calls": 8, "relations": {"equal": 2, **UNKNOWN[mistake[f]]}}
            scores[(student, lab)] = {t["test"]: (t["score"], t["max_score"]) for t in entry_tests}
            details[(student, lab)] = {"student": student, "lab": lab, "seconds": rng.uniform(20, 90),
                                       "phases": {}, "notes": [], "evidence": [], "tests": entry_tests,
                                       "behaviour": behaviour}
            cells = dict(reference)
            for f in sorted(fails & set(cells)):
                cells[f] = cells[f] + _own_lines(rng, 4)
            if i % (n_students // COPIES or 1) == 1 and copied.get("cells"):  # a renamed copy of the last one
                cells = {k: re.sub(r"\bx(\d)\b", r"renamed_\1", v) for k, v in copied["cells"].items()}
                if planted is not None and cells != reference and copied["cells"] != reference:
                    planted.append((lab, copied["student"], student))
            elif i % (n_students // COPIES or 1) == 0:
                copied.update(cells=cells, student=student)
            sources[(student, lab)] = cells
    return scores, details, sources

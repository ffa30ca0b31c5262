"""The audit's fixed subset for ``make test``: for each assertion that alone catches some mutant, that mutant.

A whole ``genlab audit`` takes minutes; ``make test`` must notice in seconds when a test is weakened. From a
full audit, :func:`choose` keeps *sentinels*: a mutant, the one test of its function that kills it, and the
line of that test where it fails, such that

- no other test of the function kills the mutant, and
- the test with the statement at that line deleted lets the mutant pass.

So each sentinel stands for one assertion that is the only thing between that bug and full marks. A test
none of whose assertions is alone in that way gets one sentinel that the test as a whole alone catches
(line 0), so that gutting or deleting the test is noticed too.
``solutions/<lab>/sentinels.json`` lists them (``genlab audit LAB --write-sentinels``, at most
``PER_TEST`` per test), and ``tests/test_audit.py`` checks in ``make test`` that each is still killed by its
test: delete or weaken such an assertion, and the suite fails, naming the test, the line and the mutant.
A mutant is found again by its description and its diff, so an edit of the reference that changes it
fails the check with the instruction to write the sentinels again.
"""
from __future__ import annotations

import ast
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from autograder.quality.audit import KILLED, Auditor, FunctionReport, compile_cell
from autograder.quality.mutants import mutants

PER_TEST = 2          # sentinels kept per test (spread over its assertions)
FILE = "sentinels.json"


@dataclass(frozen=True)
class Sentinel:
    function: str
    test: str
    line: int             # the line of the test's source where the mutant fails
    statement: str        # that statement, as written (for the message)
    description: str      # the mutant, as the audit names it
    diff: str


def delete_statement(source: str, line: int) -> str | None:
    """``source`` with the innermost simple statement that spans ``line`` deleted (None: no such statement)."""
    tree = ast.parse(source)
    best = None
    for node in ast.walk(tree):
        for name in ("body", "orelse", "finalbody"):
            body = getattr(node, name, None)
            if not isinstance(body, list):
                continue
            for i, stmt in enumerate(body):
                if isinstance(stmt, ast.stmt) and stmt.lineno <= line <= (stmt.end_lineno or stmt.lineno) and \
                        not hasattr(stmt, "body"):
                    best = (body, i)
    if best is None:
        return None
    body, i = best
    del body[i]
    if not body:
        body.append(ast.Pass())
    return ast.unparse(ast.fix_missing_locations(tree))


def _statement(source: str, line: int) -> str:
    lines = source.splitlines()
    return lines[line - 1].strip() if 0 < line <= len(lines) else ""


def _passes(auditor: Auditor, function: str, fn, tests: list[str]) -> bool:
    return all(r[1] == "passed" for r in auditor.run_tests(function, fn, tests, stop_at_first=True))


def choose(auditor: Auditor, report: FunctionReport, per_test: int = PER_TEST) -> list[Sentinel]:
    """The sentinels of one function, from its full audit ``report`` (mutants tried in the audit's order):
    first those one assertion alone catches (``line`` > 0), then, for a test that has none, one mutant that
    this test alone catches (``line`` 0: the whole test stands for it)."""
    source = auditor.lab.source.solutions[report.function]
    by_index = {m.index: m for m in mutants(source)}
    chosen: dict[str, list[Sentinel]] = {t: [] for t in report.tests}
    whole_test: dict[str, Sentinel] = {}
    for result in report.mutants:
        test, line = result.killed_by, result.killed_at
        if result.status != KILLED or not line or test not in chosen or len(chosen[test]) >= per_test or \
                any(s.line == line for s in chosen[test]):
            continue
        mutant = by_index[result.index]
        fn = compile_cell(mutant.source, report.function, auditor.reference_ns)
        others = [t for t in report.tests if t != test and t not in report.baseline_failures]
        if not _passes(auditor, report.function, fn, others):
            continue   # another test catches it too: weakening this one alone would not let it through
        sentinel = Sentinel(report.function, test, 0, "", mutant.description, mutant.diff)
        whole_test.setdefault(test, sentinel)
        weakened = delete_statement(auditor.tests[test]["source"], line)
        alone = weakened and Auditor(auditor.lab, tests={**auditor.tests, test: dict(auditor.tests[test],
                                                                                     source=weakened)},
                                     test_timeout_s=auditor.test_timeout_s)
        if alone and _passes(alone, report.function, fn, [test]):   # else a later line of the test catches it
            chosen[test].append(Sentinel(report.function, test, line, _statement(auditor.tests[test]["source"], line),
                                         mutant.description, mutant.diff))
    for test, found in chosen.items():
        if not found and test in whole_test:
            found.append(whole_test[test])
    return [s for t in report.tests for s in chosen[t]]


def write(path: Path, sentinels: list[Sentinel]) -> None:
    path.write_text(json.dumps([asdict(s) for s in sentinels], indent=1) + "\n")


def read(path: Path) -> list[Sentinel]:
    return [Sentinel(**d) for d in json.loads(path.read_text())] if path.exists() else []


def survivors(auditor: Auditor, sentinels: list[Sentinel]) -> list[str]:
    """What is wrong with each sentinel that its test no longer kills (or that no longer exists)."""
    problems, of_function = [], {}
    for s in sentinels:
        if s.function not in of_function:   # each function's mutants written once, not once per sentinel
            of_function[s.function] = list(mutants(auditor.lab.source.solutions[s.function]))
        mutant = next((m for m in of_function[s.function] if m.description == s.description and m.diff == s.diff),
                      None)
        if mutant is None:
            problems.append(f"{s.function}: the mutant '{s.description}' no longer exists (the reference changed): "
                            f"write the sentinels again with `genlab audit {auditor.lab.id} --write-sentinels`")
            continue
        if s.test not in auditor.tests:
            problems.append(f"{s.function}: the test {s.test} is gone; it was the only one to catch "
                            f"'{s.description}'")
            continue
        fn = compile_cell(mutant.source, s.function, auditor.reference_ns)
        if _passes(auditor, s.function, fn, [s.test]):
            what = f"its line {s.line} (`{s.statement[:80]}`) alone" if s.line else "it alone, of all the tests,"
            problems.append(f"{s.test} no longer catches the mutant '{s.description}' of {s.function}, which "
                            f"{what} used to catch:\n{s.diff}")
    return problems

"""`genlab audit`: the mutation operators, and that the audit kills mutants and notices weakened tests."""
from __future__ import annotations

import ast
import json
from pathlib import Path

import nbformat
import pytest

from autograder.quality.audit import EQUIVALENT, KILLED, SURVIVED, TIMEOUT, Auditor, audit_function, equivalence, probes
from autograder.quality.mutants import mutants, normalized

ROOT = Path(__file__).resolve().parents[1]

TINY = '''def f(x, y, p):
    """doc 0"""
    z = x.sum(dim=-1) + 1
    with torch.no_grad():
        z += y.T.detach()
    w = torch.zeros(3, dtype=torch.float64)
    if p < 0.5:
        z.add_(w)
    return torch.where(x > 0, z, y) * (1 - p)
'''


def descriptions(source):
    return [(m.operator, m.description) for m in mutants(source)]


def test_operators_make_the_expected_mutants_in_a_fixed_order():
    found = descriptions(TINY)
    assert found == descriptions(TINY)  # deterministic
    expected = [
        ("arith", "`+` -> `-`"), ("arith", "`*` -> `/`"), ("arith", "`+=` -> `-=`"),
        ("compare", "`<` -> `<=`"), ("compare", "`<` -> `>`"), ("compare", "`>` -> `>=`"),
        ("constant", "`1` -> `0`"), ("constant", "`0.5` -> `1.0`"), ("constant", "`3` -> `4`"),
        ("dim", "`dim=-1` -> `dim=-2`"), ("dim", "`dim=-1` -> `dim=0`"), ("dim", "`keepdim=True` added to `sum`"),
        ("transpose", "`.T` dropped"),
        ("keyword", "`dtype=` dropped from `zeros`"),
        ("cast", "`.detach()` removed"), ("cast", "`.double()` added"),
        ("no_grad", "`with torch.no_grad():` removed"),
        ("inplace", "`.add_(...)` -> `.add(...)`"), ("inplace", "`x += y` -> `x = x + y`"),
        ("swap_args", "arguments 2 and 3 of `where` swapped"),
        ("prob", "`p` -> `1 - p`"), ("prob", "`1 - p` -> `p`"),
    ]
    for item in expected:
        assert item in found, item
    assert any(op == "delete" and "z.add_(w)" in d for op, d in found)
    # the docstring is never mutated, and every mutant compiles and differs from the reference
    all_mutants = list(mutants(TINY))
    assert all('"""doc 0"""' in m.source for m in all_mutants)
    assert len({m.source for m in all_mutants}) == len(all_mutants)
    for m in all_mutants:
        compile(m.source, "<m>", "exec")
        assert m.source != normalized(TINY) and m.diff.startswith("--- reference")
    # one change each: the diff changes one statement (a removed `with` dedents its body)
    mutant = next(m for m in all_mutants if m.description == "`.T` dropped")
    assert [l for l in mutant.diff.splitlines() if l[:1] in "+-" and l[:3] not in ("+++", "---")] == \
        ["-        z += y.T.detach()", "+        z += y.detach()"]


def test_each_operator_alone():
    assert ("transpose", "`.mT` added to the right operand of `@`") in descriptions("def f(a, b):\n    return a @ b")
    assert ("transpose", "`.transpose(...)` dropped") in descriptions("def f(a):\n    return a.transpose(0, 1)")
    assert ("inplace", "`.add(...)` -> `.add_(...)`") in descriptions("def f(a, b):\n    return a.add(b)")
    assert ("inplace", "`x = x + y` -> `x += y`") in descriptions("def f(a, b):\n    a = a + b\n    return a")
    assert ("no_grad", "`@torch.no_grad()` removed") in descriptions("@torch.no_grad()\ndef f(a):\n    return a")
    # keepdim flipped: the same code as the constant `True` -> `False`, so kept once, under the first operator
    assert sum("keepdim=False" in m.source for m in mutants("def f(a):\n    return a.mean(-1, keepdim=True)")) == 1
    from autograder.quality.mutants import Dim

    assert [m.description for m in mutants("def f(a):\n    return a.mean(-1, keepdim=True)", operators=[Dim])] == \
        ["`keepdim=True` -> `keepdim=False`", "dim `-1` -> `-2` in `mean`", "dim `-1` -> `0` in `mean`"]
    assert ("dim", "dim `-1` -> `-2` in `softmax`") in descriptions("def f(a):\n    return F.softmax(a, -1)")
    assert ("keyword", "`generator=` dropped from `randn`") in descriptions(
        "def f(g):\n    return torch.randn(3, generator=g)")
    # deleting the only statement leaves a valid body
    only = list(mutants("def f(a):\n    return a"))
    assert [m.operator for m in only] == ["cast"] * 3 + ["delete"] and only[-1].source.endswith("pass")


# -- a tiny lab, written here -----------------------------------------------------------------------------------
def _cell(source, grade_id, solution=False, grade=False, points=0):
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["nbgrader"] = {"grade_id": grade_id, "solution": solution, "grade": grade, "locked": not solution,
                                 "points": points, "schema_version": 3}
    return cell


def tiny_lab(tmp_path, solution, tests):
    from autograder.core.labs import LabFolder
    from autograder.grading.pipeline import Lab
    from genlab.testing.notebook import LabNotebook

    folder = tmp_path / "solutions" / "tinylab"
    folder.mkdir(parents=True)
    name = solution.split("def ", 1)[1].split("(")[0]
    nb = nbformat.v4.new_notebook()
    nb.cells = [_cell("import torch\nfrom genlab import check_close", "setup"), _cell(solution, name, solution=True)]
    nb.cells += [_cell(src, test_id, grade=True, points=1) for test_id, src in tests.items()]
    nbformat.write(nb, str(folder / "tinylab.ipynb"))
    return Lab(LabFolder(tmp_path, "tinylab"), LabNotebook.read(folder / "tinylab.ipynb"), None)


SCALE = "def scale(x, p):\n    return x * (1 - p)\n"
SCALE_TEST = "check_close(scale(torch.ones(3), 0.25), torch.full((3,), 0.75))\n" \
             "check_close(scale(torch.arange(3.0), 0.5), torch.arange(3.0) / 2)"


def test_tiny_lab_kills_mutants_and_a_trivial_test_lets_them_survive(tmp_path):
    lab = tiny_lab(tmp_path, SCALE, {"scale_value": SCALE_TEST, "scale_runs": "scale(torch.ones(3), 0.25)"})
    strong = audit_function(Auditor(lab, tests={"scale_value": lab.tests["scale_value"]}), "scale")
    # check_close compares values only: `.detach()`/`.double()` added are the casts it lets through; and the test
    # never reads its fresh input again, so the argument written in place (x.mul_) goes unseen too
    assert all(m.status == KILLED for m in strong.mutants if m.operator not in ("cast", "write_arg")) and \
        strong.count(KILLED) >= 5
    assert {m.description for m in strong.mutants if m.status == SURVIVED} <= {
        "`.detach()` added", "`.double()` added", "`x * (1 - p)` -> `x.mul_(1 - p)` (the argument `x` written in place)"}
    weak = audit_function(Auditor(lab, tests={"scale_runs": lab.tests["scale_runs"]}), "scale")
    assert weak.count(KILLED) == 0 and weak.count(SURVIVED) >= 6 and weak.score == 0.0 < strong.score
    assert all(m.diff for m in weak.mutants if m.status == SURVIVED)


def test_a_mutant_that_loops_is_a_timeout(tmp_path):
    loop = "def countdown(n):\n    while n > 0:\n        n -= 1\n    return n\n"
    lab = tiny_lab(tmp_path, loop, {"countdown_value": "assert countdown(3) == 0 and countdown(0) == 0"})
    report = audit_function(Auditor(lab, test_timeout_s=0.3, timeout_factor=1.0), "countdown")
    timeouts = [m for m in report.mutants if m.status == TIMEOUT]
    assert any("`-=` -> `+=`" in m.description for m in timeouts)
    assert report.score == 1.0   # a timeout counts as caught


def test_a_function_whose_tests_cannot_run_here_is_skipped_not_scored(tmp_path):
    lab = tiny_lab(tmp_path, SCALE, {"scale_value": "check_close(scale(trained_state, 0.5), trained_state / 2)"})
    report = audit_function(Auditor(lab), "scale")
    assert report.skipped and report.mutants == [] and report.score is None
    assert "NameError" in report.baseline_failures["scale_value"]


def test_equivalence_compares_values_dtypes_gradients_and_inputs():
    import torch

    def ref(x):
        return x * 2
    calls = [type("C", (), {"kind": "call", "args": (torch.randn(4, 3),), "kwargs": {}})()]
    inputs = probes(calls)
    assert len(inputs) == 3
    assert equivalence(lambda x: x + x, ref, inputs) is None
    assert "dtype" in equivalence(lambda x: (x * 2).double(), ref, inputs)
    assert "requires_grad" in equivalence(lambda x: (x * 2).detach(), ref, inputs)
    assert "inputs after" in equivalence(lambda x: x.mul_(2), ref, inputs)
    assert equivalence(lambda x: x * 3, ref, inputs) is not None


# -- one real function: lab1_vae's gaussian_kl ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def vae_lab():
    from autograder.grading.pipeline import Lab

    return Lab.load(ROOT, "lab1_vae")


def _without_checks(source: str) -> str:
    """The test with its assertions deleted: `assert ...` gone, `check_*(a, b, ...)` (and `genlab.check_*`, the
    generated inputs' `genlab.check_generated`) reduced to `a`."""
    class Strip(ast.NodeTransformer):
        def visit_Assert(self, node):
            return None

        def visit_Expr(self, node):
            call = node.value
            name = getattr(getattr(call, "func", None), "id", None) or getattr(getattr(call, "func", None), "attr", "")
            if isinstance(call, ast.Call) and name.startswith("check_"):
                return ast.Expr(call.args[0]) if call.args else None
            return node
    tree = ast.fix_missing_locations(Strip().visit(ast.parse(source)))
    return ast.unparse(tree) or "pass"


def test_gaussian_kl_mutants_are_killed_and_weakened_tests_lower_the_score(vae_lab, tmp_path):
    full = audit_function(Auditor(vae_lab), "gaussian_kl")
    assert not full.baseline_failures
    assert full.count(KILLED) >= 10 and full.score >= 0.9
    assert len(full.tests) == 3

    # the same tests with their assertions deleted, in memory: the audit must see it
    weakened = {t: dict(spec, source=_without_checks(spec["source"])) for t, spec in vae_lab.tests.items()}
    assert "check_close" not in weakened["gaussian_kl_value"]["source"]
    weak = audit_function(Auditor(vae_lab, tests=weakened), "gaussian_kl")
    assert weak.count(SURVIVED) > full.count(SURVIVED) and weak.score < full.score - 0.3
    survivors = [m for m in weak.mutants if m.status == SURVIVED]
    assert any("`+` -> `-`" in m.description for m in survivors)
    assert all(m.status != EQUIVALENT or "`+` -> `-`" not in m.description for m in weak.mutants)

    # the report as JSON, through the command line
    from autograder.cli import main

    out = tmp_path / "audit.json"
    assert main(["--root", str(ROOT), "audit", "lab1_vae", "--function", "gaussian_kl", "--max-mutants", "4",
                 "--quiet", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report[0]["function"] == "gaussian_kl" and len(report[0]["mutants"]) == 4
    assert report[0]["generated"] == full.generated


# -- the fixed subset that `make test` runs: sentinels (autograder/quality/sentinels.py) ---------------------------------
from autograder.quality import sentinels  # noqa: E402
from autograder.core.labs import lab_ids  # noqa: E402


@pytest.mark.parametrize("lab_id", lab_ids(ROOT))
def test_every_sentinel_is_still_caught_by_its_test(lab_id):
    """Each assertion that alone catches some mutant (per the last full audit) still does."""
    from autograder.grading.pipeline import Lab

    chosen = sentinels.read(ROOT / "solutions" / lab_id / sentinels.FILE)
    assert chosen, f"{lab_id} has no sentinels: run `genlab audit {lab_id} --write-sentinels`"
    lab = Lab.load(ROOT, lab_id)
    graded = {t["function"] for t in lab.tests.values()}
    problems = sentinels.survivors(Auditor(lab), chosen)
    assert not problems, "\n\n".join(problems)
    assert {s.function for s in chosen} <= graded


def _hidden_block(source: str) -> range:
    lines = source.splitlines()
    begin = next(i for i, l in enumerate(lines, 1) if "BEGIN HIDDEN TESTS" in l)
    end = next(i for i, l in enumerate(lines, 1) if "END HIDDEN TESTS" in l)
    return range(begin + 1, end)


def test_deleting_a_hidden_assertion_or_gutting_a_test_fails_the_subset(vae_lab):
    chosen = sentinels.read(ROOT / "solutions" / "lab1_vae" / sentinels.FILE)
    hidden = [s for s in chosen if s.line and s.line in _hidden_block(vae_lab.tests[s.test]["source"])]
    assert hidden, "lab1_vae should have a sentinel on a hidden assertion"
    s = hidden[0]
    spec = vae_lab.tests[s.test]
    weakened = sentinels.delete_statement(spec["source"], s.line)
    assert s.statement.split("(")[0] in spec["source"].splitlines()[s.line - 1]
    problems = sentinels.survivors(Auditor(vae_lab, tests={**vae_lab.tests, s.test: dict(spec, source=weakened)}),
                                   chosen)
    assert len(problems) >= 1 and any(s.test in p and s.description in p for p in problems)
    # the untouched tests pass the same check
    assert sentinels.survivors(Auditor(vae_lab), chosen) == []
    # a test reduced to nothing is noticed too
    whole = next(x for x in chosen if x.test != s.test)
    gutted = {**vae_lab.tests, whole.test: dict(vae_lab.tests[whole.test], source="pass")}
    assert any(whole.test in p for p in sentinels.survivors(Auditor(vae_lab, tests=gutted), chosen))


def test_delete_statement_removes_one_simple_statement():
    src = "for i in range(2):\n    a = i\n    assert a >= 0, 'x'\nb = 1\n"
    assert sentinels.delete_statement(src, 3) == "for i in range(2):\n    a = i\nb = 1"
    assert sentinels.delete_statement("if x:\n    assert y\n", 2) == "if x:\n    pass"
    assert sentinels.delete_statement("x = 1\n", 5) is None


# -- what the lab's text leaves free, class probes, covariance probes ------------------------------------------
def test_what_the_text_leaves_free_is_allowed_not_survived():
    import torch

    from autograder.quality.audit import equivalence, probes

    def ref(x):
        return x * 2
    inputs = probes([type("C", (), {"kind": "call", "args": (torch.randn(4, 3, dtype=torch.float64),),
                                    "kwargs": {}})()])
    detached_ = lambda x: (x * 2).detach()  # noqa: E731
    as_float = lambda x: (x * 2).float()  # noqa: E731
    assert equivalence(detached_, ref, inputs) is not None
    assert equivalence(detached_, ref, inputs, free=frozenset({"gradients"})) is None
    assert equivalence(as_float, ref, inputs) is not None
    assert equivalence(as_float, ref, inputs, free=frozenset({"dtype"})) is None
    assert equivalence(lambda x: x * 3, ref, inputs, free=frozenset({"gradients", "dtype"})) is not None
    assert equivalence(lambda x: (x * 2).mul_(1.001), ref, inputs, free=frozenset({"dtype"})) is not None
    # float64 out, float32 inside: (x + 100) - 100 rounds x to about 4e-6
    shifted = lambda x: (x + 100) - 100  # noqa: E731
    in_float32 = lambda x: ((x.float() + 100) - 100).double()  # noqa: E731
    assert equivalence(in_float32, shifted, inputs, free=frozenset({"dtype"})) is not None
    assert equivalence(in_float32, shifted, inputs, free=frozenset({"precision"})) is None


def test_a_class_is_probed_as_the_tests_built_and_called_it():
    import torch
    from torch import nn

    from autograder.quality.audit import equivalence, module_probes, recording_class

    class Ref(nn.Module):
        def __init__(self, d, p=0.0):
            super().__init__()
            self.lin, self.p = nn.Linear(d, d), p

        def forward(self, x):
            return nn.functional.dropout(self.lin(x), self.p, self.training)

    class Detached(Ref):
        def forward(self, x):
            return super().forward(x).detach()

    class DefaultDropout(Ref):
        def __init__(self, d, p=0.5):
            super().__init__(d, p)

    log = []
    recording = recording_class(Ref, log)
    m = recording(4)
    assert isinstance(m, Ref) and type(m).__name__ == "Ref"
    m(torch.randn(2, 4))
    assert len(log) == 1 and log[0]["args"] == (4,) and log[0]["forward"][0][0][0].shape == (2, 4)
    probes_ = module_probes(log)
    assert equivalence(Ref, Ref, probes_) is None
    assert "gradients" in equivalence(Detached, Ref, probes_) or "requires_grad" in equivalence(Detached, Ref, probes_)
    assert equivalence(Detached, Ref, probes_, free=frozenset({"gradients"})) is None
    assert "training mode" in equivalence(DefaultDropout, Ref, probes_)


def test_random_probes_keep_a_covariance_a_covariance():
    import torch

    from autograder.quality.audit import _is_covariance, _random_like

    a = torch.randn(5, 8, dtype=torch.float64)
    cov = a @ a.T / 8
    assert _is_covariance(cov) and not _is_covariance(torch.randn(5, 5)) and not _is_covariance(torch.randn(5, 3))
    r = _random_like(cov, torch.Generator().manual_seed(0))
    assert _is_covariance(r) and not torch.allclose(r, cov)


def test_the_table_of_what_is_free_is_read_and_checked(tmp_path):
    from genlab.testing.notebook import LabNotebook

    def lab_with(table):
        nb = nbformat.v4.new_notebook()
        cell = nbformat.v4.new_markdown_cell(table)
        cell.metadata["nbgrader"] = {"grade_id": "what_the_tests_check", "locked": True, "solution": False,
                                     "grade": False, "schema_version": 3}
        nb.cells = [cell]
        path = tmp_path / "t.ipynb"
        nbformat.write(nb, str(path))
        return LabNotebook.read(path)
    head = "| function | the tests check | left free |\n|---|---|---|\n"
    rows = lab_with(head + "| `f` | values | **gradients, dtype.** and the error text |\n"
                           "| `g` | a \\| b | **nothing.** |\n").spec_table
    assert rows["f"].freedoms == {"gradients", "dtype"} and rows["g"].freedoms == frozenset()
    with pytest.raises(ValueError, match="unknown freedom"):
        lab_with(head + "| `f` | values | **speed.** |\n").spec_table
    with pytest.raises(ValueError, match="bold list"):
        lab_with(head + "| `f` | values | gradients |\n").spec_table


@pytest.mark.parametrize("lab_id", lab_ids(ROOT))
def test_each_lab_states_what_each_function_is_tested_on_and_what_is_free(lab_id):
    from autograder.core.labs import LabFolder
    from genlab.testing.notebook import LabNotebook

    source = LabNotebook.read(LabFolder(ROOT, lab_id).source)
    graded = {t["function"] for t in source.tests.values() if t["function"]}
    table = source.spec_table
    assert set(table) == graded, f"{lab_id}: the table lists {sorted(table)}, the graded functions are {sorted(graded)}"
    assert all(row.checked for row in table.values())
    # the student reads the same table
    assert LabNotebook.read(ROOT / "labs" / lab_id / f"{lab_id}.ipynb").spec_table == table


# -- the in-process audit gives the verdicts of the real grader ----------------------------------------------------
@pytest.mark.slow
def test_the_in_process_audit_gives_the_verdicts_of_the_grader(tmp_path):
    """A sample of mutants (per function: the first the audit finds killed and the first it finds passing),
    each handed in as a student's notebook and graded by `genlab grade` in a sandboxed kernel: every test
    passes or fails there as it does in process. Timing tests are left out: their verdicts are ratios of
    times measured in two different ways (tests/test_remote_timing.py covers the grader's)."""
    import csv
    import sys

    import grading_run

    from autograder.quality.audit import compile_cell
    from autograder.core.labs import LabFolder
    from autograder.grading.pipeline import Lab
    from autograder.release.sample_submissions import write

    expected = {}
    for lab_id, functions in (("lab1_vae", ("gaussian_kl", "negative_elbo")), ("lab2_diffusion", ("q_sample",))):
        lab, folder = Lab.load(ROOT, lab_id), LabFolder(ROOT, lab_id)
        auditor = Auditor(lab)
        for function in functions:
            tests = [t for t in auditor.tests_of(function) if not t.endswith("_performance")]
            killed, passing = [], []
            for m in mutants(lab.source.solutions[function]):
                fn = compile_cell(m.source, function, auditor.reference_ns)
                verdict = {t: status == "passed" for t, status, *_ in
                           auditor.run_tests(function, fn, tests, stop_at_first=False)}
                (passing if all(verdict.values()) else killed).append((m, verdict))
                if killed and passing:
                    break
            for m, verdict in killed[:1] + passing[:1]:
                name = f"mutant_{function}_{m.index}"
                write(folder, name, {"cells": {function: m.source}, "expect": {}}, tmp_path / "subs")
                expected[name, lab_id] = verdict
    assert sum(all(v.values()) for v in expected.values()) >= 2, "the sample should hold mutants the tests pass"

    out = tmp_path / "out"
    run = grading_run.run([sys.executable, "-m", "autograder.cli", "--root", str(ROOT), "grade",
                           str(tmp_path / "subs"), "--out", str(out), "--workers", "2", "--quiet"], timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    with (out / "grades.csv").open() as f:
        graded = {(r["student"], r["lab"], r["test"]): r["status"] == "passed" for r in csv.DictReader(f)}
    for (name, lab_id), verdict in expected.items():
        for test, passed in verdict.items():
            assert graded[name, lab_id, test] == passed, (
                f"{name}/{test}: {'passed' if passed else 'failed'} in process, the opposite in the grader")


# -- generated inputs (issue 41): the domain each row declares is the one its tests draw from ---------------------
def _generated_checks(source: str) -> list[tuple[str, str, str]]:
    """(function passed, expected passed, function named) of each ``genlab.check_generated(...)`` in a test cell."""
    code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
    found = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Call) and ast.unparse(node.func) in ("genlab.check_generated", "check_generated"):
            args = [ast.unparse(a) for a in node.args[:2]]
            named = node.args[2].value if len(node.args) > 2 and isinstance(node.args[2], ast.Constant) else None
            found.append((*args, named))
    return found


@pytest.mark.parametrize("lab_id", lab_ids(ROOT))
def test_each_row_declares_its_generated_inputs_and_the_tests_draw_from_it(lab_id):
    """Every graded function's row says which inputs are generated for it (a domain, or none and why); a row
    with a domain has a hidden `genlab.check_generated(f, reference.f, "f")` in a test of f, and no test draws
    for a row without one; the domain parses and names parameters of f, in the signature's order."""
    from autograder.core.labs import LabFolder
    from genlab.testing.notebook import LabNotebook
    from genlab.testing.properties import declares_domain, domain_of

    source = LabNotebook.read(LabFolder(ROOT, lab_id).source)
    table = source.spec_table
    undeclared = sorted(f for f, row in table.items() if not declares_domain(row.free))
    assert not undeclared, (f"{lab_id}: the rows of {undeclared} do not say which inputs are generated: end the "
                            "'left free' column with Generated inputs: `the domain`. or Generated inputs: none (why).")
    drawn: dict[str, list] = {}
    for test_id, spec in source.tests.items():
        for fn, expected, named in _generated_checks(spec["source"]):
            assert named == spec["function"] == fn and expected == f"reference.{fn}", (
                f"{lab_id}/{test_id}: check_generated({fn}, {expected}, {named!r}) must draw for the function the "
                f"test belongs to ({spec['function']}), against its reference")
            assert "### BEGIN HIDDEN TESTS" in spec["source"].split("check_generated")[0], \
                f"{lab_id}/{test_id}: the generated check compares with the reference, so it is hidden"
            drawn.setdefault(named, []).append(test_id)
    for function, row in table.items():
        domain = domain_of(row.free)
        if domain is None:
            assert function not in drawn, f"{lab_id}: {drawn.get(function)} draw inputs for {function}, whose row " \
                                          "declares none"
            continue
        assert len(drawn.get(function, [])) == 1, f"{lab_id}: {function} declares a domain; its tests draw from it " \
                                                  f"in {drawn.get(function, [])} (exactly one test should)"
        tree = ast.parse(source.solutions[function])
        node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function)
        params = [a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)]
        passed = [a.name for a in domain.args if not a.name.startswith("_")]
        assert set(passed) <= set(params), f"{lab_id}: the domain of {function} names {sorted(set(passed) - set(params))}" \
                                           f", which are not parameters of {function}{tuple(params)}"
        required = [a.name for a in domain.args if not a.optional and not a.name.startswith("_")]
        assert required == params[:len(required)], (
            f"{lab_id}: the domain of {function} passes {required} positionally, the signature starts {params}")


def test_the_new_operators_reach_the_misses_of_issue_41():
    assert ("write_arg", "`x + y` -> `x.add_(y)` (the argument `x` written in place)") in descriptions(
        "def f(x, y):\n    return x + y")
    assert ("write_arg", "`torch.exp(x)` -> `x.exp_(...)` (the argument `x` written in place)") in descriptions(
        "def f(x):\n    return torch.exp(x)")
    # a local is not an argument: nothing the caller holds is written
    assert not [d for op, d in descriptions("def f(x):\n    z = x * 2\n    return z + 1") if op == "write_arg"
                and "`z`" in d]
    assert ("reduction", "`sum` -> `mean`") in descriptions("def f(x):\n    return x.sum(-1)")
    assert ("reduction", "`.amax()` -> `.amax(0)`") in descriptions("def f(x):\n    return x.amax()")
    assert ("reduction", "`logsumexp` -> `amax`") in descriptions("def f(x):\n    return torch.logsumexp(x, 0)")
    assert not [d for op, d in descriptions("def f(a, b):\n    return max(a, b)") if op == "reduction"]  # builtins
    assert ("narrow", "`torch.float64` -> `torch.float32`") in descriptions(
        "def f(x):\n    return x.to(torch.float64)")
    assert ("narrow", "`.long()` -> `.int()`") in descriptions("def f(x):\n    return x.long()")
    # appended after the one-token operators: the mutants (and sentinels) written before keep their order
    from autograder.quality.mutants import OPERATORS

    assert [o.name for o in OPERATORS][-3:] == ["write_arg", "reduction", "narrow"]

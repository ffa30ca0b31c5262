"""`genlab audit`: the mutation operators, and that the audit kills mutants and notices weakened tests."""
from __future__ import annotations

import ast
import json
from pathlib import Path

import nbformat
import pytest

from autograder.audit import EQUIVALENT, KILLED, SURVIVED, TIMEOUT, Auditor, audit_function, equivalence, probes
from autograder.mutants import mutants, normalized

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
    from autograder.mutants import Dim

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
    from autograder.labs import LabFolder
    from autograder.pipeline import Lab
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
    # check_close compares values only: `.detach()`/`.double()` added are the casts it lets through
    assert all(m.status == KILLED for m in strong.mutants if m.operator != "cast") and strong.count(KILLED) >= 5
    assert {m.description for m in strong.mutants if m.status == SURVIVED} <= {"`.detach()` added", "`.double()` added"}
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
    from autograder.pipeline import Lab

    return Lab.load(ROOT, "lab1_vae")


def _without_checks(source: str) -> str:
    """The test with its assertions deleted: `assert ...` gone, `check_*(a, b, ...)` reduced to `a`."""
    class Strip(ast.NodeTransformer):
        def visit_Assert(self, node):
            return None

        def visit_Expr(self, node):
            call = node.value
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id.startswith("check_"):
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

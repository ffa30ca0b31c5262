"""The leak measure (autograder.release.leaks) and the student package as it is in the repository (issue 21).

The measure must see through renaming and small edits, and must not see answers in unrelated code; then
``shared/genlab`` and ``labs/`` (what students receive) must hold no solution function, nor a near copy.
"""
from __future__ import annotations

import ast
import copy
import json
import textwrap
from pathlib import Path

from autograder.release import leaks

ROOT = Path(__file__).resolve().parents[1]

SOLUTION = '''
def gaussian_kl(mu, logvar):
    """KL(q || p) per example."""
    return -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp(), dim=-1)
'''


def _one(source: str) -> leaks.Function:
    (fn,) = leaks.functions_in_source(textwrap.dedent(source), "test")
    return fn


def _ratio(a: str, b: str) -> float:
    return leaks.ratio(_one(a), _one(b))


def test_renamed_code_is_the_same_code_and_a_one_edit_bug_is_over_the_threshold():
    renamed = "def f(m, lv):\n    return -0.5 * torch.sum(1 + lv - m.pow(2) - lv.exp(), dim=-1)\n"
    flipped = "def kl(m, lv):\n    return 0.5 * torch.sum(1 + lv - m.pow(2) - lv.exp(), dim=-1)\n"
    averaged = "def kl(m, lv):\n    return -0.5 * torch.mean(1 + lv - m.pow(2) - lv.exp(), dim=-1)\n"
    assert _ratio(SOLUTION, renamed) == 1.0, "names and docstrings are not what makes an answer"
    assert _ratio(SOLUTION, flipped) >= leaks.THRESHOLD and _ratio(SOLUTION, averaged) >= leaks.THRESHOLD


def test_an_edit_of_the_students_own_function_and_unrelated_code_are_under_it():
    as_edit = "def kl_sign_flipped(gaussian_kl, mu, logvar):\n    return -gaussian_kl(mu, logvar)\n"
    unrelated = ("def pixels(images, size=8):\n    grid = images.reshape(-1, size, size).clamp(0, 1)\n"
                 "    return torch.cat([row for row in grid], dim=1).numpy()\n")
    assert _ratio(SOLUTION, as_edit) < leaks.THRESHOLD and _ratio(SOLUTION, unrelated) < leaks.THRESHOLD


def test_every_solution_function_is_found():
    found = {f.name for f in leaks.solution_functions(ROOT)}
    assert {"reparameterize", "gaussian_kl", "causal_mask", "add_lora", "kid"} <= found


def test_what_students_receive_in_the_repository_holds_no_answer():
    """shared/genlab and labs/ as they are: the closest match of every solution function is under the
    threshold (the table is printed on failure)."""
    matches = leaks.closest_matches(leaks.solution_functions(ROOT),
                                    leaks.functions_in([ROOT / "shared" / "genlab", ROOT / "labs"]))
    assert not leaks.leaks(matches), "\n" + leaks.report(matches)


class _Inline(ast.NodeTransformer):
    """A solution's body as a student would paste it into a cell: names changed, ``return x`` as ``result = x``."""

    def visit_Name(self, node: ast.Name) -> ast.AST:
        return ast.Name(id=f"my_{node.id}", ctx=node.ctx)

    def visit_Return(self, node: ast.Return) -> ast.AST:
        self.generic_visit(node)
        return ast.Assign(targets=[ast.Name(id="result", ctx=ast.Store())], value=node.value or ast.Constant(None))


def _inline_cells(root: Path) -> dict[tuple, str]:
    """Each solution function's body pasted into a cell, in a loop, between a test's other lines (keyed by the
    function's shape)."""
    from genlab.testing.notebook import nbgrader_meta

    cells = {}
    for notebook in sorted(root.glob("solutions/*/*.ipynb")):
        if notebook.stem != notebook.parent.name:
            continue
        for cell in json.loads(notebook.read_text())["cells"]:
            if cell["cell_type"] == "code" and nbgrader_meta(cell).get("solution"):
                for node in ast.walk(ast.parse("".join(cell["source"]))):
                    if isinstance(node, ast.FunctionDef):
                        body = [_Inline().visit(copy.deepcopy(s)) for s in leaks._body(node)]
                        code = textwrap.indent(ast.unparse(ast.fix_missing_locations(ast.Module(body, []))), "    ")
                        cells[leaks.shape(node)] = (
                            f"torch.manual_seed(0)\nfor trial in range(3):\n{code}\n    print(trial, result)\n")
    return cells


def test_a_solution_written_inline_in_a_cell_is_found_where_functions_alone_miss_it():
    """Every solution function's body pasted at a cell's top level (in a loop, under other names) is over the
    threshold (0.73-1.0 at the end of issue 21). Before, functions alone were compared: such a cell, with no
    def in it, had nothing to compare."""
    cells = _inline_cells(ROOT)
    low = []
    for sol in leaks.solution_functions(ROOT):
        notebook = {"cells": [{"cell_type": "code", "source": cells[sol.tokens]}]}
        found = list(leaks.functions_in_file("planted.ipynb", json.dumps(notebook).encode()))
        assert not [f for f in found if isinstance(f, leaks.Function)]
        (match,) = leaks.closest_matches([sol], found)
        if match.ratio < leaks.THRESHOLD or not match.closest.where.startswith("planted.ipynb cell 0 lines"):
            low.append(f"{sol.name}: {match.ratio:.2f} ({match.closest.where if match.closest else None})")
    assert not low, f"solutions pasted inline that the measure misses: {low}"

"""Reading the roles of cells from nbgrader's metadata.

Conventions the grader relies on (written down in docs/lab-author-guide.md, "Conventions the grader relies on"):
- the locked code cell with grade_id ``setup`` holds the lab's imports; tests may use its names;
- each function a student writes has its own solution cell, whose grade_id is the function's name;
- each test cell's grade_id starts with the name of the function it tests (``reparameterize_gradient``);
- the markdown cell ``what_the_tests_check`` holds a table, one row per graded function: what its tests check,
  and what they leave free. The "left free" column starts with a bold list of the freedoms the mutation audit
  understands (:data:`FREEDOMS`), e.g. ``**gradients, dtype.**`` or ``**nothing.**``, then prose.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import nbformat

SETUP_ID = "setup"
TABLE_ID = "what_the_tests_check"
# What a lab's text may leave free, in words the audit acts on: ``gradients`` (no test differentiates
# through the function), ``dtype`` (the floating dtype of the result is the student's choice), ``precision``
# (a float64 result may be computed in float32: compared at float32's tolerance).
FREEDOMS = frozenset({"gradients", "dtype", "precision"})
_ROW = re.compile(r"^\|\s*`(?P<function>\w+)`\s*\|(?P<checked>.*)\|(?P<free>.*)\|\s*$")
_LEAD = re.compile(r"^\s*\*\*(?P<words>[a-z ,]+)\.\*\*")


@dataclass(frozen=True)
class SpecRow:
    """One row of the lab's table: what the tests of ``function`` check, and what the text leaves free."""

    function: str
    checked: str
    free: str
    freedoms: frozenset[str]     # the subset of FREEDOMS the "left free" column names


def nbgrader_meta(cell) -> dict:
    meta = (cell.get("metadata") or {}).get("nbgrader")
    return meta if isinstance(meta, dict) else {}


def grade_id(cell) -> str | None:
    return nbgrader_meta(cell).get("grade_id")


def is_solution(cell) -> bool:
    return cell.cell_type == "code" and bool(nbgrader_meta(cell).get("solution"))


def is_test(cell) -> bool:
    meta = nbgrader_meta(cell)
    return cell.cell_type == "code" and bool(meta.get("grade")) and not meta.get("solution")


def is_setup(cell) -> bool:
    return cell.cell_type == "code" and grade_id(cell) == SETUP_ID


@dataclass
class LabNotebook:
    """The structure of one lab notebook: setup source, solution cells and test cells by grade_id."""

    path: Path
    nb: nbformat.NotebookNode

    @classmethod
    def read(cls, path) -> "LabNotebook":
        # Imported here, not at the top: a kernel imports genlab.testing to serve the grader, and nbformat's
        # import (jsonschema's format checkers) costs it a second of CPU for a reader it never uses.
        import nbformat

        return cls(Path(path), nbformat.read(str(path), as_version=4))

    @property
    def setup_source(self) -> str:
        return "\n".join(c.source for c in self.nb.cells if is_setup(c))

    @property
    def solutions(self) -> dict[str, str]:
        return {grade_id(c): c.source for c in self.nb.cells if is_solution(c)}

    @property
    def tests(self) -> dict[str, dict]:
        """grade_id -> {"source", "points", "function"} in notebook order."""
        functions = list(self.solutions)
        return {grade_id(c): {"source": c.source, "points": float(nbgrader_meta(c).get("points", 0)),
                              "function": function_of(grade_id(c), functions)}
                for c in self.nb.cells if is_test(c)}

    @property
    def differentiated(self) -> dict[str, tuple[int, ...]]:
        """The inputs a gradient is taken for, by function: ``{"reparameterize": (0, 1), ...}``, read from the
        test cells' ``grad_of(f, ...)`` and ``check_grad_reaches(f, ...)`` (their ``wrt``, default 0). An object
        a function returns (a module: ``m = CausalSelfAttention(d, h).double()``, then ``grad_of(m, x)``) is
        keyed ``"CausalSelfAttention()"``. The grader passes every call of these, not only the gradient
        calls, activations at those positions (:func:`genlab.checks.gradients.activation_inputs`)."""
        return differentiated_positions([spec["source"] for spec in self.tests.values()], list(self.solutions))


    @property
    def spec_table(self) -> dict[str, SpecRow]:
        """The ``what_the_tests_check`` table, by function ({} when the lab has none)."""
        cells = [c for c in self.nb.cells if c.cell_type == "markdown" and grade_id(c) == TABLE_ID]
        rows = {}
        for line in (cells[0].source.splitlines() if cells else []):
            match = _ROW.match(line.strip())
            if not match:
                continue
            lead = _LEAD.match(match["free"])
            if not lead:
                raise ValueError(f"{self.path.name}, row {match['function']}: the 'left free' column must start "
                                 f"with a bold list of freedoms ending in a period, e.g. **nothing.** or "
                                 f"**gradients, dtype.**; got {match['free'].strip()[:60]!r}")
            words = frozenset(w.strip() for w in lead["words"].split(",")) - {"nothing"}
            if words - FREEDOMS:
                raise ValueError(f"{self.path.name}, row {match['function']}: unknown freedom "
                                 f"{', '.join(sorted(words - FREEDOMS))} (known: {', '.join(sorted(FREEDOMS))})")
            rows[match["function"]] = SpecRow(match["function"], match["checked"].strip(), match["free"].strip(),
                                              words)
        return rows


def function_of(test_id: str, functions) -> str | None:
    """The function a test belongs to: the longest function name that prefixes the test's grade_id."""
    matches = [f for f in functions if test_id == f or test_id.startswith(f + "_")]
    return max(matches, key=len) if matches else None


GRADIENT_CHECKS = ("grad_of", "check_grad_reaches")


def differentiated_positions(sources, functions) -> dict[str, tuple[int, ...]]:
    """See :attr:`LabNotebook.differentiated`. A ``wrt`` that is not a literal is an error: the grader must
    know the positions before any call is made."""
    import ast

    functions = set(functions)
    found: dict[str, set[int]] = {}
    for source in sources:
        code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
        tree = ast.parse(code)
        made_by: dict[str, str] = {}     # a variable holding what a lab function returned -> "f()"
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and _root_call(node.value) in functions:
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        made_by[target.id] = f"{_root_call(node.value)}()"
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and _name(node.func) in GRADIENT_CHECKS and node.args
                    and isinstance(node.args[0], ast.Name)):
                continue
            first = node.args[0].id
            key = first if first in functions else made_by.get(first)
            if key is None:
                continue
            wrt = next((k.value for k in node.keywords if k.arg == "wrt"), None)
            try:
                value = 0 if wrt is None else ast.literal_eval(wrt)
            except ValueError:
                raise ValueError(f"a test calls {_name(node.func)}({first}, ..., wrt={ast.unparse(wrt)}): wrt must "
                                 "be a literal (an int or a tuple of ints)") from None
            found.setdefault(key, set()).update((value,) if isinstance(value, int) else value)
    return {key: tuple(sorted(positions)) for key, positions in found.items()}


def _name(func) -> str | None:
    import ast

    if isinstance(func, ast.Name):
        return func.id
    return func.attr if isinstance(func, ast.Attribute) else None


def _root_call(node) -> str | None:
    """``f`` for ``f(...)``, ``f(...).double()``, ``f(...).to(x).eval()``; else None."""
    import ast

    while isinstance(node, ast.Call):
        if isinstance(node.func, ast.Name):
            return node.func.id
        if not isinstance(node.func, ast.Attribute):
            return None
        node = node.func.value
    return None

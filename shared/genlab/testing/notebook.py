"""Reading the roles of cells from nbgrader's metadata.

Conventions the grader relies on (written down in autograder/README.md):
- the locked code cell with grade_id ``setup`` holds the lab's imports; tests may use its names;
- each function a student writes has its own solution cell, whose grade_id is the function's name;
- each test cell's grade_id starts with the name of the function it tests (``reparameterize_gradient``).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import nbformat

SETUP_ID = "setup"


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


def function_of(test_id: str, functions) -> str | None:
    """The function a test belongs to: the longest function name that prefixes the test's grade_id."""
    matches = [f for f in functions if test_id == f or test_id.startswith(f + "_")]
    return max(matches, key=len) if matches else None

"""The policy for graded code, as the grader applies it: the allowlist of ``autograder/course.toml``, per lab.

The checker is the student package's (:mod:`genlab.policy`), so that ``genlab check`` on a student's machine and
the grader refuse the same cells for the same reasons; this module only reads the course's allowlist and says,
for one notebook, which of the student's cells are outside it and which names they would have defined.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

from genlab.policy import Policy, Violation, check_cells, describe


def lab_policy(root: Path, lab: str) -> Policy:
    """``[policy]`` of the course's ``autograder/course.toml``, with ``[policy.labs.<lab>]`` applied; a course
    without the file (a new course's first folder, a test's) gets the checker's defaults, as its limits do."""
    path = Path(root) / "autograder" / "course.toml"
    return Policy.from_toml(path, lab) if path.exists() else Policy.from_table({}, lab)


@dataclass
class Refusals:
    cells: dict[int, str] = field(default_factory=dict)        # cell index -> why it was not run (one line)
    names: dict[str, str] = field(default_factory=dict)        # a name a refused cell defines -> that line
    violations: dict[int, list[Violation]] = field(default_factory=dict)


def refusals(cells: list[tuple[int, str, str]], policy: Policy, setup_source: str = "") -> Refusals:
    """``cells``: (index, where, source) of the student's code cells in the order they run."""
    found = check_cells([(str(index), source) for index, _where, source in cells], policy, setup_source)
    out = Refusals()
    for index, where, source in cells:
        if str(index) not in found:
            continue
        line = describe(where, found[str(index)])
        out.cells[index], out.violations[index] = line, found[str(index)]
        for name in defined_names(source):
            out.names.setdefault(name, line)
    return out


def defined_names(source: str) -> set[str]:
    """The global names a cell defines at its top level (functions, classes, assignments, imports)."""
    try:
        tree = ast.parse("\n".join(l for l in source.splitlines() if not l.lstrip().startswith(("%", "!"))))
    except SyntaxError:
        return set()
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        else:
            names |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    return names

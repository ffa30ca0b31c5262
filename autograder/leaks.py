"""Does what students receive carry an answer? The closest match of every solution function, by its shape.

A solution leaks when something students get has its body, or its body after a small edit, whatever the names
in it. So both sides are compared as code with their names taken out: each function body is parsed, its
docstring dropped, every name (arguments, variables, globals) renamed by order of first use (``v0``, ``v1``...),
and the tree written out in pre-order as tokens (node types, attribute names, constants: ``torch.exp`` and
``.pow`` stay, since they are the content of an answer). Two bodies are as close as the Dice coefficient of
their multisets of 4-token runs: 1.0 for the same code under other names.

Where the threshold sits (measured on this repository at the start of issue 21, tests/test_leaks.py keeps
them): one edit of a short solution (a flipped sign, ``mean`` for ``sum``, ``.detach()``) scores 0.78-1.0, two
or three edits 0.6-0.75; the student package's own code that is not a bug (widgets, checks, models) stays at or
below 0.55. :data:`THRESHOLD` is 0.6.

``closest_matches(solutions, candidates)`` reports, per solution function, the most similar function found;
``leaks`` keeps those at or above the threshold. ``genlab leaks PLACE...`` prints the table.
"""
from __future__ import annotations

import ast
import copy
import io
import json
import zipfile
from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Iterable, Iterator

THRESHOLD = 0.6  # at or above: the answer after a small edit (see the module's docstring)
GRAM = 4         # tokens per run compared
# Bodies shorter than this many tokens say too little to be an answer (``return x``), and match anything.
MIN_TOKENS = 40


@dataclass(frozen=True)
class Function:
    name: str       # the function's name
    where: str      # file (and cell) it was found in
    tokens: tuple   # its body, names taken out (see shape)

    @cached_property
    def grams(self) -> Counter:
        return Counter(zip(*(self.tokens[i:] for i in range(GRAM))))


@dataclass(frozen=True)
class Match:
    solution: Function
    closest: Function | None
    ratio: float

    def row(self) -> str:
        where = f"{self.closest.name} in {self.closest.where}" if self.closest else "(nothing)"
        return f"{self.solution.name:28s} {self.ratio:5.2f}  {where}"


class _Names(ast.NodeTransformer):
    """Renames arguments and variables by order of first use; attributes and constants stay."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}

    def _new(self, name: str) -> str:
        return self.names.setdefault(name, f"v{len(self.names)}")

    def visit_Name(self, node: ast.Name) -> ast.AST:
        return ast.copy_location(ast.Name(id=self._new(node.id), ctx=node.ctx), node)

    def visit_arg(self, node: ast.arg) -> ast.AST:
        return ast.copy_location(ast.arg(arg=self._new(node.arg)), node)


def shape(fn: ast.FunctionDef) -> tuple:
    """The body of ``fn`` as a token sequence, with its docstring dropped and its names taken out."""
    fn = copy.deepcopy(fn)
    if fn.body and isinstance(fn.body[0], ast.Expr) and isinstance(fn.body[0].value, ast.Constant) \
            and isinstance(fn.body[0].value.value, str):
        fn.body = fn.body[1:] or [ast.Pass()]
    fn.name, fn.decorator_list, fn.returns = "f", [], None
    return tuple(_tokens(_Names().visit(fn)))


def _tokens(node: ast.AST) -> Iterator[str]:
    """Pre-order: each node's type, its names and constants, then its children, then a closing mark."""
    if isinstance(node, ast.expr_context):
        return
    yield type(node).__name__
    for field, value in ast.iter_fields(node):
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, ast.AST):
                yield from _tokens(item)
            elif item is not None and field not in ("type_comment", "kind"):
                yield repr(item)
    yield ")"


def functions_in_source(source: str, where: str) -> Iterator[Function]:
    """Every function (and method) defined in ``source``; source that does not parse has none."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield Function(node.name, where, shape(node))


def _notebook_sources(text: str) -> Iterator[tuple[int, str]]:
    nb = json.loads(text)
    for i, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") == "code":
            source = cell.get("source", "")
            source = "".join(source) if isinstance(source, list) else source
            # IPython magics and shell lines are not Python: blank them so the rest of the cell still parses.
            yield i, "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.split("\n"))


def functions_in_file(name: str, data: bytes) -> Iterator[Function]:
    """The functions of one file: a Python file, a notebook's code cells, or a wheel's Python files."""
    if name.endswith(".py"):
        yield from functions_in_source(data.decode("utf-8", "replace"), name)
    elif name.endswith(".ipynb"):
        for i, source in _notebook_sources(data.decode("utf-8", "replace")):
            yield from functions_in_source(source, f"{name} cell {i}")
    elif name.endswith(".whl"):
        with zipfile.ZipFile(io.BytesIO(data)) as wheel:
            for member in wheel.namelist():
                if member.endswith((".py", ".ipynb")):
                    yield from functions_in_file(f"{name}!{member}", wheel.read(member))


def functions_in(places: Iterable[Path]) -> list[Function]:
    """Every function in the given files and folders (searched recursively, caches and venvs skipped)."""
    found = []
    for place in places:
        place = Path(place)
        files = [place] if place.is_file() else sorted(
            p for p in place.rglob("*") if p.is_file() and not {"__pycache__", ".venv", ".git"} & set(p.parts))
        for path in files:
            found += functions_in_file(str(path), path.read_bytes())
    return found


def solution_functions(root: Path) -> list[Function]:
    """The functions written in the solution cells of every ``solutions/<lab>/<lab>.ipynb``."""
    from genlab.testing.notebook import nbgrader_meta

    found = []
    for notebook in sorted(Path(root, "solutions").glob("*/*.ipynb")):
        if notebook.stem != notebook.parent.name:
            continue
        for cell in json.loads(notebook.read_text())["cells"]:  # plain JSON: nbformat's validation takes seconds
            meta = nbgrader_meta(cell)
            if cell["cell_type"] == "code" and meta.get("solution"):
                source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
                found += [fn for fn in functions_in_source(source, f"{notebook.name} ({meta.get('grade_id')})")
                          if len(fn.tokens) >= MIN_TOKENS]
    return found


def ratio(a: Function, b: Function) -> float:
    """Dice coefficient of the two bodies' multisets of token runs: 2 |A & B| / (|A| + |B|)."""
    total = sum(a.grams.values()) + sum(b.grams.values())
    return 2 * sum((a.grams & b.grams).values()) / total if total else 0.0


def closest_matches(solutions: list[Function], candidates: list[Function]) -> list[Match]:
    matches = []
    for sol in solutions:
        best = max(candidates, key=lambda c: ratio(sol, c), default=None)
        matches.append(Match(sol, best, ratio(sol, best) if best else 0.0))
    return matches


def leaks(matches: list[Match], threshold: float = THRESHOLD) -> list[Match]:
    return [m for m in matches if m.ratio >= threshold]


def report(matches: list[Match]) -> str:
    lines = [f"{'solution function':28s} ratio  closest match (threshold {THRESHOLD})"]
    lines += [m.row() + ("   <- LEAK" if m.ratio >= THRESHOLD else "")
              for m in sorted(matches, key=lambda m: -m.ratio)]
    return "\n".join(lines)

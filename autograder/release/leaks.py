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

Code outside any function (a notebook cell's top level, a module's) is compared too: a solution's body written
inline in a test cell is as much an answer. There, every run of consecutive statements of each statement list
outside a def (a cell's top level, and the bodies of its loops, ``with``, ``if`` and ``try`` blocks) is a
candidate, compared with the solution's statements alone (no ``def`` line, no arguments) by the same Dice
coefficient. Both sides take their names out as Baker's ``prev`` encoding does (B. S. Baker, "A theory of
parameterized pattern matching", STOC 1993): each name becomes the number of names since its last use, 0 for a
first use, and assignments are read value first, so that ``kl = <expr>`` reads as ``return <expr>`` does.
Renaming by order of first use would not do for a run: whatever the cell names first (``kl``) would shift
every later name of the solution to another token. Runs longer than :data:`LONGEST` times the solution (in
4-token runs) are not tried: their coefficient is below 2 / (1 + LONGEST) = 0.4. Measured at the end of issue
21: each solution's body pasted into a cell under other names, ``return`` made an assignment, scores 0.73-1.0
(tests/test_leaks.py checks that every one is over the threshold), and with one edit (``+`` for ``-``, ``/``
for ``*``) 0.79-0.98; the labs' own code outside functions stays at or below 0.55 (``loss = ddpm_loss(model,
x0, t, noise, alpha_bar)`` against ``ddpm_loss``).

``closest_matches(solutions, candidates)`` reports, per solution function, the most similar function or run
of statements found; ``leaks`` keeps those at or above the threshold. ``genlab leaks PLACE...`` prints the table.
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
LONGEST = 4      # runs of top-level statements tried: up to this many times the solution's body, in tokens


@dataclass(frozen=True)
class Function:
    name: str       # the function's name
    where: str      # file (and cell) it was found in
    tokens: tuple   # its body, names taken out (see shape)
    inline: tuple = ()  # its body's statements alone, names as Baker's distances (see inline), for Block

    @cached_property
    def grams(self) -> Counter:
        return _grams(self.tokens)

    @cached_property
    def inline_grams(self) -> Counter:
        return _grams(self.inline)


@dataclass(frozen=True)
class Block:
    """A list of statements outside any function (a cell's top level, a loop's body): every run of consecutive
    statements in it is compared with the solutions (:func:`closest_matches`)."""
    where: str
    statements: tuple   # per statement: (first line, last line, its raw tokens: names as _Var)


class _Var(str):
    """A name in a raw token stream; :func:`first_use` and :func:`inline` say what it becomes."""


def _grams(tokens) -> Counter:
    return Counter(zip(*(tokens[i:] for i in range(GRAM))))


@dataclass(frozen=True)
class Match:
    solution: Function
    closest: Function | None
    ratio: float

    def row(self) -> str:
        where = f"{self.closest.name} in {self.closest.where}" if self.closest else "(nothing)"
        return f"{self.solution.name:28s} {self.ratio:5.2f}  {where}"


def _body(fn: ast.FunctionDef) -> list[ast.stmt]:
    """The function's statements, its docstring dropped."""
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:] or [ast.Pass()]
    return body


def shape(fn: ast.FunctionDef) -> tuple:
    """The body of ``fn`` as a token sequence, with its docstring dropped and its names (arguments, variables,
    globals) renamed by order of first use, ``v0``, ``v1``...: attributes and constants stay."""
    fn = copy.copy(fn)  # shallow: only its own fields change
    fn.name, fn.body, fn.decorator_list, fn.returns = "f", _body(fn), [], None
    return first_use(_tokens(fn))


def first_use(raw: Iterable) -> tuple:
    """Each name renamed by order of first use: ``v0``, ``v1``..."""
    names: dict[str, int] = {}
    return tuple(repr(f"v{names.setdefault(t, len(names))}") if isinstance(t, _Var) else t for t in raw)


def inline(raw: Iterable) -> tuple:
    """Baker's parameterised tokens: each name becomes the number of names since its last use, 0 for a first
    use (``kl = f(a, b, a)``: ``^0 ^0 ^0 ^0 ^2``), so whatever comes before a run leaves the run's tokens alone."""
    last: dict[str, int] = {}   # name -> how many names came before its last use
    out, names = [], 0
    for t in raw:
        if isinstance(t, _Var):
            name, t = t, f"^{names - last[t] if t in last else 0}"
            last[name], names = names, names + 1
        out.append(t)
    return tuple(out)


# Fields visited in the order Python evaluates them, for :func:`inline`: ``kl = <expr>`` then reads as ``<expr>``
# followed by its target, so the names in ``<expr>`` get the Baker distances they have in ``return <expr>``.
_EVALUATION_ORDER = {ast.Assign: ("value", "targets"), ast.AugAssign: ("value", "op", "target"),
                     ast.AnnAssign: ("value", "target"), ast.NamedExpr: ("value", "target"),
                     ast.For: ("iter", "target", "body", "orelse"), ast.comprehension: ("iter", "target", "ifs")}


def _tokens(node: ast.AST, evaluation: bool = False) -> Iterator[str]:
    """Pre-order: each node's type, its names (as :class:`_Var`) and constants, then its children, then a
    closing mark. ``evaluation``: assignments and loops visit their value before their target."""
    if isinstance(node, ast.expr_context):
        return
    yield type(node).__name__
    fields = ast.iter_fields(node)
    if evaluation and type(node) in _EVALUATION_ORDER:
        fields = [(f, getattr(node, f)) for f in _EVALUATION_ORDER[type(node)]]
    for field, value in fields:
        if field == "annotation" and isinstance(node, ast.arg):
            continue  # an argument's type says nothing of the answer
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, ast.AST):
                yield from _tokens(item, evaluation)
            elif (field == "id" and isinstance(node, ast.Name)) or (field == "arg" and isinstance(node, ast.arg)):
                yield _Var(item)
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
            body = [t for stmt in _body(node) for t in _tokens(stmt, evaluation=True)]
            yield Function(node.name, where, shape(node), inline(body))


_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def blocks_in_source(source: str, where: str) -> Iterator[Block]:
    """The statement lists of ``source`` outside any function or class: its top level, and inside it the
    bodies of loops, ``with``, ``if``, ``try`` and ``match`` (a solution written inline in a test's loop)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return
    lists, found = [tree.body], []
    while lists:
        statements = [s for s in lists.pop(0) if not isinstance(s, _DEFS)]
        if statements:
            found.append(Block(where, tuple((s.lineno, s.end_lineno, tuple(_tokens(s, evaluation=True))) for s in statements)))
        for stmt in statements:
            for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                for item in getattr(stmt, field, None) or []:
                    if isinstance(item, ast.stmt):
                        lists.append(getattr(stmt, field))
                        break
                    lists.append(item.body)  # an except handler or a match case
    yield from found


def _notebook_sources(text: str) -> Iterator[tuple[int, str]]:
    nb = json.loads(text)
    for i, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") == "code":
            source = cell.get("source", "")
            source = "".join(source) if isinstance(source, list) else source
            # IPython magics and shell lines are not Python: blank them so the rest of the cell still parses.
            yield i, "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.split("\n"))


def functions_in_file(name: str, data: bytes) -> Iterator[Function | Block]:
    """The code of one file (a Python file, a notebook's code cells, or a wheel's Python files): its functions,
    and the blocks of statements outside them."""
    if name.endswith(".py"):
        yield from functions_in_source(data.decode("utf-8", "replace"), name)
        yield from blocks_in_source(data.decode("utf-8", "replace"), name)
    elif name.endswith(".ipynb"):
        for i, source in _notebook_sources(data.decode("utf-8", "replace")):
            yield from functions_in_source(source, f"{name} cell {i}")
            yield from blocks_in_source(source, f"{name} cell {i}")
    elif name.endswith(".whl"):
        with zipfile.ZipFile(io.BytesIO(data)) as wheel:
            for member in wheel.namelist():
                if member.endswith((".py", ".ipynb")):
                    yield from functions_in_file(f"{name}!{member}", wheel.read(member))


def functions_in(places: Iterable[Path]) -> list[Function | Block]:
    """Every function, and every block of code outside functions, in the given files and folders (searched
    recursively, caches and venvs skipped)."""
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


def closest_matches(solutions: list[Function], candidates: list[Function | Block]) -> list[Match]:
    """Per solution function, the closest function or run of statements among ``candidates``."""
    functions = [c for c in candidates if isinstance(c, Function)]
    runs = closest_runs(solutions, [c for c in candidates if isinstance(c, Block)])
    matches = []
    for sol, run in zip(solutions, runs):
        best = max(functions, key=lambda c: ratio(sol, c), default=None)
        match = Match(sol, best, ratio(sol, best) if best else 0.0)
        matches.append(run if run.ratio > match.ratio else match)
    return matches


def closest_runs(solutions: list[Function], blocks: list[Block]) -> list[Match]:
    """Per solution, the run of consecutive statements of a block whose Baker tokens (:func:`inline`) are
    closest to the solution's statements. Each run start is extended one statement at a time, its 4-token runs
    counted as they come (the names of a run depend on where it starts, not on where it ends), and stopped once
    no solution can gain: a run of n grams shares at most ``size`` of a solution's, so its coefficient is at
    most 2 size / (n + size)."""
    sizes = [sum(sol.inline_grams.values()) for sol in solutions]
    index: dict[tuple, list[tuple[int, int]]] = {}  # gram -> (solution, how often it has it)
    for k, sol in enumerate(solutions):
        for gram, count in sol.inline_grams.items():
            index.setdefault(gram, []).append((k, count))
    best = [(0.0, None, 0, 0)] * len(solutions)  # (ratio, block, first statement, last statement)
    for block in blocks:
        statements = block.statements
        for i in range(len(statements)):
            last, names, window, counts, shared, n = {}, 0, [], Counter(), [0] * len(solutions), 0
            for j in range(i, len(statements)):
                for t in statements[j][2]:
                    if isinstance(t, _Var):  # as inline() writes it, counted from the run's start
                        name, t = t, f"^{names - last[t] if t in last else 0}"
                        last[name], names = names, names + 1
                    window.append(t)
                    if len(window) >= GRAM:
                        gram = tuple(window[-GRAM:])
                        counts[gram] += 1
                        n += 1
                        for k, count in index.get(gram, ()):
                            if counts[gram] <= count:
                                shared[k] += 1
                gaining = False
                for k, size in enumerate(sizes):
                    if n > LONGEST * size or 2 * size / (n + size) <= best[k][0]:
                        continue  # longer runs only lower this solution's coefficient
                    gaining = True
                    if 2 * shared[k] / (n + size) > best[k][0]:
                        best[k] = (2 * shared[k] / (n + size), block, i, j)
                if not gaining:
                    break
    matches = []
    for sol, (r, block, i, j) in zip(solutions, best):
        if block is None:
            matches.append(Match(sol, None, 0.0))
            continue
        raw = [t for stmt in block.statements[i:j + 1] for t in stmt[2]]
        where = f"{block.where} lines {block.statements[i][0]}-{block.statements[j][1]}"
        matches.append(Match(sol, Function("(code outside functions)", where, inline(raw)), r))
    return matches


def leaks(matches: list[Match], threshold: float = THRESHOLD) -> list[Match]:
    return [m for m in matches if m.ratio >= threshold]


def report(matches: list[Match]) -> str:
    lines = [f"{'solution function':28s} ratio  closest match (threshold {THRESHOLD})"]
    lines += [m.row() + ("   <- LEAK" if m.ratio >= THRESHOLD else "")
              for m in sorted(matches, key=lambda m: -m.ratio)]
    return "\n".join(lines)

"""The policy for code that runs in a graded process: an allowlist, checked on each cell's syntax tree.

The grader (``autograder.wall.policy``) and the student's self-check (``genlab check NOTEBOOK``) apply this
same module to the same cells: the solution cells and the cells a student added. A cell outside the policy
is not run where it is graded; the student sees each construct, its line, and why, before handing in.

The allowlist itself lives in the course's ``autograder/course.toml`` (``[policy]``, and ``[policy.labs.<lab>]``
where one lab must differ); the student bundle's wheel carries a copy (``genlab/assets/policy.toml``) so that the
self-check applies what the grader applies. :class:`Policy`'s defaults here are the fallback where neither is
found (a bare checkout of the package).

Why a visitor of our own rather than RestrictedPython's ``compile_restricted``: RestrictedPython rewrites the
code it accepts (``a.b`` becomes ``_getattr_(a, "b")``, ``a.b = c`` becomes ``_write_(a).b = c``) and needs
guard functions at run time, so the kernel would run, and the grader time, different code from the student's;
and its transformer refuses every attribute and name that starts with ``_``, which rejects ``super().__init__()``
in the labs' own modules (``RestrictedPython/transformer.py``, ``check_name`` and ``visit_Attribute``). Here the
tree is only read: code inside the policy runs exactly as written.

What the policy does not see is listed in ``docs/trust-model.md`` (a policy on syntax cannot follow values).
"""
from __future__ import annotations

import ast
import functools
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path

# Builtins that reach objects by names built at run time, run code from strings, or read namespaces.
DYNAMIC_BUILTINS = ("getattr", "setattr", "delattr", "exec", "eval", "compile", "__import__",
                    "globals", "locals", "vars", "breakpoint", "get_ipython", "__builtins__")
# Attributes without an underscore that still lead to frames and code objects.
FRAME_ATTRIBUTES = ("gi_frame", "gi_code", "cr_frame", "cr_code", "ag_frame", "ag_code", "f_back", "f_globals",
                    "f_locals", "f_builtins", "f_code", "tb_frame", "tb_next", "co_code", "co_consts")


@dataclass(frozen=True)
class Policy:
    """What a graded cell may do. ``modules``: importable packages (a name allows its submodules), less
    ``forbidden_modules``; ``attributes``: the underscore attributes code may use; ``builtins``: those of
    :data:`DYNAMIC_BUILTINS` allowed anyway; ``settable``: attribute paths of imported modules that code may
    assign (settings, not functions)."""

    modules: tuple[str, ...] = ("torch", "math", "numpy", "scipy", "genlab", "functools", "itertools",
                                "collections", "typing", "dataclasses", "re", "string", "IPython.display",
                                "matplotlib")
    forbidden_modules: tuple[str, ...] = ("genlab.testing", "torch.multiprocessing", "torch.distributed",
                                          "torch.utils.cpp_extension", "torch.library", "numpy.ctypeslib")
    attributes: tuple[str, ...] = ("__init__", "__name__")
    builtins: tuple[str, ...] = ()
    settable: tuple[str, ...] = ("torch.backends.", "plt.rcParams", "matplotlib.rcParams")
    enforce: bool = True

    @classmethod
    def from_table(cls, table: dict, lab: str | None = None) -> "Policy":
        """The policy of ``[policy]`` (a course.toml's table), with ``[policy.labs.<lab>]`` applied: there a
        list adds to the course's (``modules``, ``attributes``, ``builtins``, ``settable``), ``enforce``
        replaces it."""
        names = {"modules", "forbidden_modules", "attributes", "builtins", "settable", "enforce"}
        course = {k: v for k, v in table.items() if k != "labs"}
        unknown = sorted(set(course) - names)
        if unknown:
            raise ValueError(f"unknown [policy] settings {unknown}: they are {sorted(names)}")
        policy = replace(cls(), **{k: (tuple(v) if isinstance(v, list) else v) for k, v in course.items()})
        own = table.get("labs", {}).get(lab, {}) if lab else {}
        unknown = sorted(set(own) - names)
        if unknown:
            raise ValueError(f"unknown [policy.labs.{lab}] settings {unknown}: they are {sorted(names)}")
        for key, value in own.items():
            policy = replace(policy, **{key: getattr(policy, key) + tuple(value) if isinstance(value, list) else value})
        return policy

    @classmethod
    def from_toml(cls, path: Path, lab: str | None = None) -> "Policy":
        return cls.from_table(tomllib.loads(Path(path).read_text()).get("policy", {}), lab)

    def allows_module(self, name: str) -> bool:
        if any(part.startswith("_") for part in name.split(".")):
            return False
        if any(name == m or name.startswith(m + ".") for m in self.forbidden_modules):
            return False
        return any(name == m or name.startswith(m + ".") for m in self.modules)


@dataclass(frozen=True, order=True)
class Violation:
    line: int
    construct: str      # the code, as written (``importlib.import_module``)
    why: str            # the rule, in words

    def __str__(self) -> str:
        return f"line {self.line}: `{self.construct}`: {self.why}"


@dataclass
class _Names:
    """What earlier cells bound, carried from cell to cell: imported modules and names taken from them."""
    imported: set[str] = field(default_factory=set)


@functools.lru_cache(maxsize=1)
def library_private_names() -> frozenset[str]:
    """The underscore names of the objects graded code can reach (torch, its tensors and modules, numpy, the
    interpreter's modules, the kernel's server): ``self.<one of these>`` stays refused in a method, since a method
    can be called on any object (``A.g(torch)``)."""
    import builtins
    import importlib
    import sys
    import types

    objects = [builtins, sys, types.FunctionType, types.FrameType, types.CodeType, types.ModuleType, object, type]
    for module, attrs in (("torch", ("", "Tensor", "nn.Module", "nn.Parameter", "autograd", "autograd.graph")),
                          ("numpy", ("", "ndarray")), ("math", ("",)), ("genlab.testing.server", ("",)),
                          ("genlab.testing.wire", ("",)), ("genlab", ("",))):
        try:
            root = importlib.import_module(module)
        except ImportError:
            continue
        for path in attrs:
            obj = root
            for part in filter(None, path.split(".")):
                obj = getattr(obj, part, None)
            if obj is not None:
                objects.append(obj)
    return frozenset(n for obj in objects for n in dir(obj) if n.startswith("_"))


def _dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def _text(node) -> str:
    try:
        text = ast.unparse(node)
    except Exception:  # noqa: BLE001
        return "?"
    return text if len(text) <= 80 else text[:77] + "..."


class _Checker(ast.NodeVisitor):
    def __init__(self, policy: Policy, names: _Names):
        self.policy, self.names = policy, names
        self.found: list[Violation] = []
        self.class_names: set[int] = set()   # ids of Name nodes a class body defines
        self.methods: dict[int, str] = {}    # id of a method's node -> its first parameter's name (self)
        self.instance: list[str | None] = []  # the `self` of the method being read, innermost last

    def flag(self, node, construct: str, why: str) -> None:
        self.found.append(Violation(getattr(node, "lineno", 0), construct, why))

    @staticmethod
    def root(node) -> str | None:
        """The name an attribute path starts from (``torch`` of ``torch.cuda.Event``); None past a call, whose
        result is a new object, not the module (``torch.zeros(3)[0] = 1`` changes no library)."""
        while isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        return node.id if isinstance(node, ast.Name) else None

    # -- imports --------------------------------------------------------------------------------------
    def _module(self, node, name: str) -> None:
        if not self.policy.allows_module(name):
            self.flag(node, f"import {name}", f"graded code may import only {', '.join(self.policy.modules)} "
                      "and their submodules (not private ones, nor those the course forbids)")

    def visit_Import(self, node):
        for alias in node.names:
            self._module(node, alias.name)
            self.names.imported.add((alias.asname or alias.name).split(".")[0])

    def visit_ImportFrom(self, node):
        if node.level:
            self.flag(node, f"from {'.' * node.level}{node.module or ''} import ...",
                      "a relative import reaches files beside the notebook, not an allowed package")
            return
        self._module(node, node.module)
        for alias in node.names:
            if alias.name == "*":
                self.flag(node, f"from {node.module} import *", "a star import hides which names come in: "
                          "import the names you use")
                continue
            full = f"{node.module}.{alias.name}"
            if alias.name.startswith("_") or any(full == m or full.startswith(m + ".")
                                                 for m in self.policy.forbidden_modules):
                self.flag(node, f"from {node.module} import {alias.name}", "a private or forbidden name")
            self.names.imported.add(alias.asname or alias.name)

    # -- names and attributes -------------------------------------------------------------------------
    def visit_ClassDef(self, node):
        # `__hash__ = None` or `__slots__ = (...)` in a class body defines the class's own protocol, as
        # `def __eq__` does: names stored directly in a class body may be dunders.
        for stmt in node.body:
            for target in getattr(stmt, "targets", [getattr(stmt, "target", None)]):
                if isinstance(target, ast.Name) and _dunder(target.id):
                    self.class_names.add(id(target))
        for stmt in node.body:      # a method's first parameter names the class's own instance (visit_Attribute)
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.args.args:
                self.methods[id(stmt)] = stmt.args.args[0].arg
        self.generic_visit(node)

    def visit_FunctionDef(self, node):
        # a method's `self`; a function nested in a method keeps its method's (a closure over the instance)
        self.instance.append(self.methods.get(id(node), self.instance[-1] if self.instance else None))
        self.generic_visit(node)
        self.instance.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Name(self, node):
        name = node.id
        if name in DYNAMIC_BUILTINS and name not in self.policy.builtins:
            self.flag(node, name, _BUILTIN_WHY.get(name, "reaches objects or code by names built at run time"))
        elif _dunder(name) and name not in self.policy.attributes and id(node) not in self.class_names:
            self.flag(node, name, "a dunder name reaches the interpreter's machinery")

    def _own_private(self, node) -> bool:
        """``self._cache`` in a method of the cell's own class: the student's own attribute, as Python style writes
        it (a correct ``QLoRALinear`` may keep ``self._shape``). Not a dunder, and not a private name of the
        libraries' objects (``self._C`` in a method called as ``A.g(torch)`` would reach torch._C)."""
        return (isinstance(node.value, ast.Name) and bool(self.instance) and node.value.id == self.instance[-1]
                and not _dunder(node.attr) and node.attr not in library_private_names())

    def visit_Attribute(self, node):
        attr = node.attr
        if attr.startswith("_") and attr not in self.policy.attributes and not self._own_private(node):
            self.flag(node, _text(node), "an underscore attribute is private to the library or the interpreter "
                      f"(graded code may use {', '.join(self.policy.attributes) or 'none'})")
        elif attr in FRAME_ATTRIBUTES:
            self.flag(node, _text(node), "frames and code objects are the interpreter's, not the lab's")
        else:
            path = _text(node)
            if self.root(node) in self.names.imported and any(
                    path == m or path.startswith(m + ".") for m in self.policy.forbidden_modules):
                self.flag(node, path, "a forbidden module, reached as an attribute")
        self.generic_visit(node)

    # -- assignments ----------------------------------------------------------------------------------
    def _target(self, target, verb: str) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            for t in target.elts:
                self._target(t, verb)
        elif isinstance(target, ast.Starred):
            self._target(target.value, verb)
        elif isinstance(target, (ast.Attribute, ast.Subscript)):
            path = _text(target)
            if self.root(target) in self.names.imported and not path.startswith(self.policy.settable):
                self.flag(target, path, f"{verb} a module's attribute (or what it holds) changes the library for "
                          "every caller, the grader's too: keep your own names instead")

    def _alias(self, target, value) -> None:
        """``E = torch.cuda.Event``: the new name is as much the library's as what it names."""
        if isinstance(target, ast.Name) and isinstance(value, (ast.Name, ast.Attribute)) \
                and self.root(value) in self.names.imported:
            self.names.imported.add(target.id)

    def visit_Assign(self, node):
        for t in node.targets:
            self._target(t, "assigning")
            self._alias(t, node.value)
        self.generic_visit(node)

    def visit_AnnAssign(self, node):
        self._target(node.target, "assigning")
        if node.value is not None:
            self._alias(node.target, node.value)
        self.generic_visit(node)

    def visit_AugAssign(self, node):
        self._target(node.target, "changing")
        self.generic_visit(node)

    def visit_Delete(self, node):
        for t in node.targets:
            self._target(t, "deleting")
        self.generic_visit(node)

    def visit_NamedExpr(self, node):
        self._alias(node.target, node.value)
        self.generic_visit(node)

    def visit_For(self, node):
        # `for m in (torch, np): m.allclose = ...`
        if isinstance(node.target, ast.Name) and isinstance(node.iter, (ast.Tuple, ast.List)) and any(
                self.root(e) in self.names.imported for e in node.iter.elts):
            self.names.imported.add(node.target.id)
        self.generic_visit(node)


_BUILTIN_WHY = {
    "getattr": "reaches an attribute by a name built at run time, which no check of the code can follow",
    "setattr": "sets an attribute by a name built at run time, which no check of the code can follow",
    "delattr": "deletes an attribute by a name built at run time",
    "exec": "runs code from a string, which no check of the code can see",
    "eval": "runs code from a string, which no check of the code can see",
    "compile": "makes code from a string, which no check of the code can see",
    "__import__": "imports a module by a name built at run time",
    "globals": "reads or changes the notebook's namespace as a dict",
    "locals": "reads a namespace as a dict",
    "vars": "reads or changes an object's namespace as a dict",
    "breakpoint": "starts a debugger",
    "get_ipython": "reaches the kernel's shell (IPython magics and !shell lines do too)",
    "__builtins__": "reaches every builtin, the forbidden ones included",
}


def _parse(source: str) -> ast.AST | None:
    from IPython.core.inputtransformer2 import TransformerManager

    try:
        return ast.parse(TransformerManager().transform_cell(source))
    except SyntaxError:
        return None   # it fails when run, with Python's own message; nothing runs from it


def check_cells(cells: list[tuple[str, str]], policy: Policy, context: str = "") -> dict[str, list[Violation]]:
    """Each cell's violations, by its ``where`` (cells in the order they run; a cell inside the policy is left
    out). ``context``: code that runs before them and is not checked (the lab's setup cell), read only for
    the modules it imports, so that ``torch.allclose = ...`` is seen as a change to torch wherever torch came
    from."""
    names = _Names()
    tree = _parse(context) if context else None
    if tree is not None:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.imported |= {(a.asname or a.name).split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                names.imported |= {a.asname or a.name for a in node.names}
    found: dict[str, list[Violation]] = {}
    for where, source in cells:
        tree = _parse(source)
        if tree is None or not policy.enforce:
            continue
        checker = _Checker(policy, names)
        checker.visit(tree)
        if checker.found:
            found[where] = sorted({_as_written(v, source) for v in checker.found})
    return found


def _as_written(violation: Violation, source: str) -> Violation:
    """A magic or shell line is checked as IPython runs it (``get_ipython().run_line_magic(...)``): named as the
    student wrote it (``%timeit f(x)``)."""
    lines = source.splitlines()
    if violation.construct == "get_ipython" and 0 < violation.line <= len(lines):
        line = lines[violation.line - 1].strip()
        if line.startswith(("%", "!")):
            return Violation(violation.line, line if len(line) <= 80 else line[:77] + "...",
                             "an IPython magic or shell line runs through the kernel's shell, which graded code may "
                             "not reach")
    return violation


def check_source(source: str, policy: Policy | None = None, context: str = "") -> list[Violation]:
    """One cell's violations (empty: inside the policy)."""
    return check_cells([("cell", source)], policy or Policy(), context).get("cell", [])


def student_cells(cells) -> list[tuple[int, str, str]]:
    """(index, where, source) of the notebook cells the policy checks, in order: the solution cells ("cell
    `reparameterize`") and the code cells a student added ("your cell after `reparameterize`")."""
    from genlab.testing.notebook import grade_id, is_solution

    out, last = [], None
    for index, cell in enumerate(cells):
        gid = grade_id(cell)
        if cell.cell_type == "code" and (is_solution(cell) or gid is None):
            where = f"cell `{gid}`" if gid else (f"your cell after `{last}`" if last else "your cell at the top")
            out.append((index, where, cell.source))
        last = gid or last
    return out


def describe(where: str, violations: list[Violation], graded: bool = True) -> str:
    """"cell `reparameterize` is outside the policy for graded code and was not run: line 3: ..." (``graded``
    False, for the student's self-check: "... and would not run when graded: ...")."""
    outcome = "was not run" if graded else "would not run when graded"
    return f"{where} is outside the policy for graded code and {outcome}: " + "; ".join(str(v) for v in violations)


def student_policy(lab: str | None, start: Path | None = None) -> Policy:
    """The policy as the grader applies it, where a student can read it: the wheel's copy of the course's
    ``[policy]`` (the student bundle), else the course repository's ``autograder/course.toml`` (self-study),
    else :class:`Policy`'s defaults."""
    from importlib import resources

    asset = resources.files("genlab") / "assets" / "policy.toml"
    if asset.is_file():
        return Policy.from_table(tomllib.loads(asset.read_text()).get("policy", {}), lab)
    try:
        from genlab.testing.reference import find_course_root

        course = find_course_root(start or Path.cwd()) / "autograder" / "course.toml"
        if course.is_file():
            return Policy.from_toml(course, lab)
    except FileNotFoundError:
        pass
    return Policy()

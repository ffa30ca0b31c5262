"""A static look at a student's own code for ways of reaching into the grader.

Verdicts are taken outside the student's kernel, so none of these can earn a pass by themselves; but a
notebook that patches torch, IPython or genlab, or pokes at the grader's files, is reported to the
instructor as ``tampered`` with the offending line as evidence, instead of being graded as if honest.

Reading outside its own folder (walking ``/`` or ``/root``, dumping ``os.environ``) is another matter: the
sandbox simply shows nothing there, so it costs no marks; such lines are *probes*, kept as notes for the
instructor.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from IPython.core.inputtransformer2 import TransformerManager

PROTECTED_ROOTS = {"torch", "np", "numpy", "genlab", "IPython", "time", "sys", "os", "builtins", "math",
                   "F", "nn", "safetensors", "__builtins__", "jupyter_client", "ipykernel", "checks"}
SHELL_ATTRS = {"input_transformers_cleanup", "input_transformers_post", "ast_transformers", "showtraceback",
               "set_custom_exc", "custom_exceptions", "events", "run_cell", "run_ast_nodes", "user_ns_hidden",
               "_showtraceback", "showsyntaxerror", "kernel"}
FORBIDDEN_CALLS = {("os", "kill"), ("os", "killpg"), ("os", "setsid"), ("sys", "settrace"),
                   ("sys", "setprofile"), ("gc", "get_referrers"), ("gc", "get_objects"), ("threading", "settrace")}
# signal.signal is not on the list: ignoring SIGINT is a fault (the kernel is killed at the time limit).
# ctypes is not on the list: a crash through it is a fault (status killed), and the sandbox contains it.
FORBIDDEN_NAMES = {"__code__", "__globals__", "_getframe", "__subclasses__"}
# A string that names one of these as a path part ("../solutions/lab1", "gradebook.db") is reaching for the
# grader's files; the bare words are everyday English ("hidden units", "my solutions") and are not flagged.
_GRADER_WORDS = r"(solutions|gradebook|autograder|hidden|source)"
GRADER_PATH = re.compile(rf"(^|[/\\]){_GRADER_WORDS}[/\\.]|[/\\]{_GRADER_WORDS}$")
# Listing or opening these is looking beyond the kernel's own folder (probes, not tampering).
OUTSIDE = re.compile(r"^(/|/root|/home|/srv|/tmp|/etc|/var|/mnt|/opt|/proc/1|~|\.\.)(/|$)")
FILE_READS = {"walk", "listdir", "scandir", "glob", "iglob", "rglob", "iterdir", "open", "Path", "read_text"}
ENVIRON_DUMPS = {"items", "keys", "values", "copy"}


# Settings a student may change without touching how anything is measured or judged.
HARMLESS_TARGETS = ("torch.backends.", "torch._dynamo.config.", "torch._inductor.config.", "plt.rcParams",
                    "matplotlib.rcParams", "mpl.rcParams", "pd.options.")
# Imports that only reach the grader's machinery. IPython itself is not here: `from IPython.display import
# display, clear_output` is everyday notebook code; what is flagged is changing the shell.
GRADER_IMPORTS = ("ipykernel", "jupyter_client", "genlab.testing", "IPython.core.interactiveshell",
                  "IPython.core.ultratb", "IPython.core.inputtransformer", "IPython.core.events")


def _dotted(node) -> str:
    try:
        return ast.unparse(node)
    except Exception:  # noqa: BLE001
        return "?"


class _Scanner(ast.NodeVisitor):
    """Walks a notebook's student cells in order; names bound to protected objects stay protected."""

    def __init__(self):
        self.modules = set(PROTECTED_ROOTS)
        self.shells: set[str] = set()  # names bound to get_ipython()
        self.getters = {"get_ipython"}  # names of get_ipython itself (`from IPython import get_ipython as g`)
        self.findings: list[tuple[int, str]] = []
        self.probes: list[tuple[int, str]] = []

    def flag(self, node, why: str):
        self.findings.append((getattr(node, "lineno", 0), why))

    def probe(self, node, why: str):
        self.probes.append((getattr(node, "lineno", 0), why))

    def _is_environ(self, node) -> bool:
        return isinstance(node, ast.Attribute) and node.attr == "environ" and self.root(node) == "os"

    def root(self, node) -> str | None:
        while isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name) and node.func.id in self.getters:
                return "get_ipython()"
            return self.root(node.func)
        if isinstance(node, ast.Name):
            return "get_ipython()" if node.id in self.shells else node.id
        return None

    def protected(self, node) -> bool:
        root = self.root(node)
        return root in self.modules or root == "get_ipython()"

    def _check_target(self, target):
        if isinstance(target, (ast.Tuple, ast.List)):
            for t in target.elts:
                self._check_target(t)
        elif isinstance(target, ast.Starred):
            self._check_target(target.value)
        elif isinstance(target, ast.Attribute):
            text = _dotted(target)
            if self.protected(target) and not text.startswith(HARMLESS_TARGETS):
                self.flag(target, f"replaces {text}")
            elif target.attr in ("__class__", "__eq__", "__code__", "__dict__"):
                self.flag(target, f"rewrites {text}")
        elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Attribute) \
                and target.value.attr == "__dict__" and self.protected(target.value):
            self.flag(target, f"replaces {_dotted(target)}")
        elif isinstance(target, ast.Subscript) and _is_sys_modules(target.value):
            self.flag(target, f"replaces {_dotted(target)}")

    def _bind(self, target, value):
        """`tt = torch.testing` or `ip = get_ipython()`: the new name is as protected as what it names."""
        if not isinstance(target, ast.Name):
            return
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in self.getters:
            self.shells.add(target.id)
        elif isinstance(value, (ast.Name, ast.Attribute)) and self.protected(value) \
                or isinstance(value, ast.Subscript) and _is_sys_modules(value.value):
            self.modules.add(target.id)

    def visit_Assign(self, node):
        for t in node.targets:
            self._check_target(t)
            self._bind(t, node.value)
        self.generic_visit(node)

    def visit_AnnAssign(self, node):
        self._check_target(node.target)
        if node.value is not None:
            self._bind(node.target, node.value)
        self.generic_visit(node)

    def visit_NamedExpr(self, node):
        self._bind(node.target, node.value)
        self.generic_visit(node)

    def visit_AugAssign(self, node):
        self._check_target(node.target)
        self.generic_visit(node)

    def visit_Delete(self, node):
        for t in node.targets:
            self._check_target(t)
        self.generic_visit(node)

    def visit_For(self, node):
        if self._is_environ(node.iter):
            self.probe(node, "reads the whole environment: for ... in os.environ")
        # `for m in (torch, np): m.allclose = ...`
        if isinstance(node.iter, (ast.Tuple, ast.List)) and isinstance(node.target, ast.Name) \
                and any(isinstance(e, (ast.Name, ast.Attribute)) and self.protected(e) for e in node.iter.elts):
            self.modules.add(node.target.id)
        self.generic_visit(node)

    def visit_Import(self, node):
        for alias in node.names:
            self.modules.add((alias.asname or alias.name).split(".")[0])
            if alias.name.startswith(GRADER_IMPORTS):
                self.flag(node, f"imports {alias.name}")
        self.generic_visit(node)

    def visit_ImportFrom(self, node):
        module = node.module or ""
        for alias in node.names:
            full = f"{module}.{alias.name}"
            if module.startswith(GRADER_IMPORTS) or full.startswith(GRADER_IMPORTS):
                self.flag(node, f"imports {full}")
            # whatever comes out of a library (module, class, function) is not the student's to patch
            self.modules.add(alias.asname or alias.name)
            if alias.name == "get_ipython":
                self.getters.add(alias.asname or alias.name)
        self.generic_visit(node)

    def visit_Call(self, node):
        func = node.func
        if isinstance(func, ast.Name) and func.id in ("setattr", "delattr") and node.args:
            if self.protected(node.args[0]):
                self.flag(node, f"{func.id} on {_dotted(node.args[0])}")
        if isinstance(func, ast.Name) and func.id == "vars" and node.args and self.protected(node.args[0]):
            self.flag(node, f"uses vars({_dotted(node.args[0])})")
        if isinstance(func, ast.Attribute):
            pair = (self.root(func.value), func.attr)
            if pair in FORBIDDEN_CALLS:
                self.flag(node, f"calls {pair[0]}.{pair[1]}")
            if self.root(func) == "get_ipython()" and func.attr in SHELL_ATTRS | {"register", "append", "insert"}:
                self.flag(node, f"changes the IPython shell ({_dotted(func)})")
        for arg in node.args:
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and GRADER_PATH.search(arg.value):
                self.flag(node, f"touches the grader's files ({arg.value!r})")
            elif isinstance(arg, ast.Constant) and isinstance(arg.value, str) and OUTSIDE.match(arg.value) \
                    and (func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")) in FILE_READS:
                self.probe(node, f"reads outside its folder: {_dotted(node)[:80]}")
            elif self._is_environ(arg):
                self.probe(node, f"reads the whole environment: {_dotted(node)[:80]}")
        if isinstance(func, ast.Attribute) and func.attr in ENVIRON_DUMPS and self._is_environ(func.value):
            self.probe(node, f"reads the whole environment: {_dotted(node)[:80]}")
        if isinstance(func, ast.Attribute) and _is_sys_modules(func.value) \
                and func.attr in ("pop", "update", "clear", "setdefault", "__setitem__", "__delitem__", "popitem"):
            self.flag(node, f"changes sys.modules ({_dotted(func)})")
        self.generic_visit(node)

    def visit_Attribute(self, node):
        if node.attr in FORBIDDEN_NAMES or (node.attr in SHELL_ATTRS and self.root(node) == "get_ipython()"):
            self.flag(node, f"uses {_dotted(node)}")
        self.generic_visit(node)

    def visit_Name(self, node):
        if node.id in FORBIDDEN_NAMES:
            self.flag(node, f"uses {node.id}")


def _is_sys_modules(node) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "modules" and isinstance(node.value, ast.Name) \
        and node.value.id == "sys"


@dataclass
class Scan:
    tampering: list[str] = field(default_factory=list)   # evidence: the notebook is graded as tampered
    probes: list[str] = field(default_factory=list)      # looks outside its folder: notes, no marks taken


def scan_notebook(cells: list[tuple[str, str]]) -> Scan:
    """Lines such as "cell `reparameterize`, line 3: replaces torch.allclose"; both lists empty for honest code.

    The cells are read in the order they run, so `import torch.testing as tt` in one cell and
    `tt.assert_close = ...` in a later one are seen together.
    """
    scanner, magics = _Scanner(), TransformerManager()
    result = Scan()
    for where, source in cells:
        try:
            tree = ast.parse(magics.transform_cell(source))
        except SyntaxError:
            continue  # the cell will fail when run; nothing to hide there
        scanner.findings, scanner.probes = [], []
        scanner.visit(tree)
        result.tampering += [f"{where}, line {line}: {why}" for line, why in sorted(set(scanner.findings))]
        result.probes += [f"{where}, line {line}: {why}" for line, why in sorted(set(scanner.probes))]
    return result


def scan_cells(cells: list[tuple[str, str]]) -> list[str]:
    """The tampering evidence alone (see :func:`scan_notebook`)."""
    return scan_notebook(cells).tampering


def scan_source(source: str, where: str) -> list[str]:
    return scan_cells([(where, source)])

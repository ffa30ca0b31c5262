"""A static look at a student's own code for ways of reaching into the grader.

Verdicts are taken outside the student's kernel, so none of these can earn a pass by themselves; but a
notebook that patches torch, IPython or genlab, or pokes at the grader's files, is reported to the
instructor as ``tampered`` with the offending line as evidence, instead of being graded as if honest.
"""
from __future__ import annotations

import ast

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
GRADER_PATHS = ("solutions", "gradebook", "autograder", ".genlab_rpc", "hidden", "source/")


def _root(node) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    if isinstance(node, ast.Call):
        return _root(node.func) if not (isinstance(node.func, ast.Name) and node.func.id == "get_ipython") \
            else "get_ipython()"
    return node.id if isinstance(node, ast.Name) else None


def _dotted(node) -> str:
    try:
        return ast.unparse(node)
    except Exception:  # noqa: BLE001
        return "?"


class _Scanner(ast.NodeVisitor):
    def __init__(self, modules: set[str]):
        self.modules = modules | PROTECTED_ROOTS
        self.findings: list[tuple[int, str]] = []

    def flag(self, node, why: str):
        self.findings.append((getattr(node, "lineno", 0), why))

    def _check_target(self, target):
        if isinstance(target, (ast.Tuple, ast.List)):
            for t in target.elts:
                self._check_target(t)
        elif isinstance(target, ast.Attribute):
            root = _root(target)
            if root in self.modules or root == "get_ipython()":
                self.flag(target, f"replaces {_dotted(target)}")
            elif target.attr in ("__class__", "__eq__", "__code__"):
                self.flag(target, f"rewrites {_dotted(target)}")

    def visit_Assign(self, node):
        for t in node.targets:
            self._check_target(t)
        self.generic_visit(node)

    def visit_AugAssign(self, node):
        self._check_target(node.target)
        self.generic_visit(node)

    def visit_Delete(self, node):
        for t in node.targets:
            self._check_target(t)
        self.generic_visit(node)

    def visit_Import(self, node):
        for alias in node.names:
            self.modules.add((alias.asname or alias.name).split(".")[0])
            if alias.name.split(".")[0] in ("IPython", "ipykernel", "jupyter_client"):
                self.flag(node, f"imports {alias.name}")
        self.generic_visit(node)

    def visit_ImportFrom(self, node):
        if (node.module or "").split(".")[0] in ("IPython", "ipykernel", "jupyter_client"):
            self.flag(node, f"imports from {node.module}")
        if (node.module or "").startswith("genlab.testing"):
            self.flag(node, f"imports the grader's internals ({node.module})")
        self.generic_visit(node)

    def visit_Call(self, node):
        func = node.func
        if isinstance(func, ast.Name) and func.id in ("setattr", "delattr") and node.args:
            root = _root(node.args[0])
            if root in self.modules or root == "get_ipython()":
                self.flag(node, f"{func.id} on {_dotted(node.args[0])}")
        if isinstance(func, ast.Attribute):
            pair = (_root(func.value), func.attr)
            if pair in FORBIDDEN_CALLS:
                self.flag(node, f"calls {pair[0]}.{pair[1]}")
            if _root(func) == "get_ipython()" and func.attr in SHELL_ATTRS | {"register", "append", "insert"}:
                self.flag(node, f"changes the IPython shell ({_dotted(func)})")
        for arg in node.args:
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str) \
                    and any(p in arg.value for p in GRADER_PATHS):
                self.flag(node, f"touches the grader's files ({arg.value!r})")
        self.generic_visit(node)

    def visit_Attribute(self, node):
        if node.attr in FORBIDDEN_NAMES or (node.attr in SHELL_ATTRS and _root(node) == "get_ipython()"):
            self.flag(node, f"uses {_dotted(node)}")
        if node.attr == "modules" and _root(node) == "sys":
            self.flag(node, "uses sys.modules")
        self.generic_visit(node)

    def visit_Name(self, node):
        if node.id in FORBIDDEN_NAMES:
            self.flag(node, f"uses {node.id}")


def scan_source(source: str, where: str) -> list[str]:
    """Evidence lines ("cell reparameterize, line 3: replaces torch.allclose"), empty for honest code."""
    try:
        python = TransformerManager().transform_cell(source)
        tree = ast.parse(python)
    except SyntaxError:
        return []  # the cell will fail when run; nothing to hide there
    scanner = _Scanner(set())
    scanner.visit(tree)
    return [f"{where}, line {line}: {why}" for line, why in sorted(set(scanner.findings))]

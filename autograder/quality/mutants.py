"""Mutants of a reference solution, written with :mod:`ast`: one small change each, in a fixed order.

Each operator is an :class:`ast.NodeTransformer` that counts the places where it applies ("sites", each
with one or more variants) and, given a ``target`` number, applies exactly that one change. So
``mutants(source)`` is every (operator, site, variant) in turn, deterministic for a given source, with
duplicates (two operators giving the same code) and no-ops dropped. The mutant's code, and the reference it
is compared with, are both ``ast.unparse`` d, so a diff between them shows the change and nothing else.

The operators are the mistakes students make in these labs: ``+``/``-`` and ``*``/``/`` swapped,
comparisons swapped, constants off by one (``0``/``1``, ``n`` -> ``n + 1``, ``c`` -> ``2c``), the wrong
``dim`` or ``keepdim``, a transpose dropped or added, ``dtype=``/``device=``/``generator=`` dropped,
``.detach()``/``.float()``/``.double()`` added or removed, ``torch.no_grad()`` removed, in-place and
out-of-place forms swapped, a statement deleted, two arguments swapped, and ``p`` for ``1 - p``. Then three
at the level of the misses issue 41 found: a functional op on an argument made in place on it (``x + y`` ->
``x.add_(y)``, ``torch.exp(x)`` -> ``x.exp_()``), a reduction replaced (``sum`` <-> ``mean``, ``amax`` <->
``amin``, a full reduction made one over dimension 0), and a cast to a narrower dtype (``torch.float64`` ->
``torch.float32``, ``.long()`` -> ``.int()``).
"""
from __future__ import annotations

import ast
import copy
import difflib
from dataclasses import dataclass
from typing import Callable, Iterator

REDUCTIONS = {"sum", "mean", "softmax", "log_softmax", "logsumexp", "max", "min", "amax", "amin", "argmax",
              "argmin", "prod", "std", "var", "norm", "cumsum", "cumprod", "all", "any", "median", "nansum",
              "nanmean", "unsqueeze", "squeeze", "cat", "stack", "flatten", "diff", "sort", "topk"}
DIM_KEYWORDS = {"dim", "axis"}
DROPPED_KEYWORDS = {"dtype", "device", "generator"}
CASTS = ("detach", "float", "double")
NO_GRAD = {"no_grad", "inference_mode"}
# methods with an in-place twin ``name_`` (and the other way round)
INPLACE = {"add", "sub", "mul", "div", "pow", "exp", "log", "neg", "sqrt", "rsqrt", "abs", "clamp",
           "clamp_min", "clamp_max", "masked_fill", "tanh", "sigmoid", "relu", "addcmul", "addcdiv", "lerp",
           "sign", "floor", "ceil", "round", "reciprocal", "square", "unsqueeze", "squeeze", "t", "transpose",
           "log1p", "expm1", "exp2", "sin", "cos", "fill_diagonal", "index_add", "scatter", "scatter_add",
           "masked_scatter", "clip", "mul", "true_divide", "floor_divide", "fmod", "remainder", "atan2"}
TRANSPOSE_ATTRS = {"T", "mT", "mH", "H"}
TRANSPOSE_METHODS = {"transpose", "t", "swapaxes", "swapdims"}
MATMULS = {"matmul", "bmm", "mm"}
PROB_NAMES = {"p", "prob", "dropout_p", "keep_prob", "drop_prob", "p_drop"}

ARITH_SWAPS = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult,
               ast.FloorDiv: ast.Mult, ast.Pow: ast.Mult}
COMPARE_SWAPS = {ast.Lt: (ast.LtE, ast.Gt), ast.LtE: (ast.Lt,), ast.Gt: (ast.GtE, ast.Lt), ast.GtE: (ast.Gt,),
                 ast.Eq: (ast.NotEq,), ast.NotEq: (ast.Eq,), ast.Is: (ast.IsNot,), ast.IsNot: (ast.Is,),
                 ast.In: (ast.NotIn,), ast.NotIn: (ast.In,)}
SYMBOL = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Pow: "**",
          ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=",
          ast.Is: "is", ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in", ast.MatMult: "@"}


@dataclass
class Mutant:
    index: int            # position in the deterministic order (after duplicates are dropped)
    operator: str
    description: str
    line: int             # line of the change in the unparsed reference
    source: str           # the whole mutated cell, unparsed
    diff: str             # unified diff against the unparsed reference


class Operator(ast.NodeTransformer):
    """Counts its sites; with ``target`` set, replaces the target-th variant and records what it did."""

    name = "operator"

    def __init__(self, target: int | None = None):
        self.target, self.count = target, 0
        self.applied: tuple[str, int] | None = None
        self._in_function = 0
        self._docstrings: set[int] = set()

    def offer(self, node, variants: list[tuple[str, Callable[[], object]]]):
        """``variants``: (description, builder of the replacement node) for this site."""
        for description, build in variants:
            if self.target == self.count and self.applied is None:
                self.applied = (description, getattr(node, "lineno", 0))
                self.count += 1
                return build()
            self.count += 1
        return node

    # the function bodies and docstrings are tracked for every operator
    def visit_FunctionDef(self, node):
        if node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant) \
                and isinstance(node.body[0].value.value, str):
            self._docstrings.add(id(node.body[0]))
        self._in_function += 1
        node = self.mutate_function(node)
        self.generic_visit(node)
        self._in_function -= 1
        return node

    visit_AsyncFunctionDef = visit_FunctionDef

    def mutate_function(self, node):
        return node


def _src(node) -> str:
    return ast.unparse(node)


def _const(value) -> ast.AST:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
        return ast.UnaryOp(ast.USub(), ast.Constant(-value))
    return ast.Constant(value)


def _int_value(node) -> int | None:
    """The value of an int literal, also written as ``-1``."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant) \
            and type(node.operand.value) is int:
        return -node.operand.value
    return None


def _call_name(call: ast.Call) -> str | None:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None


def _is_method(call: ast.Call) -> bool:
    """``x.sum(...)`` on a value, not ``torch.sum(...)``/``F.softmax(...)`` on a module."""
    f = call.func
    return isinstance(f, ast.Attribute) and not (isinstance(f.value, ast.Name) and f.value.id in
                                                  {"torch", "F", "nn", "np", "math", "functional", "linalg"})


class Arithmetic(Operator):
    name = "arith"

    def visit_BinOp(self, node):
        self.generic_visit(node)
        new = ARITH_SWAPS.get(type(node.op))
        if new is None:
            return node
        return self.offer(node, [(f"`{SYMBOL[type(node.op)]}` -> `{SYMBOL[new]}`",
                                  lambda: ast.BinOp(node.left, new(), node.right))])

    def visit_AugAssign(self, node):
        self.generic_visit(node)
        new = ARITH_SWAPS.get(type(node.op))
        if new is None:
            return node
        return self.offer(node, [(f"`{SYMBOL[type(node.op)]}=` -> `{SYMBOL[new]}=`",
                                  lambda: ast.AugAssign(node.target, new(), node.value))])

    def visit_UnaryOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, ast.USub) and not isinstance(node.operand, ast.Constant):
            return self.offer(node, [("unary `-` removed", lambda: node.operand)])
        return node


class Comparison(Operator):
    name = "compare"

    def visit_Compare(self, node):
        self.generic_visit(node)
        variants = []
        for i, op in enumerate(node.ops):
            for new in COMPARE_SWAPS.get(type(op), ()):
                def build(i=i, new=new):
                    ops = list(node.ops)
                    ops[i] = new()
                    return ast.Compare(node.left, ops, node.comparators)
                variants.append((f"`{SYMBOL[type(op)]}` -> `{SYMBOL[new]}`", build))
        return self.offer(node, variants)


class Constant(Operator):
    name = "constant"

    def visit_Expr(self, node):
        if id(node) in self._docstrings:
            return node
        return self.generic_visit(node)

    def visit_Constant(self, node):
        v = node.value
        if isinstance(v, bool):
            return self.offer(node, [(f"`{v}` -> `{not v}`", lambda: ast.Constant(not v))])
        if isinstance(v, int):
            new = {0: 1, 1: 0}.get(v, v + 1)
            return self.offer(node, [(f"`{v}` -> `{new}`", lambda: ast.Constant(new))])
        if isinstance(v, float):
            new = 1.0 if v == 0.0 else 2 * v
            return self.offer(node, [(f"`{v!r}` -> `{new!r}`", lambda: ast.Constant(new))])
        return node


def _dim_variants(value: int) -> list[int]:
    return {-1: [-2, 0], -2: [-1], 0: [-1, 1]}.get(value, [-1])


class Dim(Operator):
    """``dim=`` of reductions and softmax (keyword or positional), and ``keepdim`` flipped."""

    name = "dim"

    def visit_Call(self, node):
        self.generic_visit(node)
        variants = []
        for k, kw in enumerate(node.keywords):
            if kw.arg in DIM_KEYWORDS and _int_value(kw.value) is not None:
                for new in _dim_variants(_int_value(kw.value)):
                    variants.append((f"`{kw.arg}={_int_value(kw.value)}` -> `{kw.arg}={new}`",
                                     lambda k=k, new=new: self._with_keyword(node, k, _const(new))))
            elif kw.arg == "keepdim" and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, bool):
                variants.append((f"`keepdim={kw.value.value}` -> `keepdim={not kw.value.value}`",
                                 lambda k=k, v=kw.value.value: self._with_keyword(node, k, ast.Constant(not v))))
        name = _call_name(node)
        if name in REDUCTIONS:
            position = 0 if _is_method(node) else 1
            if len(node.args) > position and _int_value(node.args[position]) is not None:
                old = _int_value(node.args[position])
                for new in _dim_variants(old):
                    def build(new=new):
                        args = list(node.args)
                        args[position] = _const(new)
                        return ast.Call(node.func, args, node.keywords)
                    variants.append((f"dim `{old}` -> `{new}` in `{name}`", build))
            if name not in {"cat", "stack", "unsqueeze", "squeeze", "flatten", "diff", "sort", "topk"} and \
                    not any(kw.arg == "keepdim" for kw in node.keywords) and \
                    (any(kw.arg in DIM_KEYWORDS for kw in node.keywords) or len(node.args) > position) and \
                    name not in {"softmax", "log_softmax", "cumsum", "cumprod", "norm"}:
                variants.append((f"`keepdim=True` added to `{name}`",
                                 lambda: ast.Call(node.func, node.args,
                                                  node.keywords + [ast.keyword("keepdim", ast.Constant(True))])))
        return self.offer(node, variants)

    @staticmethod
    def _with_keyword(node, k, value):
        keywords = list(node.keywords)
        keywords[k] = ast.keyword(keywords[k].arg, value)
        return ast.Call(node.func, node.args, keywords)


class Transpose(Operator):
    name = "transpose"

    def visit_Attribute(self, node):
        self.generic_visit(node)
        if node.attr in TRANSPOSE_ATTRS and isinstance(node.ctx, ast.Load):
            return self.offer(node, [(f"`.{node.attr}` dropped", lambda: node.value)])
        return node

    def visit_Call(self, node):
        self.generic_visit(node)
        name = _call_name(node)
        if name in TRANSPOSE_METHODS:
            if _is_method(node):
                return self.offer(node, [(f"`.{name}(...)` dropped", lambda: node.func.value)])
            if node.args:
                return self.offer(node, [(f"`{name}(...)` dropped", lambda: node.args[0])])
        if name in MATMULS and not _is_method(node) and len(node.args) >= 2:
            return self.offer(node, [(f"`.mT` added to the second operand of `{name}`",
                                      lambda: ast.Call(node.func, [node.args[0], _mT(node.args[1]), *node.args[2:]],
                                                       node.keywords))])
        return node

    def visit_BinOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, ast.MatMult):
            return self.offer(node, [("`.mT` added to the right operand of `@`",
                                      lambda: ast.BinOp(node.left, ast.MatMult(), _mT(node.right)))])
        return node


def _mT(node):
    return ast.Attribute(node, "mT", ast.Load())


class DropKeyword(Operator):
    name = "keyword"

    def visit_Call(self, node):
        self.generic_visit(node)
        variants = [(f"`{kw.arg}=` dropped from `{_call_name(node)}`",
                     lambda k=k: ast.Call(node.func, node.args, node.keywords[:k] + node.keywords[k + 1:]))
                    for k, kw in enumerate(node.keywords) if kw.arg in DROPPED_KEYWORDS]
        return self.offer(node, variants)


class Cast(Operator):
    """``.detach()``, ``.float()``, ``.double()`` removed where written, added to returned and assigned values."""

    name = "cast"

    def visit_Call(self, node):
        self.generic_visit(node)
        name = _call_name(node)
        if name in CASTS and _is_method(node) and not node.args and not node.keywords:
            return self.offer(node, [(f"`.{name}()` removed", lambda: node.func.value)])
        return node

    def _added(self, value):
        return [(f"`.{c}()` added", lambda c=c: ast.Call(ast.Attribute(value, c, ast.Load()), [], []))
                for c in CASTS]

    def visit_Return(self, node):
        self.generic_visit(node)
        if node.value is None or isinstance(node.value, (ast.Tuple, ast.Constant, ast.Dict, ast.List)):
            return node
        return self.offer(node, [(d, lambda b=b: ast.Return(b())) for d, b in self._added(node.value)])

    def visit_Assign(self, node):
        self.generic_visit(node)
        if not self._in_function or not isinstance(node.value, (ast.Call, ast.BinOp)) or \
                isinstance(node.targets[0], ast.Tuple):
            return node
        return self.offer(node, [(d, lambda b=b: ast.Assign(node.targets, b())) for d, b in self._added(node.value)])


def _is_no_grad(expr) -> bool:
    return isinstance(expr, ast.Call) and _call_name(expr) in NO_GRAD or \
        isinstance(expr, ast.Attribute) and expr.attr in NO_GRAD


class NoGrad(Operator):
    name = "no_grad"

    def visit_With(self, node):
        self.generic_visit(node)
        for i, item in enumerate(node.items):
            if _is_no_grad(item.context_expr):
                def build(i=i):
                    rest = node.items[:i] + node.items[i + 1:]
                    return ast.With(rest, node.body) if rest else node.body
                return self.offer(node, [(f"`with {_src(item.context_expr)}:` removed", build)])
        return node

    def mutate_function(self, node):
        for i, dec in enumerate(node.decorator_list):
            if _is_no_grad(dec):
                def build(i=i):
                    node.decorator_list = node.decorator_list[:i] + node.decorator_list[i + 1:]
                    return node
                return self.offer(node, [(f"`@{_src(dec)}` removed", build)])
        return node


class InPlace(Operator):
    name = "inplace"

    def visit_Call(self, node):
        self.generic_visit(node)
        name = _call_name(node)
        if not (_is_method(node) and name):
            return node
        if name.endswith("_") and not name.endswith("__") and name[:-1] in INPLACE:
            new = name[:-1]
        elif name in INPLACE:
            new = name + "_"
        else:
            return node
        return self.offer(node, [(f"`.{name}(...)` -> `.{new}(...)`",
                                  lambda: ast.Call(ast.Attribute(node.func.value, new, ast.Load()), node.args,
                                                   node.keywords))])

    def visit_AugAssign(self, node):
        self.generic_visit(node)
        if not isinstance(node.target, ast.Name):
            return node
        op = SYMBOL.get(type(node.op), "?")
        return self.offer(node, [(f"`x {op}= y` -> `x = x {op} y`",
                                  lambda: ast.Assign([ast.Name(node.target.id, ast.Store())],
                                                     ast.BinOp(ast.Name(node.target.id, ast.Load()), node.op,
                                                               node.value)))])

    def visit_Assign(self, node):
        self.generic_visit(node)
        v = node.value
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) and isinstance(v, ast.BinOp) and \
                isinstance(v.left, ast.Name) and v.left.id == node.targets[0].id and type(v.op) in SYMBOL:
            op = SYMBOL[type(v.op)]
            return self.offer(node, [(f"`x = x {op} y` -> `x {op}= y`",
                                      lambda: ast.AugAssign(ast.Name(v.left.id, ast.Store()), v.op, v.right))])
        return node


class DeleteStatement(Operator):
    name = "delete"

    def generic_visit(self, node):
        super().generic_visit(node)
        if not self._in_function:
            return node
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if not isinstance(body, list) or isinstance(node, ast.Module):
                continue
            for i, stmt in enumerate(list(body)):
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Pass, ast.Import,
                                     ast.ImportFrom)) or id(stmt) in self._docstrings:
                    continue
                def build(i=i, body=body, field=field):
                    rest = body[:i] + body[i + 1:]
                    if not any(id(s) not in self._docstrings for s in rest):
                        rest = rest + [ast.Pass()]
                    setattr(node, field, rest)
                    return node
                first = _src(stmt).splitlines()[0]
                desc = f"statement deleted: `{first[:60]}`"
                # offer() returns the node itself (built in place) or the unchanged node
                self.offer(stmt, [(desc, build)])
        return node


class SwapArguments(Operator):
    name = "swap_args"

    def visit_Call(self, node):
        self.generic_visit(node)
        variants = []
        for i in range(len(node.args) - 1):
            a, b = node.args[i], node.args[i + 1]
            if isinstance(a, ast.Starred) or isinstance(b, ast.Starred) or _src(a) == _src(b):
                continue
            def build(i=i):
                args = list(node.args)
                args[i], args[i + 1] = args[i + 1], args[i]
                return ast.Call(node.func, args, node.keywords)
            variants.append((f"arguments {i + 1} and {i + 2} of `{_call_name(node)}` swapped", build))
        return self.offer(node, variants)


def _is_prob(node) -> bool:
    return isinstance(node, ast.Name) and node.id in PROB_NAMES and isinstance(node.ctx, ast.Load) or \
        isinstance(node, ast.Attribute) and node.attr in PROB_NAMES and isinstance(node.ctx, ast.Load)


class Probability(Operator):
    name = "prob"

    def visit_BinOp(self, node):
        if isinstance(node.op, ast.Sub) and isinstance(node.left, ast.Constant) and node.left.value == 1 and \
                _is_prob(node.right):
            return self.offer(node, [(f"`1 - {_src(node.right)}` -> `{_src(node.right)}`", lambda: node.right)])
        return self.generic_visit(node)

    def visit_Name(self, node):
        if _is_prob(node):
            return self.offer(node, [(f"`{node.id}` -> `1 - {node.id}`",
                                      lambda: ast.BinOp(ast.Constant(1), ast.Sub(), node))])
        return node

    def visit_Attribute(self, node):
        if _is_prob(node):
            return self.offer(node, [(f"`{_src(node)}` -> `1 - {_src(node)}`",
                                      lambda: ast.BinOp(ast.Constant(1), ast.Sub(), node))])
        return self.generic_visit(node)


# The level of the misses issue 41 found, which one-token edits do not reach: an argument written in place by
# what reads as a functional op, a reduction replaced by another, a cast to a narrower dtype.
ARG_INPLACE_OPS = {ast.Add: "add_", ast.Sub: "sub_", ast.Mult: "mul_", ast.Div: "div_"}
REDUCTION_SWAPS = {"sum": "mean", "mean": "sum", "amax": "amin", "amin": "amax", "max": "min", "min": "max",
                   "nansum": "nanmean", "nanmean": "nansum", "logsumexp": "amax"}
NARROWER_DTYPES = {"float64": "float32", "double": "float32", "float32": "float16", "float": "float16",
                   "int64": "int32", "long": "int32", "int32": "int16", "int": "int16"}
NARROWER_CASTS = {"double": "float", "float": "half", "long": "int", "int": "short"}


class WriteArgument(Operator):
    """A functional op on an argument of the function made in place on it: ``x + y`` -> ``x.add_(y)``,
    ``torch.exp(x)`` -> ``x.exp_()``. The result is the same; the caller's tensor is changed."""

    name = "write_arg"

    def __init__(self, target: int | None = None):
        super().__init__(target)
        self._params: list[set[str]] = []

    def mutate_function(self, node):
        a = node.args
        self._params.append({p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)} - {"self"})
        return node

    def visit_FunctionDef(self, node):
        node = super().visit_FunctionDef(node)
        self._params.pop()
        return node

    visit_AsyncFunctionDef = visit_FunctionDef

    def _param(self, node) -> bool:
        return bool(self._params) and isinstance(node, ast.Name) and node.id in self._params[-1]

    def visit_BinOp(self, node):
        self.generic_visit(node)
        method = ARG_INPLACE_OPS.get(type(node.op))
        if method and self._param(node.left):
            return self.offer(node, [(f"`{_src(node)}` -> `{node.left.id}.{method}({_src(node.right)})` (the "
                                      f"argument `{node.left.id}` written in place)",
                                      lambda: ast.Call(ast.Attribute(node.left, method, ast.Load()), [node.right],
                                                       []))])
        return node

    def visit_Call(self, node):
        self.generic_visit(node)
        name = _call_name(node)
        if name in INPLACE and not _is_method(node) and isinstance(node.func, ast.Attribute) and node.args \
                and self._param(node.args[0]):
            first = node.args[0]
            return self.offer(node, [(f"`{_src(node)}` -> `{first.id}.{name}_(...)` (the argument `{first.id}` "
                                      "written in place)",
                                      lambda: ast.Call(ast.Attribute(first, name + "_", ast.Load()), node.args[1:],
                                                       node.keywords))])
        return node


class Reduction(Operator):
    """A reduction replaced by another (``sum`` <-> ``mean``, ``amax`` <-> ``amin``, ``logsumexp`` -> ``amax``),
    and a full reduction (``x.sum()``) made one over the first dimension."""

    name = "reduction"

    def visit_Call(self, node):
        self.generic_visit(node)
        name = _call_name(node)
        tensor_call = _is_method(node) or (isinstance(node.func, ast.Attribute) and isinstance(node.func.value,
                                                                                              ast.Name)
                                           and node.func.value.id == "torch")
        if name not in REDUCTION_SWAPS or not tensor_call:
            return node
        new = REDUCTION_SWAPS[name]
        variants = [(f"`{name}` -> `{new}`",
                     lambda: ast.Call(ast.Attribute(node.func.value, new, ast.Load()), node.args, node.keywords))]
        if _is_method(node) and not node.args and not node.keywords and name in {"sum", "mean", "amax", "amin"}:
            variants.append((f"`.{name}()` -> `.{name}(0)`",
                             lambda: ast.Call(node.func, [ast.Constant(0)], [])))
        return self.offer(node, variants)


class NarrowCast(Operator):
    """A dtype made narrower: ``torch.float64`` -> ``torch.float32``, ``torch.int64`` -> ``torch.int32``,
    ``.double()`` -> ``.float()``, ``.long()`` -> ``.int()``, ``.float()`` -> ``.half()``."""

    name = "narrow"

    def visit_Attribute(self, node):
        self.generic_visit(node)
        if isinstance(node.value, ast.Name) and node.value.id == "torch" and node.attr in NARROWER_DTYPES and \
                isinstance(node.ctx, ast.Load):
            new = NARROWER_DTYPES[node.attr]
            return self.offer(node, [(f"`torch.{node.attr}` -> `torch.{new}`",
                                      lambda: ast.Attribute(node.value, new, ast.Load()))])
        return node

    def visit_Call(self, node):
        self.generic_visit(node)
        name = _call_name(node)
        if name in NARROWER_CASTS and _is_method(node) and not node.args and not node.keywords:
            new = NARROWER_CASTS[name]
            return self.offer(node, [(f"`.{name}()` -> `.{new}()`",
                                      lambda: ast.Call(ast.Attribute(node.func.value, new, ast.Load()), [], []))])
        return node


OPERATORS: list[type[Operator]] = [Arithmetic, Comparison, Constant, Dim, Transpose, DropKeyword, Cast, NoGrad,
                                   InPlace, DeleteStatement, SwapArguments, Probability,
                                   # issue 41: after the one-token edits, so that their order is unchanged
                                   WriteArgument, Reduction, NarrowCast]


def normalized(source: str) -> str:
    """The source as every mutant is written: ``ast.unparse`` d (comments and layout dropped)."""
    return ast.unparse(ast.parse(source))


def _count(operator: type[Operator], tree: ast.AST) -> int:
    op = operator()
    op.visit(copy.deepcopy(tree))
    return op.count


def mutants(source: str, operators=None) -> Iterator[Mutant]:
    """Every single-change mutant of ``source`` (a solution cell), in a deterministic order."""
    tree = ast.parse(source)
    original = ast.unparse(tree)
    seen = {original}
    index = 0
    for operator in operators or OPERATORS:
        for target in range(_count(operator, tree)):
            op = operator(target)
            mutated = ast.fix_missing_locations(op.visit(copy.deepcopy(tree)))
            if op.applied is None:
                continue
            try:
                text = ast.unparse(mutated)
                compile(text, "<mutant>", "exec")
            except (SyntaxError, ValueError, TypeError, AttributeError):
                continue
            if text in seen:
                continue
            seen.add(text)
            description, _ = op.applied
            diff_lines = list(difflib.unified_diff(original.splitlines(), text.splitlines(), "reference",
                                                   "mutant", lineterm="", n=1))
            line = _changed_line(original, text)
            yield Mutant(index, operator.name, description, line, text, "\n".join(diff_lines))
            index += 1


def _changed_line(a: str, b: str) -> int:
    for n, (x, y) in enumerate(zip(a.splitlines(), b.splitlines()), start=1):
        if x != y:
            return n
    return min(len(a.splitlines()), len(b.splitlines())) + 1

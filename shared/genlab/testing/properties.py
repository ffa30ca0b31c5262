"""Generated inputs over a function's stated domain, compared with an expected function (hypothesis).

The domain of a graded function is written once, in its row of the lab's "What the tests check, and what is
left free" table, at the end of the "left free" column::

    Generated inputs: `mu, logvar: real[*S] in [-20, 20]; *S: 1..3 dims of 1..7; dtype: float32, float64`.

or, for a function no input is generated for, ``Generated inputs: none (the reason).``

A test then calls ``genlab.check_generated(f, expected, "f")``: hypothesis draws inputs from that domain
(derandomized, a fixed number of examples, no example database, no deadline, so a grade never depends on
luck or on the machine), calls ``f`` and ``expected`` on each and compares the results (``check_close`` for
tensors). On a mismatch hypothesis shrinks the input to a small one, and the failure says "your f on this
input gave X, expected Y" with that input.

The domain language, clauses separated by ``;``:

- ``examples: N``: how many inputs are drawn (default :data:`DEFAULT_EXAMPLES`);
- ``B: 1..9``: a size (upper-case name), drawn in that range; ``*S: 1..3 dims of 1..7``: a batch of sizes;
- ``x, y: KIND[DIMS]`` a tensor argument (names are parameters, in the signature's order; ``eps?`` is
  optional: sometimes left out, on both sides; ``_x`` is drawn but not passed, for a ``from`` after it). DIMS are sizes, literal integers or ``*S``. KIND is ``real``
  (floats, optionally ``in [lo, hi]``, with ``at v1, v2`` values drawn often: thresholds, ties), ``int``
  (``in [lo, hi]``, bounds may name sizes: ``[0, T-1]``), ``bool``, ``unit`` (floats in [0, 1]), ``logprob``
  (log-probabilities: log-softmax over the last dimension of reals), ``decreasing`` (values in (0, 1),
  decreasing: a cumulative product of 1 - beta), ``spd`` (a symmetric positive definite matrix, the last two
  sizes equal);
- ``y: from EXPR``: computed from the sizes and the arguments drawn before it (``torch`` and ``math`` known);
- ``beta: float in [lo, hi]`` / ``k: int in [lo, hi]`` / ``flag: choice of a, b``: a Python scalar argument;
- ``dtype: float32, float64``: the dtype of every floating tensor (drawn once per example);
- ``layout: contiguous, transposed``: transposed tensors are views (``x.mT`` of a contiguous tensor), not
  contiguous in the caller's process.

The generated values are exact in the drawn dtype; the expected function gets the same tensors in float64
(so a float32 answer is compared with ground truth at float32's tolerance).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

DEFAULT_EXAMPLES = 10   # each is a call into the student's kernel: 25 cost about 2.4 CPU s per Lab 1 notebook
_SHOWN = 24        # a tensor with at most this many elements is shown in full in a failure
MARK = "Generated inputs:"


class DomainError(ValueError):
    """The domain text cannot be read (a lab author's mistake, never a student's)."""


@dataclass
class Arg:
    name: str
    kind: str                      # real, int, bool, unit, logprob, decreasing, spd, float (scalar), choice
    dims: tuple = ()               # size names, literal ints, "*S"
    lo: Any = None
    hi: Any = None
    at: tuple = ()
    optional: bool = False
    choices: tuple = ()
    tensor: bool = True
    dtype: Any = None              # a fixed dtype (``float64`` after the dims), else the example's
    below: str | None = None       # ``int[B] below t``: elementwise in [lo, t - 1]
    formula: str | None = None     # ``from EXPR``: computed from the arguments drawn before it


@dataclass
class Domain:
    text: str
    args: list[Arg] = field(default_factory=list)
    sizes: dict[str, tuple[int, int]] = field(default_factory=dict)
    batches: dict[str, tuple[int, int, int, int]] = field(default_factory=dict)
    dtypes: tuple = (torch.float32, torch.float64)
    layouts: tuple = ("contiguous",)
    examples: int = DEFAULT_EXAMPLES


_RANGE = re.compile(r"^(?P<lo>[^.]+)\.\.(?P<hi>.+)$")
_TENSOR = re.compile(r"^(?P<kind>\w+)\[(?P<dims>[^\]]*)\](?:\s+(?P<dtype>float16|bfloat16|float32|float64|int64|int32|int8|uint8))?"
                     r"(?:\s+in\s+\[(?P<lo>[^,\]]+),\s*(?P<hi>[^\]]+)\])?(?:\s+below\s+(?P<below>\w+))?"
                     r"(?:\s+at\s+(?P<at>.+))?$")
_SCALAR = re.compile(r"^(?P<kind>float|int)\s+in\s+\[(?P<lo>[^,\]]+),\s*(?P<hi>[^\]]+)\](?:\s+at\s+(?P<at>.+))?$")
_KINDS = {"real", "int", "bool", "unit", "logprob", "decreasing", "spd"}


def _number(text: str):
    text = text.strip()
    if text in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[text]
    if text.startswith("torch.") and isinstance(getattr(torch, text[6:], None), torch.dtype):
        return getattr(torch, text[6:])
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text                 # an expression in sizes (T-1), evaluated per example


def parse_domain(text: str) -> Domain:
    """Reads the domain language (see the module's docstring)."""
    domain = Domain(text)
    for clause in (c.strip() for c in text.split(";")):
        if not clause:
            continue
        if ":" not in clause:
            raise DomainError(f"domain clause {clause!r}: expected 'name: what'")
        names, what = (s.strip() for s in clause.split(":", 1))
        if names == "examples":
            domain.examples = int(what)
        elif names == "dtype" and not what.startswith("choice of "):   # else an argument named dtype
            domain.dtypes = tuple(getattr(torch, w.strip()) for w in what.split(","))
        elif names == "layout":
            domain.layouts = tuple(w.strip() for w in what.split(","))
        elif names.startswith("*"):
            m = re.match(r"^(\d+)\.\.(\d+) dims of (\d+)\.\.(\d+)$", what)
            if not m:
                raise DomainError(f"domain clause {clause!r}: expected '*S: 1..3 dims of 1..7'")
            domain.batches[names[1:]] = tuple(int(g) for g in m.groups())
        elif "," not in names and "[" not in what and " " not in what and _RANGE.match(what):   # B: 1..9
            m = _RANGE.match(what)
            if not m:
                raise DomainError(f"domain clause {clause!r}: expected 'N: 1..9'")
            domain.sizes[names] = (_number(m["lo"]), _number(m["hi"]))     # bounds may name earlier sizes
        else:
            for name in (n.strip() for n in names.split(",")):
                domain.args.append(_arg(name, what, clause))
    for arg in domain.args:
        for dim in arg.dims:
            if isinstance(dim, str) and dim.lstrip("*").isidentifier() and \
                    dim.lstrip("*") not in domain.sizes | domain.batches:
                raise DomainError(f"domain {text!r}: size {dim} of {arg.name} is not declared")
    return domain


def _arg(name: str, what: str, clause: str) -> Arg:
    optional = name.endswith("?")
    name = name.rstrip("?")
    if what.startswith("from "):
        return Arg(name, "from", formula=what[5:].strip(), optional=optional)
    if what.startswith("choice of "):
        return Arg(name, "choice", choices=tuple(_number(c) for c in what[10:].split(",")), optional=optional,
                   tensor=False)
    m = _SCALAR.match(what)
    if m:
        at = tuple(_number(v) for v in m["at"].split(",")) if m["at"] else ()
        return Arg(name, m["kind"], lo=_number(m["lo"]), hi=_number(m["hi"]), at=at, optional=optional,
                   tensor=False)
    m = _TENSOR.match(what)
    if not m or m["kind"] not in _KINDS:
        raise DomainError(f"domain clause {clause!r}: expected KIND[DIMS] with KIND one of {sorted(_KINDS)}, "
                          "or 'float in [lo, hi]', 'int in [lo, hi]', 'choice of a, b'")
    dims = tuple(_number(d) for d in m["dims"].split(",") if d.strip())
    at = tuple(float(v) for v in m["at"].split(",")) if m["at"] else ()
    return Arg(name, m["kind"], dims, _number(m["lo"]) if m["lo"] else None,
               _number(m["hi"]) if m["hi"] else None, at, optional,
               dtype=getattr(torch, m["dtype"]) if m["dtype"] else None, below=m["below"])


def declares_domain(row_free_text: str) -> bool:
    """Whether a "left free" cell says what inputs are generated: a domain, or ``none (the reason)``."""
    return MARK in row_free_text


def domain_of(row_free_text: str) -> Domain | None:
    """The domain declared in a "left free" cell of the table (None when it declares none, or ``none (why)``)."""
    if MARK not in row_free_text or re.search(re.escape(MARK) + r"\s*none \(", row_free_text):
        return None
    found = re.search(re.escape(MARK) + r"\s*`([^`]+)`", row_free_text)
    if not found:
        raise DomainError(f"'{MARK}' must be followed by the domain in backticks, or by none (the reason)")
    return parse_domain(found[1])


def lab_domain(function: str, lab: str | None = None) -> Domain:
    """The domain of ``function`` in the lab's table: the table the grader handed over (:func:`use_table`), else
    the notebook under the course root, solutions/ when present, else labs/."""
    import genlab
    from genlab.testing.reference import find_course_root

    lab = lab or genlab.LAB
    if lab is None:
        raise RuntimeError("call genlab.setup('<lab id>') first: the domain depends on the lab")
    if lab in _TABLES:
        return _row_domain(_TABLES[lab], function, f"the table of {lab}")
    root = find_course_root()
    for folder in ("solutions", "labs"):
        path = root / folder / lab / f"{lab}.ipynb"
        if path.exists():
            return _cached_domain(str(path), path.stat().st_mtime_ns, function)
    raise FileNotFoundError(f"no notebook of {lab} under {root}")


_DOMAINS: dict = {}
_TABLES: dict[str, dict[str, str]] = {}


def use_table(lab: str, rows: dict[str, str]) -> None:
    """Hands over ``lab``'s table ("left free" cells by function) from the notebook the grader loaded itself, so
    that a hidden test finds its domain wherever the course lies and whatever the working directory (a
    platform's grader runs in /autograder, with the course in /autograder/source)."""
    _TABLES[lab] = dict(rows)


def _row_domain(rows: dict[str, str], function: str, where: str) -> Domain:
    domain = domain_of(rows.get(function, ""))     # this row only: another's typo is its own
    if domain is None:
        raise DomainError(f"{where} declares no '{MARK}' domain for {function}")
    return domain


def _cached_domain(path: str, stamp: int, function: str) -> Domain:
    from genlab.testing.notebook import LabNotebook

    if (path, stamp) not in _DOMAINS:
        _DOMAINS[(path, stamp)] = {f: r.free for f, r in LabNotebook.read(path).spec_table.items()}
    return _row_domain(_DOMAINS[(path, stamp)], function, f"the table of {path}")


# ---------------------------------------------------------------------------------------------------- drawing


def _strategies():
    import hypothesis.strategies as st

    return st


def _floats(st, lo, hi, width, at=()):
    """Floats of ``width`` bits in [lo, hi] (bounds rounded inwards to that width), ``at`` values drawn often."""
    import numpy as np

    kind = {16: np.float16, 32: np.float32, 64: np.float64}[width]
    lo_w, hi_w = kind(lo), kind(hi)
    if float(lo_w) < lo:
        lo_w = np.nextafter(lo_w, kind(np.inf))
    if float(hi_w) > hi:
        hi_w = np.nextafter(hi_w, kind(-np.inf))
    floats = st.floats(min_value=float(lo_w), max_value=float(hi_w), allow_nan=False, allow_infinity=False,
                       width=width)
    at = tuple(dict.fromkeys(float(kind(v)) for v in at if lo <= v <= hi))
    if at:
        return st.one_of(st.sampled_from(at), floats)
    return floats


def _eval(value, sizes: dict):
    if isinstance(value, str):
        return eval(value, {"__builtins__": {}}, dict(sizes))  # noqa: S307 - the lab's own text, sizes only
    return value


def draw_example(data, domain: Domain) -> tuple[list, dict, dict]:
    """One input: positional args, keyword args (optional ones drawn in), and what was drawn (sizes, dtype)."""
    import numpy as np
    from hypothesis.extra.numpy import arrays

    st = _strategies()
    sizes: dict = {}
    for name, (lo, hi) in domain.sizes.items():
        sizes[name] = data.draw(st.integers(_eval(lo, sizes), _eval(hi, sizes)), label=name)
    batches = {}
    for name, (dlo, dhi, slo, shi) in domain.batches.items():
        n = data.draw(st.integers(dlo, dhi), label=f"len({name})")
        batches[name] = tuple(data.draw(st.integers(slo, shi), label=f"{name}[{i}]") for i in range(n))
    dtype = data.draw(st.sampled_from(domain.dtypes), label="dtype") if len(domain.dtypes) > 1 else domain.dtypes[0]
    layout = data.draw(st.sampled_from(domain.layouts), label="layout") if len(domain.layouts) > 1 \
        else domain.layouts[0]
    width = {torch.float16: 16, torch.float32: 32}.get(dtype, 64)
    args, kwargs, drawn = [], {}, []
    for arg in domain.args:
        if arg.optional and not data.draw(st.booleans(), label=f"pass {arg.name}"):
            drawn.append(None)
            continue
        env = {**sizes, **{a.name: v for a, v in zip(domain.args, drawn) if v is not None}}
        if arg.kind == "from":
            value = eval(arg.formula, {"__builtins__": {}, "torch": torch, "math": math}, env)  # noqa: S307
        elif not arg.tensor:
            if arg.kind == "choice":
                value = data.draw(st.sampled_from(arg.choices), label=arg.name)
            elif arg.kind == "int":
                value = data.draw(st.integers(_eval(arg.lo, env), _eval(arg.hi, env)), label=arg.name)
            else:
                value = float(data.draw(_floats(st, float(_eval(arg.lo, env)), float(_eval(arg.hi, env)), 64,
                                                arg.at), label=arg.name))
        else:
            shape = []
            for dim in arg.dims:
                if isinstance(dim, str) and dim.startswith("*"):
                    shape.extend(batches[dim[1:]])
                else:
                    shape.append(_eval(dim, sizes))
            own = arg.dtype or dtype
            own_width = {torch.float16: 16, torch.float32: 32, torch.bfloat16: 32}.get(own, 64) if arg.dtype \
                else width
            value = _tensor(data, st, arrays, np, arg, tuple(shape), env, own, own_width)
            if layout == "transposed" and value.dim() >= 2:
                value = value.mT.contiguous().mT
        drawn.append(value)
        if arg.name.startswith("_"):        # drawn for the arguments after it, not passed
            continue
        if arg.optional:
            kwargs[arg.name] = value
        else:
            args.append(value)
    return args, kwargs, {"sizes": sizes, "batches": batches, "dtype": dtype, "layout": layout}


def _tensor(data, st, arrays, np, arg: Arg, shape, sizes, dtype, width):
    name = arg.name
    if arg.kind == "int":
        lo, hi = _eval(arg.lo if arg.lo is not None else -10, sizes), _eval(arg.hi if arg.hi is not None else 10, sizes)
        if arg.below:           # elementwise below another int tensor: [lo, other - 1]
            other = sizes[arg.below]
            gaps = data.draw(arrays(np.int64, shape, elements=st.integers(0, 10 ** 6)), label=name)
            top = other - 1
            return top - torch.from_numpy(np.array(gaps)) % (top - lo + 1).clamp(min=1)
        values = data.draw(arrays(np.int64, shape, elements=st.integers(lo, hi)), label=name)
        return torch.from_numpy(np.array(values)).to(arg.dtype or torch.int64)
    if arg.kind == "bool":
        return torch.from_numpy(np.array(data.draw(arrays(np.bool_, shape, elements=st.booleans()), label=name)))
    if arg.kind == "unit":
        lo, hi = 0.0, 1.0
    elif arg.kind == "decreasing":
        lo, hi = 1e-4, 0.5          # betas: alpha_bar = cumprod(1 - beta) is in (0, 1) and decreasing
    else:
        lo = float(_eval(arg.lo, sizes)) if arg.lo is not None else -10.0
        hi = float(_eval(arg.hi, sizes)) if arg.hi is not None else 10.0
    if arg.kind == "spd":
        lo, hi = -3.0, 3.0
    # drawn where the drawn dtype is exact; bfloat16 is drawn in float32 and rounded (then exact in float64)
    np_dtype = {16: np.float16, 32: np.float32, 64: np.float64}[width]
    values = data.draw(arrays(np_dtype, shape, elements=_floats(st, lo, hi, width, arg.at)), label=name)
    t = torch.from_numpy(np.array(values, dtype=np_dtype)).to(dtype)
    if arg.kind == "logprob":
        t = torch.log_softmax(t.double(), dim=-1).to(dtype) if t.dim() else t
    elif arg.kind == "decreasing":
        t = torch.cumprod(1 - t.double(), dim=-1).to(dtype)
    elif arg.kind == "spd":
        a = t.double()
        t = (a @ a.mT / max(a.shape[-1], 1) + 0.1 * torch.eye(a.shape[-1], dtype=torch.float64)).to(dtype)
    return t


# ------------------------------------------------------------------------------------------------- comparing


def _as_float64(value):
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.detach().to(torch.float64)
    if isinstance(value, (list, tuple)):
        return type(value)(_as_float64(v) for v in value)
    if isinstance(value, dict):
        return {k: _as_float64(v) for k, v in value.items()}
    return value


def compare(got, expected, name: str = "result", rtol=None, atol=None) -> None:
    """Fails (CheckFailed) unless ``got`` matches ``expected``: tensors by ``check_close``, floats by closeness,
    the rest exactly; tuples, lists and dicts item by item."""
    from genlab.checks import CheckFailed, check_close

    if isinstance(expected, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            raise CheckFailed(f"{name}: expected a torch.Tensor, got {type(got).__name__}")
        if not expected.is_floating_point():
            if got.shape != expected.shape or got.dtype != expected.dtype or not torch.equal(got, expected):
                raise CheckFailed(f"{name}: expected {_show(expected)}, got {_show(got)}")
            return
        if atol is None and got.is_floating_point():
            # check_close scales atol by the RMS of the expected values; here by at least 1, the scale of the
            # drawn inputs: a result that cancels to nearly 0 (mu + sigma eps, a KL at the prior) is compared
            # at the rounding of its terms, which correct code in got's dtype cannot beat
            from genlab.checks.values import DEFAULT_TOLERANCES

            finite = expected[torch.isfinite(expected)].double()
            rms = finite.pow(2).mean().sqrt().item() if finite.numel() else 1.0
            atol = DEFAULT_TOLERANCES.get(got.dtype, DEFAULT_TOLERANCES[torch.float32])[1] * max(rms, 1.0)
        check_close(got, expected, name=name, rtol=rtol, atol=atol, equal_nan=True)
        return
    if isinstance(expected, (tuple, list)):
        if not isinstance(got, (tuple, list)) or len(got) != len(expected):
            raise CheckFailed(f"{name}: expected {len(expected)} results, got {_show(got)}")
        for i, (g, e) in enumerate(zip(got, expected)):
            compare(g, e, f"{name}[{i}]", rtol, atol)
        return
    if isinstance(expected, dict):
        if not isinstance(got, dict) or set(got) != set(expected):
            raise CheckFailed(f"{name}: expected the keys {sorted(expected)}, got {_show(got)}")
        for k in expected:
            compare(got[k], expected[k], f"{name}[{k!r}]", rtol, atol)
        return
    if isinstance(expected, float):
        g = float(got.item() if isinstance(got, torch.Tensor) else got)
        if not math.isclose(g, expected, rel_tol=rtol or 1e-6, abs_tol=atol or 1e-9) and not (g != g and expected != expected):
            raise CheckFailed(f"{name}: expected {expected!r}, got {g!r}")
        return
    if got != expected or type(got) is not type(expected):
        raise CheckFailed(f"{name}: expected {expected!r} ({type(expected).__name__}), got {_show(got)}")


def _show(value) -> str:
    if isinstance(value, torch.Tensor):
        if value.numel() <= _SHOWN:
            with _printoptions():
                body = repr(value.detach().cpu()).replace("\n", " ")
            return re.sub(r"\s+", " ", body)
        return f"tensor of shape {tuple(value.shape)}, {value.dtype}"
    if isinstance(value, (list, tuple)):
        inner = ", ".join(_show(v) for v in value)
        return f"({inner})" if isinstance(value, tuple) else f"[{inner}]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_show(v)}" for k, v in value.items()) + "}"
    if isinstance(value, BaseException):
        return f"{type(value).__name__}: {value}"
    return repr(value)


def _printoptions():
    return torch._tensor_str.printoptions(precision=6, sci_mode=None) if hasattr(torch._tensor_str, "printoptions") \
        else _NoOp()


class _NoOp:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def show_call(function: str, args, kwargs) -> str:
    parts = [_show(a) for a in args] + [f"{k}={_show(v)}" for k, v in kwargs.items()]
    return f"{function}({', '.join(parts)})"


class _Abort(BaseException):
    """Not a verdict on the student's code (the grader's kernel is gone, timed out): stops hypothesis at once."""

    def __init__(self, error: BaseException):
        super().__init__(str(error))
        self.error = error


def _is_verdict(exc: BaseException) -> bool:
    """An exception that says something about the function under test (it raised, or its result was wrong)."""
    from genlab.checks import CheckFailed
    from genlab.testing.wire import StudentError

    if isinstance(exc, (CheckFailed, AssertionError, StudentError)):
        return True     # StudentError: relayed from the grader's kernel, named after the student's (IndexError)
    # the student's own exception, raised in this process (self-check)
    return not type(exc).__module__.startswith(("autograder", "genlab"))


def check_generated(fn: Callable, expected: Callable, function: str, *, name: str | None = None,
                    domain: Domain | str | None = None, rtol=None, atol=None, max_examples: int | None = None,
                    compare_with: Callable | None = None, exact: bool = False) -> int:
    """Calls ``fn`` and ``expected`` on inputs drawn from ``function``'s declared domain and compares them.

    ``expected`` gets every floating tensor in float64 (ground truth), or the same tensors with ``exact`` (for
    a result rounded from floats: codes, indices, counts). ``compare_with(got, want, name)``
    replaces :func:`compare`. Returns the number of examples run; raises :class:`~genlab.checks.CheckFailed`
    with the shrunk failing input.
    """
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import strategies as st

    from genlab.checks import CheckFailed

    _keep_hypothesis_files_private()

    if domain is None:
        domain = lab_domain(function)
    elif isinstance(domain, str):
        domain = parse_domain(domain)
    check = compare_with or (lambda g, e, n: compare(g, e, n, rtol, atol))
    label = name or function
    examples = max_examples or domain.examples
    key = (function, label, domain.text, examples, exact, _unwrapped(expected))
    failed_kept = None
    if key in _PASSED:
        failed_kept = _replay(fn, check, function, label, _PASSED[key][1])
        if failed_kept is None:
            return _PASSED[key][0]      # as many as hypothesis counted (it also counts a draw it abandoned)
    last: dict = {}
    count = [0]
    seen: list = []     # every input drawn and its expected answer, kept as they were before any call

    @settings(max_examples=examples, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck), phases=(Phase.explicit, Phase.generate, Phase.shrink),
              print_blob=False, report_multiple_bugs=False, verbosity=_quiet())
    @given(st.data())
    def generated(data):
        count[0] += 1
        args, kwargs, _ = draw_example(data, domain)
        shown = show_call(function, args, kwargs)
        kept = _fresh((args, kwargs))
        try:
            want = expected(*args, **kwargs) if exact else expected(*_as_float64(args), **_as_float64(kwargs))
        except Exception as exc:  # noqa: BLE001 - outside the stated domain: the lab's text is wrong
            raise _Abort(DomainError(f"the reference raised {type(exc).__name__}: {exc} on {shown}: the domain "
                                     f"declared for {function} is wider than the reference accepts")) from exc
        seen.append((*kept, _fresh(want)))
        try:
            got = fn(*args, **kwargs)
            check(got, want, label)
        except BaseException as exc:  # noqa: BLE001
            if isinstance(exc, Exception) and _is_verdict(exc):
                last.update(call=shown, error=exc, got=locals().get("got", exc), want=want)
                raise
            raise _Abort(exc) from exc

    try:
        generated()
    except _Abort as abort:
        raise abort.error from None
    except Exception as exc:  # noqa: BLE001 - hypothesis re-raised the shrunk failure (or a flaky one)
        if not last:
            raise
        raise CheckFailed(_failure(function, domain, last["call"], last["got"], last["want"], last["error"],
                                   ", shrunk to a small one that still fails")) from None
    if failed_kept is not None:     # hypothesis drew otherwise this time, and passed: a kept input still failed
        raise CheckFailed(_failure(function, domain, *failed_kept))
    _PASSED[key] = (count[0], seen)
    return count[0]


# -- the same draws for the next notebook -------------------------------------------------------------------------
# The grader checks one function in notebook after notebook, in one process. Derandomized, with no database and
# no deadline, hypothesis draws the same inputs, in the same order, every time every input passes: what it draws
# next never depends on what the function under test returned; only a failure changes its course (it then
# shrinks). (It does depend on the literals hypothesis collects from the course's own modules loaded in the
# process, which it draws now and then: a module imported between two notebooks could change the draws.) So the
# inputs of a run that passed, with their expected answers, are kept (copies made before any call: the grader
# writes a change made in place back into the test's tensors), and the next notebook is checked on them without
# drawing: every notebook a process grades gets the same inputs. Only a notebook that fails one is run through
# hypothesis again, from the start, which fails it on the same input and shrinks it as before. This saves the
# drawing (about 16 ms an input in the grader) and the reference's calls. tests/test_properties.py checks that
# the kept inputs are those hypothesis draws, and that a failure reads the same.
_PASSED: dict[tuple, tuple[int, list]] = {}
_NOTHING = object()     # no result: the call raised


def _unwrapped(expected: Callable):
    """The expected function itself (a reference measured with activations wraps it): the same object for every
    notebook a grader grades, since it loads a lab's reference once; kept alive by the key, so never reused."""
    import inspect

    inner = inspect.unwrap(expected)
    try:
        hash(inner)
    except TypeError:
        return object()     # equal to no other key: nothing kept for it
    return inner


def _fresh(value):
    """A copy of every tensor in ``value``, with its dtype and strides (a transposed view stays one)."""
    if isinstance(value, torch.Tensor):
        return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype,
                                   device=value.device).copy_(value.detach())
    if isinstance(value, (list, tuple)):
        return type(value)(_fresh(v) for v in value)
    if isinstance(value, dict):
        return {k: _fresh(v) for k, v in value.items()}
    return value


def _replay(fn: Callable, check: Callable, function: str, label: str, passed: list):
    """None if ``fn`` passes every kept input; else the first input it fails, with what it gave and expected,
    for hypothesis to find and shrink. An error that is no verdict on ``fn`` (the kernel is gone, a timeout) is
    raised, as the run with hypothesis raises it."""
    for args, kwargs, want in passed:
        got = _NOTHING
        try:
            got = fn(*_fresh(args), **_fresh(kwargs))
            check(got, _fresh(want), label)
        except Exception as exc:  # noqa: BLE001
            if _is_verdict(exc):
                return show_call(function, args, kwargs), (exc if got is _NOTHING else got), want, exc
            raise
    return None


def _failure(function: str, domain: Domain, shown: str, got, want, error, how: str = "") -> str:
    what = f"raised {_show(error)}" if got is error else f"gave {_show(got)}, expected {_show(want)}"
    reason = "" if got is error else f" ({error})"
    return (f"your {function} on this input {what}{reason}\n  the input: {shown}\n"
            f"  (one of {domain.examples} inputs drawn from the domain the lab's table declares for {function}{how})")


def _keep_hypothesis_files_private() -> None:
    """Hypothesis caches what it reads of the code under test in ``.hypothesis/`` of the working directory (even with
    ``database=None``: its ``constants`` cache, the literals of every local module, which it mixes into its draws).
    That is a student's folder, or the course's ``solutions/<lab>`` when nbval runs a notebook there (a file that
    appeared under solutions/ while the suite graded). A folder shared by name in the temporary directory is no
    better: anybody on the machine could make it first and plant constants that every later grader of that user
    reads (issue 41). So each process gets a folder of its own, made with ``mkdtemp`` (mode 0700, a name nobody
    can guess) and removed when the process ends, unless ``HYPOTHESIS_STORAGE_DIRECTORY`` says where. Reading the
    constants afresh costs a process about 0.4 s of CPU, once (measured with the grader's modules loaded)."""
    import atexit
    import os
    import shutil
    import tempfile
    from pathlib import Path

    from hypothesis import configuration

    global _PRIVATE_HOME
    if os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY") or _PRIVATE_HOME is not None:
        return
    _PRIVATE_HOME = Path(tempfile.mkdtemp(prefix="genlab-hypothesis-"))
    owner = os.getpid()   # a forked child that exits normally must not remove its parent's folder

    def remove(folder=_PRIVATE_HOME):
        if os.getpid() == owner:
            shutil.rmtree(folder, ignore_errors=True)

    atexit.register(remove)
    configuration.set_hypothesis_home_dir(_PRIVATE_HOME)


_PRIVATE_HOME = None   # this process's folder for hypothesis's files (_keep_hypothesis_files_private)


def _quiet():
    from hypothesis import Verbosity

    return Verbosity.quiet

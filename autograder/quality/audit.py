"""``genlab audit LAB``: how many small bugs in the reference solution do the lab's own tests catch?

For each graded function, every mutant of its reference solution (:mod:`autograder.quality.mutants`) is graded by
that function's visible and hidden tests, through the test code the grader runs: each test cell's source
from ``solutions/`` executed with :func:`genlab.testing.runner.run_test` in the namespace the pipeline builds
(:meth:`autograder.grading.pipeline.Lab.test_globals`: the setup cell's names and ``reference``), with every
student function bound to the reference except the mutated one, all of them in this process. A mutant is

- **killed** when a test fails or errors (or **timeout**: a test ran past its limit, ``signal.setitimer``);
- otherwise called on probe inputs (the arguments the tests passed to the function, recorded while the
  reference ran them, plus random inputs of the same shapes and dtypes) beside the reference, and is
  **probably equivalent** when values, dtypes, gradients and the inputs' state afterwards all agree, else
  **survived**: a bug the tests let through;
- **allowed** when it differs from the reference only in what the lab's text leaves free, as its table
  ``what_the_tests_check`` says (:attr:`genlab.testing.notebook.LabNotebook.spec_table`: ``gradients``,
  ``dtype``, ``precision``): not a bug, so not counted;
- **invalid** when its cell does not even run (never counted).

A class (an ``nn.Module``) is probed as the tests use it: each construction the tests made, with the same
seed for the reference and the mutant, then the module's state, and its forward on the inputs the tests
passed (and random ones of the same shapes) in training and in eval mode, with gradients to its parameters
and inputs. Random probe inputs keep the structure of the recorded ones: a symmetric positive semi-definite
matrix (a covariance) is replaced by another one, a probability by a probability.

The score is ``(killed + timeout) / (killed + timeout + survived)``.
"""
from __future__ import annotations

import contextlib
import io
import json
import math
import signal
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from autograder.quality.mutants import Mutant, mutants, normalized
from genlab.testing.calls import LocalFunction, Recorder, detached
from genlab.testing.runner import run_test

KILLED, TIMEOUT, SURVIVED, EQUIVALENT, ALLOWED, INVALID = (
    "killed", "timeout", "survived", "probably equivalent", "allowed", "invalid")
MAX_PROBE_CALLS = 6        # recorded calls used as probes (evenly spread over the tests' calls)
RANDOM_PROBES = 2          # random inputs per recorded call


class MutantTimeout(BaseException):
    """Raised by the alarm: a BaseException, so that neither run_test nor a test's own ``except`` keeps it."""


@contextlib.contextmanager
def time_limit(seconds: float):
    """Raises :class:`MutantTimeout` in this (main) thread after ``seconds``; Python-level code only."""
    def alarm(signum, frame):
        raise MutantTimeout(f"ran past {seconds:g} s")
    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@dataclass
class MutantResult:
    index: int
    operator: str
    description: str
    line: int
    status: str
    killed_by: str | None = None
    killed_at: int = 0          # the line of that test which failed
    message: str = ""
    diff: str = ""
    seconds: float = 0.0


@dataclass
class FunctionReport:
    lab: str
    function: str
    tests: list[str]
    generated: int
    mutants: list[MutantResult] = field(default_factory=list)
    baseline_failures: dict[str, str] = field(default_factory=dict)   # tests the reference itself fails
    seconds: float = 0.0
    skipped: str = ""     # why no mutant was run (no test passes on the reference in this process)

    def count(self, status: str) -> int:
        return sum(m.status == status for m in self.mutants)

    @property
    def score(self) -> float | None:
        caught = self.count(KILLED) + self.count(TIMEOUT)
        total = caught + self.count(SURVIVED)
        return caught / total if total else None

    def as_dict(self) -> dict:
        d = asdict(self)
        d.update({"killed": self.count(KILLED), "timeouts": self.count(TIMEOUT), "survived": self.count(SURVIVED),
                  "probably_equivalent": self.count(EQUIVALENT), "allowed": self.count(ALLOWED),
                  "invalid": self.count(INVALID),
                  "score": self.score})
        return d


# -- running the tests against one version of the function ---------------------------------------------------
class Auditor:
    """One lab's tests, in process. ``lab`` is an :class:`autograder.grading.pipeline.Lab` (only its source and
    reference are used); ``tests`` maps test id -> {"source", "function", ...}, by default the lab's."""

    def __init__(self, lab, tests: dict | None = None, test_timeout_s: float = 20.0, timeout_factor: float = 10.0):
        self.lab = lab
        self.tests = dict(tests if tests is not None else lab.tests)
        self.test_timeout_s, self.timeout_factor = test_timeout_s, timeout_factor
        self.reference_ns = self._with_needed_cells(lab)

    @staticmethod
    def _with_needed_cells(lab) -> dict:
        """The reference's namespace with the lab's ``grade-needs`` cells run in it (a copy), as the grader runs
        them in the student's kernel: Lab 1's ``beta_sweep`` calls ``train_vae`` from such a cell."""
        from autograder.grading.pipeline import GRADE_NEEDS

        cells = [c.source for c in lab.source.nb.cells if c.cell_type == "code" and
                 GRADE_NEEDS in c.get("metadata", {}).get("tags", [])]
        namespace = lab.reference._namespace
        if cells:
            namespace = dict(namespace)
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                for source in cells:
                    exec(compile(source, "<grade-needs cell>", "exec"), namespace)
        return namespace

    def tests_of(self, function: str) -> list[str]:
        return [t for t, spec in self.tests.items() if spec["function"] == function]

    def namespace(self, function: str, impl, recorder: Recorder) -> dict:
        """The pipeline's test namespace (setup run afresh, ``reference``), the student's functions bound to
        the reference, ``function`` to ``impl``; every call is recorded as the grader records it."""
        names = self.lab.test_globals()
        for f in self.lab.functions:
            fn = impl if f == function else self.reference_ns.get(f)
            names[f] = (LocalFunction(fn, f, recorder, self.lab.differentiated.get(f, ()))
                        if callable(fn) and not isinstance(fn, type) else fn)
        return names

    def run_tests(self, function: str, impl, tests: list[str], limits: dict[str, float] | None = None,
                  stop_at_first: bool = True, recorder: Recorder | None = None):
        """Runs ``tests`` against ``impl``; returns [(test, status, message, seconds, failing line)]."""
        recorder = recorder if recorder is not None else Recorder()
        results = []
        for test in tests:
            namespace = self.namespace(function, impl, recorder)
            start = time.perf_counter()
            limit = (limits or {}).get(test, self.test_timeout_s * 3)
            try:
                with warnings.catch_warnings(record=True), contextlib.redirect_stdout(io.StringIO()), \
                        contextlib.redirect_stderr(io.StringIO()), \
                        time_limit(limit):
                    outcome = run_test(test, self.tests[test]["source"], namespace)
                status, message, line = str(outcome.status), outcome.message, outcome.line
            except MutantTimeout as exc:
                status, message, line = TIMEOUT, f"{test}: {exc}", 0
            except RecursionError as exc:
                status, message, line = "error", f"RecursionError: {exc}", 0
            results.append((test, status, message, time.perf_counter() - start, line))
            if stop_at_first and status != "passed":
                break
        return results


def compile_cell(source: str, function: str, reference_ns: dict):
    """The cell's ``function`` defined in a copy of the reference's namespace (the reference stays intact)."""
    namespace = dict(reference_ns)
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(source, f"<mutant of {function}>", "exec"), namespace)
    return namespace[function]


# -- probable equivalence ---------------------------------------------------------------------------------------
def _is_covariance(t: torch.Tensor) -> bool:
    """A symmetric positive semi-definite matrix (up to rounding): a covariance, a Gram matrix."""
    if t.dim() != 2 or t.shape[0] != t.shape[1] or t.shape[0] < 2:
        return False
    base = t.detach().double()
    scale = base.abs().max().item() or 1.0
    return torch.allclose(base, base.T, atol=1e-6 * scale, rtol=0) and \
        torch.linalg.eigvalsh((base + base.T) / 2).min().item() >= -1e-6 * scale


def _random_like(t: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    if not t.is_floating_point() or t.numel() == 0:
        return t.clone()
    base = t.detach().double()
    if _is_covariance(t):   # the function's domain: another covariance of the same size and scale
        n = t.shape[0]
        a = torch.randn(n, n + 3, generator=g, dtype=torch.float64)
        r = a @ a.T / (n + 3) * (torch.trace(base).item() / n or 1.0)
        return r.to(dtype=t.dtype, device=t.device)
    r = torch.randn(t.shape, generator=g, dtype=torch.float64)
    lo, hi = base.min().item(), base.max().item()
    if lo >= 0 and hi <= 1:
        r = torch.rand(t.shape, generator=g, dtype=torch.float64) * 0.98 + 0.01
    elif lo >= 0:
        r = r.abs() * max(base.std().item() if t.numel() > 1 else 1.0, 1e-3) + 1e-3
    else:
        r = r * max(base.std().item() if t.numel() > 1 else 1.0, 1e-3) + base.mean().item()
    return r.to(dtype=t.dtype, device=t.device)


def _map_tensors(value, fn):
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_map_tensors(v, fn) for v in value)
    if isinstance(value, dict):
        return {k: _map_tensors(v, fn) for k, v in value.items()}
    return value


def _fresh(value):
    """A copy for one run: tensors cloned (grad flags kept), modules and generators copied."""
    return detached(value, keep_grad=True)


def _differ(a, b, what: str, free: frozenset = frozenset()) -> str | None:
    """None when ``a`` and ``b`` agree (values, dtypes, shapes, module state), else what differs; what the
    lab's text leaves ``free`` (``dtype``: compared at the lower precision; ``gradients``) is not compared."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return f"{what}: {type(a).__name__} vs {type(b).__name__}"
        x, y = a.detach(), b.detach()
        if "dtype" in free and x.dtype != y.dtype and x.is_floating_point() and y.is_floating_point():
            lower = x.dtype if torch.finfo(x.dtype).eps > torch.finfo(y.dtype).eps else y.dtype
            x, y = x.to(lower), y.to(lower)
        if "precision" in free and x.dtype == y.dtype == torch.float64:
            x, y = x.float(), y.float()
        try:
            torch.testing.assert_close(y, x, equal_nan=True)
        except AssertionError as exc:
            return f"{what}: {str(exc).splitlines()[0]}"
        if a.requires_grad != b.requires_grad and "gradients" not in free:
            return f"{what}: requires_grad {a.requires_grad} vs {b.requires_grad}"
        return None
    if isinstance(a, torch.Generator) and isinstance(b, torch.Generator):
        return None if torch.equal(a.get_state(), b.get_state()) else f"{what}: generator state"
    if isinstance(a, torch.nn.Module) and isinstance(b, torch.nn.Module):
        if [m.training for m in a.modules()] != [m.training for m in b.modules()]:
            return f"{what}: train/eval modes"
        sa, sb = a.state_dict(), b.state_dict()
        if list(sa) != list(sb):
            return f"{what}: state_dict keys"
        for k in sa:
            d = _differ(sa[k], sb[k], f"{what}.{k}", free)
            if d:
                return d
        return None
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if type(a) is not type(b) or len(a) != len(b):
            return f"{what}: {type(a).__name__} of {len(a)} vs {type(b).__name__} of {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            d = _differ(x, y, f"{what}[{i}]", free)
            if d:
                return d
        return None
    if isinstance(a, dict) and isinstance(b, dict):
        if list(a) != list(b):
            return f"{what}: keys"
        for k in a:
            d = _differ(a[k], b[k], f"{what}[{k!r}]", free)
            if d:
                return d
        return None
    if isinstance(a, float) and isinstance(b, float):
        return None if math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9) or (math.isnan(a) and math.isnan(b)) \
            else f"{what}: {a!r} vs {b!r}"
    if type(a) is not type(b):
        return f"{what}: {type(a).__name__} vs {type(b).__name__}"
    try:
        return None if a == b else f"{what}: {a!r} vs {b!r}"[:200]
    except Exception:  # noqa: BLE001 - objects without equality: compared by their repr
        return None if repr(a) == repr(b) else f"{what}: differs"


def _leaves(value, with_grad: bool) -> list[torch.Tensor]:
    """With ``with_grad``, every float tensor in ``value`` made a leaf that requires grad (returned)."""
    leaves = []
    if with_grad:
        def mark(t):
            if t.is_floating_point() and not t.requires_grad:
                t.requires_grad_(True)
                leaves.append(t)
            return t
        _map_tensors(value, mark)
    return leaves


def _grads(out, wrt: list[torch.Tensor], seed: int):
    """Gradients of a random weighted sum of the float outputs that reach the graph, w.r.t. ``wrt``."""
    outs = [t for t in _flat(out) if isinstance(t, torch.Tensor) and t.is_floating_point() and t.requires_grad]
    if not outs:
        return ("no output reaches the graph",)
    g = torch.Generator().manual_seed(seed)
    loss = sum((o * torch.randn(o.shape, generator=g, dtype=torch.float64).to(o.dtype)).sum() for o in outs)
    return torch.autograd.grad(loss, wrt, allow_unused=True) if wrt else ()


def _run_once(fn, args, kwargs, seed: int, with_grad: bool):
    """[(what, value)]: the result, the grads of the float inputs, the inputs after; or :class:`Raised`."""
    args, kwargs = _fresh(args), _fresh(kwargs)
    leaves = _leaves((args, kwargs), with_grad)
    torch.manual_seed(seed)
    try:
        out = fn(*args, **kwargs)
        grads = _grads(out, leaves, seed) if with_grad else None
    except Exception as exc:  # noqa: BLE001
        return Raised(type(exc).__name__)
    return [("result", out), ("gradients", grads), ("inputs after the call", (args, kwargs))]


@dataclass
class ModuleProbe:
    """One construction of an ``nn.Module`` class the tests made, and one input to its forward (or None)."""

    args: tuple
    kwargs: dict
    forward: tuple[tuple, dict] | None = None
    training: bool = True


def _run_module(cls, probe: ModuleProbe, seed: int, with_grad: bool):
    """[(what, value)]: the module as built, then its output and gradients (to its parameters and float
    inputs) in the probe's mode; or :class:`Raised`."""
    args, kwargs = _fresh(probe.args), _fresh(probe.kwargs)
    torch.manual_seed(seed)
    try:
        module = cls(*args, **kwargs)
        built = [("the module as built", module),
                 ("which parameters train", [(n, p.requires_grad) for n, p in module.named_parameters()])]
        if probe.forward is None:
            return built
        module.train(probe.training)
        f_args, f_kwargs = _fresh(probe.forward)
        leaves = _leaves((f_args, f_kwargs), with_grad)
        torch.manual_seed(seed + 1)
        out = module(*f_args, **f_kwargs)
        wrt = [p for p in module.parameters() if p.requires_grad] + leaves
        grads = _grads(out, wrt, seed) if with_grad else None
    except Exception as exc:  # noqa: BLE001
        return Raised(type(exc).__name__)
    mode = "training" if probe.training else "eval"
    return built + [(f"forward in {mode} mode", out), (f"gradients in {mode} mode", grads)]


def recording_class(cls: type, log: list[dict]) -> type:
    """A subclass of ``cls`` (same name) that logs each construction's arguments and, for a module, the first
    two inputs each instance's forward received: the probes of a class, as the tests used it."""
    def __init__(self, *args, **kwargs):
        entry = {"args": detached(args), "kwargs": detached(kwargs), "forward": []}
        cls.__init__(self, *args, **kwargs)
        log.append(entry)
        if isinstance(self, torch.nn.Module):
            def record(module, f_args, f_kwargs):
                if len(entry["forward"]) < 2:
                    entry["forward"].append((detached(f_args), detached(f_kwargs)))
            self.register_forward_pre_hook(record, with_kwargs=True)
    return type(cls.__name__, (cls,), {"__init__": __init__, "__qualname__": cls.__qualname__,
                                       "__module__": cls.__module__, "__doc__": cls.__doc__})


def module_probes(log: list[dict], seed: int = 0) -> list[ModuleProbe]:
    """Each recorded construction (at most MAX_PROBE_CALLS, spread evenly) with its recorded forward inputs
    and one random version of them, each in training and in eval mode."""
    chosen = _spread(log, MAX_PROBE_CALLS)
    g = torch.Generator().manual_seed(seed)
    out = []
    for entry in chosen:
        out.append(ModuleProbe(entry["args"], entry["kwargs"]))
        inputs = entry["forward"][:1]
        inputs += [_map_tensors(f, lambda t: _random_like(t, g)) for f in inputs]
        out += [ModuleProbe(entry["args"], entry["kwargs"], f, training) for f in inputs for training in (True, False)]
    return out


@dataclass
class Raised:
    error: str


def _flat(value):
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _flat(v)]
    if isinstance(value, dict):
        return [x for v in value.values() for x in _flat(v)]
    return [value]


def probes(calls, seed: int = 0) -> list[tuple[tuple, dict]]:
    """The recorded calls (at most MAX_PROBE_CALLS, spread evenly), each with RANDOM_PROBES random versions."""
    plain = []
    for c in calls:
        kwargs = dict(c.kwargs)
        if c.kind == "grad_of":
            kwargs.pop("wrt", None), kwargs.pop("grad_output", None)
        elif c.kind != "call":
            if c.kind not in ("peak_memory", "count_flops"):
                continue
        plain.append((tuple(c.args), kwargs))
    if len(plain) > MAX_PROBE_CALLS:
        step = len(plain) / MAX_PROBE_CALLS
        plain = [plain[int(i * step)] for i in range(MAX_PROBE_CALLS)]
    g = torch.Generator().manual_seed(seed)
    out = []
    for args, kwargs in plain:
        out.append((args, kwargs))
        for _ in range(RANDOM_PROBES):
            out.append(_map_tensors((args, kwargs), lambda t: _random_like(t, g)))
    return out


def equivalence(mutant_fn, reference_fn, probe_inputs, timeout_s: float = 20.0,
                free: frozenset = frozenset()) -> str | None:
    """None when the mutant agrees with the reference on every probe, else the first difference. Probes are
    (args, kwargs) of a call, or :class:`ModuleProbe` for a class; what is ``free`` is not compared
    (``gradients``: nothing is differentiated)."""
    if not probe_inputs:
        return "no probe inputs: the tests never called the function"
    compared = 0
    for i, probe in enumerate(probe_inputs):
        def run(fn, with_grad):
            if isinstance(probe, ModuleProbe):
                return _run_module(fn, probe, seed=1000 + i, with_grad=with_grad)
            return _run_once(fn, *probe, seed=1000 + i, with_grad=with_grad)
        for with_grad in (False,) if "gradients" in free else (False, True):
            want = run(reference_fn, with_grad)
            if isinstance(want, Raised):
                continue   # not a valid input for the reference: says nothing
            try:
                with time_limit(timeout_s):
                    got = run(mutant_fn, with_grad)
            except MutantTimeout:
                return f"probe {i}: ran past {timeout_s:g} s"
            where = f"probe {i}{' (with grad)' if with_grad else ''}"
            if isinstance(got, Raised):
                return f"{where}: the mutant raised {got.error}"
            compared += 1
            for (label, a), (_, b) in zip(want, got):
                d = _differ(a, b, f"{where}: {label}", free)
                if d:
                    return d
    return None if compared else "no probe input that the reference accepts"


# -- the audit --------------------------------------------------------------------------------------------------
def audit_function(auditor: Auditor, function: str, max_mutants: int | None = None,
                   progress=None) -> FunctionReport:
    start = time.perf_counter()
    lab = auditor.lab
    source = lab.source.solutions[function]
    tests = auditor.tests_of(function)
    all_mutants = list(mutants(source))
    chosen = _spread(all_mutants, max_mutants)
    report = FunctionReport(lab.id, function, tests, len(all_mutants))

    # the reference, as every mutant is written (unparsed), must pass; its calls are the probes
    recorder, constructions = Recorder(), []
    reference_fn = compile_cell(normalized(source), function, auditor.reference_ns)
    is_class = isinstance(reference_fn, type)
    baseline = auditor.run_tests(function, recording_class(reference_fn, constructions) if is_class else reference_fn,
                                 tests, stop_at_first=False, recorder=recorder)
    for test, status, message, _, _ in baseline:
        if status != "passed":
            report.baseline_failures[test] = f"{status}: {message}"[:500]
    seconds = {t: s for t, status, _, s, _ in baseline if status == "passed"}
    good = sorted(seconds, key=seconds.get)   # cheapest first: most mutants die in the first test
    limits = {t: max(auditor.test_timeout_s, auditor.timeout_factor * s) for t, s in seconds.items()}
    probe_inputs = module_probes(constructions) if is_class else probes(
        [c for c in recorder.calls if c.name == function])
    row = lab.source.spec_table.get(function)
    free = row.freedoms if row else frozenset()
    if not good:
        # Every mutant would "survive" tests that cannot run here (e.g. a test needing a `grade-needs` cell's
        # state, which the audit does not run): nothing to learn, so nothing is run.
        report.skipped = "no test of it passes on the reference in this process" + \
            (" (it may need a grade-needs cell's state, which the audit does not run)" if report.baseline_failures
             else " (it has no tests)")
        chosen = []

    for m in chosen:
        t0 = time.perf_counter()
        result = MutantResult(m.index, m.operator, m.description, m.line, SURVIVED, diff=m.diff)
        try:
            fn = compile_cell(m.source, function, auditor.reference_ns)
        except Exception as exc:  # noqa: BLE001 - the mutated cell does not run: not a mutant of interest
            result.status, result.message = INVALID, f"{type(exc).__name__}: {exc}"[:300]
        else:
            outcome = auditor.run_tests(function, fn, good, limits)
            failed = [r for r in outcome if r[1] != "passed"]
            if failed:
                test, status, message, _, line = failed[0]
                result.status = TIMEOUT if status == TIMEOUT else KILLED
                result.killed_by, result.killed_at, result.message = test, line, message[:300]
            else:
                difference = equivalence(fn, reference_fn, probe_inputs, auditor.test_timeout_s)
                if difference is None:
                    result.status = EQUIVALENT
                    result.message = f"agrees with the reference on {len(probe_inputs)} probe inputs"
                elif free and equivalence(fn, reference_fn, probe_inputs, auditor.test_timeout_s, free) is None:
                    result.status = ALLOWED
                    result.message = (f"{difference[:250]}; the lab's text leaves {', '.join(sorted(free))} free "
                                      f"for {function}")
                else:
                    result.message = difference[:300]
        result.seconds = time.perf_counter() - t0
        report.mutants.append(result)
        if progress:
            progress(result)
    report.seconds = time.perf_counter() - start
    return report


def _spread(items: list, n: int | None) -> list:
    """At most ``n`` items, evenly spread over the deterministic order (every operator keeps a share)."""
    if n is None or n >= len(items):
        return items
    if n <= 0:
        return []
    step = len(items) / n
    return [items[int(i * step)] for i in range(n)]


def auditor_for(root: Path, lab_id: str, test_timeout_s: float = 20.0) -> Auditor:
    from autograder.grading.pipeline import Lab

    return Auditor(Lab.load(Path(root), lab_id), test_timeout_s=test_timeout_s)


def audit_lab(root: Path, lab_id: str, functions: list[str] | None = None, max_mutants: int | None = None,
              test_timeout_s: float = 20.0, progress=None, auditor: Auditor | None = None) -> list[FunctionReport]:
    auditor = auditor or auditor_for(root, lab_id, test_timeout_s)
    lab = auditor.lab
    unknown = [f for f in functions or [] if f not in lab.functions]
    if unknown:
        raise KeyError(f"{lab_id} has no graded function {', '.join(unknown)} (it has {', '.join(lab.functions)})")
    return [audit_function(auditor, f, max_mutants, progress) for f in functions or lab.functions]


def table(reports: list[FunctionReport]) -> str:
    head = ("lab", "function", "tests", "mutants", "killed", "timeout", "survived", "equiv?", "allowed", "invalid",
            "score", "seconds")
    rows = [head]
    for r in reports:
        rows.append((r.lab, r.function, str(len(r.tests)), f"{len(r.mutants)}/{r.generated}", str(r.count(KILLED)),
                     str(r.count(TIMEOUT)), str(r.count(SURVIVED)), str(r.count(EQUIVALENT)), str(r.count(ALLOWED)),
                     str(r.count(INVALID)),
                     "skipped" if r.skipped else "-" if r.score is None else f"{r.score:.0%}", f"{r.seconds:.1f}"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def details(reports: list[FunctionReport]) -> str:
    out = []
    for r in reports:
        if r.skipped:
            out.append(f"[{r.function}] not audited: {r.skipped}")
        for test, why in r.baseline_failures.items():
            out.append(f"[{r.function}] the reference fails {test} ({why.splitlines()[0][:200]}): test left out")
        for m in r.mutants:
            if m.status == SURVIVED:
                out.append(f"\n[{r.function}] SURVIVED mutant {m.index} ({m.operator}: {m.description}); "
                           f"differs from the reference at {m.message}\n{m.diff}")
        for status in (EQUIVALENT, ALLOWED):
            same = [m for m in r.mutants if m.status == status]
            if same:
                out.append(f"\n[{r.function}] {status}: " +
                           "; ".join(f"{m.index} ({m.operator}: {m.description})" for m in same))
    return "\n".join(out)


def write_json(reports: list[FunctionReport], path: Path) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps([r.as_dict() for r in reports], indent=1))

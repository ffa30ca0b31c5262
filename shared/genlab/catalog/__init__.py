"""Catalogues of real, documented bugs, one module per lab, kept as code students may read.

A lab's failure-modes cells import these to reproduce each bug and measure its symptom, and the grader
replays a student's calls through them to name the bug a student made.

Students receive this package, so no entry may be the answer with a small edit (issue 21; checked by
:mod:`autograder.release.leaks`). A bug whose code would be is written here as an :func:`edit` of the student's own
functions (``-gaussian_kl(mu, logvar)``, ``reparameterize(mu, logvar, eps).detach()``): in the notebook it
runs on the student's function, for the grader on the reference. Its full body, as a student would write it,
lives with the instructor, in ``solutions/<lab>/bugs.py``: the bug samples are made of it, and
``tests/test_catalogue.py`` checks that the body and the edit are the same bug.
"""
from __future__ import annotations

import functools
import importlib
import inspect
from dataclasses import dataclass
from typing import Callable


class Edit:
    """A bug written as an edit of the student's own functions: ``@edit("gaussian_kl")`` over
    ``def kl_sign_flipped(gaussian_kl, mu, logvar): return -gaussian_kl(mu, logvar)``.

    Called as the function it breaks (``bug.impl(mu, logvar)``), it takes the named functions from the
    notebook's namespace, the student's own; :meth:`bound` takes them from another namespace instead (the
    grader binds the reference)."""

    def __init__(self, fn: Callable, functions: tuple[str, ...]):
        self.fn, self.functions = fn, functions
        self.__name__, self.__doc__, self.__wrapped__ = fn.__name__, fn.__doc__, fn

    def bound(self, namespace) -> Callable:
        """The bug with the named functions taken from ``namespace`` (a dict or an object's attributes)."""
        found = [namespace[f] if isinstance(namespace, dict) else getattr(namespace, f) for f in self.functions]
        return functools.partial(self.fn, *found)

    def __call__(self, *args, **kwargs):
        return self.bound(_notebook_namespace(self.functions))(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<bug {self.__name__}: an edit of your {', '.join(self.functions)}>"

    def __reduce__(self):  # by name: its module's attribute of that name is this Edit, not self.fn
        return (_module_attribute, (self.fn.__module__, self.__name__))


def _module_attribute(module: str, name: str):
    return getattr(importlib.import_module(module), name)


def edit(*functions: str) -> Callable[[Callable], Edit]:
    """Decorator: the bug below is an edit of these student functions, passed to it first."""
    return lambda fn: Edit(fn, functions)


def runnable(impl: Callable, namespace) -> Callable:
    """``impl`` ready to call outside the notebook: an :class:`Edit` bound to ``namespace`` (the reference)."""
    return impl.bound(namespace) if isinstance(impl, Edit) else impl


def _notebook_namespace(functions) -> dict:
    """The namespace of the notebook running this (IPython's user namespace, else ``__main__``)."""
    try:
        namespace = get_ipython().user_ns  # noqa: F821 - defined inside IPython only
    except NameError:
        import __main__
        namespace = vars(__main__)
    missing = [f for f in functions if not callable(namespace.get(f))]
    if missing:
        raise NameError(f"this failure mode runs on your own {', '.join(missing)}, which is not defined: "
                        "run its cell first (and make it pass its tests, or the symptom shown is your bug's too)")
    return namespace


@dataclass(frozen=True)
class Bug:
    id: str                  # stable key, shown in grades.csv's diagnosis column
    function: str            # the student function it is a wrong version of
    title: str               # one line for the feedback
    symptom: str             # what goes wrong, in words
    fix: str                 # what to try
    reference: str           # where the bug is documented
    impl: Callable           # the bug, same signature as the function: code, or an Edit of the student's
    # Bugs whose values are right but whose cost is wrong cannot be named by replaying values:
    # ``detect(calls)`` looks at the recorded calls (e.g. a memory or time ratio) instead.
    detect: Callable | None = None
    # What replay may compare. Values and gradients by default; equivalent correct code can differ in peak
    # memory by a temporary, so memory counts as evidence only for bugs whose symptom *is* memory.
    kinds: tuple = ("call", "grad_of")

    @property
    def source(self) -> str:
        return inspect.getsource(getattr(self.impl, "fn", self.impl))

    def describe(self) -> str:
        return f"{self.title}: {self.symptom} Fix: {self.fix}"

    @property
    def lab(self) -> str:
        """The lab whose catalogue holds it: its module is ``genlab.catalog.<lab>`` (or the lab's ``bugs.py``)."""
        module = getattr(self.impl, "fn", self.impl).__module__
        return module.rsplit(".", 1)[-1].removeprefix("genlab_bugs_")

    def __reduce__(self):
        # By name, as the catalogue's entry: a full body from the instructor's bugs.py is not importable by name
        # in another process (results cross process boundaries when several workers grade).
        return (bug, (self.lab, self.id))


def too_slow(calls, max_ratio: float = 5.0) -> bool:
    """The timing symptom: even the best of the timing measurements made was over ``max_ratio``."""
    ratios = [c.result.ratio for c in calls if c.kind == "time_ratio" and c.result is not None]
    return bool(ratios) and min(ratios) > max_ratio


def argument(call, position: int, name: str, default):
    """One argument of a recorded call, given by position or by keyword."""
    if len(call.args) > position:
        return call.args[position]
    return call.kwargs.get(name, default)


def dropout_in_eval(calls, n_inputs: int, p_at: int, training_at: int, training_default: bool) -> bool:
    """The symptom of dropout not tied to ``training``: two calls on the same inputs that must both be
    deterministic (``dropout_p == 0``, or outside training), one of them with ``dropout_p > 0``, returned
    different outputs: dropout ran where it must not. Judged from the student's own outputs alone (what the
    failure-mode cells show: two passes over the same inputs differ), so nothing here computes the function's
    answer. The first ``n_inputs`` arguments are the inputs compared; ``dropout_p`` and ``training`` are read at
    positions ``p_at`` and ``training_at`` or by keyword."""
    import torch

    deterministic = []  # (inputs, dropout_p, result) of each call whose output the spec fixes
    for c in calls:
        if c.kind != "call" or c.error or not isinstance(c.result, torch.Tensor) or len(c.args) < n_inputs:
            continue
        p = argument(c, p_at, "dropout_p", 0.0)
        if p == 0 or not argument(c, training_at, "training", training_default):
            deterministic.append((c.args[:n_inputs], p, c.result))
    for i, (inputs, p, out) in enumerate(deterministic):
        for other, q, again in deterministic[i + 1:]:
            if max(p, q) > 0 and _same_inputs(inputs, other) and not (
                    out.shape == again.shape and torch.allclose(out.double(), again.double(), rtol=1e-5, atol=1e-6)):
                return True
    return False


def _same_inputs(a, b) -> bool:
    import torch

    return len(a) == len(b) and all(
        torch.equal(x, y) if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) else
        (x is None and y is None) or (not isinstance(x, torch.Tensor) and not isinstance(y, torch.Tensor) and x == y)
        for x, y in zip(a, b))


def bugs_for(lab: str) -> list[Bug]:
    try:
        module = importlib.import_module(f"genlab.catalog.{lab}")
    except ModuleNotFoundError:
        return []
    return list(module.BUGS)


def bug(lab: str, bug_id: str) -> Bug:
    for b in bugs_for(lab):
        if b.id == bug_id:
            return b
    raise KeyError(f"no bug {bug_id!r} in the {lab} catalogue; known: {[b.id for b in bugs_for(lab)]}")

"""Naming a student's bug: replay the student's recorded calls through each catalogued bug.

A bug is named when, on every call where the bug's output is deterministic, the student's output equals
the bug's, and on at least one of those calls the bug's output differs from the reference's (so a correct
function is never "diagnosed"). Randomness (a sampler called without ``eps``) makes a call uninformative
rather than a mismatch, and so does a call on which the student raises the error the reference raises
(input validation the bug's code leaves out says nothing about the bug).
"""
from __future__ import annotations

import math
from typing import Callable

import torch

from genlab.catalog import Bug, runnable
from genlab.checks.values import DEFAULT_TOLERANCES, tolerances
from genlab.testing.calls import Call, detached

LOW_PRECISION = (torch.float16, torch.bfloat16)


def same(a, b, rtol: float = 1e-4, atol: float = 1e-5) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape:
            return False
        if a.dtype.is_floating_point or b.dtype.is_floating_point:
            low = [d for d in (a.dtype, b.dtype) if d in LOW_PRECISION]
            a, b = a.detach().cpu().double(), b.detach().cpu().double()
            if low:
                # Half-precision results of one formula differ by more than rounding when the student rounds at
                # another step (1 - alpha_bar in float16 vs in float64). The tests forgive that (check_close's
                # per-dtype band, atol relative to the RMS), and so must the match with a bug, or the bug goes
                # unnamed. Twice the band: each of the two results may lie a full band from the truth.
                coarsest = max(low, key=lambda d: DEFAULT_TOLERANCES[d][0])
                band_rtol, band_atol, _ = tolerances(coarsest, b, None, None)
                rtol, atol = max(rtol, 2 * band_rtol), max(atol, 2 * band_atol)
            return torch.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
        return torch.equal(a.detach().cpu(), b.detach().cpu())
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y, rtol, atol) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        try:
            return math.isclose(float(a), float(b), rel_tol=rtol, abs_tol=atol) or (a != a and b != b)
        except (TypeError, ValueError):
            return False
    if isinstance(a, dict) and isinstance(b, dict):  # a dict of results (Lab 5's four manifold metrics)
        return a.keys() == b.keys() and all(same(a[k], b[k], rtol, atol) for k in a)
    if isinstance(a, BaseException) or isinstance(b, BaseException):
        return type(a).__name__ == type(b).__name__
    return a == b if type(a) is type(b) and isinstance(a, (int, str, type(None), bool)) else False


def replay(fn: Callable, call: Call):
    """What ``fn`` gives on ``call``'s inputs, measured the way the call was; an exception is a value."""
    import genlab.checks as checks

    # fresh copies on every replay: a replayed function may write to its arguments (in place, or a module in
    # train mode updating BatchNorm's running statistics), and the next replay must see them as they were sent
    args, kwargs = detached(call.args), detached(call.kwargs)
    try:
        if call.kind == "call":
            return fn(*args, **kwargs)
        return getattr(checks, call.kind)(fn, *args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - a bug that raises is still a comparable outcome
        return exc


def signature(value):
    """Shape and dtype of every tensor in a value: what stays fixed when the values are random."""
    if isinstance(value, torch.Tensor):
        return (tuple(value.shape), str(value.dtype))
    if isinstance(value, (list, tuple)):
        return tuple(signature(v) for v in value)
    if isinstance(value, dict):
        return tuple((k, signature(v)) for k, v in sorted(value.items(), key=lambda kv: str(kv[0])))
    if isinstance(value, BaseException):
        return type(value).__name__
    return type(value).__name__


def student_outcome(call: Call):
    if call.error is not None:
        return type(call.error, (Exception,), {})()
    return call.result


def matches(bug: Bug, calls: list[Call], reference: Callable, impl: Callable | None = None) -> bool:
    """``impl``: the bug ready to run (an edit bound to the reference); by default ``bug.impl``."""
    impl = impl or bug.impl
    if bug.detect is not None:  # a symptom replay cannot see (time, statistics of random draws)
        return bool(bug.detect(calls))
    informative = 0
    for call in calls:
        if call.kind not in bug.kinds:
            continue
        outcome = student_outcome(call)
        if isinstance(outcome, BaseException) and same(outcome, replay(reference, call)):
            continue  # input validation the student got right (t = T raises): silent about this bug
        buggy = replay(impl, call)
        if not same(buggy, replay(impl, call)):
            # Random values, but shape and dtype are still deterministic and can tell a bug apart.
            if signature(buggy) == signature(replay(reference, call)):
                continue
            if signature(outcome) != signature(buggy):
                return False
            informative += 1
            continue
        if not same(outcome, buggy):
            return False
        if not same(buggy, replay(reference, call)):
            informative += 1
    return informative > 0


def diagnose(bugs: list[Bug], calls: list[Call], reference_namespace) -> list[Bug]:
    """The catalogued bugs that explain ``calls`` (each for the function the calls were made to)."""
    found = []
    for bug in bugs:
        own = [c for c in calls if c.name == bug.function]
        reference = getattr(reference_namespace, bug.function, None)
        if own and reference is not None and matches(bug, own, reference, runnable(bug.impl, reference_namespace)):
            found.append(bug)
    return found

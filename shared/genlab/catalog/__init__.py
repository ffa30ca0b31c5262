"""Catalogues of real, documented bugs, one module per lab, kept as code.

A lab's failure-modes cells import these implementations to reproduce each bug and measure its symptom,
and the grader replays a student's calls through them to name the bug a student made. One definition
serves both, so the lesson and the diagnosis cannot drift apart.
"""
from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Bug:
    id: str                  # stable key, shown in grades.csv's diagnosis column
    function: str            # the student function it is a wrong version of
    title: str               # one line for the feedback
    symptom: str             # what goes wrong, in words
    fix: str                 # what to try
    reference: str           # where the bug is documented
    impl: Callable           # the buggy implementation, same signature as the function
    # Bugs whose values are right but whose cost is wrong cannot be named by replaying values:
    # ``detect(calls)`` looks at the recorded calls (e.g. a memory or time ratio) instead.
    detect: Callable | None = None
    # What replay may compare. Values and gradients by default; equivalent correct code can differ in peak
    # memory by a temporary, so memory counts as evidence only for bugs whose symptom *is* memory.
    kinds: tuple = ("call", "grad_of")

    @property
    def source(self) -> str:
        return inspect.getsource(self.impl)

    def describe(self) -> str:
        return f"{self.title}: {self.symptom} Fix: {self.fix}"


def too_slow(calls, max_ratio: float = 5.0) -> bool:
    """The timing symptom: even the best of the timing measurements made was over ``max_ratio``."""
    ratios = [c.result.ratio for c in calls if c.kind == "time_ratio" and c.result is not None]
    return bool(ratios) and min(ratios) > max_ratio


def argument(call, position: int, name: str, default):
    """One argument of a recorded call, given by position or by keyword."""
    if len(call.args) > position:
        return call.args[position]
    return call.kwargs.get(name, default)


def dropout_in_eval(calls, deterministic: Callable, p_at: int, training_at: int, training_default: bool) -> bool:
    """The symptom of dropout not tied to ``training``: calls with ``dropout_p > 0`` outside training returned
    something other than the deterministic output, while the calls without dropout were right.

    ``deterministic(call)`` is the output without dropout, in float64, or None for a call it cannot judge;
    ``dropout_p`` and ``training`` are read at positions ``p_at`` and ``training_at`` or by keyword."""
    import torch

    deterministic_ok, dropped_in_eval = True, False
    for c in calls:
        if c.kind != "call" or c.error or not isinstance(c.result, torch.Tensor):
            continue
        p, training = argument(c, p_at, "dropout_p", 0.0), argument(c, training_at, "training", training_default)
        if p > 0 and training:
            continue  # random by design
        expected = deterministic(c)
        if expected is None:
            continue
        ok = c.result.shape == expected.shape and torch.allclose(c.result.double(), expected, rtol=1e-2, atol=1e-2)
        if p > 0:
            dropped_in_eval |= not ok
        else:
            deterministic_ok &= ok
    return dropped_in_eval and deterministic_ok


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

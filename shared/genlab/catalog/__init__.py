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

"""The one exception every check raises, and small helpers for its messages.

`CheckFailed` subclasses `AssertionError` so that pytest, nbgrader and plain
``assert``-style test cells all treat a failed check as a failed test, while
graders can still tell "the student's answer is wrong" (CheckFailed) apart from
"the check itself crashed" (any other exception).
"""

from __future__ import annotations

import torch


class CheckFailed(AssertionError):
    """A student's result did not pass a check; the message says what to fix."""


def type_name(obj: object) -> str:
    """A readable name for the type of `obj`, e.g. ``numpy.ndarray`` or ``list``."""
    cls = type(obj)
    module = cls.__module__
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"


def require_tensor(obj: object, *, name: str, expected: str) -> torch.Tensor:
    """Return `obj` if it is a tensor; otherwise fail with a hint for the usual slip.

    `expected` describes what was wanted (e.g. "a torch.Tensor of shape (B, D)").
    """
    if isinstance(obj, torch.Tensor):
        return obj
    if obj is None:
        hint = "did you forget a `return` statement?"
    elif type(obj).__module__.startswith("numpy"):
        hint = "stay in torch (torch.from_numpy(...) or torch ops) so gradients and devices keep working"
    elif isinstance(obj, (int, float, bool)):
        hint = "return the tensor itself, not .item()"
    elif isinstance(obj, (list, tuple)):
        hint = "return one tensor (torch.stack / torch.tensor), not a Python sequence or .tolist()"
    else:
        hint = "return a torch.Tensor"
    raise CheckFailed(f"{name}: expected {expected}, got {type_name(obj)}: {hint}")

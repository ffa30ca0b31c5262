"""The hook that lets the grader measure a function living in another process.

The autograder runs student notebooks in their own kernel and hands the checks a
*proxy* callable. Measuring the proxy locally would measure the IPC, not the
student's code, so a proxy carries a hook and the checks forward the request:

* ``fn.__genlab_measure__(kind, args, kwargs)`` with kind ``"grad_of"``,
  ``"peak_memory"`` or ``"count_flops"``; `kwargs` also holds the check's own
  options (``wrt``, ``grad_output``...), so the far side can simply call
  ``<kind>(real_fn, *args, **kwargs)``.
* ``fn.__genlab_time_ratio__(reference, args, kwargs)`` for timing, which must
  run both functions in the same process to be a fair race.

Ordinary functions have neither attribute, so local use is unaffected.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

MEASURE_HOOK = "__genlab_measure__"
TIME_RATIO_HOOK = "__genlab_time_ratio__"


def remote_hook(fn: Any, hook_name: str = MEASURE_HOOK) -> Optional[Callable[..., Any]]:
    """Return `fn`'s remote-measurement hook, or None for an ordinary local function."""
    return getattr(fn, hook_name, None)

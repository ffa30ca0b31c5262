"""Checks for lab notebooks and the autograder: one concept per module.

Every failure raises :class:`CheckFailed` (an ``AssertionError``) whose message
says what was expected, what was got, and what to try.

* :mod:`.shapes`    - ``check_shape(z, "B D", B=32, D=16)``
* :mod:`.values`    - ``check_close`` (float64 ground truth aware), ``check_dtype_device``
* :mod:`.gradients` - ``grad_of``, ``check_grad_reaches``
* :mod:`.memory`    - ``peak_memory``
* :mod:`.flops`     - ``count_flops``
* :mod:`.timing`    - ``time_ratio``, ``check_not_slower``, ``TimingResult``
"""

from .errors import CheckFailed
from .flops import count_flops
from .gradients import check_grad_reaches, grad_of
from .memory import peak_memory
from .shapes import check_shape
from .timing import TimingResult, check_not_slower, time_ratio
from .values import check_close, check_dtype_device

__all__ = [
    "CheckFailed",
    "check_shape",
    "check_close",
    "check_dtype_device",
    "grad_of",
    "check_grad_reaches",
    "peak_memory",
    "count_flops",
    "TimingResult",
    "time_ratio",
    "check_not_slower",
]

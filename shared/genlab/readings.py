"""A sentence of a lab's text that rests on numbers of the run: stated once, checked in the run, printed with them.

The prose of a lab reads its tables ("the noise costs no fidelity", "leading spacing does better without
clipping"). Written once against one machine's numbers, such a sentence can become false on another machine or
after a change to the lab: issue 42 found several read the opposite way from what the run measured. So each
sentence that a markdown cell or a comment states about a result is also given to :func:`reading`, next to the
numbers it rests on:

    reading("the noise costs no fidelity", abs(p_noise - p_real) < 0.01,
            f"precision {p_noise:.3f} against {p_real:.3f}")

In a student's run a reading that fails prints that it does not hold, with the numbers, so the student is never
told something this run contradicts. Under ``make test`` (nbval with ``GENLAB_STRICT_READINGS=1``) it raises
:class:`ReadingFailed`, so a change that turns a sentence false fails the suite instead of shipping.
"""
from __future__ import annotations

import os

STRICT_ENV = "GENLAB_STRICT_READINGS"


class ReadingFailed(AssertionError):
    """A sentence of the text does not hold on this run's numbers (raised only under ``GENLAB_STRICT_READINGS=1``)."""


def strict() -> bool:
    return os.environ.get(STRICT_ENV, "") == "1"


def reading(sentence: str, holds, measured: str) -> bool:
    """Prints whether ``sentence`` holds on this run, with the ``measured`` numbers it rests on; returns it.

    ``holds`` is the sentence's condition computed from the run's numbers (a bool, or a one-element tensor).
    Under ``GENLAB_STRICT_READINGS=1`` a sentence that does not hold raises :class:`ReadingFailed`."""
    holds = bool(holds)
    if holds:
        print(f"Reading: {sentence} (holds: {measured}).")
        return True
    message = (f"Reading does NOT hold in this run: {sentence}. Measured: {measured}. The text above rests on this "
               f"sentence; on this run, trust the numbers, not the sentence.")
    if strict():
        raise ReadingFailed(message + f" ({STRICT_ENV}=1: the lab's text must be corrected, or the experiment made "
                                      f"large enough to show what it claims.)")
    print(message)
    return False

"""Running one test cell's code and turning what happened into a verdict.

The same runner serves a student's self-check (functions are :class:`~genlab.testing.calls.LocalFunction` s
in the student's kernel) and the grader, whose trusted process binds the student's functions to proxies
into the kernel and adds its own statuses (timeout, killed, tampered, missing: ``autograder.core.results``).
"""
from __future__ import annotations

import linecache
import time
import traceback
from dataclasses import dataclass, field

from genlab.checks import CheckFailed
from genlab.testing.wire import StudentError

PASSED, FAILED, ERROR = "passed", "failed", "error"


@dataclass
class Outcome:
    test: str
    status: str
    message: str = ""
    seconds: float = 0.0
    diagnosis: list = field(default_factory=list)   # catalogued Bug objects
    line: int = 0                                   # the test's line that failed (0: passed, or not known)

    @property
    def passed(self) -> bool:
        return self.status == PASSED


def _failing_line(exc: BaseException, filename: str) -> str:
    """The line of the test that failed, for assertions written without a message."""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if frame.filename == filename:
            return (frame.line or linecache.getline(filename, frame.lineno)).strip()
    return ""


def _failing_lineno(exc: BaseException, filename: str) -> int:
    return next((f.lineno for f in reversed(traceback.extract_tb(exc.__traceback__)) if f.filename == filename), 0)


def _quoted(text: str) -> str:
    return "\n".join("  | " + line for line in (text.splitlines() or [""]))


def run_test(test_id: str, source: str, namespace: dict, passthrough: tuple = ()) -> Outcome:
    """Executes ``source`` in ``namespace``; the test passes when it finishes without an exception.

    Exceptions of the types in ``passthrough`` are not verdicts on the student's code (the grader's kernel
    died or timed out) and are raised to the caller, which knows what they mean.
    """
    filename = f"<test {test_id}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    start = time.perf_counter()
    line = 0
    try:
        exec(compile(source, filename, "exec"), namespace)
        status, message = PASSED, ""
    except passthrough:
        raise
    except StudentError as exc:
        line = _failing_lineno(exc, filename)
        # Text from the student's kernel: quoted line by line, so that none of it reads as the grader's own
        # (a line "[genlab grader] ... PASSED" in a message stays behind the quote marks).
        where = exc.remote_traceback.strip().splitlines()[-3:] if exc.remote_traceback else []
        status = ERROR
        message = f"your code raised {exc.remote_type}, saying:\n" + _quoted(str(exc)) + \
            ("\nat the end of its traceback:\n" + _quoted("\n".join(where)) if where else "")
    except (CheckFailed, AssertionError) as exc:
        line = _failing_lineno(exc, filename)
        status = FAILED
        message = str(exc) or f"this check failed: {_failing_line(exc, filename)}"
    except Exception as exc:  # noqa: BLE001 - the test could not use what the student's code returned
        line = _failing_lineno(exc, filename)
        status = ERROR
        message = (f"the test could not use your result ({type(exc).__name__}: {exc}) "
                   f"at: {_failing_line(exc, filename)}")
    return Outcome(test_id, status, message, time.perf_counter() - start, line=line)

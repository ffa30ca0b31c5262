"""A whole ``genlab grade`` run started by a test, which leaves nothing behind when it runs out of time.

``subprocess.run(..., timeout=...)`` kills only the process it started: the grader's worker processes then
went on grading, orphaned, for the rest of the suite (seen after a run that timed out under load). Here the
grader gets a process group of its own, which is stopped whole on a timeout or an interrupted test run:
SIGTERM, then SIGKILL.
"""
from __future__ import annotations

import os
import signal
import subprocess


def _stop_group(proc: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=20)
            return
        except subprocess.TimeoutExpired:
            continue


def run(cmd: list[str], timeout: float, **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            **kwargs)
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:  # the time limit, or Ctrl-C: the grader and its workers go with the test
        _stop_group(proc)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)

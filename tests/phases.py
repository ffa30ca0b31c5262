"""Where the suite's time goes: the machine it ran on, then seconds per phase and per pytest worker.

Printed at the end of every run (``pytest_terminal_summary`` in conftest.py), so a closing note can give the
suite's time together with the CPU it was measured on. A phase's seconds are the sum of its tests' setup, call
and teardown times, fixtures included, so phases that ran side by side on two workers add up to more than the
wall time. ``GENLAB_CI_START`` (epoch seconds, set by ``.ci/run``) makes the setup before pytest a phase too.
"""
from __future__ import annotations

import os
import platform
import time
from collections import defaultdict

# First match wins: a test file (or folder) and the phase it belongs to.
PHASES = [
    ("solutions/", "nbval (solution notebooks)"),
    ("tests/test_browser.py", "browser (JupyterLab, feedback pages in Chromium)"),
    ("tests/test_feedback_page.py", "browser (JupyterLab, feedback pages in Chromium)"),
    ("tests/test_term.py", "browser (JupyterLab, feedback pages in Chromium)"),
    ("tests/test_slurm.py", "cluster (Slurm job array)"),
    ("tests/test_grading.py", "grading (every sample, both modes)"),
    ("tests/test_sharding.py", "grading (shards, resume, PostgreSQL)"),
    ("tests/test_feedback_inert.py", "grading (inert feedback)"),
    ("tests/test_least_privilege.py", "grading (least privilege)"),
    ("tests/test_labs.py", "grading (lab folders)"),
    ("tests/test_class_report.py", "grading (class report)"),
]
OTHER = "unit tests and lab checks"
FILES_SHOWN = 15


def phase_of(nodeid: str) -> str:
    return next((phase for prefix, phase in PHASES if nodeid.startswith(prefix)), OTHER)


def cpu_model() -> str:
    """The CPU's model name and the widest vector unit torch's kernels use on it (AVX2, AVX512, ...)."""
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            name = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), name)
    except OSError:
        pass
    try:
        import torch

        capability = torch.backends.cpu.get_cpu_capability()
    except Exception:  # noqa: BLE001 - no torch, or an old one: the model name alone
        capability = "unknown"
    return f"{name}, {os.cpu_count()} CPUs, torch kernels: {capability}"


def summary(reports, session_start: float) -> list[str]:
    per_phase: dict[str, float] = defaultdict(float)
    per_worker: dict[str, float] = defaultdict(float)
    per_file: dict[str, float] = defaultdict(float)
    for report in reports:
        seconds = getattr(report, "duration", 0.0) or 0.0
        per_phase[phase_of(report.nodeid)] += seconds
        per_file[report.nodeid.split("::")[0]] += seconds
        node = getattr(report, "node", None)   # pytest-xdist: the worker that ran it
        per_worker[getattr(getattr(node, "gateway", None), "id", "main")] += seconds
    lines = [f"machine: {cpu_model()}"]
    ci_start = os.environ.get("GENLAB_CI_START")
    if ci_start:
        lines.append(f"  {session_start - float(ci_start):7.0f} s  setup (venv, system packages, PostgreSQL)")
    for phase, seconds in sorted(per_phase.items(), key=lambda kv: -kv[1]):
        lines.append(f"  {seconds:7.0f} s  {phase}")
    # The files that cost most: where to look first when the suite is over its time.
    lines.append("  the longest files: " + ", ".join(f"{name} {seconds:.0f} s" for name, seconds in
                                                  sorted(per_file.items(), key=lambda kv: -kv[1])[:FILES_SHOWN]))
    lines.append(f"  {time.time() - session_start:7.0f} s  pytest, wall clock; busy per worker: "
                 + ", ".join(f"{w} {s:.0f} s" for w, s in sorted(per_worker.items())))
    return lines

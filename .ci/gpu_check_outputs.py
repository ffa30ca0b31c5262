"""A pytest plugin for .ci/gpu-check: keeps what each notebook cell printed while nbval ran it.

nbval compares a cell's outputs and then drops them; the GPU report needs the figures the claim sections
print on CUDA. Each nbval cell's text outputs ride on its test report (a report section, so they also cross
from pytest-xdist workers), and the controller appends one JSON line per cell to $GENLAB_NBVAL_OUTPUTS:
{"notebook", "cell" (index among code cells, as nbval counts), "outcome", "seconds", "text"}.
Load with ``-p gpu_check_outputs`` and .ci on PYTHONPATH.
"""
from __future__ import annotations

import json
import os

import pytest

SECTION = "genlab cell output"


def _text(outputs) -> str:
    parts = []
    for out in outputs or []:
        if out.get("output_type") == "stream":
            parts.append(out.get("text", ""))
        elif out.get("output_type") in ("execute_result", "display_data"):
            parts.append(out.get("data", {}).get("text/plain", ""))
        elif out.get("output_type") == "error":
            parts.append(f"{out.get('ename')}: {out.get('evalue')}\n")
    return "".join(parts)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if call.when == "call" and hasattr(item, "test_outputs") and hasattr(item, "cell_num"):
        report.sections.append((SECTION, json.dumps({"cell": item.cell_num,
                                                     "text": _text(item.test_outputs)})))


def pytest_runtest_logreport(report):
    path = os.environ.get("GENLAB_NBVAL_OUTPUTS")
    # Under pytest-xdist a worker sees its own reports too: only the controller writes, once per cell.
    if not path or report.when != "call" or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    for name, content in report.sections:
        if name == SECTION:
            record = json.loads(content)
            record.update(notebook=report.nodeid.split("::")[0], outcome=report.outcome,
                          seconds=round(report.duration, 3))
            with open(path, "a") as f:
                f.write(json.dumps(record) + "\n")

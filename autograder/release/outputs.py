"""Stored outputs for nbval: solution cells marked ``# NBVAL_CHECK_OUTPUT`` keep the output of a reference run.

nbval runs in lax mode (``--nbval-lax``): every cell must run without error, and only marked cells, whose
output is deterministic (shapes, strides, byte counts, seeded statistics), are compared with what is stored.
Timings are replaced by ``TIME`` on both sides (``.ci/nbval-sanitize.cfg``). Other cells keep no output, so
the solution notebooks stay small and the student release (which clears every output) is unaffected.
"""
from __future__ import annotations

import os
from pathlib import Path

import nbformat
from nbclient import NotebookClient

MARK = "NBVAL_CHECK_OUTPUT"


def store_checked_outputs(path: Path, timeout: int = 600) -> int:
    """Runs the notebook and keeps the outputs of marked cells only; returns how many cells are marked."""
    path = Path(path).resolve()
    nb = nbformat.read(str(path), as_version=4)
    os.environ.setdefault("GENLAB_ROOT", str(path.parents[2]))  # hidden tests load the reference from there
    client = NotebookClient(nb, timeout=timeout, resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    marked = 0
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        if MARK in cell.source:
            marked += 1
            cell.outputs = [o for o in cell.outputs if o.output_type in ("stream", "execute_result")]
        else:
            cell.outputs, cell.execution_count = [], None
        cell.metadata.pop("execution", None)
    nb.metadata.pop("widgets", None)
    nbformat.write(nb, str(path))
    return marked

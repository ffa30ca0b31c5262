"""Finding each student's notebook for each lab in an nbgrader ``submitted/`` tree.

The expected place is ``<student>/<lab>/<lab>.ipynb``. Students also hand in ``Lab1.ipynb``, a copy named
``lab1_vae (1).ipynb``, or a folder named after the wrong lab. A notebook is recognised as a lab's by its
cells: nbgrader's grade_ids travel with the cells, whatever the file is called. Nothing is graded under
a lab it does not belong to, and a notebook found elsewhere is graded with a note saying so.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

RECOGNISED = 0.5  # share of a lab's graded cells a notebook must carry to count as that lab's


@dataclass
class Found:
    path: Path | None
    note: str = ""
    refused: str = ""   # why the file is not read at all (then `status` says how its rows are marked)
    status: str = ""    # "tampered" (a link out of the student's folder) or "error"


def refusal(path: Path, student_dir: Path, max_bytes: int) -> tuple[str, str]:
    """(status, reason) when a handed-in file must not be opened, else ("", "").

    The grader reads submissions with its own rights, outside the sandbox: a notebook that is a link to
    the solutions (or to another student's notebook, or to /dev/zero), a named pipe that blocks every
    read, or a file of gigabytes must be refused before anything opens it. ``max_bytes`` comes from
    ``Limits.max_notebook_bytes`` (course.toml: max_notebook_mib).
    """
    if path.is_symlink() or student_dir.is_symlink() or not path.resolve().is_relative_to(student_dir.resolve()):
        target = path.resolve()
        return "tampered", (f"{path.name} is a link to {target}: the grader reads only files handed in, never "
                            "links; hand in the notebook itself")
    if not path.is_file():
        return "error", f"{path.name} is not a regular file: hand in the .ipynb file saved by JupyterLab"
    size = path.stat().st_size
    if size > max_bytes:
        return "error", (f"{path.name} is {size / 2**20:.0f} MiB, over the {max_bytes / 2**20:.0f} MiB limit; "
                         "clear the outputs (Edit > Clear Outputs of All Cells), save, and hand it in again")
    return "", ""


def _grade_ids(path: Path, student_dir: Path, max_bytes: int) -> set[str]:
    if refusal(path, student_dir, max_bytes)[0]:
        return set()
    try:
        nb = json.loads(path.read_text(errors="replace"))
        return {c.get("metadata", {}).get("nbgrader", {}).get("grade_id") for c in nb.get("cells", [])} - {None}
    except (OSError, ValueError, AttributeError, TypeError):
        return set()


def locate(student_dir: Path, lab: str, lab_ids: set[str], max_bytes: int) -> Found:
    expected = student_dir / lab / f"{lab}.ipynb"
    if expected.exists() or expected.is_symlink():
        status, why = refusal(expected, student_dir, max_bytes)
        return Found(expected, refused=why, status=status)
    if not student_dir.is_dir():
        return Found(None)
    best, best_share = None, 0.0
    for path in sorted(student_dir.rglob("*.ipynb")):
        if ".ipynb_checkpoints" in path.parts:
            continue
        share = len(_grade_ids(path, student_dir, max_bytes) & lab_ids) / max(1, len(lab_ids))
        if share > best_share:
            best, best_share = path, share
    if best is not None and best_share >= RECOGNISED:
        rel = best.relative_to(student_dir)
        return Found(best, f"graded {rel}: expected {lab}/{lab}.ipynb (the notebook was submitted under "
                           "another name; its cells identify it as this lab)")
    return Found(None)


def students(submissions: Path) -> list[str]:
    return sorted(p.name for p in submissions.iterdir() if p.is_dir() and not p.name.startswith("."))

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


def _grade_ids(path: Path) -> set[str]:
    try:
        nb = json.loads(path.read_text(errors="replace"))
        return {c.get("metadata", {}).get("nbgrader", {}).get("grade_id") for c in nb.get("cells", [])} - {None}
    except (OSError, ValueError, AttributeError, TypeError):
        return set()


def locate(student_dir: Path, lab: str, lab_ids: set[str]) -> Found:
    expected = student_dir / lab / f"{lab}.ipynb"
    if expected.exists():
        return Found(expected)
    if not student_dir.is_dir():
        return Found(None)
    best, best_share = None, 0.0
    for path in sorted(student_dir.rglob("*.ipynb")):
        if ".ipynb_checkpoints" in path.parts:
            continue
        share = len(_grade_ids(path) & lab_ids) / max(1, len(lab_ids))
        if share > best_share:
            best, best_share = path, share
    if best is not None and best_share >= RECOGNISED:
        rel = best.relative_to(student_dir)
        return Found(best, f"graded {rel}: expected {lab}/{lab}.ipynb (the notebook was submitted under "
                           "another name; its cells identify it as this lab)")
    return Found(None)


def students(submissions: Path) -> list[str]:
    return sorted(p.name for p in submissions.iterdir() if p.is_dir() and not p.name.startswith("."))

"""Rebuilding the notebook to grade from the student's file and the released version.

Students delete, edit, duplicate and reorder cells, by accident or not. The grader never trusts the
student's copy of a locked cell: every locked cell (instructions, setup, tests) comes from the release by
its grade_id, every solution cell from the student, and cells the student added stay after the cell they
followed. Each repair is reported in the feedback, so nothing is silently lost or silently kept.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field

import nbformat

from genlab.testing.notebook import grade_id, nbgrader_meta

START = "<start>"


@dataclass
class Assembled:
    nb: nbformat.NotebookNode
    notes: list[str] = field(default_factory=list)
    student_cells: list[tuple[str, str]] = field(default_factory=list)  # (where, source) of student code


def assemble(student: nbformat.NotebookNode, release: nbformat.NotebookNode) -> Assembled:
    notes: list[str] = []
    by_id: dict[str, nbformat.NotebookNode] = {}
    added: dict[str, list] = {}
    anchor = START
    order = []
    release_ids = [grade_id(c) for c in release.cells if grade_id(c)]
    for cell in student.cells:
        gid = grade_id(cell)
        if gid is None:
            added.setdefault(anchor, []).append(cell)
            continue
        if gid in by_id:
            notes.append(f"cell `{gid}` appears more than once; the first copy was graded")
            continue
        by_id[gid] = cell
        order.append(gid)
        if gid in release_ids:  # a cell the lab does not have is dropped; what follows it must not be
            anchor = gid
    known = [g for g in order if g in release_ids]
    if known != [g for g in release_ids if g in known]:
        notes.append("cells were moved; they were graded in the released order")

    out = nbformat.v4.new_notebook(metadata=copy.deepcopy(release.metadata))
    student_code: list[tuple[str, str]] = []

    def take_added(key):
        for cell in added.get(key, []):
            cell = copy.deepcopy(cell)
            # An added cell is the student's: it may carry nbgrader metadata (points, a "grade" flag) copied
            # or forged, but only the release decides what is graded and for how much.
            if cell.get("metadata", {}).pop("nbgrader", None) is not None:
                notes.append(f"a cell you added after `{key}` carried grading metadata; it was ignored")
            out.cells.append(cell)
            if cell.cell_type == "code":
                student_code.append((f"your added cell after `{key}`", cell.source))

    take_added(START)
    for cell in release.cells:
        gid = grade_id(cell)
        mine = by_id.get(gid)
        if is_answer(cell):
            if mine is None:
                notes.append(f"solution cell `{gid}` was missing; the empty template was graded")
                mine = cell
            elif cell.cell_type == "code":
                student_code.append((f"cell `{gid}`", mine.source))
            chosen = copy.deepcopy(mine)
            chosen.metadata["nbgrader"] = copy.deepcopy(nbgrader_meta(cell))
            if "id" in cell:
                chosen["id"] = cell["id"]  # the release's cell, with the student's code
            out.cells.append(chosen)
        else:
            if gid is not None and mine is None:
                notes.append(f"locked cell `{gid}` was deleted; it was restored")
            elif mine is not None and mine.source != cell.source:
                notes.append(f"locked cell `{gid}` was edited; the original was restored")
            out.cells.append(copy.deepcopy(cell))
        if gid is not None:
            take_added(gid)
    for gid in by_id:
        if gid not in release_ids:
            notes.append(f"cell `{gid}` is not part of this lab and was ignored")
    _unique_ids(out)
    return Assembled(out, notes, student_code)


def is_answer(cell) -> bool:
    """A cell the student writes: a solution's code, or a manually graded answer in markdown."""
    return bool(nbgrader_meta(cell).get("solution"))


def _unique_ids(nb) -> None:
    """Cells the student added may carry an id a release cell has: nbformat requires ids to be unique."""
    seen: set[str] = set()
    for index, cell in enumerate(nb.cells):
        if "id" in cell and cell["id"] in seen:
            cell["id"] = f"added-{index}"
        seen.add(cell.get("id"))

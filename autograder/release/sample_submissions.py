"""Sample submissions, generated from each lab's ``solutions/<lab>/samples.py`` and its released notebook.

A sample is a student folder under ``autograder/samples/<name>/<lab>/``; its spec names the solution cells
it replaces (by grade_id) and how else the handed-in file differs from a clean copy of the release:

- ``cells``: grade_id -> source; ``after``: grade_id -> source of a cell added after that one;
  ``edit``: locked cells edited; ``delete``; ``duplicate``; ``swap``; ``metadata``: nbgrader metadata forged;
  ``add``: (source, nbgrader metadata) cells appended;
- ``path`` (handed in under another name), ``link`` (a symlink), ``raw`` (bytes that are not a notebook),
  ``missing`` (an empty folder);
- ``policy``: ``"off"`` for a sample that tests the walls behind the policy for graded code (its cells are
  outside it): ``tests/test_grading.py`` grades it with ``--without-policy``;
- ``expect``: what the grader must conclude (``tests/test_grading.py`` reads it): ``full``; ``bug`` and
  ``function``; ``tampered``; ``failed_tests``; ``status`` / ``message`` per test; ``status_all``; ``notes``;
  ``feedback_shows`` (text the feedback page must hold)...

Labs are discovered (:mod:`autograder.core.labs`), so a new lab folder's samples are generated with no other edit.
"""
from __future__ import annotations

import copy
import inspect
import re
import textwrap
from pathlib import Path

import nbformat

from autograder.core.labs import LabFolder, discover
from genlab.testing.notebook import LabNotebook, grade_id, is_solution

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parents[1] / "samples"
BUILD_KEYS = {"cells", "after", "edit", "delete", "duplicate", "swap", "metadata", "add", "path", "link", "raw",
              "missing", "expect", "policy"}


def bug_cell(lab: str, bug_id: str) -> str:
    """A student's solution cell whose body is the catalogued bug, written as a student would write it.

    The catalogue keeps each bug as a function named after the bug; the cell renames it to the student
    function it replaces and defines first the catalogue's private helpers (``_kl``) that the body uses.
    """
    import genlab.catalog
    from autograder.core.labs import LabFolder

    entry = genlab.catalog.bug(lab, bug_id)
    impl = LabFolder(ROOT, lab).bodies.get(bug_id, entry.impl)  # the full body, where students see an edit
    names = impl.__globals__  # the module it is written in (a catalogue module, or the lab's bugs.py)
    source = textwrap.dedent(inspect.getsource(impl))
    source = re.sub(rf"^def {impl.__name__}\(", f"def {entry.function}(", source, count=1, flags=re.M)
    helpers = []
    for name in impl.__code__.co_names:
        value = names.get(name)
        if not name.startswith("_") or value is None:
            continue
        if inspect.isfunction(value):
            helpers.append(textwrap.dedent(inspect.getsource(value)))
        elif isinstance(value, re.Pattern):
            helpers.append(f"{name} = re.compile({value.pattern!r})\n")
    return "\n".join(helpers + [source])


def reference_sources(lab: LabFolder) -> dict[str, str]:
    """The reference solution cells, as a student with the right answer would submit them."""
    src = LabNotebook.read(lab.source).solutions
    return {k: "\n".join(l for l in v.splitlines() if "### " not in l) + "\n" for k, v in src.items()}


def build(lab: LabFolder, spec: dict) -> nbformat.NotebookNode:
    unknown = set(spec) - BUILD_KEYS
    if unknown:
        raise ValueError(f"{lab.id} sample: unknown keys {sorted(unknown)}; known: {sorted(BUILD_KEYS)}")
    release = nbformat.read(str(lab.release), as_version=4)
    cells = {**reference_sources(lab), **spec.get("cells", {})}
    nb = copy.deepcopy(release)
    out = []
    for cell in nb.cells:
        gid = grade_id(cell)
        if gid in spec.get("delete", []):
            continue
        if is_solution(cell) and gid in cells:
            cell.source = cells[gid]
        if gid in spec.get("edit", {}):
            cell.source = spec["edit"][gid]
        if gid in spec.get("metadata", {}):
            cell.metadata.setdefault("nbgrader", {}).update(spec["metadata"][gid])
        out.append(cell)
        if gid in spec.get("after", {}):
            out.append(nbformat.v4.new_code_cell(spec["after"][gid]))
    for gid in spec.get("duplicate", []):
        out += [copy.deepcopy(c) for c in out if grade_id(c) == gid]
    for source, meta in spec.get("add", []):
        out.append(nbformat.v4.new_code_cell(source, metadata={"nbgrader": dict(meta)}))
    if "swap" in spec:
        a, b = (next(i for i, c in enumerate(out) if grade_id(c) == g) for g in spec["swap"])
        out[a], out[b] = out[b], out[a]
    nb.cells = out
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i:03d}"
    return nb


def write(lab: LabFolder, name: str, spec: dict, out: Path) -> Path | None:
    """Writes one sample where a student would have put it; returns the notebook's path (None if absent)."""
    folder = out / name / lab.id
    folder.mkdir(parents=True, exist_ok=True)
    if spec.get("missing"):
        (folder / ".keep").write_text("the student handed in an empty folder\n")
        return None
    path = out / name / spec["path"] if "path" in spec else folder / f"{lab.id}.ipynb"
    if "path" in spec:
        folder.rmdir()
        path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink() or path.exists():
        path.unlink()  # never write through an old link
    if "link" in spec:
        path.symlink_to(spec["link"])
    elif "raw" in spec:
        path.write_text(spec["raw"])
    else:
        nbformat.write(build(lab, spec), str(path))
    return path


def generate(root: Path = ROOT, out: Path | None = None, labs: list[str] | None = None) -> list[Path | None]:
    """Writes every sample of every lab (or of the named labs only)."""
    out = out or HERE
    return [write(lab, name, spec, out) for lab in discover(root) if not labs or lab.id in labs
            for name, spec in lab.samples.items()]


if __name__ == "__main__":
    import sys

    for p in generate(labs=sys.argv[1:] or None):  # python -m autograder.release.sample_submissions [LAB ...]
        print(p or "(no notebook)")

"""Sample submissions, generated from the released notebook and the per-lab definitions beside this file."""
from __future__ import annotations

import copy
import importlib
from pathlib import Path

import nbformat

from genlab.testing.notebook import grade_id, is_solution

HERE = Path(__file__).parent / "samples"
LABS = ["lab1_vae", "lab2_diffusion", "lab3_attention"]


def reference_sources(root: Path, lab: str) -> dict[str, str]:
    """The reference solution cells, as a student with the right answer would submit them."""
    from genlab.testing.notebook import LabNotebook

    src = LabNotebook.read(root / "solutions" / lab / f"{lab}.ipynb").solutions
    return {k: "\n".join(l for l in v.splitlines() if "### " not in l) + "\n" for k, v in src.items()}


def build(root: Path, lab: str, name: str, spec: dict) -> nbformat.NotebookNode:
    release = nbformat.read(str(root / "labs" / lab / f"{lab}.ipynb"), as_version=4)
    cells = {**reference_sources(root, lab), **spec.get("cells", {})}
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


def write(root: Path, lab: str, name: str, spec: dict, out: Path) -> Path | None:
    """Writes one sample where a student would have put it; returns the notebook's path (None if absent)."""
    folder = out / name / lab
    folder.mkdir(parents=True, exist_ok=True)
    if spec.get("missing"):
        (folder / ".keep").write_text("the student handed in an empty folder\n")
        return None
    path = out / name / spec["path"] if "path" in spec else folder / f"{lab}.ipynb"
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
        nbformat.write(build(root, lab, name, spec), str(path))
    return path


def generate(root: Path, out: Path | None = None) -> list[Path]:
    out = out or HERE
    written = []
    for lab in LABS:
        module = importlib.import_module(f"autograder.sample_defs.{lab}")
        for name, spec in module.SAMPLES.items():
            written.append(write(root, lab, name, spec, out))
    return written


if __name__ == "__main__":
    for p in generate(HERE.parent.parent):
        print(p or "(no notebook)")

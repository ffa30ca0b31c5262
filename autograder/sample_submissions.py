"""Sample submissions, generated from the released notebook and the per-lab definitions beside this file."""
from __future__ import annotations

import copy
import importlib
from pathlib import Path

import nbformat

from genlab.testing.notebook import grade_id, is_solution

HERE = Path(__file__).parent / "samples"
LABS = ["lab1_vae", "lab2_diffusion"]


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
        out.append(cell)
        if gid in spec.get("after", {}):
            out.append(nbformat.v4.new_code_cell(spec["after"][gid]))
    nb.cells = out
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i:03d}"
    return nb


def generate(root: Path, out: Path | None = None) -> list[Path]:
    out = out or HERE
    written = []
    for lab in LABS:
        module = importlib.import_module(f"autograder.sample_defs.{lab}")
        for name, spec in module.SAMPLES.items():
            path = out / name / lab / f"{lab}.ipynb"
            path.parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(build(root, lab, name, spec), str(path))
            written.append(path)
    return written


if __name__ == "__main__":
    for p in generate(HERE.parent.parent):
        print(p)

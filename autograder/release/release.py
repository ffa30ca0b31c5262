"""``genlab release``: the student notebooks in labs/ are generated from solutions/ by nbgrader.

nbgrader's own converter does the work (solutions replaced by ``raise NotImplementedError()``, hidden
tests and outputs removed, cells locked, checksums computed). We only point its course directory at our
layout: ``solutions/<lab>/<lab>.ipynb`` -> ``labs/<lab>/<lab>.ipynb``.
"""
from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path

import nbformat
from nbgrader.apps import NbGrader  # noqa: F401 - registers nbgrader's config classes
from nbgrader.converters import GenerateAssignment
from nbgrader.coursedir import CourseDirectory
from nbgrader.utils import compute_checksum
from traitlets.config import Config

from autograder.release.outputs import MARK
from traitlets.config.loader import PyFileConfigLoader


def lab_ids(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "solutions").iterdir()
                  if (p / f"{p.name}.ipynb").exists())


def _config(root: Path, release_dir: Path, db_url: str) -> Config:
    """The course's nbgrader_config.py, pointed at this run's release folder and gradebook."""
    c = PyFileConfigLoader("nbgrader_config.py", path=str(Path(__file__).resolve().parents[1])).load_config()
    c.CourseDirectory.root = str(root)
    c.CourseDirectory.release_directory = str(release_dir)
    c.CourseDirectory.db_url = db_url
    c.GenerateAssignment.force = True
    c.GenerateAssignment.create_assignment = True
    return c


def generate(root: Path, lab: str, release_dir: Path, db_url: str) -> Path:
    """Runs nbgrader's generate_assignment for one lab; also records the lab in the gradebook at db_url."""
    coursedir = CourseDirectory(config=_config(root, release_dir, db_url))
    converter = GenerateAssignment(coursedir=coursedir, config=_config(root, release_dir, db_url))
    converter.log.setLevel(logging.WARNING)
    coursedir.assignment_id = lab
    converter.start()
    out = release_dir / lab / f"{lab}.ipynb"
    _normalise(out)
    return out


def _normalise(path: Path) -> None:
    """Stable bytes for the committed release: no outputs, no execution counts, no nbval markers (the
    student copy stores no outputs to compare with), ids kept."""
    nb = nbformat.read(str(path), as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
            stripped = "\n".join(line for line in cell.source.split("\n") if line.strip() != f"# {MARK}")
            if stripped != cell.source:
                cell.source = stripped
                cell.metadata["nbgrader"]["checksum"] = compute_checksum(cell)  # nbgrader validate checks it
    nbformat.write(nb, str(path))


def release(root: Path, labs: list[str] | None = None, out_dir: Path | None = None) -> list[Path]:
    """Regenerates labs/ (or ``out_dir``) from solutions/; returns the written notebooks."""
    root = Path(root).resolve()
    out_dir = Path(out_dir or root / "labs").resolve()
    written = []
    with tempfile.TemporaryDirectory() as tmp:
        db_url = f"sqlite:///{tmp}/release.db"
        for lab in labs or lab_ids(root):
            staged = generate(root, lab, Path(tmp) / "release", db_url)
            target = out_dir / lab / f"{lab}.ipynb"
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(staged, target)
            written.append(target)
    return written

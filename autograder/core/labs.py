"""A lab is one folder, discovered, never listed: ``solutions/<lab>/``.

Everything that defines a lab lives there:
- ``<lab>.ipynb``: the nbgrader source notebook (reference solutions, visible and hidden tests);
- ``samples.py``: its sample submissions (reference, one per catalogued bug, correct variants, attacks,
  faults), each with what the grader must conclude (``SAMPLES[name] = {"cells": ..., "expect": ...}``);
- optional lab data beside them.

- ``bugs.py`` (optional): ``BODIES``, the full body of each catalogued bug that students see only as an edit
  of their own function (the answer with a small edit must not ship, issue 21): samples and diagnosis use it.

The lab's bug catalogue stays importable by the student package (``genlab.catalog.<lab>``), because the
notebook's failure-mode cells run it; ``tests/test_labs.py`` fails when a lab has no samples or a
catalogued bug has no sample. ``labs/<lab>/<lab>.ipynb`` is generated from the source by ``genlab release``.
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

SOURCE_DIR = "solutions"
RELEASE_DIR = "labs"


def lab_ids(root: Path) -> list[str]:
    """Every folder of ``solutions/`` that holds a notebook of its own name is a lab."""
    folder = Path(root) / SOURCE_DIR
    return sorted(p.name for p in folder.iterdir() if (p / f"{p.name}.ipynb").is_file()) if folder.is_dir() else []


@dataclass(frozen=True)
class LabFolder:
    root: Path
    id: str

    @property
    def folder(self) -> Path:
        return Path(self.root) / SOURCE_DIR / self.id

    @property
    def source(self) -> Path:
        return self.folder / f"{self.id}.ipynb"

    @property
    def release(self) -> Path:
        return Path(self.root) / RELEASE_DIR / self.id / f"{self.id}.ipynb"

    @property
    def samples_file(self) -> Path:
        return self.folder / "samples.py"

    @cached_property
    def _samples_module(self):
        return _load(self.samples_file, f"genlab_samples_{self.id}")

    @property
    def bodies_file(self) -> Path:
        return self.folder / "bugs.py"

    @cached_property
    def bodies(self) -> dict:
        """Bug id -> its full body (instructor only): ``BODIES`` of ``bugs.py``."""
        return dict(getattr(_load(self.bodies_file, f"genlab_bugs_{self.id}"), "BODIES", {}))

    @cached_property
    def bugs(self) -> list:
        """The lab's catalogue (``genlab.catalog.<lab>``), each bug as its full body where there is one."""
        from dataclasses import replace

        from genlab.catalog import bugs_for

        return [replace(b, impl=self.bodies[b.id]) if b.id in self.bodies else b for b in bugs_for(self.id)]

    @property
    def samples(self) -> dict[str, dict]:
        """Sample name (the student folder) -> its spec, with ``expect``: what the grader must conclude."""
        return dict(getattr(self._samples_module, "SAMPLES", {}))

    @property
    def depends(self) -> dict[str, list[str]]:
        """Functions that call another student function, and so may lose marks with it."""
        return dict(getattr(self._samples_module, "DEPENDS", {}))


def instructor_bug(lab: str, bug_id: str, root: Path | None = None):
    """A catalogued bug as the grader replays it: its full body where students see an edit of their function
    (this checkout's ``solutions/<lab>/bugs.py``), the catalogue's code otherwise."""
    folder = LabFolder(Path(root) if root else Path(__file__).resolve().parents[2], lab)
    for b in folder.bugs:
        if b.id == bug_id:
            return b
    raise KeyError(f"no bug {bug_id!r} in the {lab} catalogue; known: {[b.id for b in folder.bugs]}")


def _load(path: Path, name: str):
    """A lab's Python file as a module (None when the lab has none)."""
    if not path.is_file():
        return None
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def discover(root: Path) -> list[LabFolder]:
    return [LabFolder(Path(root), lab) for lab in lab_ids(root)]

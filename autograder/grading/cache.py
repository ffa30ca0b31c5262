"""Resuming: a re-run of ``genlab grade`` with the same --out regrades only what is new or changed.

A result is reused only when everything that decided it is unchanged: the submitted notebook's bytes, the
lab's source and release notebooks, the limits of the run (a longer timeout must regrade a timeout), and the
code of the grader and of genlab (a fixed test or catalogue entry must regrade). Reused results are
re-recorded in the gradebook like fresh ones, so an interrupted run that is resumed ends with a complete
gradebook.
"""
from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from pathlib import Path

import nbformat

import autograder
import genlab
from autograder.core.results import Result


@lru_cache(maxsize=1)
def code_digest() -> str:
    """A digest of every Python file of the ``autograder`` and ``genlab`` packages (tests, wire, catalogue)."""
    h = hashlib.sha256()
    for package in (autograder, genlab):
        base = Path(package.__file__).parent
        for path in sorted(base.rglob("*.py")):
            h.update(f"{package.__name__}/{path.relative_to(base)}\0".encode() + path.read_bytes())
    return h.hexdigest()


def key(notebook: Path | None, lab_files: list[Path], limits) -> str:
    h = hashlib.sha256(f"{genlab.__version__}\0{code_digest()}\0{limits!r}".encode())
    for path in (notebook, *lab_files):
        h.update(path.read_bytes() if path is not None and path.exists() else b"<none>")
    return h.hexdigest()


def _paths(out: Path, student: str, lab: str) -> tuple[Path, Path]:
    folder = out / ".cache" / student
    return folder / f"{lab}.json", folder / f"{lab}.ipynb"


def load(out: Path, student: str, lab: str, expected_key: str) -> Result | None:
    meta_path, nb_path = _paths(out, student, lab)
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError):
        return None
    if meta.get("key") != expected_key:
        return None
    notebook = nbformat.read(str(nb_path), as_version=4) if nb_path.exists() else None
    return Result.from_json(meta["result"], notebook)


def store(out: Path, result: Result, result_key: str) -> None:
    meta_path, nb_path = _paths(out, result.student, result.lab)
    meta_path.parent.mkdir(parents=True, exist_ok=True)
    if result.notebook is not None:
        nbformat.write(result.notebook, str(nb_path))
    meta_path.write_text(json.dumps({"key": result_key, "result": result.to_json()}))

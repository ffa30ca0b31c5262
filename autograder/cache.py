"""Resuming: a re-run of ``genlab grade`` with the same --out regrades only what is new or changed.

A result is reused when the submitted notebook's bytes, the lab's source notebook and the genlab version
are all the same as when it was graded. Reused results are re-recorded in the gradebook like fresh ones,
so an interrupted run that is resumed ends with a complete gradebook.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import nbformat

import genlab
from autograder.results import Result


def key(notebook: Path | None, source: Path) -> str:
    h = hashlib.sha256(genlab.__version__.encode())
    for path in (notebook, source):
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

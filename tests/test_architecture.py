"""The grader's rooms and the one direction of their imports (pyproject.toml, ``[tool.importlinter]``;
docs/architecture.md): every contract is kept, and a planted import against the direction, or a circle between
two modules of one room, breaks it."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(tree: Path) -> subprocess.CompletedProcess:
    """import-linter on the packages as ``tree`` holds them (its autograder and shared/genlab first on the path)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), str(tree / "shared")])}
    return subprocess.run([str(LINT_IMPORTS), "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
                          cwd=tree, env=env, capture_output=True, text=True, timeout=120)


def test_every_import_runs_downward():
    run = lint_imports(ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "0 broken" in run.stdout


def _copy(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    shutil.copytree(ROOT / "autograder", tree / "autograder",
                    ignore=shutil.ignore_patterns("samples", "__pycache__"))
    shutil.copytree(ROOT / "shared" / "genlab", tree / "shared" / "genlab",
                    ignore=shutil.ignore_patterns("__pycache__", "assets"))
    return tree


def _plant(module: Path, line: str) -> None:
    module.write_text(module.read_text() + f"\n\ndef _planted():\n    {line}\n")


def test_an_upward_import_breaks_the_layers(tmp_path):
    tree = _copy(tmp_path)
    _plant(tree / "autograder" / "core" / "results.py", "from autograder.course import feedback  # noqa")
    run = lint_imports(tree)
    assert run.returncode != 0
    assert "imports only the rooms below it BROKEN" in run.stdout
    assert "autograder.core.results -> autograder.course.feedback" in run.stdout


def test_a_circle_inside_a_room_breaks_the_acyclic_contract(tmp_path):
    tree = _copy(tmp_path)  # as export and feedback once did: each imported the other
    _plant(tree / "autograder" / "course" / "gradebook.py", "from autograder.course import feedback  # noqa")
    run = lint_imports(tree)
    assert run.returncode != 0
    assert "in a circle BROKEN" in run.stdout


def test_the_student_package_never_imports_the_grader(tmp_path):
    tree = _copy(tmp_path)
    _plant(tree / "shared" / "genlab" / "__init__.py", "import autograder  # noqa")
    run = lint_imports(tree)
    assert run.returncode != 0
    assert "never imports the grader (trust flows one way) BROKEN" in run.stdout

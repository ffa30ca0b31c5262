"""``genlab release --student-bundle DIR``: what students of a graded course receive, and nothing more.

The course repository is the instructor's: solutions, hidden tests, the full bodies of the catalogued bugs, the
grader. Students get a folder written from it (nbgrader keeps ``source/`` and ``release/`` apart the same way):

- ``labs/<lab>/<lab>.ipynb``: the student notebooks, as ``genlab release`` wrote them into ``labs/`` (byte for
  byte, so a submission made from the bundle grades as one made from the repository);
- ``wheels/genlab-<version>-py3-none-any.whl``: the student package alone (``shared/genlab``; no
  ``autograder``), with its dependencies declared and the student's ``genlab`` command (``doctor``, ``check``);
- ``README.md``: how to install it and start a lab.

Before it is reported clean, the bundle is read back the way a student could read it, every code cell of every
notebook and every Python file of the wheel: no function in it, and no run of statements outside functions,
may be a solution or a solution after a small edit (:mod:`autograder.release.leaks`), and no line of a hidden test may
appear in it.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import torch

from autograder.release import leaks
from autograder.core.labs import LabFolder, discover

README = """# genlab: the labs

Generative-AI engineering, hands on: each lab is a notebook where you implement the core functions of a model
next to their derivation, check them, and measure what goes wrong when they are written the wrong way.

## Set up (once)

    python -m venv .venv
    .venv/bin/pip install {wheel} jupyterlab    # add your torch build first for a GPU: see pytorch.org
    .venv/bin/genlab doctor                         # what this machine can run, and what to fix

## Work on a lab

    .venv/bin/jupyter lab labs/

In a notebook, `genlab.check("function_name")` runs the visible tests of one function and names the
catalogued bug your outputs match, if any; `genlab check labs/<lab>/<lab>.ipynb` does the same for a whole lab
from a terminal. Hand in the notebook file itself (`labs/<lab>/<lab>.ipynb`); the course's hidden tests grade it.

The "Failure modes" cells run real bugs as edits of *your* functions (negate your KL, detach your sample):
run them once your functions pass their tests.

Labs in this bundle: {labs}.
"""


COURSE_FOLDERS = {"labs", "solutions", "shared", "autograder", "tests"}  # never replaced by a bundle


@dataclass
class StudentBundle:
    path: Path
    wheel: Path
    notebooks: list[Path]
    matches: list[leaks.Match] = field(default_factory=list)   # closest match of each solution function
    hidden_lines: list[tuple[str, str]] = field(default_factory=list)  # (hidden test line, where found)

    @property
    def leaks(self) -> list[leaks.Match]:
        return leaks.leaks(self.matches)

    @property
    def clean(self) -> bool:
        return not self.leaks and not self.hidden_lines

    @property
    def size(self) -> int:
        return sum(p.stat().st_size for p in self.path.rglob("*") if p.is_file())

    def summary(self) -> str:
        lines = [f"student bundle: {self.path} ({self.size / 1e6:.2f} MB; wheel {self.wheel.name}, "
                 f"{self.wheel.stat().st_size / 1e3:.0f} kB; {len(self.notebooks)} notebooks)",
                 leaks.report(self.matches)]
        lines += [f"hidden test line found: {line!r} in {where}" for line, where in self.hidden_lines]
        lines.append("clean: no solution, no near copy of one, no hidden test line" if self.clean
                     else "NOT CLEAN: do not hand this bundle out")
        return "\n".join(lines)


def student_bundle(root: Path, out: Path) -> StudentBundle:
    """Writes the student bundle for the course at ``root`` into ``out`` (replaced) and checks it."""
    root, out = Path(root).resolve(), Path(out).resolve()
    if out == root or out in root.parents or (out.parent == root and out.name in COURSE_FOLDERS):
        raise ValueError(f"{out} holds the course itself: write the bundle to a folder of its own")
    if out.exists():
        shutil.rmtree(out)
    labs = discover(root)
    notebooks = []
    for lab in labs:
        target = out / "labs" / lab.id / lab.release.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(lab.release, target)
        notebooks.append(target)
    wheel = build_wheel(root, out / "wheels")
    (out / "README.md").write_text(README.format(wheel=f"wheels/{wheel.name}", labs=", ".join(l.id for l in labs)))
    return check(root, StudentBundle(out, wheel, notebooks))


def check(root: Path, bundle: StudentBundle) -> StudentBundle:
    """Reads the bundle back: the closest match of every solution function, and any hidden test line."""
    bundle.matches = leaks.closest_matches(leaks.solution_functions(root), leaks.functions_in([bundle.path]))
    bundle.hidden_lines = hidden_lines_in(root, bundle.path)
    return bundle


def build_wheel(root: Path, wheels: Path, labs: list[str] | None = None) -> Path:
    """The student package alone, as a wheel: ``shared/genlab`` with the project's dependencies and the
    student's ``genlab`` command. Built offline by pip with the setuptools already installed. ``labs``: only
    these labs' fingerprints (default: every lab's)."""
    pyproject = tomllib.loads((root / "pyproject.toml").read_text())
    project, package_data = pyproject["project"], pyproject["tool"]["setuptools"]["package-data"]
    wheels.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        stage = Path(tmp)
        shutil.copytree(root / "shared" / "genlab", stage / "genlab",
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        prints = stage / "genlab" / "assets" / "fingerprints"
        prints.mkdir(parents=True)
        for lab in discover(root):
            if labs is None or lab.id in labs:
                torch.save(fingerprints(lab), prints / f"{lab.id}.pt")
        # The course's policy for graded code, so that the student's `genlab check` refuses what the grader refuses.
        course = tomllib.loads((root / "autograder" / "course.toml").read_text())
        (stage / "genlab" / "assets" / "policy.toml").write_text(_policy_toml(course.get("policy", {})))
        (stage / "pyproject.toml").write_text(
            _student_pyproject(project, package_data["genlab"] + ["assets/fingerprints/*.pt", "assets/policy.toml"]))
        env = {**os.environ, "SOURCE_DATE_EPOCH": "315532800"}  # fixed timestamps: the same bytes every build
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                        "--no-index", "--wheel-dir", str(wheels), str(stage)], check=True, env=env)
    (wheel,) = wheels.glob("genlab-*.whl")
    return wheel


def fingerprints(lab: LabFolder) -> list[dict]:
    """Each bug written as an edit, on the calls the released notebook's visible tests make (run as the
    self-check runs them, on the reference): the bug's outcome wherever it differs from the reference's.
    The student's self-check names such a bug from these (:func:`genlab.selfcheck.fingerprints`); entries
    that torch cannot load as plain data (modules, generators) are left out."""
    import io

    from genlab.catalog import Edit, bugs_for, runnable
    from genlab.selfcheck import as_data, visible_runs
    from genlab.testing.diagnosis import replay, same
    from genlab.testing.notebook import LabNotebook
    from genlab.testing.reference import Reference, execute_reference

    edits = [b for b in bugs_for(lab.id) if isinstance(b.impl, Edit) and b.detect is None]  # detect: no need
    if not edits:
        return []
    source = LabNotebook.read(lab.source)
    namespace = execute_reference(source)
    reference = Reference(namespace, source.solutions)
    entries = []
    for function in sorted({b.function for b in edits}):
        for test_id, _, recorder in visible_runs(LabNotebook.read(lab.release), namespace, function):
            for bug in (b for b in edits if b.function == function):
                impl = lab.bodies.get(bug.id) or runnable(bug.impl, reference)
                for c in (c for c in recorder.calls if c.name == function and c.kind in bug.kinds):
                    outcome = replay(impl, c)
                    if not same(outcome, replay(impl, c)) or same(outcome, replay(namespace[function], c)):
                        continue  # random, or the bug and the reference agree here: says nothing
                    # an error stays the dict the self-check looks for (as_data would make it sorted pairs, and
                    # the bug that raises, masked_fill_minus_1e9 in float16, would never be named)
                    outcome = {"error": type(outcome).__name__} if isinstance(outcome, BaseException) \
                        else as_data(outcome)
                    entry = {"bug": bug.id, "test": test_id, "kind": c.kind, "args": as_data(c.args),
                             "kwargs": as_data(c.kwargs), "outcome": outcome}
                    buffer = io.BytesIO()
                    try:
                        torch.save(entry, buffer)
                        buffer.seek(0)
                        torch.load(buffer, weights_only=True)
                    except Exception:  # noqa: BLE001 - not plain data: this call cannot be fingerprinted
                        continue
                    entries.append(entry)
    return entries


def _policy_toml(table: dict) -> str:
    """``[policy]`` (and its ``[policy.labs.<lab>]``) written back as TOML: lists of strings and booleans only."""
    def pairs(d: dict) -> list[str]:
        return [f"{k} = {json.dumps(v)}" for k, v in d.items() if not isinstance(v, dict)]

    lines = ["# The course's policy for graded code (autograder/course.toml [policy]), as the grader applies it.",
             "[policy]", *pairs(table)]
    for lab, own in table.get("labs", {}).items():
        lines += ["", f"[policy.labs.{lab}]", *pairs(own)]
    return "\n".join(lines) + "\n"


def _student_pyproject(project: dict, package_data: list[str]) -> str:
    # the package's own dependencies and the labs' (pyproject's `labs` extra): a student installs one wheel
    labs = project.get("optional-dependencies", {}).get("labs", [])
    dependencies = ", ".join(json.dumps(d) for d in [*project["dependencies"], *labs])
    return f"""[build-system]
requires = ["setuptools>=77"]
build-backend = "setuptools.build_meta"

[project]
name = "genlab"
version = {json.dumps(project["version"])}
description = "The student package of the genlab course: data, checks, widgets, genlab.check and genlab doctor"
requires-python = {json.dumps(project["requires-python"])}
license = {json.dumps(project["license"])}
dependencies = [{dependencies}]

[project.optional-dependencies]
chem = ["rdkit"]

[project.scripts]
genlab = "genlab.cli:main"

[tool.setuptools.packages.find]
include = ["genlab*"]

[tool.setuptools.package-data]
genlab = [{", ".join(json.dumps(p) for p in package_data)}]
"""


def hidden_test_lines(root: Path) -> set[str]:
    """The lines of the labs' hidden tests that are theirs alone: a line that also appears outside the hidden
    tests (in a visible test, the lab's text, another lab, the student package: ``torch.manual_seed(0)``) is no
    secret. Lines under 20 characters are left out: too generic to say anything."""
    from genlab.testing.notebook import LabNotebook

    hidden, elsewhere = set(), set()
    for lab in discover(root):
        for cell in LabNotebook.read(lab.source).nb.cells:
            inside = False
            for line in cell.source.splitlines():
                text = line.strip()
                if text.startswith("### BEGIN HIDDEN TESTS"):
                    inside = True
                elif text.startswith("### END HIDDEN TESTS"):
                    inside = False
                elif len(text) >= 20:
                    (hidden if inside else elsewhere).add(text)
    for path in (root / "shared" / "genlab").rglob("*.py"):
        elsewhere.update(line.strip() for line in path.read_text().splitlines())
    return hidden - elsewhere


def _lines(path: Path):
    """(where, stripped lines) of every notebook's cells and every text file in a folder, wheels opened."""
    def of(name: str, data: bytes):
        text = data.decode("utf-8", "replace")
        if name.endswith(".ipynb"):
            cells = json.loads(text).get("cells", [])
            text = "\n".join("".join(c["source"]) if isinstance(c["source"], list) else c["source"] for c in cells)
        return {line.strip() for line in text.splitlines()}

    for p in sorted(path.rglob("*")):
        if p.suffix in (".py", ".ipynb", ".md", ".txt"):
            yield str(p), of(p.name, p.read_bytes())
        elif p.suffix == ".whl":
            with zipfile.ZipFile(p) as wheel:
                for member in wheel.namelist():
                    yield f"{p}!{member}", of(member, wheel.read(member))


def hidden_lines_in(root: Path, path: Path) -> list[tuple[str, str]]:
    """Each hidden test line that is a line of something in ``path`` (where it was found)."""
    hidden = hidden_test_lines(root)
    return [(line, where) for where, lines in _lines(path) for line in sorted(hidden & lines)]

"""Grading one submission: run the student's cells in their kernel, take every verdict here.

For each cell of the assembled notebook, in order:
- a student or locked cell runs in the student's kernel (its outputs go to the feedback);
- a test cell runs *in this process*, with the student's functions bound to proxies into the kernel
  (:mod:`genlab.testing.proxy`) and the reference loaded from ``solutions/``. Its verdict, and the
  catalogued bug it matches, become that cell's output in the feedback.
So a test that ran keeps its result whatever happens later in the notebook.
"""
from __future__ import annotations

import contextlib
import io
import json
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from autograder.assemble import assemble
from autograder.kernel import KernelSession, Limits
from autograder.scan import scan_cells
from genlab.catalog import bugs_for
from genlab.testing.diagnosis import diagnose
from genlab.testing.notebook import LabNotebook, grade_id, is_test
from genlab.testing.proxy import KernelLost, Recorder, RemoteFunction, RemoteTimeout
from genlab.testing.reference import Reference, execute_reference
from genlab.testing.wire import Encoder
from genlab.testing.runner import (ERROR, KILLED, MISSING, PASSED, TAMPERED, TIMEOUT, Outcome, run_test)


@dataclass
class Lab:
    """What the grader knows about one lab: the source (with solutions and hidden tests) and the release."""

    id: str
    source: LabNotebook
    release: nbformat.NotebookNode

    @classmethod
    def load(cls, root: Path, lab: str) -> "Lab":
        source = LabNotebook.read(root / "solutions" / lab / f"{lab}.ipynb")
        release = nbformat.read(str(root / "labs" / lab / f"{lab}.ipynb"), as_version=4)
        return cls(lab, source, release)

    @property
    def tests(self) -> dict[str, dict]:
        return self.source.tests


@dataclass
class Result:
    student: str
    lab: str
    outcomes: list[Outcome]
    points: dict[str, float]
    notes: list[str] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)
    notebook: nbformat.NotebookNode | None = None
    seconds: float = 0.0

    def score(self, test: str) -> float:
        outcome = next(o for o in self.outcomes if o.test == test)
        return self.points[test] if outcome.status == PASSED else 0.0


class ReferenceKernel:
    """A kernel holding only the reference solution, for timing side by side (started on first use)."""

    def __init__(self, lab: Lab, workdir: Path, limits: Limits, launcher=None):
        self.lab, self.workdir, self.limits, self.launcher = lab, workdir, limits, launcher
        self.session: KernelSession | None = None

    def get(self) -> KernelSession:
        if self.session is None or not self.session.alive():
            self.session = KernelSession(self.workdir, self.limits, launcher=self.launcher)
            self.session.start()
            self.session.run_cell(self.lab.source.setup_source)
            for source in self.lab.source.solutions.values():
                self.session.run_cell(source)
        return self.session

    def shutdown(self):
        if self.session is not None:
            self.session.shutdown()


class _LazyReferenceSession:
    """Passes requests to the reference kernel, starting it only if a timing test needs it."""

    def __init__(self, ref: ReferenceKernel):
        self._ref = ref

    def request(self, header, encoder):
        return self._ref.get().request(header, encoder)


def _verdict_output(outcome: Outcome, points: float) -> nbformat.NotebookNode:
    earned = points if outcome.passed else 0.0
    lines = [f"[genlab grader] {outcome.test}: {outcome.status.upper()} ({earned:g}/{points:g} points)"]
    if outcome.message:
        lines.append(outcome.message)
    for bug in outcome.diagnosis:
        lines.append(f"Diagnosis: {bug.id}: {bug.describe()}")
    return nbformat.v4.new_output("stream", name="stdout" if outcome.passed else "stderr",
                                  text="\n".join(lines) + "\n")


def _check_cells(nb) -> None:
    """The little structure the grader relies on; nbformat itself accepts much stranger files."""
    if not isinstance(nb.get("cells"), list):
        raise ValueError("it has no list of cells")
    for i, cell in enumerate(nb.cells):
        if not isinstance(cell, dict) or cell.get("cell_type") not in ("code", "markdown", "raw") \
                or not isinstance(cell.get("source", ""), str):
            raise ValueError(f"cell {i} is not a notebook cell")
        if not isinstance(cell.get("metadata", {}), dict):
            raise ValueError(f"cell {i} has malformed metadata")


def all_outcomes(lab: Lab, status: str, message: str) -> list[Outcome]:
    return [Outcome(test, status, message) for test in lab.tests]


def grade_notebook(student: str, lab: Lab, path: Path, *, workdir: Path, limits: Limits,
                   reference: Reference, reference_kernel: ReferenceKernel, launcher=None,
                   cgroup_limits: tuple[int, int] | None = None) -> Result:
    points = {t: spec["points"] for t, spec in lab.tests.items()}
    start = time.monotonic()
    if not path.exists():
        return Result(student, lab.id, all_outcomes(lab, MISSING, (
            f"no notebook for {lab.id} was handed in: expected {lab.id}/{lab.id}.ipynb, and no other notebook "
            "in the submission carries this lab's cells")), points)
    try:
        submitted = nbformat.read(str(path), as_version=4)
        _check_cells(submitted)
    except Exception as exc:  # noqa: BLE001 - not JSON, not a notebook, unreadable
        return Result(student, lab.id, all_outcomes(
            lab, ERROR, f"the notebook could not be read ({exc})"[:500] + ": open it in JupyterLab, save it, and "
                        "hand it in again"), points)

    assembled = assemble(submitted, lab.release)
    evidence = scan_cells(assembled.student_cells)
    tests = lab.tests
    functions = list(lab.source.solutions)
    bugs = bugs_for(lab.id)
    outcomes: dict[str, Outcome] = {}
    all_calls: list = []
    test_cells: dict = {}

    test_globals: dict = {"__name__": f"genlab_tests_{lab.id}"}
    with contextlib.redirect_stdout(io.StringIO()):  # the setup cell's banner is for students
        exec(compile(lab.source.setup_source, "<setup>", "exec"), test_globals)
    ref_session = _LazyReferenceSession(reference_kernel)

    session = KernelSession(workdir, limits, launcher=launcher, cgroup_limits=cgroup_limits)
    try:
        session.start()
        boot = session.run_cell("import genlab.testing.server as _genlab_server; _genlab_server.install()",
                                silent=True)
        if boot.status != "ok":
            raise RuntimeError(f"could not prepare the kernel: {boot.error}")
        for index, cell in enumerate(assembled.nb.cells):
            if cell.cell_type != "code":
                continue
            if is_test(cell):
                test = grade_id(cell)
                if test not in tests:
                    continue
                if not session.alive():
                    outcomes[test] = Outcome(test, KILLED if "timeout" not in session.dead_reason else TIMEOUT,
                                             f"not run: {session.dead_reason}")
                else:
                    # Checked before each test too, so a patch undone before the notebook ends is still seen.
                    evidence += [e for e in _integrity(session) if e not in evidence]
                    recorder = Recorder()
                    namespace = dict(test_globals)
                    namespace.update({f: RemoteFunction(session, f, recorder, ref_session) for f in functions})
                    outcome = run_test(test, tests[test]["source"], namespace, recorder)
                    all_calls.extend(recorder.calls)
                    evidence += recorder.evidence
                    outcomes[test] = outcome
                test_cells[test] = cell
                continue
            if not session.alive():
                cell.outputs = [nbformat.v4.new_output("stream", name="stderr",
                                                       text=f"[genlab grader] not run: {session.dead_reason}\n")]
                continue
            run = session.run_cell(cell.source)
            cell.outputs = run.outputs
            where = f"cell {index} ({grade_id(cell) or 'a cell you added'})"
            if run.status == "error" and any(m in run.error for m in MEMORY_ERRORS):
                assembled.notes.append(f"{where} ran out of memory: the limit is "
                                       f"{limits_note(cgroup_limits, launcher)}; later tests may fail because of it")
            if run.status in ("timeout", "dead") and session.dead_reason:
                # The kernel is gone (killed, crashed, or stopped for ignoring the interrupt): say where.
                msg = session.dead_reason = f"{session.dead_reason} in {where}"
            elif run.status == "timeout":
                # Interrupted and still alive: only this cell's work is lost; later tests still run.
                msg = f"{where} was stopped: {run.error}"
                assembled.notes.append(msg)
            if run.status in ("timeout", "dead"):
                cell.outputs.append(nbformat.v4.new_output("stream", name="stderr",
                                                           text=f"[genlab grader] {msg}\n"))
        if session.alive():
            evidence += [e for e in _integrity(session) if e not in evidence]
    finally:
        session.shutdown()

    # Diagnose after all tests ran: every call made to a function, from all of its tests, must agree
    # with a bug before the bug is named (one test's calls alone can fit two bugs by coincidence).
    for test, outcome in outcomes.items():
        if outcome.status != PASSED:
            function = tests[test]["function"]
            outcome.diagnosis = diagnose(bugs, [c for c in all_calls if c.name == function], reference)
    for test, cell in test_cells.items():
        cell.outputs = [_verdict_output(outcomes[test], points[test])]
    final = []
    for test in tests:
        outcome = outcomes.get(test) or Outcome(test, KILLED if session.dead_reason else ERROR,
                                                f"not run: {session.dead_reason or 'the test cell was not reached'}")
        if evidence and outcome.status != MISSING:
            outcome = Outcome(test, TAMPERED, "the notebook interferes with the grader: " + "; ".join(evidence[:5]),
                              outcome.seconds, outcome.diagnosis)
        final.append(outcome)
    return Result(student, lab.id, final, points, assembled.notes, evidence, assembled.nb,
                  time.monotonic() - start)


def _integrity(session: KernelSession) -> list[str]:
    """Evidence lines for the watched objects (torch.allclose, IPython's hooks, ...) replaced so far."""
    try:
        changed, _ = session.request({"kind": "integrity", "args": [], "kwargs": {"__dict__": {}}}, Encoder())
    except (KernelLost, RemoteTimeout):
        return []
    if changed.get("ok") and changed.get("result"):
        return [f"replaced at run time: {name}" for name in changed["result"]]
    return []


MEMORY_ERRORS = ("can't allocate memory", "MemoryError", "CUDA out of memory", "OutOfMemoryError")


def limits_note(cgroup_limits, launcher) -> str:
    from autograder import cgroups

    if cgroup_limits and cgroups.usable():
        return f"{cgroup_limits[0] / 2**30:g} GiB of memory per kernel"
    for arg in launcher or []:
        if arg.startswith("--as="):
            return f"{int(arg[5:]) / 2**30:g} GiB of address space per kernel"
    return "the machine's memory"


def load_lab_reference(lab: Lab) -> Reference:
    return Reference(execute_reference(lab.source), lab.source.solutions)


def scratch_dir(base: Path | None, student: str) -> Path:
    safe = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in student)[:20]
    path = Path(tempfile.mkdtemp(prefix=f"{safe}-", dir=base))
    return path


def remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def result_json(result: Result) -> dict:
    return {"student": result.student, "lab": result.lab, "seconds": round(result.seconds, 2),
            "notes": result.notes, "evidence": result.evidence,
            "tests": [{"test": o.test, "status": o.status, "score": result.score(o.test),
                       "max_score": result.points[o.test], "message": o.message,
                       "diagnosis": [b.id for b in o.diagnosis]} for o in result.outcomes]}


def dumps(results: list[Result]) -> str:
    return json.dumps([result_json(r) for r in results], indent=2)
